package swarm

import (
	"testing"
)

func TestSmokeEpisode(t *testing.T) {
	m, _ := NewPresetModel("small")
	ts := startServer(t, m, testTrainConfig(1, 2), nil)
	ctx := ctxT(t)
	for i := 0; i < 2; i++ {
		ep, err := ts.cli.BeginEpisode(ctx, BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := ep.Chat().Create(ctx, ChatRequest{Model: "small", Messages: []ChatMessage{{Role: "user", Content: "hi"}}, MaxTokens: 8, Logprobs: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", resp.Choices[0])
		if err := ts.cli.EndEpisode(ctx, ep, "t0", WorkflowResult{Reward: float64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "step 1", func() bool { _, _, st := ts.s.Status(); return st == 1 })
}
