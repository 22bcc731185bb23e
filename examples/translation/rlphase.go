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

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/swarm"
)

// rlServers are the RL phase's swarm servers (none with -servers) and its
// clients: the small model's (agent 1), the larger model's (agent 2) and
// the small model's again (agent 3).
type rlServers struct {
	local    []*swarm.Server
	clients  []*swarm.Client
	perRound [2]int64 // train episodes each local server gets per GRPO round
}

func (s *rlServers) close() {
	for _, srv := range slices.Backward(s.local) {
		srv.Close()
	}
}

// startServers starts the two swarm servers, the small model's and the
// larger model's, each training its model with GRPO on its own reward, on
// -ports; with -servers it starts none and connects to those.
func (o *options) startServers(e *env, w *warmed) (s *rlServers, err error) {
	s = &rlServers{}
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
			// Agent 2's answers do not train their first token ("[]" or a
			// list's start): whether to answer is left to the warm start, as
			// that token's gradient, sampled at temperature 0.5, follows
			// another objective than greedy decoding and drives it to lists.
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
			go http.Serve(ln, srv.Handler())
			if err := srv.Start(); err != nil {
				return nil, err
			}
			s.local = append(s.local, srv)
			addrs = append(addrs, ln.Addr().String())
			s.perRound[i] = int64(cfg.BatchSize * cfg.NumRepeat)
		}
	}
	small := swarm.NewClient("http://" + addrs[0])
	s.clients = []*swarm.Client{small, swarm.NewClient("http://" + addrs[1]), small}
	logf("swarm servers: small model at %s, larger model at %s", addrs[0], addrs[1])
	return s, nil
}

// newLMModel serves lm through a swarm.Adapter, trained by GRPO with cfg
// and plain SGD at learning rate lr: steps in proportion to the gradient,
// which beat AdamW's normalised steps on the validation split. With
// klCoef > 0, GRPO adds the k3 KL penalty to a frozen copy of lm as it is
// now (the warm start). With maskFirst every sampled answer trains given
// its first token, not that token (firstAsContext).
func newLMModel(name string, lm *nn.LM, tok *tokenizer.Tokenizer, lr, klCoef float64, cfg rl.GRPOConfig, maskFirst bool) (*swarm.Adapter, error) {
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
	return swarm.NewAdapter(swarm.AdapterConfig{
		Name:      name,
		Tokenizer: tailChat{swarm.TokenizerChat{Tok: tok}, lm.Config.MaxLen - 4},
		Sampler:   swarm.NewLMSampler(lm, tok.MustSpecialID(tokenizer.End)),
		Policy:    policies.NewLM(lm, nn.NewLMTrainer(lm, opt, nn.TrainConfig{ClipNorm: 1, LenBucket: 32})),
		Trainer:   rl.NewGRPO(cfg),
		State:     &swarm.LMState{Store: lm.Store, Opt: opt, Meta: map[string]string{"tokenizer": string(tj)}},
		MaxLen:    lm.Config.MaxLen,
		Prepare: func(batch []rl.Sample) (kept []rl.Sample, dropped int) {
			for _, s := range batch {
				ok := true
				if maskFirst && len(s.LogProbs) > 0 { // sampled, not forced, answers
					s, ok = firstAsContext(s)
				}
				if !ok || len(s.Prompt) == 0 || len(s.Actions) == 0 || len(s.Prompt)+len(s.Actions) > lm.Config.MaxLen {
					dropped++
					continue
				}
				kept = append(kept, s)
			}
			return kept, dropped
		},
	})
}

// tailChat keeps the last n tokens of an over-long chat prompt, as the
// evaluation does: its end is the open assistant turn, which the answer
// must follow, and the answer has at least MaxLen − n tokens of room.
type tailChat struct {
	swarm.TokenizerChat
	n int
}

func (t tailChat) ChatPrompt(msgs []swarm.Message) ([]int, error) {
	p, err := t.TokenizerChat.ChatPrompt(msgs)
	if len(p) > t.n {
		p = p[len(p)-t.n:]
	}
	return p, err
}

// firstAsContext returns s with its first action moved to the end of its
// prompt (and its first behaviour log-probability dropped), so that GRPO
// trains the rest of the answer given that token but not the token itself;
// false when no action would be left. s's slices are not modified.
func firstAsContext(s rl.Sample) (rl.Sample, bool) {
	if len(s.Actions) < 2 {
		return s, false
	}
	s.Prompt = append(append(make([]int, 0, len(s.Prompt)+1), s.Prompt...), s.Actions[0])
	s.Actions = s.Actions[1:]
	if s.LogProbs != nil {
		s.LogProbs = s.LogProbs[1:]
	}
	if s.StepRewards != nil {
		s.StepRewards = s.StepRewards[1:]
	}
	return s, true
}

// rlPhase runs the GRPO rounds, each one batch per server, waiting for local servers to train.
func (o *options) rlPhase(e *env, w *warmed, srv *rlServers, rep *report) error {
	r := rand.New(rand.NewPCG(o.rlSeed(), 5))
	// Error-prone tasks: train sentences whose warm-start rough translation
	// misses a glossary term. Only there can the detector earn more than
	// "[]", which scores full marks on clean sentences and, with too few
	// error-prone tasks, is what the detector learns.
	var hard []task
	for _, rx := range w.roughs {
		if len(truthErrors(rx.T, rx.Rough)) > 0 {
			hard = append(hard, rx.T)
		}
	}
	logf("RL task mix: %.0f%% of each batch from the %d train sentences whose warm-start rough translation misses a glossary term, the rest random", 100*o.HardFrac, len(hard))
	bar := progressbar.NewOptions(o.Steps, progressbar.OptionSetDescription("GRPO"), progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount())
	for step := 0; step < o.Steps; step++ {
		batch := make([]task, o.Batch)
		for i := range batch {
			// Error-prone slots spread evenly: with 0.5, the odd ones.
			isHard := math.Floor(float64(i+1)*o.HardFrac) > math.Floor(float64(i)*o.HardFrac)
			if isHard && len(hard) > 0 {
				batch[i] = hard[r.IntN(len(hard))]
			} else {
				batch[i] = w.train[r.IntN(len(w.train))]
			}
		}
		st := time.Now()
		rs, rl, err := e.rlRound(context.Background(), srv.clients, batch, o.Repeats, r, step)
		if err != nil {
			return fmt.Errorf("RL step %d: %w", step, err)
		}
		var gs [2]int64
		var gn [2]float64
		// Each local server has trained on this round when it has used
		// all its episodes and is rolling again.
		for i, s := range srv.local {
			for {
				status, _, g := s.Status()
				a := s.Accounting()
				if status == swarm.StatusRolling && a.TrainedEpisodes+a.Dropped >= int64(step+1)*srv.perRound[i] {
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
		rep.steps = append(rep.steps, stepRow{Step: step + 1, RewardSmall: rs, RewardLarge: rl, GlobalSmall: gs[0], GlobalLarge: gs[1], Seconds: time.Since(st).Seconds()})
		bar.Add(1)
		fmt.Fprintf(os.Stderr, "\n[%6.1fs] step %d: reward small %.3f (server step %d, grad norm %.3g) | reward large %.3f (server step %d, grad norm %.3g)\n",
			time.Since(t0).Seconds(), step+1, rs, gs[0], gn[0], rl, gs[1], gn[1])
	}
	for i, s := range srv.local {
		s.Stop()
		a := s.Accounting()
		rep.trained[i], rep.untrained[i] = a.TrainedEpisodes, a.Dropped+a.Buffered
	}
	return nil
}
