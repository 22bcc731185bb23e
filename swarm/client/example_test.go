package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"unicode/utf8"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// ExampleRunWorkflow serves a model with Serve and runs a workflow on it:
// RunWorkflow claims the episode, the workflow asks the model and scores
// the answer, and RunWorkflow ends the episode with that reward (or aborts
// it, had the workflow failed).
func ExampleRunWorkflow() {
	model, _ := tabular.NewPreset("tiny")
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = 1, 2
	_, url, stop, err := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: model, Train: tc, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	ctx := context.Background()
	cli := client.New(url)
	for i := range 2 {
		seed := int64(i)
		results, err := client.RunWorkflow(ctx, []*client.Client{cli}, nil, "task-1",
			func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
				resp, err := eps[0].Chat().Create(ctx, api.ChatRequest{
					Messages:  []api.Message{{Role: "user", Content: "Say something long."}},
					MaxTokens: 4, Seed: &seed,
				})
				if err != nil {
					return nil, err
				}
				// longer answers score higher
				return []client.WorkflowResult{{Reward: float64(resp.Usage.CompletionTokens) / 4}}, nil
			})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("episode %d: reward %.3f\n", i, results[0].Reward)
	}
	cli.WaitForStep(ctx, 1)
	st, _ := cli.EngineStatus(ctx)
	fmt.Println("global step:", st.GlobalStep)
	// Output:
	// episode 0: reward 0.250
	// episode 1: reward 1.000
	// global step: 1
}

// ExampleClient_BeginEpisode is a client's episode loop: claim an episode,
// ask the model, score the answer with your own reward, end the episode
// with it; the server trains a step whenever a batch is complete. The
// answer here is one character, rewarded when it is a lower-case letter,
// and the tabular model learns that in three steps.
func ExampleClient_BeginEpisode() {
	model, _ := tabular.NewPreset("tiny")
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = 1, 8 // a step per 8 episodes
	_, url, stop, _ := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: model, Train: tc, Logger: quiet})
	defer stop()

	reward := func(answer string) float64 {
		if len(answer) == 1 && 'a' <= answer[0] && answer[0] <= 'z' {
			return 1
		}
		return 0
	}
	ctx := context.Background()
	cli := client.New(url)
	temp := 1.0
	for step := range 5 {
		var sum float64
		for i := range tc.NumRepeat {
			ep, err := cli.BeginEpisode(ctx, client.BeginOptions{})
			if err != nil {
				fmt.Println(err)
				return
			}
			seed := int64(100*step + i)
			resp, err := ep.Chat().Create(ctx, api.ChatRequest{
				Messages:  []api.Message{{Role: "user", Content: "Write a letter."}},
				MaxTokens: 1, Seed: &seed, Temperature: &temp,
			})
			if err != nil {
				cli.AbortEpisode(ctx, ep)
				fmt.Println(err)
				return
			}
			r := reward(resp.Choices[0].Message.Content)
			sum += r
			cli.EndEpisode(ctx, ep, "letters", client.WorkflowResult{Reward: r})
		}
		fmt.Printf("step %d: mean reward %.2f\n", step, sum/float64(tc.NumRepeat))
		cli.WaitForStep(ctx, int64(step+1))
	}
	// Output:
	// step 0: mean reward 0.00
	// step 1: mean reward 0.12
	// step 2: mean reward 0.38
	// step 3: mean reward 1.00
	// step 4: mean reward 1.00
}

// ExampleRunWorkflow_twoServers runs one workflow across two models, each on
// its own server: the writer answers the user, the reviewer answers the
// writer, and each model is trained on its own reward. Neither shares
// parameters with the other.
func ExampleRunWorkflow_twoServers() {
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = 1, 2
	var clients []*client.Client
	for _, preset := range []string{"tiny", "small"} {
		model, _ := tabular.NewPreset(preset)
		_, url, stop, err := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: model, Train: tc, Logger: quiet})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer stop()
		clients = append(clients, client.New(url))
	}

	ctx := context.Background()
	ask := func(ctx context.Context, ep *client.Episode, prompt string, seed int64) (string, error) {
		resp, err := ep.Chat().Create(ctx, api.ChatRequest{
			Messages:  []api.Message{{Role: "user", Content: prompt}},
			MaxTokens: 6, Seed: &seed,
		})
		if err != nil {
			return "", err
		}
		return resp.Choices[0].Message.Content, nil
	}
	for i := range 2 {
		results, err := client.RunWorkflow(ctx, clients, nil, "review", func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
			draft, err := ask(ctx, eps[0], "Write a word.", int64(i))
			if err != nil {
				return nil, err
			}
			review, err := ask(ctx, eps[1], "Review: "+draft, int64(i))
			if err != nil {
				return nil, err
			}
			// the writer is rewarded for long drafts, the reviewer for short reviews
			return []client.WorkflowResult{
				{Reward: float64(utf8.RuneCountInString(draft))},
				{Reward: 1 / float64(1+utf8.RuneCountInString(review))},
			}, nil
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("rollout %d: writer %.0f, reviewer %.2f\n", i, results[0].Reward, results[1].Reward)
	}
	for k, c := range clients {
		c.WaitForStep(ctx, 1)
		st, _ := c.EngineStatus(ctx)
		fmt.Printf("server %d: global step %d\n", k, st.GlobalStep)
	}
	// Output:
	// rollout 0: writer 0, reviewer 1.00
	// rollout 1: writer 6, reviewer 0.14
	// server 0: global step 1
	// server 1: global step 1
}
