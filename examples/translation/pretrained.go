package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/swarm/adapter"
	"github.com/troupe-ml/troupe/swarm/hfmodel"
	"github.com/troupe-ml/troupe/textgen"
)

// decoder answers a batch of conversations greedily, the evaluation's decoding.
type decoder func(msgs [][]tokenizer.Message, maxTok int) ([]string, error)

// lmDecoder decodes with a warm-started nn.LM.
func lmDecoder(lm *nn.LM, tok *tokenizer.Tokenizer) decoder {
	return func(msgs [][]tokenizer.Message, maxTok int) ([]string, error) { return generate(lm, tok, msgs, maxTok) }
}

// hfDecoder decodes with a pretrained model, its chat template and the
// agent's LoRA adapter, 32 conversations at a time.
func hfDecoder(base *hf.Model, tok *hf.Tokenizer, ad *hf.LoRA) decoder {
	return func(msgs [][]tokenizer.Message, maxTok int) ([]string, error) {
		out := make([]string, 0, len(msgs))
		for batch := range slices.Chunk(msgs, 32) {
			prompts := make([][]int, len(batch))
			for i, conv := range batch {
				var sm []api.Message
				for _, m := range conv {
					sm = append(sm, api.Message{Role: m.Role, Content: m.Content})
				}
				var err error
				if prompts[i], err = (hfmodel.Chat{Tok: tok}).ChatPrompt(context.Background(), sm, nil); err != nil {
					return nil, err
				}
			}
			gens, err := base.Generate(context.Background(), ad, prompts, textgen.GenerateOptions{MaxTokens: maxTok, StopTokens: tok.StopTokens()}, nil)
			if err != nil {
				return nil, err
			}
			for _, g := range gens {
				out = append(out, strings.ToValidUTF8(tok.Decode(g.Tokens, true), "\uFFFD"))
			}
		}
		return out, nil
	}
}

// pretrainedStarts replaces the warm starts with pretrained checkpoints, each
// served with a LoRA adapter that GRPO trains; one directory loads one base.
// RL's task mix then has no error-prone pool (the warm start's).
func (o *options) pretrainedStarts(train []task) (w *warmed, closeAll func(), err error) {
	type loaded struct {
		base *hf.Model
		tok  *hf.Tokenizer
	}
	bases := map[string]*loaded{}
	closeAll = func() {
		for _, l := range bases {
			l.base.Close()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	w = &warmed{train: train}
	// An -export-hf model comes with agent 1's rough translations (RL's hard tasks).
	if b, err := os.ReadFile(filepath.Join(o.SmallModelDir, roughFile)); err == nil {
		if err := json.Unmarshal(b, &w.roughs); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", filepath.Join(o.SmallModelDir, roughFile), err)
		}
	}
	for i, dir := range []string{o.SmallModelDir, o.LargeModelDir} {
		name := [2]string{"small", "large"}[i]
		l := bases[filepath.Clean(dir)]
		if l == nil {
			l = &loaded{}
			if l.base, err = hf.Load(dir); err != nil {
				return nil, nil, err
			}
			bases[filepath.Clean(dir)] = l
			if l.tok, err = hf.LoadTokenizer(dir); err != nil {
				return nil, nil, err
			}
		}
		kl, lr := [2]float64{o.KLSmall, o.KLLarge}[i], [2]float64{o.LoRALR, o.LoRALRLarge}[i]
		m, pol, err := newHFModel(name, l.base, l.tok, o.Seed+uint64(i), lr, kl, o.LoRASteps, i == 1)
		if err != nil {
			return nil, nil, fmt.Errorf("%s model %s: %w", name, dir, err)
		}
		w.models[i] = m
		w.dec[i] = hfDecoder(l.base, l.tok, pol.Adapter)
		logf("%s model: pretrained %s (%s, %d parameters), LoRA rank 16 on the seven projections, AdamW %g (warm-up, then a cosine to a tenth over %d steps), KL β %g to the base", name, dir, l.base.Config.Arch, l.base.Config.NumParams(), lr, o.LoRASteps, kl)
	}
	return w, closeAll, nil
}

// newHFModel serves a pretrained base through a new LoRA adapter (rank 16)
// trained by GRPO with AdamW, the miniatures' recipe otherwise: a k3 KL
// penalty to the base (the adapter switched off) when klCoef > 0, and with
// maskFirst each sampled answer's first token as context. The learning rate
// warms up over the first steps/20+1 of the run's GRPO steps (one optimizer
// step each) to lr, then decays by a cosine to lr/10 at the last (TRL's
// GRPO trainer, too, decays its rate over the run by default): at a
// constant lr the detector's early gain in reward was lost, with its JSON,
// in a longer run.
func newHFModel(name string, base *hf.Model, tok *hf.Tokenizer, seed uint64, lr, klCoef float64, steps int, maskFirst bool) (*adapter.Adapter, *policies.LoRA, error) {
	if !tok.HasChatTemplate() {
		return nil, nil, fmt.Errorf("the tokenizer has no chat template")
	}
	ad, err := hf.NewLoRA(base, hf.LoRAConfig{Rank: 16, Alpha: 32, Seed: seed})
	if err != nil {
		return nil, nil, err
	}
	cfg := rl.GRPOConfig{ClipEps: 0.2}
	if klCoef > 0 {
		cfg.Ref, cfg.KLCoef = policies.LoRABase{Model: base}, klCoef
	}
	opt := nn.NewAdamW(nn.WarmupCosine(lr, steps/20+1, steps, lr/10), 0)
	pol := policies.NewLoRA(ad, opt, 1)
	maxLen := min(base.Config.MaxPos, hfmodel.DefaultMaxLen)
	// Sequences sample from the adapter's snapshot, republished after
	// every step.
	sampler := &hfmodel.Sampler{Base: base, StopTokens: tok.StopTokens()}
	sampler.Publish(ad, 0)
	a, err := adapter.New(adapter.Config{
		Name:      name,
		Tokenizer: hfmodel.Chat{Tok: tok},
		Sampler:   sampler,
		Policy:    pol,
		Trainer:   rl.NewGRPO(cfg),
		State:     &adapter.StoreState{Store: ad.Store, Opt: opt},
		MaxLen:    maxLen,
		Prepare:   prepare(maxLen, maskFirst),
		OnUpdate:  func(version int64) { sampler.Publish(ad, version) },
	})
	return a, pol, err
}
