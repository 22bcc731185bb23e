package swarm_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"time"
	"unicode/utf8"

	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// waitStep waits until the server behind c has trained step steps and rolls
// again.
func waitStep(ctx context.Context, c *swarm.Client, step int64) error {
	for {
		st, err := c.EngineStatus(ctx)
		if err != nil {
			return err
		}
		if st.GlobalStep >= step && st.Status == swarm.StatusRolling {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}

// Example runs a swarm server with the tiny tabular model, plays two train
// episodes of one task with a Go client and shows that the server trained
// one GRPO step on their rewards.
func Example() {
	model, _ := swarm.NewPresetModel("tiny")
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = 1, 2 // one task, two episodes per batch
	srv, _ := swarm.NewServer(swarm.ServerConfig{Model: model, Train: tc, Logger: quiet})
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
	waitStep(ctx, client, 1)
	st, _ := client.EngineStatus(ctx)
	fmt.Println("global step:", st.GlobalStep)
	// Output:
	// completion tokens: 1 finish: stop
	// completion tokens: 4 finish: length
	// global step: 1
}

// ExampleRunWorkflow serves a model with Serve and runs a workflow on it:
// RunWorkflow claims the episode, the workflow asks the model and scores
// the answer, and RunWorkflow ends the episode with that reward (or aborts
// it, had the workflow failed).
func ExampleRunWorkflow() {
	model, _ := swarm.NewPresetModel("tiny")
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = 1, 2
	_, url, stop, err := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: model, Train: tc, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	ctx := context.Background()
	client := swarm.NewClient(url)
	for i := range 2 {
		seed := int64(i)
		results, err := swarm.RunWorkflow(ctx, []*swarm.Client{client}, nil, "task-1",
			func(ctx context.Context, eps []*swarm.Episode) ([]swarm.WorkflowResult, error) {
				resp, err := eps[0].Chat().Create(ctx, swarm.ChatRequest{
					Messages:  []swarm.ChatMessage{{Role: "user", Content: "Say something long."}},
					MaxTokens: 4, Seed: &seed,
				})
				if err != nil {
					return nil, err
				}
				// longer answers score higher
				return []swarm.WorkflowResult{{Reward: float64(resp.Usage.CompletionTokens) / 4}}, nil
			})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("episode %d: reward %.3f\n", i, results[0].Reward)
	}
	waitStep(ctx, client, 1)
	st, _ := client.EngineStatus(ctx)
	fmt.Println("global step:", st.GlobalStep)
	// Output:
	// episode 0: reward 0.250
	// episode 1: reward 1.000
	// global step: 1
}

// ExampleNewAdapter makes a Model of parts that exist already: a tokenizer
// with a chat template, a sampler, an rl.Policy and a trainer (here all
// from the tabular model; an nn.LM's are TokenizerChat, LMSampler and
// policies.LM). The Adapter counts the versions, keeps them across
// checkpoints and applies stop sequences; a Server hosts it as any Model.
func ExampleNewAdapter() {
	tab := swarm.NewTabularModel(swarm.Presets["tiny"])
	model, err := swarm.NewAdapter(swarm.AdapterConfig{
		Name:      "my-model",
		Tokenizer: tab,
		Sampler:   tab,
		Policy:    tab.Policy,
		Trainer:   rl.NewREINFORCE(rl.REINFORCEConfig{}),
		MaxLen:    64,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var m swarm.Model = model // what NewServer takes

	prompt, _ := m.ChatPrompt([]swarm.Message{{Role: "user", Content: "hi"}})
	rngs := []*rand.Rand{rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(2, 2))}
	gens, _ := m.Generate(context.Background(), [][]int{prompt, prompt},
		swarm.GenerateOptions{MaxTokens: 5, Temperature: 1, Rand: rngs})
	var batch []rl.Sample
	for i, g := range gens {
		batch = append(batch, rl.Sample{TaskID: "hi", Prompt: prompt, Actions: g.Tokens,
			LogProbs: g.LogProbs, Reward: float64(i), Version: m.Version()})
	}
	st, err := m.Train(batch)
	fmt.Println("trained on", st.Samples, "samples, error:", err)
	fmt.Println("version:", m.Version())
	fmt.Println(m.Save(io.Discard))
	// Output:
	// trained on 2 samples, error: <nil>
	// version: 1
	// swarm: model "my-model" has no checkpoint (its AdapterConfig.State is nil)
}

// ExampleClient_BeginEpisode is a client's episode loop: claim an episode,
// ask the model, score the answer with your own reward, end the episode
// with it; the server trains a step whenever a batch is complete. The
// answer here is one character, rewarded when it is a lower-case letter,
// and the tabular model learns that in three steps.
func ExampleClient_BeginEpisode() {
	model, _ := swarm.NewPresetModel("tiny")
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
	client := swarm.NewClient(url)
	temp := 1.0
	for step := range 5 {
		var sum float64
		for i := range tc.NumRepeat {
			ep, err := client.BeginEpisode(ctx, swarm.BeginOptions{})
			if err != nil {
				fmt.Println(err)
				return
			}
			seed := int64(100*step + i)
			resp, err := ep.Chat().Create(ctx, swarm.ChatRequest{
				Messages:  []swarm.ChatMessage{{Role: "user", Content: "Write a letter."}},
				MaxTokens: 1, Seed: &seed, Temperature: &temp,
			})
			if err != nil {
				client.AbortEpisode(ctx, ep)
				fmt.Println(err)
				return
			}
			r := reward(resp.Choices[0].Message.Content)
			sum += r
			client.EndEpisode(ctx, ep, "letters", swarm.WorkflowResult{Reward: r})
		}
		fmt.Printf("step %d: mean reward %.2f\n", step, sum/float64(tc.NumRepeat))
		waitStep(ctx, client, int64(step+1))
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
	var clients []*swarm.Client
	for _, preset := range []string{"tiny", "small"} {
		model, _ := swarm.NewPresetModel(preset)
		_, url, stop, err := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: model, Train: tc, Logger: quiet})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer stop()
		clients = append(clients, swarm.NewClient(url))
	}

	ctx := context.Background()
	ask := func(ctx context.Context, ep *swarm.Episode, prompt string, seed int64) (string, error) {
		resp, err := ep.Chat().Create(ctx, swarm.ChatRequest{
			Messages:  []swarm.ChatMessage{{Role: "user", Content: prompt}},
			MaxTokens: 6, Seed: &seed,
		})
		if err != nil {
			return "", err
		}
		return resp.Choices[0].Message.Content, nil
	}
	for i := range 2 {
		results, err := swarm.RunWorkflow(ctx, clients, nil, "review", func(ctx context.Context, eps []*swarm.Episode) ([]swarm.WorkflowResult, error) {
			draft, err := ask(ctx, eps[0], "Write a word.", int64(i))
			if err != nil {
				return nil, err
			}
			review, err := ask(ctx, eps[1], "Review: "+draft, int64(i))
			if err != nil {
				return nil, err
			}
			// the writer is rewarded for long drafts, the reviewer for short reviews
			return []swarm.WorkflowResult{
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
		waitStep(ctx, c, 1)
		st, _ := c.EngineStatus(ctx)
		fmt.Printf("server %d: global step %d\n", k, st.GlobalStep)
	}
	// Output:
	// rollout 0: writer 0, reviewer 1.00
	// rollout 1: writer 6, reviewer 0.14
	// server 0: global step 1
	// server 1: global step 1
}
