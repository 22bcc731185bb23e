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

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/rl"
	rlmetrics "github.com/troupe-ml/troupe/rl/metrics"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/adapter"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/lmmodel"
)

// rlServers are the RL phase's local swarm servers (none with -servers) and
// agents 1, 2 and 3's clients.
type rlServers struct {
	local     []*swarm.Server
	listeners []net.Listener
	clients   []*client.Client
	perRound  [2]int64 // train episodes each local server gets per GRPO round
}

func (s *rlServers) close() {
	for _, ln := range s.listeners {
		ln.Close()
	}
	for _, srv := range slices.Backward(s.local) {
		srv.Close()
	}
}

// startServers starts the small and the larger model's servers on -ports,
// or connects to -servers.
func (o *options) startServers(e *env, w *warmed) (_ *rlServers, err error) {
	// Not the named result: an error return sets that to nil before the
	// deferred close runs.
	s := &rlServers{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	var addrs []string
	if o.servers != "" {
		if addrs = strings.Split(o.servers, ","); len(addrs) != 2 {
			return nil, fmt.Errorf("-servers wants host:port,host:port, got %q", o.servers)
		}
	} else {
		ports := strings.Split(o.ports, ",")
		if len(ports) != 2 {
			return nil, fmt.Errorf("-ports wants two ports, got %q", o.ports)
		}
		grpo := rl.GRPOConfig{ClipEps: 0.2}
		ms, ml := w.models[0], w.models[1]
		if ms == nil { // the warm-started miniatures
			if ms, err = newLMModel("small", w.small, e.tok, o.RLLR, o.KLSmall, grpo, false); err != nil {
				return nil, err
			}
			// Agent 2's first token ("[]" or a list) stays the warm start's: its
			// gradient, sampled at temperature 0.5, drives the detector to lists.
			if ml, err = newLMModel("large", w.large, e.tok, o.RLLRLarge, o.KLLarge, grpo, true); err != nil {
				return nil, err
			}
		}
		for i, m := range []swarm.Model{ms, ml} {
			cfg := swarm.DefaultTrainConfig()
			cfg.BatchSize, cfg.NumRepeat, cfg.MaxStaleness = o.Batch, o.Repeats, 1
			cfg.MaxResponseTokens = max(e.maxTok+16, e.maxDetTok)
			srv, err := swarm.NewServer(swarm.ServerConfig{Model: m, Train: cfg, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				return nil, err
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+ports[i])
			if err != nil {
				return nil, fmt.Errorf("server %d: %w (use -ports)", i, err)
			}
			s.listeners = append(s.listeners, ln)
			go http.Serve(ln, srv.Handler())
			if err := srv.Start(); err != nil {
				srv.Close()
				return nil, err
			}
			s.local = append(s.local, srv)
			addrs = append(addrs, ln.Addr().String())
			s.perRound[i] = int64(cfg.BatchSize * cfg.NumRepeat)
		}
	}
	small := client.New("http://" + addrs[0])
	s.clients = []*client.Client{small, client.New("http://" + addrs[1]), small}
	logf("swarm servers: small model at %s, larger model at %s", addrs[0], addrs[1])
	return s, nil
}

// newLMModel serves lm through a adapter.Adapter trained by GRPO with plain
// SGD (on the validation split, steps in proportion to the gradient beat
// AdamW's), a k3 KL penalty to lm as it is now when klCoef > 0, and with
// maskFirst each sampled answer's first token as context (firstAsContext).
func newLMModel(name string, lm *nn.LM, tok *tokenizer.Tokenizer, lr, klCoef float64, cfg rl.GRPOConfig, maskFirst bool) (*adapter.Adapter, error) {
	if klCoef > 0 {
		ref := nn.NewLM(nn.NewStore(0), lm.Config) // never stepped: its trainer only computes log-probabilities
		for _, p := range lm.Store.Params() {
			copy(ref.Store.Param(p.Name).Data(), p.Data())
		}
		cfg.Ref = policies.NewLM(ref, nn.NewLMTrainer(ref, nn.NewAdamW(nn.Constant(0), 0), nn.TrainConfig{LenBucket: 32}))
		cfg.KLCoef = klCoef
	}
	opt := nn.NewSGD(nn.Constant(lr), 0)
	tj, _ := tok.MarshalJSON()
	return adapter.New(adapter.Config{
		Name:      name,
		Tokenizer: tailChat{lmmodel.TokenizerChat{Tok: tok}, lm.Config.MaxLen - 4},
		Sampler:   lmmodel.NewSampler(lm, tok.MustSpecialID(tokenizer.End)),
		Policy:    policies.NewLM(lm, nn.NewLMTrainer(lm, opt, nn.TrainConfig{ClipNorm: 1, LenBucket: 32})),
		Trainer:   rl.NewGRPO(cfg),
		State:     &adapter.StoreState{Store: lm.Store, Opt: opt, Meta: map[string]string{"tokenizer": string(tj)}},
		MaxLen:    lm.Config.MaxLen,
		Prepare:   prepare(lm.Config.MaxLen, maskFirst),
	})
}

// prepare keeps the samples that fit maxLen tokens and, with maskFirst,
// moves each sampled answer's first token to its prompt (firstAsContext).
func prepare(maxLen int, maskFirst bool) func([]rl.Sample) ([]rl.Sample, int) {
	return func(batch []rl.Sample) (kept []rl.Sample, dropped int) {
		for _, s := range batch {
			ok := true
			if maskFirst && len(s.LogProbs) > 0 { // sampled, not forced, answers
				s, ok = firstAsContext(s)
			}
			if !ok || len(s.Prompt) == 0 || len(s.Actions) == 0 || len(s.Prompt)+len(s.Actions) > maxLen {
				dropped++
				continue
			}
			kept = append(kept, s)
		}
		return kept, dropped
	}
}

// tailChat keeps the last n tokens of an over-long chat prompt, the open
// assistant turn, as the evaluation does.
type tailChat struct {
	lmmodel.TokenizerChat
	n int
}

func (t tailChat) ChatPrompt(ctx context.Context, msgs []api.Message, tools []api.Tool) ([]int, error) {
	p, err := t.TokenizerChat.ChatPrompt(ctx, msgs, tools)
	if len(p) > t.n {
		p = p[len(p)-t.n:]
	}
	return p, err
}

// firstAsContext moves s's first action to its prompt, so that GRPO trains
// the rest of the answer given it; false when no action would be left.
// s's slices are not modified.
func firstAsContext(s rl.Sample) (rl.Sample, bool) {
	if len(s.Actions) < 2 {
		return s, false
	}
	s.Prompt = append(append(make([]int, 0, len(s.Prompt)+1), s.Prompt...), s.Actions[0])
	s.Actions = s.Actions[1:]
	s.LogProbs, s.StepRewards = s.LogProbs[min(1, len(s.LogProbs)):], s.StepRewards[min(1, len(s.StepRewards)):]
	return s, true
}

// rlPhase runs the GRPO rounds, each one batch per server, waiting for local servers to train.
func (o *options) rlPhase(e *env, w *warmed, srv *rlServers, rep *report) error {
	r := rand.New(rand.NewPCG(o.rlSeed(), 5))
	// Error-prone tasks, whose warm-start rough translation misses a term: only
	// there can the detector earn more than "[]", which it learns without them.
	var hard []task
	for _, rx := range w.roughs {
		if len(truthErrors(rx.T, rx.Rough)) > 0 {
			hard = append(hard, rx.T)
		}
	}
	logf("RL task mix: %.0f%% of each batch from the %d train sentences whose warm-start rough translation misses a glossary term, the rest random", 100*o.HardFrac, len(hard))
	// The bar only on a terminal: in a log file it would interleave with the step lines.
	var bar *progressbar.ProgressBar
	lead := ""
	if rlmetrics.IsTerminal(os.Stderr) {
		bar = progressbar.NewOptions(o.rlSteps(), progressbar.OptionSetDescription("GRPO"), progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount())
		lead = "\n"
	}
	for step := range o.rlSteps() {
		batch := make([]task, o.Batch)
		for i := range batch {
			// Error-prone slots spread evenly: with 0.5, the odd ones.
			from := w.train
			if math.Floor(float64(i+1)*o.HardFrac) > math.Floor(float64(i)*o.HardFrac) && len(hard) > 0 {
				from = hard
			}
			batch[i] = from[r.IntN(len(from))]
		}
		st := time.Now()
		rs, rl, err := e.rlRound(context.Background(), srv.clients, batch, o.Repeats, r, step)
		if err != nil {
			return fmt.Errorf("RL step %d: %w", step, err)
		}
		gs, gn := [2]int64{}, [2]float64{}
		// A local server has trained on the round when rolling with its episodes used.
		for i, s := range srv.local {
			for {
				status, _, g := s.Status()
				if a := s.Accounting(); status == swarm.StatusRolling && a.TrainedEpisodes+a.Dropped >= int64(step+1)*srv.perRound[i] {
					gs[i] = g
					break
				}
				if time.Since(st) > 90*time.Second {
					return errors.New("server did not train within 90 s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			gn[i] = s.LastTrainStats().GradNorm
		}
		for i := 0; len(srv.local) == 0 && i < 2; i++ { // servers elsewhere report their own steps
			if es, err := srv.clients[i].EngineStatus(context.Background()); err == nil {
				gs[i] = es.GlobalStep
			}
		}
		rep.steps = append(rep.steps, stepRow{Step: step + 1, RewardSmall: rs, RewardLarge: rl, GlobalSmall: gs[0], GlobalLarge: gs[1], Seconds: time.Since(st).Seconds()})
		if bar != nil {
			bar.Add(1)
		}
		fmt.Fprintf(os.Stderr, lead+"[%6.1fs] step %d: reward small %.3f (server step %d, grad norm %.3g) | reward large %.3f (server step %d, grad norm %.3g)\n",
			time.Since(t0).Seconds(), step+1, rs, gs[0], gn[0], rl, gs[1], gn[1])
	}
	for i, s := range srv.local {
		s.Stop()
		a := s.Accounting()
		rep.trained[i], rep.untrained[i] = a.TrainedEpisodes, a.Dropped+a.Buffered
	}
	return nil
}
