package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"examples/translation/corpus"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/nn/tokenizer"
)

// The warm-started nn.LM models cannot be written as Hugging Face
// checkpoints: their pointer (copy) head mixes attention over the context
// into the next-token distribution, which no Qwen or Llama layer does,
// and their blocks are GPT-style (LayerNorm, GELU) rather than RMSNorm and
// SwiGLU. -export-hf therefore warm-starts Qwen3-shaped models of its own
// on the same supervised data and writes those: the workflow's models as
// a Hugging Face user would receive them, to be served with LoRA adapters
// by -small-model-dir and -large-model-dir.
//
// nn/hf trains adapters, not bases, so each model starts from random
// weights and a LoRA adapter of full rank on every projection learns the
// warm start, with a trainable copy of the token embedding (PEFT's
// modules_to_save, kept tied to the output): a random frozen embedding
// left agent 3 unable to learn to copy the rough translation. Export
// merges both into the weights. InitStd is set for a largest initial logit
// of about 13; 0.02 (Hugging Face's default) learned the copy task more
// slowly in a short trial (docs/experiments/2026-12-06-hf-embedding.md).

// roughFile, beside an exported small model, holds agent 1's rough
// translations of the train sentences.
const roughFile = "rough.json"

// hfShape is the Qwen3 shape of the exported models: hidden width dim,
// layers, 4 heads, an MLP three times as wide, and room for prompts four
// times the warm start's context.
func hfShape(vocab, dim, layers, maxLen int, end int) hf.Config {
	return hf.Config{Arch: "qwen3", Vocab: vocab, Hidden: dim, Layers: layers, Heads: 4, KVHeads: 4, HeadDim: dim / 4,
		Intermediate: 3 * dim, MaxPos: 4 * maxLen, RMSEps: 1e-6, RopeTheta: 10000, Tied: true, QKNorm: true, EOS: []int{end}}
}

// hfStepper is a stepper over an nn/hf model's adapter: cross-entropy on
// the targets, gradients clipped to norm 1, AdamW.
type hfStepper struct {
	m   *hf.Model
	ad  *hf.LoRA
	opt nn.Optimizer
}

func (h hfStepper) SupervisedStep(batch []nn.SeqExample) (float64, error) {
	seqs := make([]hf.Seq, len(batch))
	for i, ex := range batch {
		seqs[i] = hf.Seq{Prompt: ex.Prompt, Target: ex.Target}
	}
	loss, err := h.m.ForwardBackward(h.ad, seqs, hf.CrossEntropy)
	if err != nil {
		return 0, err
	}
	nn.ClipGradNorm(h.ad.Params(), 1)
	h.opt.Update(h.ad.Params())
	h.ad.Store.ZeroGrad()
	return loss, nil
}

// hfEncoder encodes examples as the served model sees them: the prompt
// rendered by tok's chat template and encoded by tok, the reply encoded
// and closed with the end of the turn.
func hfEncoder(tok *hf.Tokenizer) encoder {
	stop := tok.StopTokens()
	return func(msgs []tokenizer.Message, reply string) (nn.SeqExample, error) {
		conv := make([]hf.Message, len(msgs))
		for i, m := range msgs {
			conv[i] = hf.Message{Role: m.Role, Content: m.Content}
		}
		p, err := tok.ApplyChatTemplate(conv, true)
		if err != nil {
			return nn.SeqExample{}, err
		}
		return nn.SeqExample{Prompt: p, Target: append(tok.Encode(reply), stop[0])}, nil
	}
}

// exportHF warm-starts the small (agents 1 and 3) and the larger (agent 2)
// Qwen3-shaped models on the warm start's data and writes them, merged,
// with the tokenizer (troupe's, in Hugging Face's format, with its chat
// template) to dir/small and dir/large.
func (o *options) exportHF(e *env, d *corpus.Dataset, train []task, dir string) error {
	spec := e.tok.HFSpec()
	end := e.tok.MustSpecialID(tokenizer.End)
	wc := warmCfg{Mix: warmMix{FinalFrac: o.FinalFrac, RoughTasks: o.RoughTasks, Pseudo: o.Pseudo, CopySteps: o.CopySteps * o.HFSteps / max(o.WarmSteps, 1)},
		Steps: o.HFSteps, Batch: o.WarmBatch, LR: o.WarmLR, Seed: o.Seed, MaxRough: e.maxRough, MaxTok: e.maxTok}
	wc.Spec.MaxLen = o.MaxLen
	var rx []roughEx
	for i, role := range []string{"small", "large"} {
		c := hfShape(e.tok.VocabSize(), o.HFDim, o.HFLayers, o.MaxLen, end)
		base := filepath.Join(dir, role+"-random")
		if err := hf.WriteRandom(base, c, o.Seed+uint64(i), hf.WriteOptions{DType: "F32", InitStd: 13 / float64(c.Hidden)}); err != nil {
			return err
		}
		if err := spec.WriteDir(base); err != nil {
			return err
		}
		m, tok, err := hf.Open(base)
		if err != nil {
			return err
		}
		ad, err := hf.NewLoRA(m, hf.LoRAConfig{Rank: c.Hidden, Alpha: float64(c.Hidden), Seed: o.Seed + uint64(i),
			ModulesToSave: []string{hf.EmbedTokens}, EnsureWeightTying: true})
		if err != nil {
			m.Close()
			return err
		}
		st := hfStepper{m, ad, nn.NewAdamW(nn.WarmupCosine(wc.LR, wc.Steps/10+1, wc.Steps, wc.LR/10), 0)}
		logf("export-hf %s: Qwen3-shaped, hidden %d, %d layers, %d parameters, a rank-%d LoRA on every projection and a trainable tied embedding", role, c.Hidden, c.Layers, c.NumParams(), c.Hidden)
		var loss float64
		if role == "small" {
			loss, rx, err = trainSmall(wc, st, hfEncoder(tok), hfDecoder(m, tok, ad), train, d.Glossary)
		} else {
			wc.Steps, wc.Seed, wc.Mix = o.HFLargeSteps, o.Seed+1, warmMix{}
			st.opt = nn.NewAdamW(nn.WarmupCosine(wc.LR, wc.Steps/10+1, wc.Steps, wc.LR/10), 0)
			loss, err = trainLarge(wc, st, hfEncoder(tok), rx, d.Glossary)
		}
		if err == nil {
			err = m.Export(filepath.Join(dir, role), ad, hf.WriteOptions{DType: "F32"})
		}
		if err == nil {
			err = spec.WriteDir(filepath.Join(dir, role))
		}
		if err == nil && role == "small" {
			// Agent 1's rough translations, whose error-prone sentences
			// are RL's hard tasks, as the warm start's cache keeps them.
			b, _ := json.Marshal(rx)
			err = os.WriteFile(filepath.Join(dir, role, roughFile), b, 0o644)
		}
		m.Close()
		if err != nil {
			return fmt.Errorf("export-hf %s: %w", role, err)
		}
		if err := os.RemoveAll(base); err != nil {
			return err
		}
		logf("export-hf %s: warm-start loss %.3f; wrote %s", role, loss, filepath.Join(dir, role))
	}
	logf("RL on them: -small-model-dir %s -large-model-dir %s", filepath.Join(dir, "small"), filepath.Join(dir, "large"))
	return nil
}
