package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/troupe-ml/troupe/examples/translation/corpus"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm"
)

// startServers starts the two swarm servers, the small model's and the
// larger model's, each training its model with GRPO on its own reward, on
// -ports; with -servers it starts none and connects to those. clients are
// the small model's, the larger model's and (unless -joint-small) agent 3's
// (the small model's again). perRound is the number of train episodes each
// local server gets per GRPO round. closeAll closes the local servers.
func (o *options) startServers(e *env, w *warmed, d *corpus.Dataset, rlSeed uint64) (servers []*swarm.Server, clients []*swarm.Client, perRound [2]int64, closeAll func(), err error) {
	var addrs []string
	var closers []func()
	closeAll = func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	fail := func(err error) ([]*swarm.Server, []*swarm.Client, [2]int64, func(), error) {
		closeAll()
		return nil, nil, [2]int64{}, func() {}, err
	}
	if o.servers == "" {
		// The supervised anchors draw from their own random streams.
		anchor, anchorN := smallExamples(w.warmTrain, w.roughs, e.tok, d.Glossary, o.warmMix(), e.maxRough, rand.New(rand.NewPCG(rlSeed, 71))), o.ptxSmall
		if o.anchorSelf > 0 {
			if anchor, err = selfAnchor(e, w.small, w.roughs, 512, rand.New(rand.NewPCG(rlSeed, 73))); err != nil {
				return fail(err)
			}
			anchorN = o.anchorSelf
		}
		gs := o.grpo()
		gs.NoCenter = o.scstSmall
		ms := newLMModel("small", w.small, e.tok, o.rlOpt, o.rlLR, o.klSmall, gs, 0).withAnchor(anchor, anchorN).withTempered(o.tempered)
		gl := o.grpo()
		gl.Epochs, gl.SkipEqualGroups, gl.PositiveOnly, gl.NoCenter = o.epochsLarge, o.skipEqualLarge, o.positiveLarge, o.scstLarge
		if o.aggLarge == "token" {
			gl.Aggregation = rl.TokenMean
		}
		decay := 0
		if o.cosineLarge {
			decay = o.steps * o.epochsLarge
		}
		ml := newLMModel("large", w.large, e.tok, o.rlOptLarge, o.rlLRLarge, o.klLarge, gl, decay).
			withAnchor(largeExamples(w.largeRx, e.tok, e.hint, e.maxRough, rand.New(rand.NewPCG(rlSeed, 72))), o.ptxLarge).withTempered(o.tempered)
		ml.maskFirst = o.vineMask
		ports := strings.Split(o.ports, ",")
		if len(ports) != 2 {
			return fail(fmt.Errorf("-ports wants two ports, got %q", o.ports))
		}
		for i, m := range []swarm.Model{ms, ml} {
			cfg := swarm.DefaultTrainConfig()
			cfg.BatchSize, cfg.NumRepeat, cfg.MaxStaleness = o.batch, o.repeats, 1
			if i == 1 {
				cfg.BatchSize = o.batchLarge
				if o.vineLarge {
					cfg.NumRepeat += 2 // the two branch rollouts of each task
				}
				cfg.NumRepeat += o.branchLarge // -branch-large's branches
			}
			if i == 0 && !o.jointSmall && !o.noTrainFinal && !o.noTrainRough {
				cfg.BatchSize = 2 * o.batch // a group for agent 1 and one for agent 3 per task
			}
			cfg.MaxResponseTokens = max(e.maxTok+16, e.maxDetTok)
			srv, err := swarm.NewServer(swarm.ServerConfig{Model: m, Train: cfg, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				return fail(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+ports[i])
			if err != nil {
				return fail(fmt.Errorf("server %d: %w (use -ports)", i, err))
			}
			go http.Serve(ln, srv.Handler())
			if err := srv.Start(); err != nil {
				return fail(err)
			}
			closers = append(closers, func() { srv.Close() })
			servers = append(servers, srv)
			addrs = append(addrs, ln.Addr().String())
			perRound[i] = int64(cfg.BatchSize * cfg.NumRepeat)
		}
	} else {
		addrs = strings.Split(o.servers, ",")
		if len(addrs) != 2 {
			return fail(fmt.Errorf("-servers wants host:port,host:port, got %q", o.servers))
		}
	}
	clients = []*swarm.Client{swarm.NewClient("http://" + addrs[0]), swarm.NewClient("http://" + addrs[1])}
	if !o.jointSmall {
		clients = append(clients, clients[0]) // agent 3's episode
	}
	logf("swarm servers: small model at %s, larger model at %s", addrs[0], addrs[1])
	return servers, clients, perRound, closeAll, nil
}

// rlPhase runs -steps GRPO rounds of the workflow on RL's tasks (w.rlTrain,
// -hard-frac of each batch from the error-prone ones): each round gives
// each server one training batch, and with local servers it waits until
// both have trained on it, logs the step, and (-select-every) evaluates
// the checkpoint selection. Then it stops the local servers and restores
// the selected checkpoints.
func (o *options) rlPhase(e *env, w *warmed, servers []*swarm.Server, clients []*swarm.Client, perRound [2]int64, sel *selector, rep *report, rlSeed uint64) error {
	local := o.servers == ""
	// GRPO rounds: each round gives each server one training batch.
	ctx := context.Background()
	r := rand.New(rand.NewPCG(rlSeed, 5))
	// Error-prone tasks: train sentences whose warm-start rough translation
	// (agent 1's greedy output, made for the warm start of agents 2 and 3)
	// misses a glossary term. Only there can the detector earn more than
	// "[]" does; on clean sentences "[]" scores full marks.
	var hard []task
	for _, rx := range w.rlRx {
		if len(truthErrors(rx.T, rx.Rough)) > 0 {
			hard = append(hard, rx.T)
		}
	}
	logf("RL task mix: %.0f%% of each batch from the %d train sentences whose warm-start rough translation misses a glossary term, the rest random", 100*o.hardFrac, len(hard))
	if local && o.selectEvery > 0 {
		if err := sel.check(0); err != nil {
			return err
		}
	}
	bar := progressbar.NewOptions(o.steps, progressbar.OptionSetDescription("GRPO"), progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount())
	for step := 0; step < o.steps; step++ {
		// -hard-frac of the tasks are error-prone ones: otherwise most groups
		// have no true error and the detector learns that "[]" always pays
		// (it did, with half the tasks merely having glossary terms:
		// notes/translation.md).
		batch := make([]task, o.batchLarge)
		credit := make([]bool, len(batch)) // whose branch pairs count (-vine-hard)
		for i := range batch {
			// Error-prone slots spread evenly: with 0.5, the odd ones.
			isHard := math.Floor(float64(i+1)*o.hardFrac) > math.Floor(float64(i)*o.hardFrac)
			if isHard && len(hard) > 0 {
				batch[i] = hard[r.IntN(len(hard))]
				credit[i] = o.vineHard
			} else {
				batch[i] = w.rlTrain[r.IntN(len(w.rlTrain))]
				credit[i] = true
			}
		}
		st := time.Now()
		rs, rl, err := e.rlRound(ctx, clients, batch, credit, o.batch, o.repeats, r, step)
		if err != nil {
			return fmt.Errorf("RL step %d: %w", step, err)
		}
		var gs [2]int64
		if local {
			// Wait until both servers trained on this round: each has
			// handed all of this round's episodes to a training step and
			// is rolling again. (Not the model's version: it moves by the
			// optimizer steps, two a round with -epochs-large 2 and none
			// when -skip-equal-large finds every group equal.)
			for i, s := range servers {
				for {
					status, _, g := s.Status()
					a := s.Accounting()
					if status == swarm.StatusRolling && a.TrainedEpisodes+a.Dropped >= int64(step+1)*perRound[i] {
						gs[i] = g
						break
					}
					if time.Since(st) > 90*time.Second {
						return errors.New("server did not train within 90 s")
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
		rep.steps = append(rep.steps, stepRow{Step: step + 1, RewardSmall: rs, RewardLarge: rl, GlobalSmall: gs[0], GlobalLarge: gs[1], Seconds: time.Since(st).Seconds()})
		bar.Add(1)
		var gn [2]float64
		skipped := ""
		if local {
			for i, s := range servers {
				gn[i] = s.LastTrainStats().GradNorm
			}
			if o.skipEqualLarge {
				skipped = fmt.Sprintf(", %g of %d groups skipped", float64(servers[1].LastTrainStats().SkippedGroups), o.batchLarge)
			}
		}
		fmt.Fprintf(os.Stderr, "\n[%6.1fs] step %d: reward small %.3f (server step %d, grad norm %.3g) | reward large %.3f (server step %d, grad norm %.3g%s)\n",
			time.Since(t0).Seconds(), step+1, rs, gs[0], gn[0], rl, gs[1], gn[1], skipped)
		if local && o.selectEvery > 0 && ((step+1)%o.selectEvery == 0 || step+1 == o.steps) {
			// Both servers are idle between rounds: no episode is open.
			if err := sel.check(step + 1); err != nil {
				return err
			}
		}
	}
	if local {
		for i, s := range servers {
			s.Stop()
			a := s.Accounting()
			rep.trained[i], rep.untrained[i] = a.TrainedEpisodes, a.Dropped+a.Buffered
		}
		if o.selectEvery > 0 {
			sel.restore()
			rep.selection = sel
			logf("checkpoint selection on %d validation sentences: small model from step %d, larger model from step %d", len(sel.tasks), sel.best[0].step, sel.best[1].step)
		}
	}
	return nil
}
