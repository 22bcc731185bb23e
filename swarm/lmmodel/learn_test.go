package lmmodel

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/textgen"
)

// TestLMModelLearns trains the lm-tiny transformer with rl.GRPO (no server)
// to emit bytes close to 'a' and checks that its mean reward rises.
func TestLMModelLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("transformer RL run; skipped in -short")
	}
	m, err := NewPreset("lm-tiny")
	if err != nil {
		t.Fatal(err)
	}
	prompt, _ := m.ChatPrompt(context.Background(), []api.Message{{Role: "user", Content: "say a"}}, nil)
	const maxTok = 4
	reward := func(toks []int) float64 {
		var b []int
		for _, tk := range toks {
			for _, x := range m.TokenBytes(tk) {
				b = append(b, int(x))
			}
		}
		if len(b) > maxTok {
			b = b[:maxTok]
		}
		return closeness(b, 'a', maxTok)
	}
	r := rand.New(rand.NewPCG(5, 6))
	sampleBatch := func(n int) ([]rl.Sample, float64) {
		prompts := make([][]int, n)
		for i := range prompts {
			prompts[i] = prompt
		}
		gens, err := m.Generate(context.Background(), prompts, textgen.GenerateOptions{MaxTokens: maxTok, Temperature: 1, Seed: r.Uint64()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var batch []rl.Sample
		var sum float64
		for _, g := range gens {
			rw := reward(g.Tokens)
			sum += rw
			batch = append(batch, rl.Sample{TaskID: "a", Prompt: prompt, Actions: g.Tokens, LogProbs: g.LogProbs, Reward: rw, Version: m.Version()})
		}
		return batch, sum / float64(n)
	}
	var curve []float64
	for step := 0; step < 120; step++ {
		batch, mean := sampleBatch(16)
		curve = append(curve, mean)
		if _, err := m.Train(batch); err != nil {
			t.Fatal(err)
		}
	}
	first := (curve[0] + curve[1] + curve[2] + curve[3] + curve[4]) / 5
	_, last := sampleBatch(64)
	t.Logf("lm-tiny mean reward: first 5 steps %.3f, after 120 steps %.3f", first, last)
	if !(last > first+0.1) {
		t.Fatalf("transformer did not learn: %.3f -> %.3f", first, last)
	}
}

// closeness is the test reward: the mean over maxTokens positions of
// 1 − |byte − target|/256 (a missing byte scores 0).
func closeness(toks []int, target, maxTokens int) float64 {
	var s float64
	for _, t := range toks {
		d := t - target
		if d < 0 {
			d = -d
		}
		s += 1 - float64(d)/256
	}
	return s / float64(maxTokens)
}
