package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"examples/translation/grader"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/swarm/client"
)

// workflowRun is the outcome of one three-agent rollout.
type workflowRun struct {
	Rough, Detection, Final, Given string // Given: what agents 2 and 3 saw of Rough
	Quality, Detect                grader.Result
}

// chat asks an episode's model for one answer.
func chat(ctx context.Context, ep *client.Episode, msgs []tokenizer.Message, maxTok int, temp float64, seed int64) (string, error) {
	req := api.ChatRequest{Model: "m", MaxTokens: maxTok, Temperature: &temp, Seed: &seed}
	for _, m := range msgs {
		req.Messages = append(req.Messages, api.Message{Role: m.Role, Content: m.Content})
	}
	resp, err := ep.Chat().Create(ctx, req)
	if err != nil {
		return "", err
	}
	if len(resp.Choices) == 0 {
		return "", fmt.Errorf("translation: empty chat response")
	}
	return resp.Choices[0].Message.Content, nil
}

// rolloutWorkflow runs the three agents on t, each in its own episode so
// that credit is per turn (agent 1's tokens do not get the final
// translation's advantage), each model rewarded by its own grader.
func (e *env) rolloutWorkflow(t task, seed int64) client.Workflow {
	return func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
		var w workflowRun
		var err error
		if w.Rough, err = chat(ctx, eps[0], msgsTranslate(t.En), e.maxTok, e.rlTemp, seed); err != nil {
			return nil, err
		}
		w.Given = clip(w.Rough, e.maxRough)
		if w.Detection, err = chat(ctx, eps[1], msgsDetect(e.qg.Glossary, t.En, w.Given), e.maxDetTok, e.rlTempLarge, seed+1); err != nil {
			return nil, err
		}
		w.Detect = grader.ProperNounDetectionGrader{}.Grade(w.Detection, truthErrors(t, w.Given))
		finalMsgs := msgsFinal(t.En, w.Given, clientCorrections(t.En, w.Given, w.Detection))
		if w.Final, err = chat(ctx, eps[2], finalMsgs, e.maxTok+16, e.rlTemp, seed+2); err != nil {
			return nil, err
		}
		w.Quality = e.qg.Grade(t.En, t.Ref, w.Final)
		q1 := e.qg.GradeText(t.En, t.Ref, w.Rough, grader.Result{})
		det, final := e.trainRewards(t, w)
		return []client.WorkflowResult{
			{Reward: q1.Normalised, IsSuccess: q1.Normalised >= 0.5, Metadata: map[string]any{"issues": q1.Issues, "rough": w.Rough}},
			{Reward: det, IsSuccess: w.Detect.Normalised >= 0.5, Metadata: map[string]any{"issues": w.Detect.Issues, "detection": w.Detection, "detection_score": w.Detect.Normalised}},
			{Reward: final, IsSuccess: w.Quality.Normalised >= 0.5, Metadata: map[string]any{"issues": w.Quality.Issues, "final": w.Final, "quality": w.Quality.Normalised}},
		}, nil
	}
}

// trainRewards are agents 2 and 3's difference rewards (Wolpert and Tumer
// 2002): the gain over "[]" or the copied rough translation, a baseline
// that removes agent 1's variance without biasing the gradient.
func (e *env) trainRewards(t task, w workflowRun) (det, final float64) {
	final = w.Quality.Normalised - e.qg.GradeText(t.En, t.Ref, w.Given, grader.Result{}).Normalised
	det = w.Detect.Normalised - grader.ProperNounDetectionGrader{}.Grade("[]", truthErrors(t, w.Given)).Normalised
	return det, final
}

// beginOptions gives each episode its GRPO group. Agent 1's is not trained
// on: that lowers agent 3's copying, which the same weights serve.
func beginOptions(taskID string) []client.BeginOptions {
	return []client.BeginOptions{{TaskID: taskID + "/agent1", Type: api.EpisodeEval}, {TaskID: taskID + "/agent2"}, {TaskID: taskID + "/agent3"}}
}

// rlRound runs len(tasks) × repeats workflows concurrently: agents 3's and 2's mean scores.
func (e *env) rlRound(ctx context.Context, clients []*client.Client, tasks []task, repeats int, r *rand.Rand, round int) (small, large float64, err error) {
	// Summed in index order, not in the order the rollouts finish.
	res := make([]struct {
		small, large float64
		err          error
	}, len(tasks)*repeats)
	var wg sync.WaitGroup
	for ti, t := range tasks {
		taskID := fmt.Sprintf("r%d-t%d", round, ti)
		for k := range repeats {
			seed, slot := r.Int64(), &res[ti*repeats+k]
			wg.Go(func() {
				out, err := client.RunWorkflow(ctx, clients, beginOptions(taskID), taskID, e.rolloutWorkflow(t, seed))
				if slot.err = err; err == nil { // the graders' scores, not the difference rewards
					slot.small, slot.large = out[2].Metadata["quality"].(float64), out[1].Metadata["detection_score"].(float64)
				}
			})
		}
	}
	wg.Wait()
	n := 0
	for _, x := range res {
		if x.err != nil && err == nil {
			err = x.err
			logf("workflow failed (episodes aborted): %v", err)
		}
		if x.err == nil {
			small, large, n = small+x.small, large+x.large, n+1
		}
	}
	if n == 0 {
		return 0, 0, err
	}
	return small / float64(n), large / float64(n), nil
}

// clip bounds (in runes) what one agent passes to the next, to fit the context.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}
