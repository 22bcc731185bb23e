package swarm_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Example runs a swarm server with the tiny tabular model, plays two train
// episodes of one task with a Go client and shows that the server trained
// one GRPO step on their rewards.
func Example() {
	model, _ := tabular.NewPreset("tiny")
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = 1, 2 // one task, two episodes per batch
	srv, _ := swarm.NewServer(swarm.ServerConfig{Model: model, Train: tc, Logger: quiet})
	defer srv.Close()
	srv.Start()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	ctx := context.Background()
	cli := client.New(hs.URL)
	for i := 0; i < 2; i++ {
		ep, _ := cli.BeginEpisode(ctx, client.BeginOptions{})
		seed := int64(i)
		resp, _ := ep.Chat().Create(ctx, api.ChatRequest{
			Messages:  []api.Message{{Role: "user", Content: "hello"}},
			MaxTokens: 4, Seed: &seed,
		})
		fmt.Println("completion tokens:", resp.Usage.CompletionTokens, "finish:", resp.Choices[0].FinishReason)
		cli.EndEpisode(ctx, ep, "task-1", client.WorkflowResult{Reward: float64(i)})
	}
	cli.WaitForStep(ctx, 1)
	st, _ := cli.EngineStatus(ctx)
	fmt.Println("global step:", st.GlobalStep)
	// Output:
	// completion tokens: 1 finish: stop
	// completion tokens: 4 finish: length
	// global step: 1
}
