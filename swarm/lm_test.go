package swarm

import (
	"bytes"
	"testing"
)

// TestLMModelServesAndTrains serves the transformer preset lm-tiny through
// the swarm server: completions (plain and streamed) come back, a GRPO step
// runs on the recorded episodes and changes the parameters, and a
// checkpoint restores them and the version.
func TestLMModelServesAndTrains(t *testing.T) {
	m, err := NewLMPreset("lm-tiny")
	if err != nil {
		t.Fatal(err)
	}
	before := m.Checksum()
	tc := testTrainConfig(1, 2)
	tc.MaxResponseTokens = 12
	ts := startServer(t, m, tc, nil)
	ctx := ctxT(t)
	for i := 0; i < 2; i++ {
		ep, err := ts.cli.BeginEpisode(ctx, BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		temp := 1.0
		resp, err := ep.Chat().Create(ctx, ChatRequest{Messages: []ChatMessage{{Role: "system", Content: "Say yes."}, {Role: "user", Content: "Hello"}}, MaxTokens: 12, Temperature: &temp, Logprobs: true})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Usage == nil || resp.Usage.CompletionTokens == 0 {
			t.Fatalf("no completion tokens: %+v", resp)
		}
		var streamed bytes.Buffer
		if err := ep.Chat().Stream(ctx, ChatRequest{Messages: []ChatMessage{{Role: "user", Content: "Hi"}}, MaxTokens: 8}, func(c ChatChunk) error {
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil {
					streamed.WriteString(*ch.Delta.Content)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := ts.cli.EndEpisode(ctx, ep, "t", WorkflowResult{Reward: float64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "LM training step", func() bool { st, _, g := ts.s.Status(); return g == 1 && st == StatusRolling })
	var after uint64
	ts.s.WithModel(func(Model) { after = m.Checksum() })
	if after == before {
		t.Fatal("GRPO step did not change the transformer's parameters")
	}
	var buf bytes.Buffer
	ts.s.WithModel(func(Model) {
		if err := m.Save(&buf); err != nil {
			t.Fatal(err)
		}
	})
	m2, _ := NewLMPreset("lm-tiny")
	if err := m2.Load(&buf); err != nil {
		t.Fatal(err)
	}
	if m2.Version() != 1 || m2.Checksum() != after {
		t.Fatalf("LM checkpoint: version %d, checksum equal %v", m2.Version(), m2.Checksum() == after)
	}
}
