package swarm_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"

	"github.com/troupe-ml/troupe/swarm"
)

// Example runs a swarm server with the tiny tabular model, plays two train
// episodes of one task with a Go client and shows that the server trained
// one GRPO step on their rewards.
func Example() {
	model, _ := swarm.NewPresetModel("tiny")
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = 1, 2 // one task, two episodes per batch
	srv, _ := swarm.NewServer(swarm.ServerConfig{Model: model, Train: tc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer srv.Close()
	srv.Start()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	ctx := context.Background()
	client := swarm.NewClient(hs.URL)
	for i := 0; i < 2; i++ {
		ep, _ := client.BeginEpisode(ctx, swarm.BeginOptions{})
		seed := int64(i)
		resp, _ := ep.Chat().Create(ctx, swarm.ChatRequest{
			Messages:  []swarm.ChatMessage{{Role: "user", Content: "hello"}},
			MaxTokens: 4, Seed: &seed,
		})
		fmt.Println("completion tokens:", resp.Usage.CompletionTokens, "finish:", resp.Choices[0].FinishReason)
		client.EndEpisode(ctx, ep, "task-1", swarm.WorkflowResult{Reward: float64(i)})
	}
	client.WaitForStatus(ctx, swarm.StatusRolling)
	for {
		if st, _ := client.EngineStatus(ctx); st.GlobalStep == 1 && st.Status == swarm.StatusRolling {
			fmt.Println("global step:", st.GlobalStep)
			break
		}
	}
	// Output:
	// completion tokens: 1 finish: stop
	// completion tokens: 4 finish: length
	// global step: 1
}
