package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/troupe-ml/troupe/examples/translation/grader"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/swarm"
)

// workflowRun is the outcome of one three-agent rollout.
type workflowRun struct {
	Rough, Detection, Final string
	Quality, Detect         grader.Result
}

func toChat(msgs []tokenizer.Message) []swarm.ChatMessage {
	out := make([]swarm.ChatMessage, len(msgs))
	for i, m := range msgs {
		out[i] = swarm.ChatMessage{Role: m.Role, Content: m.Content}
	}
	return out
}

func chat(ctx context.Context, ep *swarm.Episode, msgs []tokenizer.Message, maxTok int, temp float64, seed int64) (string, error) {
	resp, err := ep.Chat().Create(ctx, swarm.ChatRequest{Model: "m", Messages: toChat(msgs), MaxTokens: maxTok, Temperature: &temp, Seed: &seed})
	if err != nil {
		return "", err
	}
	if len(resp.Choices) == 0 {
		return "", fmt.Errorf("translation: empty chat response")
	}
	return resp.Choices[0].Message.Content, nil
}

// rolloutWorkflow runs agent 1 and agent 3 on eps[0] (small model) and
// agent 2 on eps[1] (larger model), and rewards each with its own grader.
func (e *env) rolloutWorkflow(t task, temp float64, seed int64) swarm.Workflow {
	return func(ctx context.Context, eps []*swarm.Episode) ([]swarm.WorkflowResult, error) {
		var w workflowRun
		var err error
		if w.Rough, err = chat(ctx, eps[0], msgsTranslate(t.En), e.maxTok, temp, seed); err != nil {
			return nil, err
		}
		if w.Detection, err = chat(ctx, eps[1], msgsDetect(t.En, clip(w.Rough, e.maxRough)), e.maxTok, temp, seed+1); err != nil {
			return nil, err
		}
		if w.Final, err = chat(ctx, eps[0], msgsFinal(t.En, clip(w.Rough, e.maxRough), clip(w.Detection, e.maxDet)), e.maxTok+16, temp, seed+2); err != nil {
			return nil, err
		}
		w.Quality = e.qg.Grade(t.En, t.Ref, w.Final)
		w.Detect = grader.ProperNounDetectionGrader{}.Grade(w.Detection, truthErrors(t, w.Rough))
		detReward := w.Detect.Normalised
		if e.sharedReward {
			detReward = w.Quality.Normalised
		}
		return []swarm.WorkflowResult{
			{Reward: w.Quality.Normalised, IsSuccess: w.Quality.Normalised >= 0.5, Metadata: map[string]any{"issues": w.Quality.Issues, "final": w.Final}},
			{Reward: detReward, IsSuccess: w.Detect.Normalised >= 0.5, Metadata: map[string]any{"issues": w.Detect.Issues, "detection": w.Detection, "detection_score": w.Detect.Normalised}},
		}, nil
	}
}

// rlRound runs batch tasks × repeats workflows concurrently (one GRPO group
// per task on each server) and returns the mean rewards of the two models.
func (e *env) rlRound(ctx context.Context, clients []*swarm.Client, tasks []task, repeats int, r *rand.Rand, round int) (small, large float64, err error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	n := 0
	for ti, t := range tasks {
		for k := 0; k < repeats; k++ {
			wg.Add(1)
			seed := r.Int64()
			taskID := fmt.Sprintf("r%d-t%d", round, ti)
			go func() {
				defer wg.Done()
				res, err := swarm.RunWorkflow(ctx, clients, []swarm.BeginOptions{{TaskID: taskID}}, taskID, e.rolloutWorkflow(t, 1.0, seed))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
						logf("workflow failed (episodes aborted): %v", err)
					}
					return
				}
				small += res[0].Reward
				large += res[1].Reward
				n++
			}()
		}
	}
	wg.Wait()
	if n == 0 {
		return 0, 0, firstErr
	}
	return small / float64(n), large / float64(n), nil
}

// clip bounds what one agent passes to the next (in runes), so that prompts
// fit the small models' context.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}
