package hf

import (
	"context"
	"hash/fnv"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/safetensors"
)

// baseHash hashes every weight of the base model, bit for bit.
func baseHash(m *Model) uint64 {
	h := fnv.New64a()
	mat := func(w *Matrix) {
		if w.F32 != nil {
			h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&w.F32[0])), 4*len(w.F32)))
		} else {
			h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&w.Half[0])), 2*len(w.Half)))
		}
	}
	vec := func(v []float32) {
		if len(v) > 0 {
			h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
		}
	}
	mat(&m.embed)
	mat(m.head)
	vec(m.norm)
	for l := range m.layers {
		L := &m.layers[l]
		vec(L.inNorm)
		vec(L.postNorm)
		vec(L.qNorm)
		vec(L.kNorm)
		for p := range L.proj {
			mat(&L.proj[p])
			vec(L.bias[p])
		}
	}
	return h.Sum64()
}

// grpoRound samples a group per prompt with the policy's adapter, rewards
// each completion with reward, and applies one GRPO update.
func grpoRound(t *testing.T, pol *Policy, prompts [][]int, reward func([]int) float64, seed uint64) rl.Stats {
	t.Helper()
	m := pol.LoRA.Base
	var batch []rl.Sample
	for i, p := range prompts {
		group := [][]int{p, p, p, p}
		gens, err := m.Generate(context.Background(), pol.LoRA, group, nn.GenerateOptions{MaxTokens: 6, Temperature: 1, Seed: seed + uint64(i)}, nil)
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
	c := tinyConfigs()["qwen3"]
	c.Vocab = 16 // a small vocabulary makes the rewarded tokens common
	m := loadTiny(t, writeTiny(t, c, 21, WriteOptions{}))
	before := baseHash(m)
	newPol := func(seed uint64) *Policy {
		ad, err := NewLoRA(m, LoRAConfig{Rank: 4, Alpha: 8, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return NewPolicy(ad, nn.NewAdamW(nn.Constant(2e-2), 0), 1)
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
	measure := func(p *Policy, parity int) float64 {
		gens, err := m.Generate(context.Background(), p.LoRA, [][]int{{1, 2, 3}, {4, 5}, {6}, {7, 8}}, nn.GenerateOptions{MaxTokens: 8, Temperature: 1, Seed: 777}, nil)
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
	if after := baseHash(m); after != before {
		t.Fatalf("the base model changed during training (hash %x -> %x)", before, after)
	}
	seqs := []Seq{{Prompt: []int{1, 2, 3}, Target: []int{4, 5, 6, 7, 8, 9}}}
	le, _ := m.TokenLogProbs(even.LoRA, seqs)
	lo, _ := m.TokenLogProbs(odd.LoRA, seqs)
	if cmp.Equal(le, lo, cmpopts.EquateApprox(0, 1e-3)) {
		t.Errorf("the two adapters give the same log-probs %v: they did not diverge", le)
	}
	for name, p := range map[string]*Policy{"even": even, "odd": odd} {
		dir := filepath.Join(t.TempDir(), name)
		if err := p.LoRA.Save(dir, "tiny"); err != nil {
			t.Fatal(err)
		}
		re, err := LoadLoRA(m, dir)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := m.TokenLogProbs(p.LoRA, seqs)
		got, _ := m.TokenLogProbs(re, seqs)
		if !cmp.Equal(want, got) {
			t.Errorf("%s: reloaded adapter gives %v, want %v", name, got, want)
		}
		exp := filepath.Join(t.TempDir(), name+"-merged")
		if err := m.Export(exp, p.LoRA, WriteOptions{DType: safetensors.F32}); err != nil {
			t.Fatal(err)
		}
		merged := loadTiny(t, exp)
		got, _ = merged.TokenLogProbs(nil, seqs)
		if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-4)); diff != "" {
			t.Errorf("%s: merged export differs from base+adapter:\n%s", name, diff)
		}
	}
}

// TestPolicySkipsNonFinite: a NaN loss adds nothing and skips the step.
func TestPolicySkipsNonFinite(t *testing.T) {
	m := loadTiny(t, writeTiny(t, tinyConfigs()["llama"], 3, WriteOptions{}))
	ad, err := NewLoRA(m, LoRAConfig{Rank: 2})
	if err != nil {
		t.Fatal(err)
	}
	pol := NewPolicy(ad, nn.NewAdam(nn.Constant(1e-3)), 0)
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
