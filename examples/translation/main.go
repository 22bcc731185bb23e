package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/troupe-ml/troupe/examples/translation/corpus"
	"github.com/troupe-ml/troupe/examples/translation/grader"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/swarm"
)

type env struct {
	tok    *tokenizer.Tokenizer
	qg     *grader.TranslationQualityGrader
	maxTok int
	// maxRough and maxDet bound (in runes) the rough translation and the
	// detector's JSON passed to the next agent.
	maxRough, maxDet int
	// sharedReward gives agent 2 the final translation's quality reward
	// instead of its own detection reward (the sweep's second arm).
	sharedReward bool
	// jointSmall puts agents 1 and 3 in one episode on the small model's
	// server (one reward, the final translation's) instead of one each.
	jointSmall bool
}

type options struct {
	quick                           bool
	smallDim, smallLayers, largeDim int
	largeLayers, maxLen, vocab      int
	warmSteps, warmBatch            int
	largeWarmSteps                  int
	learnedPos                      bool
	warmLR, rlLR, klSmall, klLarge  float64
	steps, batch, repeats           int
	ports, servers, out             string
	evalN, maxEn, maxZh             int
	seed                            uint64
	sharedReward, jointSmall        bool
	sweep                           bool
	cacheDir                        string // warm-start cache; default <out>/cache
	finalFrac, pseudo               float64
	copySteps                       int
	roughTasks                      int
}

func main() {
	var o options
	flag.BoolVar(&o.quick, "quick", false, "a run of well under a minute (tiny models, 2 RL steps per server)")
	flag.IntVar(&o.smallDim, "small-dim", 64, "width of the small model (agents 1 and 3)")
	flag.IntVar(&o.smallLayers, "small-layers", 3, "layers of the small model (3: agent 3 must copy, which 2 layers learn far more slowly)")
	flag.BoolVar(&o.learnedPos, "learned-pos", false, "learned position embeddings instead of rotary ones")
	flag.IntVar(&o.largeDim, "large-dim", 96, "width of the larger model (agent 2)")
	flag.IntVar(&o.largeLayers, "large-layers", 3, "layers of the larger model")
	flag.IntVar(&o.maxLen, "max-len", 128, "context length of both models")
	flag.IntVar(&o.vocab, "vocab", 768, "BPE vocabulary size")
	flag.IntVar(&o.warmSteps, "warm-steps", 5000, "supervised warm-start steps of the small model (agents 1 and 3)")
	flag.IntVar(&o.largeWarmSteps, "large-warm-steps", 1500, "supervised warm-start steps of the larger model (agent 2)")
	flag.IntVar(&o.warmBatch, "warm-batch", 16, "warm-start batch size")
	flag.Float64Var(&o.warmLR, "warm-lr", 3e-3, "warm-start peak learning rate")
	flag.Float64Var(&o.rlLR, "rl-lr", 2e-4, "GRPO learning rate")
	flag.Float64Var(&o.klSmall, "kl-small", 0, "GRPO KL penalty (β, k3 estimator) of the small model to its warm start")
	flag.Float64Var(&o.klLarge, "kl-large", 0, "GRPO KL penalty (β, k3 estimator) of the larger model to its warm start")
	flag.IntVar(&o.steps, "steps", 30, "GRPO steps per server")
	flag.IntVar(&o.batch, "batch", 4, "tasks per GRPO step")
	flag.IntVar(&o.repeats, "repeats", 4, "episodes per task (GRPO group size)")
	flag.StringVar(&o.ports, "ports", "10086,10087", "ports of the small and larger model's servers")
	flag.StringVar(&o.servers, "servers", "", "host:port,host:port of servers already running elsewhere (no local servers, no local evaluation)")
	flag.StringVar(&o.out, "out", "out/translation", "output folder (report, plots, checkpoint cache)")
	flag.IntVar(&o.evalN, "eval", 200, "test sentences to evaluate (0 = all)")
	flag.IntVar(&o.maxEn, "max-en", 48, "longest English source used (bytes)")
	flag.IntVar(&o.maxZh, "max-zh", 24, "longest Chinese reference used (characters)")
	flag.Uint64Var(&o.seed, "seed", 1, "random seed")
	flag.BoolVar(&o.sharedReward, "shared-reward", false, "reward agent 2 with the final translation's quality instead of its own detection grader")
	flag.BoolVar(&o.jointSmall, "joint-small", false, "one episode (rewarded by the final translation) for agents 1 and 3 on the small model's server instead of one per agent")
	flag.BoolVar(&o.sweep, "sweep", false, "research sweep: independent vs shared reward, same warm start and seed; writes sweep.md and sweep.png to -out")
	flag.Float64Var(&o.finalFrac, "final-frac", 0.4, "fraction of agent-3 examples in the small model's warm start")
	flag.IntVar(&o.copySteps, "copy-steps", 2000, "first warm-start steps of the small model spent on agent 3's copy task alone (part of -warm-steps)")
	flag.Float64Var(&o.pseudo, "pseudo", 0.5, "fraction of agent 3's second-phase warm-start examples made on pseudo-rough texts (copy training) instead of agent 1's real outputs")
	flag.IntVar(&o.roughTasks, "rough-tasks", 0, "train sentences agent 1 translates for the warm start of agents 2 and 3 (0: all)")
	flag.Parse()
	if o.quick {
		o.applyQuick()
	}
	if o.sweep {
		if err := sweep(o); err != nil {
			fmt.Fprintln(os.Stderr, "translation:", err)
			os.Exit(1)
		}
		return
	}
	if _, err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "translation:", err)
		os.Exit(1)
	}
}

// applyQuick sets the -quick configuration: tiny models, a few warm-start
// steps and two GRPO steps per server.
func (o *options) applyQuick() {
	o.smallDim, o.smallLayers, o.largeDim, o.largeLayers = 16, 1, 24, 1
	o.maxLen, o.vocab, o.warmSteps, o.warmBatch = 96, 320, 6, 8
	o.roughTasks, o.largeWarmSteps, o.copySteps = 32, 6, 2
	o.steps, o.batch, o.repeats, o.evalN = 2, 2, 2, 16
	o.maxEn, o.maxZh = 32, 16
}

var t0 = time.Now()

func logf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] "+f+"\n", append([]any{time.Since(t0).Seconds()}, a...)...)
}

func run(o options) (*report, error) {
	d, err := corpus.Load()
	if err != nil {
		return nil, err
	}
	train := makeTasks(d.Train, d.Glossary, o.maxEn, o.maxZh)
	test := makeTasks(d.Test, d.Glossary, o.maxEn, o.maxZh)
	if o.evalN > 0 && len(test) > o.evalN {
		test = test[:o.evalN]
	}
	logf("data: %d train / %d test tasks (of %d/%d pairs), glossary %d terms, %d acronyms",
		len(train), len(test), len(d.Train), len(d.Test), len(d.Glossary.Terms), len(d.Acronyms))
	tok, err := trainTokenizer(train, d.Glossary, o.vocab)
	if err != nil {
		return nil, err
	}
	e := &env{tok: tok, qg: &grader.TranslationQualityGrader{Glossary: d.Glossary, Acronyms: d.Acronyms}, maxTok: 40, maxRough: 2 * o.maxZh, maxDet: 120, sharedReward: o.sharedReward, jointSmall: o.jointSmall}
	cache := o.cacheDir
	if cache == "" {
		cache = filepath.Join(o.out, "cache")
	}
	mix := warmMix{FinalFrac: o.finalFrac, RoughTasks: o.roughTasks, Pseudo: o.pseudo, CopySteps: o.copySteps}
	wc := warmCfg{Spec: modelSpec{o.smallDim, o.smallLayers, 4, o.maxLen, !o.learnedPos}, Mix: mix, Steps: o.warmSteps, Batch: o.warmBatch,
		LR: o.warmLR, Seed: o.seed, MaxRough: e.maxRough, MaxTok: e.maxTok, CacheDir: cache}
	small, lossS, roughs, err := warmStartSmall(wc, train, tok, d.Glossary, logf)
	if err != nil {
		return nil, err
	}
	wc.Spec, wc.Seed, wc.Mix, wc.Steps = modelSpec{o.largeDim, o.largeLayers, 4, o.maxLen, !o.learnedPos}, o.seed+1, warmMix{}, o.largeWarmSteps
	large, lossL, err := warmStartLarge(wc, roughs, tok, d.Glossary, logf)
	if err != nil {
		return nil, err
	}
	rep := &report{opts: o, lossSmall: lossS, lossLarge: lossL, nTrain: len(train), nTest: len(test)}
	local := o.servers == ""
	if local {
		logf("evaluating warm start on %d test sentences", len(test))
		if rep.aloneBefore, rep.flowBefore, err = e.evaluate(small, large, test); err != nil {
			return nil, err
		}
	}

	// Servers.
	var addrs []string
	var servers []*swarm.Server
	if local {
		ms := newLMModel("small", small, tok, o.rlLR, o.klSmall)
		ml := newLMModel("large", large, tok, o.rlLR, o.klLarge)
		ports := strings.Split(o.ports, ",")
		if len(ports) != 2 {
			return nil, fmt.Errorf("-ports wants two ports, got %q", o.ports)
		}
		for i, m := range []swarm.Model{ms, ml} {
			cfg := swarm.DefaultTrainConfig()
			cfg.BatchSize, cfg.NumRepeat, cfg.MaxStaleness = o.batch, o.repeats, 1
			if i == 0 && !o.jointSmall {
				cfg.BatchSize = 2 * o.batch // a group for agent 1 and one for agent 3 per task
			}
			cfg.MaxResponseTokens = e.maxTok + 16
			srv, err := swarm.NewServer(swarm.ServerConfig{Model: m, Train: cfg, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				return nil, err
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+ports[i])
			if err != nil {
				return nil, fmt.Errorf("server %d: %w (use -ports)", i, err)
			}
			go http.Serve(ln, srv.Handler())
			if err := srv.Start(); err != nil {
				return nil, err
			}
			defer srv.Close()
			servers = append(servers, srv)
			addrs = append(addrs, ln.Addr().String())
		}
	} else {
		addrs = strings.Split(o.servers, ",")
		if len(addrs) != 2 {
			return nil, fmt.Errorf("-servers wants host:port,host:port, got %q", o.servers)
		}
	}
	clients := []*swarm.Client{swarm.NewClient("http://" + addrs[0]), swarm.NewClient("http://" + addrs[1])}
	if !o.jointSmall {
		clients = append(clients, clients[0]) // agent 3's episode
	}
	logf("swarm servers: small model at %s, larger model at %s", addrs[0], addrs[1])

	// GRPO rounds: each round gives each server one training batch.
	ctx := context.Background()
	r := rand.New(rand.NewPCG(o.seed, 5))
	var withTerms []task
	for _, t := range train {
		if len(t.Terms) > 0 {
			withTerms = append(withTerms, t)
		}
	}
	bar := progressbar.NewOptions(o.steps, progressbar.OptionSetDescription("GRPO"), progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount())
	for step := 0; step < o.steps; step++ {
		// Half the tasks come from sentences with glossary terms, where
		// terminology errors can occur: otherwise most groups have no true
		// error and the detector learns that "[]" always pays.
		batch := make([]task, o.batch)
		for i := range batch {
			if i%2 == 1 && len(withTerms) > 0 {
				batch[i] = withTerms[r.IntN(len(withTerms))]
			} else {
				batch[i] = train[r.IntN(len(train))]
			}
		}
		st := time.Now()
		rs, rl, err := e.rlRound(ctx, clients, batch, o.repeats, r, step)
		if err != nil {
			return nil, fmt.Errorf("RL step %d: %w", step, err)
		}
		var gs [2]int64
		if local {
			// Wait until both servers trained on this round.
			for i, s := range servers {
				for {
					_, _, g := s.Status()
					if g >= int64(step+1) {
						gs[i] = g
						break
					}
					if time.Since(st) > 90*time.Second {
						return nil, errors.New("server did not train within 90 s")
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
		rep.steps = append(rep.steps, stepRow{Step: step + 1, RewardSmall: rs, RewardLarge: rl, GlobalSmall: gs[0], GlobalLarge: gs[1], Seconds: time.Since(st).Seconds()})
		bar.Add(1)
		fmt.Fprintf(os.Stderr, "\n[%6.1fs] step %d: reward small %.3f (server step %d) | reward large %.3f (server step %d)\n",
			time.Since(t0).Seconds(), step+1, rs, gs[0], rl, gs[1])
	}
	if local {
		for _, s := range servers {
			s.Stop()
		}
		logf("evaluating after RL")
		if rep.aloneAfter, rep.flowAfter, err = e.evaluate(small, large, test); err != nil {
			return nil, err
		}
	}
	rep.seconds = time.Since(t0).Seconds()
	if err := rep.write(o.out); err != nil {
		return nil, err
	}
	logf("report: %s", filepath.Join(o.out, "report.md"))
	return rep, nil
}
