package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/troupe-ml/troupe/examples/translation/grader"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/swarm"
)

// workflowRun is the outcome of one three-agent rollout.
type workflowRun struct {
	Rough, Detection, Final string
	// Given is the rough translation agents 2 and 3 saw (clipped): agent
	// 1's Rough, or with shared inputs the group's greedy one.
	Given           string
	Quality, Detect grader.Result
	// GreedyDetect and GreedyQuality are the scores of agents 2 and 3's
	// greedy answers to their sampled turns' prompts (-scst-large,
	// -scst-small); nil when not run.
	GreedyDetect, GreedyQuality *grader.Result
}

// groupInputs are what agents 2 and 3 see in every repeat of a task's
// rollouts when the groups share their inputs: agent 1's greedy rough
// translation and agent 2's greedy detection on it.
type groupInputs struct {
	Rough, Detection string
}

func toChat(msgs []tokenizer.Message) []swarm.ChatMessage {
	out := make([]swarm.ChatMessage, len(msgs))
	for i, m := range msgs {
		out[i] = swarm.ChatMessage{Role: m.Role, Content: m.Content}
	}
	return out
}

func chat(ctx context.Context, ep *swarm.Episode, msgs []tokenizer.Message, maxTok int, temp float64, seed int64) (string, error) {
	return chatPrefixed(ctx, ep, msgs, maxTok, temp, seed, "", "")
}

// chatPrefixed is chat with the answer forced to start with prefix (the
// swarm server's assistant_prefix; none when empty) after the given text
// (assistant_context, which needs a prefix; none when empty); it returns
// the whole answer, given + prefix + continuation.
func chatPrefixed(ctx context.Context, ep *swarm.Episode, msgs []tokenizer.Message, maxTok int, temp float64, seed int64, given, prefix string) (string, error) {
	resp, err := ep.Chat().Create(ctx, swarm.ChatRequest{Model: "m", Messages: toChat(msgs), MaxTokens: maxTok, Temperature: &temp, Seed: &seed, AssistantContext: given, AssistantPrefix: prefix})
	if err != nil {
		return "", err
	}
	if len(resp.Choices) == 0 {
		return "", fmt.Errorf("translation: empty chat response")
	}
	return given + prefix + resp.Choices[0].Message.Content, nil
}

// rolloutWorkflow runs the three agents and rewards each model with its own
// grader. eps holds the episodes: agent 1's on the small model's server,
// agent 2's on the larger model's, and agent 3's on the small model's again;
// with e.jointSmall agents 1 and 3 share eps[0] and there is no eps[2].
//
// Separate episodes for agents 1 and 3 assign credit per turn: agent 1's
// tokens are rewarded by the quality of its own (rough) translation and
// agent 3's by the quality of the final one, both by the
// TranslationQualityGrader. In one shared episode every token of the small
// model gets the final translation's advantage, and RL lowered agent 1's own
// quality (chrF 0.171 → 0.159 on the test split, notes/translation.md).
//
// With in != nil the GRPO groups share their prompts, as GRPO's group
// baseline assumes: agent 1 samples its own translation (rewarded as
// above), but agent 2 samples a detection of the group's greedy rough
// translation in.Rough, and agent 3 a final translation of in.Rough with
// the greedy detection in.Detection. Otherwise each repeat's agents 2 and 3
// see that repeat's samples, and the repeats of a group differ in their
// prompts as well as their actions.
//
// With noFinal agent 3 does not run: eps holds agents 1 and 2 only (a
// detector-only task of -batch-large, where agent 3's turn would train
// nothing and reward nothing).
//
// With g's indices set (-scst-large, -scst-small), eps also holds evaluation
// episodes in which agents 2 and 3 answer their sampled turn's prompt
// greedily; the greedy answers' scores are those agents' reward baselines
// (trainRewards).
func (e *env) rolloutWorkflow(t task, temp float64, seed int64, in *groupInputs, noFinal bool, g greedyEps) swarm.Workflow {
	return func(ctx context.Context, eps []*swarm.Episode) ([]swarm.WorkflowResult, error) {
		var w workflowRun
		var err error
		res := make([]swarm.WorkflowResult, len(eps)) // the greedy episodes' results stay zero
		if w.Rough, err = chat(ctx, eps[0], msgsTranslate(t.En), e.maxTok, temp, seed); err != nil {
			return nil, err
		}
		w.Given = clip(w.Rough, e.maxRough)
		if in != nil {
			w.Given = clip(in.Rough, e.maxRough)
		}
		detMsgs := e.hint.msgs(t.En, w.Given)
		if w.Detection, err = chat(ctx, eps[1], detMsgs, e.maxDetTok, e.rlTempLarge, seed+1); err != nil {
			return nil, err
		}
		truth := truthErrors(t, w.Given)
		w.Detect = grader.ProperNounDetectionGrader{}.Grade(w.Detection, truth)
		if g.large > 0 {
			ans, err := chat(ctx, eps[g.large], detMsgs, e.maxDetTok, 0, 0)
			if err != nil {
				return nil, err
			}
			r := grader.ProperNounDetectionGrader{}.Grade(ans, truth)
			w.GreedyDetect = &r
		}
		detRes := func(reward float64) swarm.WorkflowResult {
			return swarm.WorkflowResult{Reward: reward, IsSuccess: w.Detect.Normalised >= 0.5, Metadata: map[string]any{"issues": w.Detect.Issues, "detection": w.Detection, "detection_score": w.Detect.Normalised}}
		}
		var roughRes swarm.WorkflowResult
		if !e.jointSmall {
			q1 := e.qg.GradeText(t.En, t.Ref, w.Rough, grader.Result{})
			roughRes = swarm.WorkflowResult{Reward: q1.Normalised, IsSuccess: q1.Normalised >= 0.5, Metadata: map[string]any{"issues": q1.Issues, "rough": w.Rough}}
		}
		if noFinal {
			detReward, _ := e.trainRewards(t, w)
			res[0], res[1] = roughRes, detRes(detReward)
			return res, nil
		}
		det := w.Detection
		if in != nil {
			det = in.Detection
		}
		finalMsgs := msgsFinal(t.En, w.Given, e.corrections(t.En, w.Given, det))
		if w.Final, err = chat(ctx, eps[e.finalIdx()], finalMsgs, e.maxTok+16, temp, seed+2); err != nil {
			return nil, err
		}
		w.Quality = e.qg.Grade(t.En, t.Ref, w.Final)
		if g.small > 0 {
			ans, err := chat(ctx, eps[g.small], finalMsgs, e.maxTok+16, 0, 0)
			if err != nil {
				return nil, err
			}
			q := e.qg.Grade(t.En, t.Ref, ans)
			w.GreedyQuality = &q
		}
		detReward, finalReward := e.trainRewards(t, w)
		finalRes := swarm.WorkflowResult{Reward: finalReward, IsSuccess: w.Quality.Normalised >= 0.5, Metadata: map[string]any{"issues": w.Quality.Issues, "final": w.Final, "quality": w.Quality.Normalised}}
		if e.jointSmall {
			res[0], res[1] = finalRes, detRes(detReward)
			return res, nil
		}
		res[0], res[1], res[2] = roughRes, detRes(detReward), finalRes
		return res, nil
	}
}

// greedyEps are the indices, in a rollout's episodes, of the evaluation
// episodes in which agent 2 (large) and agent 3 (small) answer greedily for
// their self-critical baselines; 0 means none (index 0 is always agent 1's
// episode).
type greedyEps struct{ large, small int }

// withGreedy appends to a rollout's clients and episode options the
// evaluation episodes of its self-critical baselines (-scst-large on the
// larger model's server, -scst-small on the small model's, the latter only
// where agent 3 runs) and returns their indices. clients are the small
// model's, the larger model's and (unless -joint-small) agent 3's.
func (e *env) withGreedy(clients []*swarm.Client, cl []*swarm.Client, opts []swarm.BeginOptions, noFinal bool) ([]*swarm.Client, []swarm.BeginOptions, greedyEps) {
	var g greedyEps
	if !e.scstLarge && !(e.scstSmall && !noFinal) {
		return cl, opts, g
	}
	cl = slices.Clip(cl) // appends copy: cl may be clients itself
	if len(opts) == 1 {
		opts = slices.Repeat(opts, len(cl)) // one option for all episodes (RunWorkflow)
	}
	opts = slices.Clip(opts)
	if e.scstLarge {
		g.large = len(cl)
		cl, opts = append(cl, clients[1]), append(opts, swarm.BeginOptions{Type: swarm.EpisodeEval})
	}
	if e.scstSmall && !noFinal {
		g.small = len(cl)
		cl, opts = append(cl, clients[0]), append(opts, swarm.BeginOptions{Type: swarm.EpisodeEval})
	}
	return cl, opts, g
}

// trainRewards are the rewards agents 2 and 3 are trained on, given the
// graded rollout w: by default their graders' scores (the detector's, or
// the final translation's with e.sharedReward).
//
// With e.counterfactual they are difference rewards: what the agent's turn
// added over doing nothing with the same input ("[]" for the detector, the
// rough translation unchanged for agent 3). The baselines depend only on
// the agent's prompt (the rough translation it was given), so they leave
// the policy gradient unbiased, while removing agent 1's share of the
// variance from agents 2 and 3's advantages: the repeats of a GRPO group
// see different rough translations (Wolpert and Tumer 2002's difference
// rewards; the counterfactual baseline of Foerster et al. 2018, COMA).
func (e *env) trainRewards(t task, w workflowRun) (det, final float64) {
	det, final = w.Detect.Normalised, w.Quality.Normalised
	if e.sharedReward {
		det = w.Quality.Normalised
	}
	switch {
	case w.GreedyQuality != nil:
		final -= w.GreedyQuality.Normalised
	case e.counterfactual && !e.jointSmall:
		final -= e.qg.GradeText(t.En, t.Ref, w.Given, grader.Result{}).Normalised
	}
	switch {
	case e.sharedReward:
	case w.GreedyDetect != nil:
		det -= w.GreedyDetect.Normalised
	case e.counterfactual && !e.jointSmall:
		det -= grader.ProperNounDetectionGrader{}.Grade("[]", truthErrors(t, w.Given)).Normalised
	}
	return det, final
}

// corrections is what agent 3 is given of agent 2's answer det to the rough
// translation rough of en: clientCorrections, or det itself with
// -raw-corrections.
func (e *env) corrections(en, rough, det string) string {
	if e.rawCorrections {
		return det
	}
	return clientCorrections(en, rough, det)
}

// finalIdx is the index of agent 3's episode (and result) in a rollout:
// 0 when agents 1 and 3 share the small model's episode, else 2.
func (e *env) finalIdx() int {
	if e.jointSmall {
		return 0
	}
	return 2
}

// beginOptions gives each episode of one rollout its GRPO group: one group
// per task and agent on each server. With detOnly the small model's
// episodes are evaluation episodes: the task trains the larger model alone
// (the extra tasks of -batch-large).
func (e *env) beginOptions(taskID string, detOnly bool) []swarm.BeginOptions {
	if e.jointSmall {
		return []swarm.BeginOptions{{TaskID: taskID}}
	}
	final := swarm.BeginOptions{TaskID: taskID + "/agent3"}
	if e.noTrainFinal || detOnly {
		final.Type = swarm.EpisodeEval
	}
	rough := swarm.BeginOptions{TaskID: taskID + "/agent1"}
	if e.noTrainRough || detOnly {
		rough.Type = swarm.EpisodeEval
	}
	return []swarm.BeginOptions{rough, {TaskID: taskID + "/agent2"}, final}
}

// rlRound runs batch tasks × repeats workflows concurrently (one GRPO group
// per task and agent on each server) and returns the mean final-translation
// quality (the small model's reward for agent 3) and the mean reward of the
// larger model. Tasks from index nSmall on train the larger model alone
// (beginOptions' detOnly); small is the mean over the first nSmall. With
// -vine-large, credit[i] says whether task i's branch pair counts (a pair
// that does not is rolled out, for the server's group size, with zero
// advantage).
func (e *env) rlRound(ctx context.Context, clients []*swarm.Client, tasks []task, credit []bool, nSmall, repeats int, r *rand.Rand, round int) (small, large float64, err error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr, vineErr error
	// Each rollout's two means' terms, kept by index and summed in that
	// order after the round: in completion order the float sums (and the
	// step log) changed in the last digit from run to run.
	type terms struct {
		ok           bool
		small, large float64
	}
	res := make([]terms, len(tasks)*repeats)
	for ti, t := range tasks {
		var in *groupInputs
		if e.groupInputs || e.crossRough != nil {
			g, err := e.greedyInputs(ctx, clients, t)
			if err != nil {
				return 0, 0, fmt.Errorf("greedy inputs of task %d: %w", ti, err)
			}
			in = &g
		}
		taskID := fmt.Sprintf("r%d-t%d", round, ti)
		var vg *vineGroup
		if e.vineLarge || e.branchLarge > 0 {
			vg = &vineGroup{}
			vg.wg.Add(repeats)
		}
		// The branch rollouts of -vine-large and -branch-large. If one
		// fails, the task's group can no longer complete: the round fails
		// (the server would wait for it).
		branches := func(run func() error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := run(); err != nil {
					mu.Lock()
					if vineErr == nil {
						vineErr = fmt.Errorf("branch rollouts of task %d: %w", ti, err)
					}
					mu.Unlock()
				}
			}()
		}
		if e.vineLarge {
			branches(func() error { return e.vineRollout(ctx, clients, t, in, taskID, vg, credit[ti]) })
		}
		if e.branchLarge > 0 {
			branches(func() error { return e.branchRollout(ctx, clients, t, in, taskID, vg) })
		}
		for k := 0; k < repeats; k++ {
			wg.Add(1)
			seed := r.Int64()
			slot := &res[ti*repeats+k]
			go func() {
				defer wg.Done()
				var agent2 float64 // agent 2's training reward, for the branch rollouts
				ok := false
				if vg != nil {
					defer func() { vg.done(agent2, ok) }()
				}
				// A detector-only task runs agent 3 only when its final
				// translation is agent 2's reward (-shared-reward).
				detOnly := ti >= nSmall
				noFinal := detOnly && !e.sharedReward
				cl, opts := clients, e.beginOptions(taskID, detOnly)
				if noFinal {
					cl, opts = clients[:2], opts[:2]
				}
				cl, opts, g := e.withGreedy(clients, cl, opts, noFinal)
				out, err := swarm.RunWorkflow(ctx, cl, opts, taskID, e.rolloutWorkflow(t, e.rlTemp, seed, in, noFinal, g))
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						logf("workflow failed (episodes aborted): %v", err)
					}
					mu.Unlock()
					return
				}
				// The graders' scores, not the difference rewards of
				// -counterfactual; with -shared-reward the larger model's
				// reward is the final translation's quality.
				slot.ok = true
				agent2, ok = out[1].Reward, true
				if !detOnly {
					slot.small = out[e.finalIdx()].Metadata["quality"].(float64)
				}
				if e.sharedReward {
					slot.large = out[1].Reward
				} else {
					slot.large = out[1].Metadata["detection_score"].(float64)
				}
			}()
		}
	}
	wg.Wait()
	if vineErr != nil {
		return 0, 0, vineErr
	}
	n, ns := 0, 0
	for i, x := range res {
		if !x.ok {
			continue
		}
		large += x.large
		n++
		if i/repeats < nSmall {
			small += x.small
			ns++
		}
	}
	if n == 0 || ns == 0 {
		return 0, 0, firstErr
	}
	return small / float64(ns), large / float64(n), nil
}

// vineGroup collects the training rewards agent 2's sampled episodes of
// one task end with, for that task's branch rollouts.
type vineGroup struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	sum float64
	n   int
}

func (g *vineGroup) done(reward float64, ok bool) {
	if ok {
		g.mu.Lock()
		g.sum += reward
		g.n++
		g.mu.Unlock()
	}
	g.wg.Done()
}

// mean waits for the task's sampled episodes and returns the mean of their
// rewards (0 when none finished).
func (g *vineGroup) mean() float64 {
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		return 0
	}
	return g.sum / float64(g.n)
}

// vineRollout adds two episodes to agent 2's GRPO group of task t: its
// answer to agent 1's greedy rough translation (in.Rough with shared
// inputs) forced to start with e.vinePrefixes[0] ("[]") and with
// e.vinePrefixes[1] (a list's first token), each continued greedily, and
// each training the forced token alone (the swarm server's
// assistant_prefix). Rolling out both branches from the same prompt values
// agent 2's first decision whatever the sampler explores: the "vine" of
// Schulman et al. 2015 (TRPO, §5.2). Greedy continuations value each branch
// as the evaluation decodes it.
//
// The two episodes' rewards are m ± k·w·(Q₀ − Q₁)/2, where k is
// -vine-scale, Q₀ and Q₁ are the branches' training rewards
// (trainRewards), m is the mean reward of the group's sampled episodes (so
// the pair moves the group's mean by nothing, and its advantages are
// ±k·w·(Q₀ − Q₁)/2 over the group's spread), and w is pairWeight's: by
// default 4q(1−q) with q = σ((log p₀ − log p₁)/τ), p₀ and p₁ the model's
// probabilities of the two first tokens (an evaluation episode's
// top_logprobs) and τ = -vine-temp. The pair then follows the gradient of
// the expected reward of the first decision made at temperature τ, the
// two branches' values known exactly: only prompts near the decision's
// boundary count, as for greedy decoding's reward, where an unweighted
// pair (τ = 0) pushes every prompt toward its better branch and, on a
// detector that hardly tells its inputs apart, toward answering "[]"
// everywhere (notes/translation.md R22). -vine-logistic weights by
// 2(1 − q_b) instead, q_b the better branch's q.
//
// With counts false the pair is rolled out (the server waits for the
// group's -repeats + 2 episodes) but both episodes get m: no advantage.
func (e *env) vineRollout(ctx context.Context, clients []*swarm.Client, t task, in *groupInputs, taskID string, vg *vineGroup, counts bool) error {
	cl := []*swarm.Client{clients[0], clients[1], clients[1], clients[1]}
	opts := []swarm.BeginOptions{{Type: swarm.EpisodeEval}, {Type: swarm.EpisodeEval}, {TaskID: taskID + "/agent2"}, {TaskID: taskID + "/agent2"}}
	_, err := swarm.RunWorkflow(ctx, cl, opts, taskID+"/vine", func(ctx context.Context, eps []*swarm.Episode) ([]swarm.WorkflowResult, error) {
		w, msgs, err := e.branchInput(ctx, eps[0], t, in)
		if err != nil {
			return nil, err
		}
		var lp [2]float64 // the two first tokens' log-probabilities, when weighted
		if counts && e.vineTemp > 0 {
			var err error
			if lp, err = firstLogProbs(ctx, eps[1], msgs, e.vinePrefixes); err != nil {
				return nil, err
			}
		}
		var value [2]float64
		res := make([]swarm.WorkflowResult, 4)
		for b, prefix := range e.vinePrefixes {
			ans, err := chatPrefixed(ctx, eps[2+b], msgs, e.maxDetTok, 0, 0, "", prefix)
			if err != nil {
				return nil, err
			}
			w.Detection = ans
			w.Detect = grader.ProperNounDetectionGrader{}.Grade(ans, truthErrors(t, w.Given))
			value[b], _ = e.trainRewards(t, w)
			res[2+b].Metadata = map[string]any{"branch": prefix, "detection": ans, "detection_score": w.Detect.Normalised}
		}
		weight := 0.0
		if counts {
			weight = pairWeight(lp, value, e.vineTemp, e.vineLogistic)
		}
		for b := range 2 {
			res[2+b].Metadata["branch_weight"] = weight
		}
		m := vg.mean()
		half := e.vineScale * weight * (value[0] - value[1]) / 2
		res[2].Reward, res[3].Reward = m+half, m-half
		return res, nil
	})
	return err
}

// branchInput is agent 2's prompt for the branch rollouts of task t (vine
// pairs and -branch-large): on the group's greedy rough translation
// in.Rough, or without shared inputs on agent 1's greedy translation,
// asked for on the evaluation episode ep.
func (e *env) branchInput(ctx context.Context, ep *swarm.Episode, t task, in *groupInputs) (workflowRun, []tokenizer.Message, error) {
	rough := ""
	if in != nil {
		rough = in.Rough
	} else {
		var err error
		if rough, err = chat(ctx, ep, msgsTranslate(t.En), e.maxTok, 0, 0); err != nil {
			return workflowRun{}, nil, err
		}
	}
	w := workflowRun{Rough: rough, Given: clip(rough, e.maxRough)}
	return w, e.hint.msgs(t.En, w.Given), nil
}

// pairWeight is the weight of a branch pair whose first tokens have
// log-probabilities lp ("[]", list) and whose branches are worth value:
// with tau = 0, 1; otherwise, with q = σ((lp[0] − lp[1])/tau) the
// probability of "[]" among the two at temperature tau, 4q(1−q) (the
// expected reward of the decision drawn at tau, scaled to 1 at the
// boundary) or, with logistic, 2(1 − q_b), q_b the better branch's
// probability (a logistic loss on which branch is better, weighted by
// |value[0] − value[1]|; 0 on a tie). A pair whose probe found the answer
// ending at once (infinite lp, firstLogProbs) has weight 0 when tau > 0.
func pairWeight(lp, value [2]float64, tau float64, logistic bool) float64 {
	if tau == 0 {
		return 1
	}
	if math.IsInf(lp[0], 0) || math.IsInf(lp[1], 0) {
		return 0
	}
	q := 1 / (1 + math.Exp(-(lp[0]-lp[1])/tau))
	if !logistic {
		return 4 * q * (1 - q)
	}
	switch {
	case value[0] > value[1]:
		return 2 * (1 - q)
	case value[0] < value[1]:
		return 2 * q
	}
	return 0
}

// firstLogProbs returns the log-probabilities of agent 2's two possible
// first tokens (as text) from an evaluation episode's top_logprobs; a token
// outside the top 20 gets the 20th's. When the model would end its answer
// at once it returns −∞ and +∞ (weight 0 in vineRollout).
func firstLogProbs(ctx context.Context, ep *swarm.Episode, msgs []tokenizer.Message, first [2]string) ([2]float64, error) {
	var out [2]float64
	zero, seed := 0.0, int64(0)
	resp, err := ep.Chat().Create(ctx, swarm.ChatRequest{Model: "m", Messages: toChat(msgs), MaxTokens: 1, Temperature: &zero, Seed: &seed, Logprobs: true, TopLogprobs: 20})
	if err != nil {
		return out, err
	}
	if len(resp.Choices) == 0 || resp.Choices[0].LogProbs == nil {
		return out, fmt.Errorf("translation: no log-probabilities in the first-token probe")
	}
	if len(resp.Choices[0].LogProbs.Content) == 0 || len(resp.Choices[0].LogProbs.Content[0].TopLogProbs) == 0 {
		// The answer ended at once (the end token is not listed): neither
		// branch is the model's choice, and the pair gets no weight.
		return [2]float64{math.Inf(-1), math.Inf(1)}, nil
	}
	top := resp.Choices[0].LogProbs.Content[0].TopLogProbs
	for i, f := range first {
		out[i] = float64(top[len(top)-1].LogProb)
		for _, c := range top {
			if c.Token == f {
				out[i] = float64(c.LogProb)
				break
			}
		}
	}
	return out, nil
}

// firstTokens returns the two first answer tokens of agent 2 as text: "[]"
// (no error) and the first token of a JSON list, which must differ for
// -vine-large to force the decision between them.
func firstTokens(tok *tokenizer.Tokenizer) ([2]string, error) {
	var out [2]string
	for i, s := range []string{"[]", errorsJSON([]grader.TermError{{OriginalWord: "x", CorrectTranslation: "y"}})} {
		ids := tok.Encode(s)
		if len(ids) == 0 {
			return out, fmt.Errorf("translation: %q encodes to no token", s)
		}
		out[i] = string(tok.TokenBytes(ids[0]))
	}
	if out[0] != "[]" || out[1] == "[" || out[1][0] != '[' {
		return out, fmt.Errorf("-vine-large needs \"[]\" to be one token and a list to start with another (\"[{\"…), got %q and %q", out[0], out[1])
	}
	return out, nil
}

// greedyInputs runs agents 1 and 2 greedily on t in evaluation episodes
// (never trained on) and returns what agents 2 and 3 see in each repeat of
// t's rollouts. With -rl-crossfit the rough translation is the cross-fitted
// model's (e.crossRough) and only agent 2 runs.
func (e *env) greedyInputs(ctx context.Context, clients []*swarm.Client, t task) (groupInputs, error) {
	var in groupInputs
	cross, isCross := e.crossRough[t.En]
	if e.crossRough != nil && !isCross {
		return in, fmt.Errorf("-rl-crossfit has no rough translation of %q", t.En)
	}
	cl, eval := clients[:2], []swarm.BeginOptions{{Type: swarm.EpisodeEval}, {Type: swarm.EpisodeEval}}
	if isCross {
		in.Rough, cl, eval = cross, clients[1:2], eval[:1]
		e.crossGroups.Add(1)
	}
	_, err := swarm.RunWorkflow(ctx, cl, eval, "greedy", func(ctx context.Context, eps []*swarm.Episode) ([]swarm.WorkflowResult, error) {
		var err error
		if !isCross {
			if in.Rough, err = chat(ctx, eps[0], msgsTranslate(t.En), e.maxTok, 0, 0); err != nil {
				return nil, err
			}
		}
		det := eps[len(eps)-1]
		if in.Detection, err = chat(ctx, det, e.hint.msgs(t.En, clip(in.Rough, e.maxRough)), e.maxDetTok, 0, 0); err != nil {
			return nil, err
		}
		return make([]swarm.WorkflowResult, len(eps)), nil
	})
	return in, err
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
