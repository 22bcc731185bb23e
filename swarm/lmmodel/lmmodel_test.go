package lmmodel

import (
	"bytes"
	"context"
	"math"
	"testing"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/swarmtest"
)

// TestLMModelServesAndTrains serves the transformer preset lm-tiny through
// the swarm server: completions (plain and streamed) come back, a GRPO step
// runs on the recorded episodes and changes the parameters, and a
// checkpoint restores them and the version.
func TestLMModelServesAndTrains(t *testing.T) {
	m, err := NewPreset("lm-tiny")
	if err != nil {
		t.Fatal(err)
	}
	before := m.Checksum()
	tc := swarmtest.TrainConfig(1, 2)
	tc.MaxResponseTokens = 12
	ts := swarmtest.Start(t, m, tc, nil)
	ctx := swarmtest.Context(t)
	for i := 0; i < 2; i++ {
		ep, err := ts.Client.BeginEpisode(ctx, client.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		temp := 1.0
		resp, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "system", Content: "Say yes."}, {Role: "user", Content: "Hello"}}, MaxTokens: 12, Temperature: &temp, Logprobs: true})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Usage == nil || resp.Usage.CompletionTokens == 0 {
			t.Fatalf("no completion tokens: %+v", resp)
		}
		var streamed bytes.Buffer
		if err := ep.Chat().Stream(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "Hi"}}, MaxTokens: 8}, func(c api.ChatChunk) error {
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil {
					streamed.WriteString(*ch.Delta.Content)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := ts.Client.EndEpisode(ctx, ep, "t", client.WorkflowResult{Reward: float64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	swarmtest.WaitFor(t, "LM training step", func() bool { st, _, g := ts.S.Status(); return g == 1 && st == swarm.StatusRolling })
	var after uint64
	ts.S.WithModel(func(swarm.Model) { after = m.Checksum() })
	if after == before {
		t.Fatal("GRPO step did not change the transformer's parameters")
	}
	var buf bytes.Buffer
	ts.S.WithModel(func(swarm.Model) {
		if err := m.Save(&buf); err != nil {
			t.Fatal(err)
		}
	})
	m2, _ := NewPreset("lm-tiny")
	if err := m2.Load(&buf); err != nil {
		t.Fatal(err)
	}
	if m2.Version() != 1 || m2.Checksum() != after {
		t.Fatalf("LM checkpoint: version %d, checksum equal %v", m2.Version(), m2.Checksum() == after)
	}
}

// nanTrainer is an rl.Trainer whose loss is NaN: one ForwardBackward and one
// Step per Update.
type nanTrainer struct{ info rl.StepInfo }

func (n *nanTrainer) Update(p rl.Policy, batch []rl.Sample) (rl.Stats, error) {
	err := p.ForwardBackward(batch, func(logp, _ [][]float32) (float64, [][]float32, [][]float32) {
		d := make([][]float32, len(logp))
		for i := range logp {
			d[i] = make([]float32, len(logp[i]))
			for j := range d[i] {
				d[i][j] = float32(math.NaN())
			}
		}
		return math.NaN(), d, nil
	})
	if err != nil {
		return rl.Stats{}, err
	}
	n.info, err = p.Step()
	return rl.Stats{}, err
}

// TestLMModelSkipsNonFiniteStep: a NaN loss is not an error of Train (the
// rl/policies.LM adapter turns it into a skipped step), the parameters are
// untouched, and the version (the swarm global step) does not grow — also
// after a checkpoint restored a non-zero version.
func TestLMModelSkipsNonFiniteStep(t *testing.T) {
	cfg := Presets["lm-tiny"]
	nt := &nanTrainer{}
	cfg.Trainer = nt
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	prompt, _ := m.ChatPrompt(context.Background(), []api.Message{{Role: "user", Content: "hi"}}, nil)
	batch := []rl.Sample{{TaskID: "t", Prompt: prompt, Actions: []int{prompt[0], prompt[1]}, LogProbs: []float32{-1, -1}, Reward: 1}}
	// restore version 7 from a checkpoint of another model
	src, _ := New(Presets["lm-tiny"])
	for range 7 {
		if _, err := src.Train(batch); err != nil {
			t.Fatal(err)
		}
	}
	if src.Version() != 7 {
		t.Fatalf("source model at version %d after 7 steps", src.Version())
	}
	var buf bytes.Buffer
	if err := src.Save(&buf); err != nil {
		t.Fatal(err)
	}
	if err := m.Load(&buf); err != nil {
		t.Fatal(err)
	}
	before := m.Checksum()
	if _, err := m.Train(batch); err != nil {
		t.Fatalf("NaN loss: Train returned %v, want a skipped step", err)
	}
	if !nt.info.Skipped {
		t.Fatalf("step not reported skipped: %+v", nt.info)
	}
	if m.Version() != 7 || m.Checksum() != before {
		t.Fatalf("after a skipped step: version %d (want 7), parameters changed %v", m.Version(), m.Checksum() != before)
	}
}
