package tabular

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/textgen"
)

// TestTabularSaveLoad checks that a checkpoint restores parameters,
// optimizer state and version exactly: training continues identically.
func TestTabularSaveLoad(t *testing.T) {
	cfg := policies.TabularConfig{Name: "m", Order: 2, Rows: 64, Optimizer: "adam", LR: 0.1, InitScale: 0.01, Seed: 5}
	a := New(cfg)
	batch := []rl.Sample{
		{TaskID: "x", Prompt: []int{'a'}, Actions: []int{'b', 'c'}, LogProbs: []float32{-5.5, -5.5}, Reward: 1},
		{TaskID: "x", Prompt: []int{'a'}, Actions: []int{'d'}, LogProbs: []float32{-5.5}, Reward: 0},
	}
	for i := 0; i < 3; i++ {
		if _, err := a.Train(batch); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := a.Save(&buf); err != nil {
		t.Fatal(err)
	}
	b := New(cfg)
	if err := b.Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if a.Version() != 3 || b.Version() != 3 || a.Checksum() != b.Checksum() {
		t.Fatalf("after load: versions %d/%d checksums %x/%x", a.Version(), b.Version(), a.Checksum(), b.Checksum())
	}
	a.Train(batch)
	b.Train(batch)
	if a.Checksum() != b.Checksum() {
		t.Fatal("training diverged after load: optimizer state not restored")
	}
	if err := New(Presets["small"]).Load(bytes.NewReader(buf.Bytes())); err == nil {
		t.Fatal("loading an order-2 checkpoint into an order-1 model should fail")
	}
	if err := b.Load(bytes.NewReader(buf.Bytes()[:100])); err == nil {
		t.Fatal("loading a truncated checkpoint should fail")
	}
}

// TestGRPOLearns trains a small policy directly (no server) to emit 'a' and
// checks that the mean reward rises.
func TestGRPOLearns(t *testing.T) {
	m := New(Presets["small"])
	prompt, _ := m.ChatPrompt(context.Background(), []api.Message{{Role: "user", Content: "say a"}}, nil)
	r := rand.New(rand.NewPCG(3, 4))
	reward := func(toks []int) float64 { return closeness(toks, 'a', 4) }
	meanReward := func() float64 {
		var s float64
		for i := 0; i < 200; i++ {
			g, _ := m.Generate(context.Background(), [][]int{prompt}, textgen.GenerateOptions{MaxTokens: 4, Temperature: 1, Seed: r.Uint64()}, nil)
			s += reward(g[0].Tokens)
		}
		return s / 200
	}
	before := meanReward()
	for step := 0; step < 150; step++ {
		var batch []rl.Sample
		for k := 0; k < 16; k++ {
			g, _ := m.Generate(context.Background(), [][]int{prompt}, textgen.GenerateOptions{MaxTokens: 4, Temperature: 1, Seed: r.Uint64()}, nil)
			batch = append(batch, rl.Sample{TaskID: "t", Prompt: prompt, Actions: g[0].Tokens, LogProbs: g[0].LogProbs, Reward: reward(g[0].Tokens)})
		}
		if _, err := m.Train(batch); err != nil {
			t.Fatal(err)
		}
	}
	after := meanReward()
	t.Logf("mean reward before %.3f after %.3f", before, after)
	if !(after > before+0.2) {
		t.Fatalf("GRPO did not learn: reward %.3f -> %.3f", before, after)
	}
}

// closeness is the test reward: the mean over maxTokens positions of
// 1 − |byte − target|/256 (an end-of-sequence or missing token scores 0).
func closeness(toks []int, target, maxTokens int) float64 {
	var s float64
	for _, t := range toks {
		if t < 256 {
			d := t - target
			if d < 0 {
				d = -d
			}
			s += 1 - float64(d)/256
		}
	}
	return s / float64(maxTokens)
}
