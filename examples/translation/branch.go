package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/troupe-ml/troupe/examples/translation/grader"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/swarm"
)

// branchKey is the text after which agent 2's answer writes which term an
// item is about: the first token after it is the token -branch-large
// branches at.
const branchKey = `"original_word":"`

// branchRollout adds e.branchLarge episodes to agent 2's GRPO group of task
// t, branching its greedy answer where the answer names its first term
// (-branch-large; notes/translation.md R26).
//
// Agent 2 answers agent 1's greedy rough translation (in.Rough with shared
// inputs) greedily, with its top_logprobs, on an evaluation episode. If the
// answer is a list, the branch position is the first token after its first
// `"original_word":"`: the token that picks the glossary entry the item is
// about. The K = e.branchLarge most likely tokens there are each forced
// after the answer so far (the swarm server's assistant_prefix after
// assistant_context) and continued greedily; each branch's episode trains
// its one token, with the reward m + e.branchScale·(Q_b − Q̄), where Q_b is
// its continuation's training reward (trainRewards), Q̄ the mean over the
// branches and m the mean reward of the group's sampled episodes. So the
// branches move the group's mean by nothing, and each token's advantage is
// how much better its branch is than the others'.
//
// Why: on the validation warm start of stop 26 (unquoted, unmarked hint), 78
// of the 217 items of agent 2's lists named a term other than one they
// should (30 a garbled copy, 48 a term the rough translation has), and where
// another of the top tokens at that position would have named the right
// one, that token had probability 0.08 (median). Sampled at -rl-temp-large
// 0.5 it is drawn about once in a hundred answers, so the sampled episodes
// almost never show GRPO the better answer; the branches show it every
// step, valued as the evaluation decodes (greedily). This is the rollout
// from an intermediate state of VinePPO (Kazemnejad et al. 2024) and of
// TRPO's vine (Schulman et al. 2015, §5.2), at one chosen position. It did
// not beat the defaults on validation (R26): the garbled copies were a
// tokenization problem, which -hint-quotes fixes.
//
// Where the greedy answer has no such position ("[]", or no item) or fewer
// than K usable alternatives, the missing branches are still rolled out
// (the server waits for the group's -repeats + K episodes): forced to the
// greedy answer's first token and rewarded m, so they carry no advantage.
func (e *env) branchRollout(ctx context.Context, clients []*swarm.Client, t task, in *groupInputs, taskID string, vg *vineGroup) error {
	k := e.branchLarge
	cl := []*swarm.Client{clients[0], clients[1]}
	opts := []swarm.BeginOptions{{Type: swarm.EpisodeEval}, {Type: swarm.EpisodeEval}}
	for range k {
		cl = append(cl, clients[1])
		opts = append(opts, swarm.BeginOptions{TaskID: taskID + "/agent2"})
	}
	_, err := swarm.RunWorkflow(ctx, cl, opts, taskID+"/branch", func(ctx context.Context, eps []*swarm.Episode) ([]swarm.WorkflowResult, error) {
		w, msgs, err := e.branchInput(ctx, eps[0], t, in)
		if err != nil {
			return nil, err
		}
		zero, seed := 0.0, int64(0)
		resp, err := eps[1].Chat().Create(ctx, swarm.ChatRequest{Model: "m", Messages: toChat(msgs), MaxTokens: e.maxDetTok, Temperature: &zero, Seed: &seed, Logprobs: true, TopLogprobs: nn.MaxTopLogProbs})
		if err != nil {
			return nil, err
		}
		if len(resp.Choices) == 0 || resp.Choices[0].LogProbs == nil {
			return nil, fmt.Errorf("translation: no log-probabilities in agent 2's greedy answer")
		}
		given, at, alts := branchPoint(resp.Choices[0].LogProbs.Content, k)
		first := "[]"
		if c := resp.Choices[0].LogProbs.Content; len(c) > 0 && c[0].Token != "" {
			first = c[0].Token
		}
		truth := truthErrors(t, w.Given)
		values := make([]float64, len(alts))
		res := make([]swarm.WorkflowResult, 2+k)
		for b := range k {
			ep := eps[2+b]
			if b >= len(alts) {
				if _, err := chatPrefixed(ctx, ep, msgs, e.maxDetTok, 0, 0, "", first); err != nil {
					return nil, err
				}
				res[2+b].Metadata = map[string]any{"branch": "(none)"}
				continue
			}
			// The continuation's budget is what is left of the
			// evaluation's after the answer so far.
			ans, err := chatPrefixed(ctx, ep, msgs, e.maxDetTok-at, 0, 0, given, alts[b])
			if err != nil {
				return nil, err
			}
			w.Detection = ans
			w.Detect = grader.ProperNounDetectionGrader{}.Grade(ans, truth)
			values[b], _ = e.trainRewards(t, w)
			res[2+b].Metadata = map[string]any{"branch": alts[b], "detection": ans, "detection_score": w.Detect.Normalised}
		}
		if len(alts) > 0 {
			e.branchGroups.Add(1)
			for _, v := range values[1:] {
				if v > values[0] {
					e.branchBetter.Add(1)
					break
				}
			}
		}
		for b, r := range branchRewards(vg.mean(), e.branchScale, values, k) {
			res[2+b].Reward = r
		}
		return res, nil
	})
	return err
}

// branchRewards are the rewards of k branch episodes whose first
// len(values) branches are worth values: m + scale·(value − their mean),
// and m for the rest (no advantage in a group whose sampled episodes'
// rewards average m).
func branchRewards(m, scale float64, values []float64, k int) []float64 {
	mean := 0.0
	for _, v := range values {
		mean += v / float64(len(values))
	}
	out := make([]float64, k)
	for b := range out {
		out[b] = m
		if b < len(values) {
			out[b] += scale * (values[b] - mean)
		}
	}
	return out
}

// branchPoint finds, in agent 2's greedy answer (its logprobs content), the
// first token after the first branchKey, and returns the answer's text
// before it, its index, and up to k alternatives there, most likely first: the
// top_logprobs tokens that are whole, non-empty text. It returns no
// alternatives when the answer has no such token.
func branchPoint(content []swarm.ChatLogProb, k int) (given string, at int, alts []string) {
	var b strings.Builder
	for i, c := range content {
		if strings.HasSuffix(b.String(), branchKey) {
			for _, a := range c.TopLogProbs {
				if len(alts) == k {
					break
				}
				if a.Token != "" && !strings.ContainsRune(a.Token, '\uFFFD') {
					alts = append(alts, a.Token)
				}
			}
			return b.String(), i, alts
		}
		b.WriteString(c.Token)
	}
	return "", 0, nil
}
