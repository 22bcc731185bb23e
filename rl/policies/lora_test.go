package policies

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/textgen"
)

// tinyQwen3 is a Qwen3-shaped model small enough to train in a test.
func tinyQwen3() hf.Config {
	return hf.Config{Arch: "qwen3", Vocab: 300, Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 32, Intermediate: 96,
		MaxPos: 128, RMSEps: 1e-6, RopeTheta: 10000, BOS: []int{1}, EOS: []int{2}, QKNorm: true, Tied: true}
}

// loadTiny writes random weights of shape c (init std 0.15, so that the
// model's distributions are far from uniform) and loads them.
func loadTiny(t testing.TB, c hf.Config, seed uint64) *hf.Model {
	t.Helper()
	dir := t.TempDir()
	if err := hf.WriteRandom(dir, c, seed, hf.WriteOptions{InitStd: 0.15}); err != nil {
		t.Fatal(err)
	}
	return openModel(t, dir)
}

func openModel(t testing.TB, dir string) *hf.Model {
	t.Helper()
	m, err := hf.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// grpoRound samples a group per prompt with the policy's adapter, rewards
// each completion with reward, and applies one GRPO update.
func grpoRound(t *testing.T, pol *LoRA, prompts [][]int, reward func([]int) float64, seed uint64) rl.Stats {
	t.Helper()
	m := pol.Adapter.Base
	var batch []rl.Sample
	for i, p := range prompts {
		group := [][]int{p, p, p, p}
		gens, err := m.Generate(context.Background(), pol.Adapter, group, textgen.GenerateOptions{MaxTokens: 6, Temperature: 1, Seed: seed + uint64(i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gens {
			batch = append(batch, rl.Sample{TaskID: string(rune('a' + i)), Prompt: p, Actions: g.Tokens,
				LogProbs: g.LogProbs, Version: pol.Version(), Reward: reward(g.Tokens)})
		}
	}
	st, err := rl.NewGRPO(rl.GRPOConfig{ClipEps: 0.2}).Update(pol, batch)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestLoRAAgentsOnOneBase: two adapters on one frozen base, trained by
// GRPO on opposite rewards, move apart and toward their own rewards while
// the base stays bit-identical; each reloads from its PEFT files to the
// same logits, and its merged export reloads to them too.
func TestLoRAAgentsOnOneBase(t *testing.T) {
	c := tinyQwen3()
	c.Vocab = 16 // a small vocabulary makes the rewarded tokens common
	m := loadTiny(t, c, 21)
	before := m.Checksum()
	newPol := func(seed uint64) *LoRA {
		ad, err := hf.NewLoRA(m, hf.LoRAConfig{Rank: 4, Alpha: 8, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return NewLoRA(ad, nn.NewAdamW(nn.Constant(2e-2), 0), 1)
	}
	even, odd := newPol(1), newPol(2)
	share := func(toks []int, parity int) float64 {
		n := 0
		for _, tk := range toks {
			if tk%2 == parity {
				n++
			}
		}
		return float64(n) / float64(len(toks))
	}
	prompts := [][]int{{1, 2, 3}, {4, 5}, {6}}
	measure := func(p *LoRA, parity int) float64 {
		gens, err := m.Generate(context.Background(), p.Adapter, [][]int{{1, 2, 3}, {4, 5}, {6}, {7, 8}}, textgen.GenerateOptions{MaxTokens: 8, Temperature: 1, Seed: 777}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var s float64
		for _, g := range gens {
			s += share(g.Tokens, parity)
		}
		return s / float64(len(gens))
	}
	e0, o0 := measure(even, 0), measure(odd, 1)
	for step := 0; step < 12; step++ {
		grpoRound(t, even, prompts, func(tk []int) float64 { return share(tk, 0) }, uint64(100+step*10))
		grpoRound(t, odd, prompts, func(tk []int) float64 { return share(tk, 1) }, uint64(500+step*10))
	}
	e1, o1 := measure(even, 0), measure(odd, 1)
	t.Logf("even-token share %.3f -> %.3f; odd-token share %.3f -> %.3f", e0, e1, o0, o1)
	if e1 <= e0 || o1 <= o0 {
		t.Errorf("GRPO did not move the adapters toward their rewards: even %.3f -> %.3f, odd %.3f -> %.3f", e0, e1, o0, o1)
	}
	if even.Version() != 12 || odd.Version() != 12 {
		t.Errorf("versions %d, %d, want 12", even.Version(), odd.Version())
	}
	if after := m.Checksum(); after != before {
		t.Fatalf("the base model changed during training (hash %x -> %x)", before, after)
	}
	seqs := []hf.Seq{{Prompt: []int{1, 2, 3}, Target: []int{4, 5, 6, 7, 8, 9}}}
	le, _ := m.TokenLogProbs(even.Adapter, seqs)
	lo, _ := m.TokenLogProbs(odd.Adapter, seqs)
	if cmp.Equal(le, lo, cmpopts.EquateApprox(0, 1e-3)) {
		t.Errorf("the two adapters give the same log-probs %v: they did not diverge", le)
	}
	for name, p := range map[string]*LoRA{"even": even, "odd": odd} {
		dir := filepath.Join(t.TempDir(), name)
		if err := p.Adapter.Save(dir, "tiny"); err != nil {
			t.Fatal(err)
		}
		re, err := hf.LoadLoRA(m, dir)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := m.TokenLogProbs(p.Adapter, seqs)
		got, _ := m.TokenLogProbs(re, seqs)
		if !cmp.Equal(want, got) {
			t.Errorf("%s: reloaded adapter gives %v, want %v", name, got, want)
		}
		exp := filepath.Join(t.TempDir(), name+"-merged")
		if err := m.Export(exp, p.Adapter, hf.WriteOptions{DType: safetensors.F32}); err != nil {
			t.Fatal(err)
		}
		merged := openModel(t, exp)
		got, _ = merged.TokenLogProbs(nil, seqs)
		if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-4)); diff != "" {
			t.Errorf("%s: merged export differs from base+adapter:\n%s", name, diff)
		}
	}
}

// TestPolicySkipsNonFinite: a NaN loss adds nothing and skips the step.
func TestPolicySkipsNonFinite(t *testing.T) {
	m := loadTiny(t, tinyQwen3(), 3)
	ad, err := hf.NewLoRA(m, hf.LoRAConfig{Rank: 2})
	if err != nil {
		t.Fatal(err)
	}
	pol := NewLoRA(ad, nn.NewAdam(nn.Constant(1e-3)), 0)
	batch := []rl.Sample{{Prompt: []int{1, 2}, Actions: []int{3, 4}}}
	nan := func(logp, _ [][]float32) (float64, [][]float32, [][]float32) {
		return float64(logp[0][0]) * 0 / 0, [][]float32{{1, 1}}, nil
	}
	if err := pol.ForwardBackward(batch, nan); err != nil {
		t.Fatal(err)
	}
	info, err := pol.Step()
	if err != nil || !info.Skipped || pol.Version() != 0 {
		t.Fatalf("step after a NaN loss: %+v, %v, version %d; want skipped", info, err, pol.Version())
	}
}

// TestLoRABase: the base policy scores with the adapter switched off, the
// same before and after the adapter trains, and refuses to train.
func TestLoRABase(t *testing.T) {
	m := loadTiny(t, tinyQwen3(), 1)
	ad, err := hf.NewLoRA(m, hf.LoRAConfig{Rank: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	batch := []rl.Sample{{Prompt: []int{5, 6, 7}, Actions: []int{8, 9}}}
	want, err := m.TokenLogProbs(nil, []hf.Seq{{Prompt: batch[0].Prompt, Target: batch[0].Actions}})
	if err != nil {
		t.Fatal(err)
	}
	pol := NewLoRA(ad, nn.NewAdamW(nn.Constant(1e-2), 0), 0)
	for range 3 {
		if err := pol.ForwardBackward(batch, func(logp, _ [][]float32) (float64, [][]float32, [][]float32) {
			return 0, [][]float32{{-1, -1}}, nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := pol.Step(); err != nil {
			t.Fatal(err)
		}
	}
	base := LoRABase{Model: m}
	got, err := base.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	adapted, _ := pol.LogProbs(batch)
	if !cmp.Equal(got, want) || cmp.Equal(adapted, want) {
		t.Errorf("base log-probs %v, want %v (the adapter's %v)", got, want, adapted)
	}
	if base.ForwardBackward(batch, nil) == nil || base.Version() != 0 {
		t.Error("the base trained")
	}
	if _, err := base.Step(); err == nil {
		t.Error("the base stepped")
	}
}
