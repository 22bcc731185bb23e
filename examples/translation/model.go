package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/swarm"
)

// lmModel hosts an nn.LM with the BPE tokenizer behind a swarm server: it
// implements swarm.Model (chat template, sampling with behaviour
// log-probabilities, GRPO training through rl/policies.LM).
type lmModel struct {
	name string
	lm   *nn.LM
	tok  *tokenizer.Tokenizer
	end  int
	opt  nn.Optimizer
	pol  *policies.LM
	ref  *policies.LM // the KL penalty's frozen reference (nil: no penalty)
	grpo *rl.GRPO
	// tempered scores samples at their sampling temperature (withTempered).
	tempered bool
	// maskFirst moves the first action of every sampled sample (one with
	// behaviour log-probabilities) into its prompt: the sample then
	// trains its answer given its first token, not that token, which only
	// forced-prefix samples (no log-probabilities) train (-vine-mask).
	maskFirst bool
	// anchor draws supervised warm-start examples; after each GRPO update
	// Train takes one supervised step on anchorN of them (0: none).
	anchor   func() (nn.SeqExample, error)
	anchorN  int
	anchorTr *nn.LMTrainer // the anchor's own optimizer
	newOpt   func() nn.Optimizer
	base     int64 // version restored from a checkpoint; pol counts steps since
	genMu    sync.Mutex
}

// newLMModel wraps lm for a swarm server, trained by GRPO with cfg. With
// klCoef > 0, GRPO adds the k3 KL penalty to a frozen copy of lm as it is
// now (the warm start).
//
// With decaySteps > 0 the GRPO steps' learning rate falls from rlLR to 0
// along a half cosine over that many optimizer steps (-cosine-large); the
// supervised anchor steps keep rlLR.
func newLMModel(name string, lm *nn.LM, tok *tokenizer.Tokenizer, rlOpt string, rlLR, klCoef float64, cfg rl.GRPOConfig, decaySteps int) *lmModel {
	mk := func(lr nn.Schedule) nn.Optimizer {
		if rlOpt == "sgd" {
			return nn.NewSGD(lr, 0)
		}
		return nn.NewAdamW(lr, 0)
	}
	newOpt := func() nn.Optimizer { return mk(nn.Constant(rlLR)) }
	opt := newOpt()
	if decaySteps > 0 {
		opt = mk(nn.WarmupCosine(rlLR, 0, decaySteps, 0))
	}
	var refPol *policies.LM
	if klCoef > 0 {
		ref := frozenCopy(lm) // never stepped: its trainer only computes log-probabilities
		refPol = policies.NewLM(ref, nn.NewLMTrainer(ref, nn.NewAdamW(nn.Constant(0), 0), nn.TrainConfig{LenBucket: 32}))
		cfg.Ref = refPol
		cfg.KLCoef = klCoef
	}
	return &lmModel{name: name, lm: lm, tok: tok, end: tok.MustSpecialID(tokenizer.End), opt: opt,
		grpo: rl.NewGRPO(cfg), newOpt: newOpt, ref: refPol,
		pol: policies.NewLM(lm, nn.NewLMTrainer(lm, opt, nn.TrainConfig{ClipNorm: 1, LenBucket: 32}))}
}

// withAnchor mixes supervised steps into RL training: after each GRPO
// update, one step of next-token loss on n examples from draw (warm-start
// data, or the model's own replies). This is the "PPO-ptx" mix of
// Ouyang et al. 2022 ("Training language models to follow instructions
// with human feedback", arXiv:2203.02155), there against the drift of
// abilities that the RL reward does not measure; here the small model's
// RL on agent 1's turns had eroded agent 3's copying, a skill the same
// weights serve (notes/translation.md, R12).
//
// The anchor steps have their own optimizer, of the GRPO steps' kind and
// learning rate: sharing AdamW's moment estimates would scale the
// supervised gradients, which are far larger than the policy-gradient ones,
// by the wrong second moments.
func (m *lmModel) withAnchor(draw func() (nn.SeqExample, error), n int) *lmModel {
	m.anchor, m.anchorN = draw, n
	if n > 0 && draw != nil && m.anchorTr == nil {
		m.anchorTr = nn.NewLMTrainer(m.lm, m.newOpt(), nn.TrainConfig{ClipNorm: 1, LenBucket: 32})
	}
	return m
}

// withTempered makes GRPO score every sample at the temperature it was
// sampled at (rl/policies.LM.Tempered), the KL penalty's reference too, so
// that the penalty compares the two tempered distributions. The server
// records the temperature of each completion with its sample, but its
// log-probabilities at temperature 1; Train drops those of tempered samples
// so that GRPO recomputes them under the current parameters, which sampled
// them: the client waits for each round's update before the next round's
// rollouts, so a tempered sample of another version is dropped.
func (m *lmModel) withTempered(on bool) *lmModel {
	m.tempered = on
	m.pol.Tempered = on
	if m.ref != nil {
		m.ref.Tempered = on
	}
	return m
}

// frozenCopy returns a copy of lm with its own parameters (the reference
// policy of the KL penalty).
func frozenCopy(lm *nn.LM) *nn.LM {
	c := nn.NewLM(nn.NewStore(0), lm.Config)
	for _, p := range lm.Store.Params() {
		copy(c.Store.Param(p.Name).Data(), p.Data())
	}
	return c
}

func (m *lmModel) Name() string { return m.name }

func (m *lmModel) ChatPrompt(msgs []swarm.Message) ([]int, error) {
	tm := make([]tokenizer.Message, len(msgs))
	for i, x := range msgs {
		tm[i] = tokenizer.Message{Role: x.Role, Content: x.Content}
	}
	return m.tok.ApplyChat(tm, true)
}

func (m *lmModel) TokenBytes(t int) []byte {
	if t < 0 || t >= m.tok.VocabSize() || m.tok.IsSpecial(t) {
		return nil
	}
	return m.tok.TokenBytes(t)
}

// EncodeText implements swarm.TextEncoder (forced prefixes, -vine-large).
func (m *lmModel) EncodeText(s string) ([]int, error) { return m.tok.Encode(s), nil }

func (m *lmModel) Generate(ctx context.Context, prompts [][]int, opts swarm.GenerateOptions) ([]swarm.Generation, error) {
	out := make([]swarm.Generation, len(prompts))
	for i, p := range prompts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(p) > m.lm.Config.MaxLen-4 {
			// Keep the end (the open assistant turn); Train cuts the
			// server's sample the same way.
			p = p[len(p)-(m.lm.Config.MaxLen-4):]
		}
		maxTok := max(1, min(opts.MaxTokens, m.lm.Config.MaxLen-len(p)))
		var seed uint64
		if i < len(opts.Rand) && opts.Rand[i] != nil {
			seed = opts.Rand[i].Uint64()
		}
		m.genMu.Lock()
		g, err := m.lm.Generate([][]int{p}, nn.GenerateOptions{Temperature: opts.Temperature, TopP: opts.TopP,
			MaxTokens: maxTok, StopTokens: []int{m.end}, Seed: seed, TopLogProbs: opts.TopLogProbs})
		m.genMu.Unlock()
		if err != nil {
			return nil, err
		}
		gen := swarm.Generation{Tokens: g[0].Tokens, LogProbs: g[0].LogProbs, FinishReason: g[0].FinishReason}
		for _, pos := range g[0].TopLogProbs {
			top := make([]swarm.TokenLogProb, len(pos))
			for k, c := range pos {
				top[k] = swarm.TokenLogProb{Token: c.Token, LogProb: c.LogProb}
			}
			gen.Top = append(gen.Top, top)
		}
		if opts.Stop != nil {
			for k := 1; k <= len(gen.Tokens); k++ {
				if opts.Stop(i, gen.Tokens[:k]) {
					gen.Tokens, gen.LogProbs, gen.FinishReason = gen.Tokens[:k], gen.LogProbs[:k], "stop"
					if gen.Top != nil {
						gen.Top = gen.Top[:k]
					}
					break
				}
			}
		}
		out[i] = gen
	}
	return out, nil
}

func (m *lmModel) Train(batch []rl.Sample) (rl.Stats, error) {
	var keep []rl.Sample
	stale := 0
	for _, s := range batch {
		sampled := len(s.LogProbs) > 0 // forced-prefix samples have none
		if m.tempered && s.Temperature > 0 && s.Temperature != 1 {
			if s.Version != m.Version() {
				stale++
				continue
			}
			s.LogProbs = nil // recomputed at s.Temperature by GRPO
		}
		// Generate cut over-long prompts to their last MaxLen-4 tokens;
		// train on the same context the actions were sampled from.
		if n := m.lm.Config.MaxLen - 4; len(s.Prompt) > n {
			s.Prompt = s.Prompt[len(s.Prompt)-n:]
		}
		if m.maskFirst && sampled {
			// After the cut: the first token was sampled after the cut
			// prompt, and the rest after both.
			var ok bool
			if s, ok = firstAsContext(s); !ok {
				continue
			}
		}
		if len(s.Prompt) > 0 && len(s.Actions) > 0 && len(s.Prompt)+len(s.Actions) <= m.lm.Config.MaxLen {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return rl.Stats{Dropped: stale}, nil
	}
	st, err := m.grpo.Update(m.pol, keep)
	if err != nil {
		return st, err
	}
	// Tempered samples of an older version were left out above: count them
	// with the ones GRPO drops.
	st.Dropped += stale
	if m.anchorTr != nil {
		b, err := drawBatch(m.anchor, m.anchorN, m.lm.Config.MaxLen)
		if err != nil {
			return st, fmt.Errorf("%s: supervised anchor: %w", m.name, err)
		}
		if _, err := m.anchorTr.SupervisedStep(b); err != nil {
			return st, fmt.Errorf("%s: supervised anchor: %w", m.name, err)
		}
	}
	return st, nil
}

// firstAsContext returns s with its first action moved to the end of its
// prompt (and its first behaviour log-probability dropped), so that GRPO
// trains the rest of the answer given that token but not the token itself
// (-vine-mask). s's slices are not modified. It returns false when no
// action would be left.
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

func (m *lmModel) Version() int64 { return m.base + m.pol.Version() }

func (m *lmModel) Save(w io.Writer) error {
	dir, err := os.MkdirTemp("", "troupe-lm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "m.safetensors")
	tj, _ := m.tok.MarshalJSON()
	if err := nn.SaveCheckpoint(p, m.lm.Store, m.opt, map[string]string{"version": strconv.FormatInt(m.Version(), 10), "tokenizer": string(tj)}); err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

func (m *lmModel) Load(r io.Reader) error {
	f, err := os.CreateTemp("", "troupe-lm-*.safetensors")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	f.Close()
	meta, err := nn.LoadCheckpoint(f.Name(), m.lm.Store, m.opt)
	if err != nil {
		return err
	}
	v, err := strconv.ParseInt(meta["version"], 10, 64)
	if err != nil {
		return fmt.Errorf("translation: checkpoint without version: %w", err)
	}
	m.base = v - m.pol.Version()
	return nil
}
