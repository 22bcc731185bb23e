// Minimal trains a model with a reward you write: it serves the tiny
// tabular model on a swarm server, plays episodes against it over the
// OpenAI-compatible API, scores every answer with reward below, and prints
// the mean reward of each training step as it rises.
//
//	go run ./examples/minimal
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// reward is the part to rewrite: the share of an answer's two characters
// that are lower-case letters.
func reward(answer string) float64 {
	letters := 0
	for _, r := range answer {
		if 'a' <= r && r <= 'z' {
			letters++
		}
	}
	return float64(letters) / 2
}

func main() {
	steps := flag.Int("steps", 15, "training steps")
	flag.Parse()
	if _, err := run(*steps, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run serves the model, trains it for steps steps of 16 episodes each and
// returns the mean reward of every step.
func run(steps int, out io.Writer) ([]float64, error) {
	model, err := tabular.NewPreset("tiny")
	if err != nil {
		return nil, err
	}
	train := swarm.DefaultTrainConfig()
	train.BatchSize, train.NumRepeat = 1, 16 // a GRPO step per 16 episodes of one task
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, url, stop, err := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: model, Train: train, Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli := client.New(url)
	temperature := 1.0
	var curve []float64
	for step := range steps {
		var sum float64
		var answer string
		for i := range train.NumRepeat {
			seed := int64(step*train.NumRepeat + i) // seeded: every run prints the same
			res, err := client.RunWorkflow(ctx, []*client.Client{cli}, nil, "letters",
				func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
					resp, err := eps[0].Chat().Create(ctx, api.ChatRequest{
						Messages:    []api.Message{{Role: "user", Content: "Write two letters."}},
						MaxTokens:   2,
						Temperature: &temperature,
						Seed:        &seed,
					})
					if err != nil {
						return nil, err
					}
					answer = resp.Choices[0].Message.Content
					return []client.WorkflowResult{{Reward: reward(answer)}}, nil
				})
			if err != nil {
				return nil, fmt.Errorf("step %d, episode %d: %w", step, i, err)
			}
			sum += res[0].Reward
		}
		mean := sum / float64(train.NumRepeat)
		curve = append(curve, mean)
		fmt.Fprintf(out, "step %2d  mean reward %.2f  %-20s  last answer %q\n", step, mean, strings.Repeat("#", int(20*mean)), answer)
		if err := cli.WaitForStep(ctx, int64(step+1)); err != nil {
			return nil, err
		}
	}
	return curve, nil
}
