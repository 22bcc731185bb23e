package swarm

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// rewardFromLogprobs rebuilds the sampled bytes from the logprobs of a
// choice and scores their closeness to target.
func rewardFromLogprobs(c api.Choice, target, maxTokens int) float64 {
	var toks []int
	if c.LogProbs != nil {
		for _, e := range c.LogProbs.Content {
			toks = append(toks, e.Bytes...)
		}
	}
	return closeness(toks, target, maxTokens)
}

// TestTwoServersIndependentRewards runs two servers of different sizes and
// optimizers (a 66k-parameter bigram policy with Adam and a 131k-parameter
// hashed trigram policy with SGD). One workflow claims an episode on each,
// asks both models, and gives each model its own reward: model A is
// rewarded for bytes near 'a', model B for bytes near 'z'. In phase 1 only A
// trains (B's episodes are eval episodes); in phase 2 only B trains. Each
// model's reward must rise while it trains, and the parameters of the model
// that is not training must stay bit-identical.
func TestTwoServersIndependentRewards(t *testing.T) {
	ma := tabular.New(policies.TabularConfig{Name: "small-adam", Order: 1, Optimizer: "adam", LR: 1.0, MaxGradNorm: 1, InitScale: 0.01, Seed: 11})
	mb := tabular.New(policies.TabularConfig{Name: "medium-sgd", Order: 2, Rows: 512, Optimizer: "sgd", LR: 30, InitScale: 0.01, Seed: 12})
	if !(mb.Policy.NumParams() > ma.Policy.NumParams()) {
		t.Fatal("model B should be larger")
	}
	tc := testTrainConfig(2, 8)
	a := startServer(t, ma, tc, nil)
	b := startServer(t, mb, tc, nil)
	clients := []*client.Client{a.cli, b.cli}
	targets := []int{'a', 'z'}
	const maxTok = 2
	rounds := 60
	if testing.Short() {
		rounds = 20
	}
	ctx := ctxT(t)
	checksum := func(s *Server) (c uint64) {
		s.WithModel(func(m Model) { c = m.(*tabular.Model).Checksum() })
		return
	}

	phase := func(train int) (first, last float64) {
		opts := []client.BeginOptions{{Type: api.EpisodeEval}, {Type: api.EpisodeEval}}
		opts[train].Type = api.EpisodeTrain
		var curve []float64
		for r := 0; r < rounds; r++ {
			var mu sync.Mutex
			var sum float64
			var wg sync.WaitGroup
			for k := 0; k < tc.BatchSize*tc.NumRepeat; k++ {
				wg.Add(1)
				go func(k int) {
					defer wg.Done()
					task := fmt.Sprintf("p%d-r%d-t%d", train, r, k%tc.BatchSize)
					res, err := client.RunWorkflow(ctx, clients, opts, task, func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
						out := make([]client.WorkflowResult, len(eps))
						for i, ep := range eps {
							temp := 1.0
							seed := int64(train*1_000_000 + r*1000 + k*10 + i)
							resp, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "task " + task}},
								MaxTokens: maxTok, Temperature: &temp, Logprobs: true, Seed: &seed})
							if err != nil {
								return nil, err
							}
							out[i].Reward = rewardFromLogprobs(resp.Choices[0], targets[i], maxTok)
						}
						return out, nil
					})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					sum += res[train].Reward
					mu.Unlock()
				}(k)
			}
			wg.Wait()
			curve = append(curve, sum/float64(tc.BatchSize*tc.NumRepeat))
			// wait for this round's training step before the next round
			srv := []*testServer{a, b}[train]
			waitFor(t, "training step", func() bool {
				st, _, g := srv.s.Status()
				return st == StatusRolling && g >= int64(r+1)
			})
		}
		n := 5
		for i := 0; i < n; i++ {
			first += curve[i] / float64(n)
			last += curve[len(curve)-1-i] / float64(n)
		}
		return first, last
	}

	b0 := checksum(b.s)
	first, last := phase(0)
	t.Logf("phase 1: model A reward %.3f -> %.3f (step %d); model B checksum unchanged: %v", first, last, stepOf(a.s), checksum(b.s) == b0)
	if !(last > first+0.08) {
		t.Errorf("model A's reward did not rise: %.3f -> %.3f", first, last)
	}
	if checksum(b.s) != b0 || stepOf(b.s) != 0 {
		t.Fatalf("model B's parameters changed while only A trained (step %d)", stepOf(b.s))
	}

	a1 := checksum(a.s)
	first, last = phase(1)
	t.Logf("phase 2: model B reward %.3f -> %.3f (step %d); model A checksum unchanged: %v", first, last, stepOf(b.s), checksum(a.s) == a1)
	if !(last > first+0.08) {
		t.Errorf("model B's reward did not rise: %.3f -> %.3f", first, last)
	}
	if checksum(a.s) != a1 || stepOf(a.s) != int64(rounds) {
		t.Fatalf("model A's parameters changed while only B trained (step %d)", stepOf(a.s))
	}
	if a.s.OpenEpisodes() != 0 || b.s.OpenEpisodes() != 0 {
		t.Fatal("episodes left open")
	}
}

func stepOf(s *Server) int64 { _, _, g := s.Status(); return g }

// TestRunWorkflowPerAgentGroups puts two agents of one workflow on the same
// server, each with its own GRPO group (client.BeginOptions.TaskID): two rollouts
// of one task make two groups of two episodes, which completes a batch of
// two groups. Ending both under the workflow's task id would make one group
// of four and never train.
func TestRunWorkflowPerAgentGroups(t *testing.T) {
	m, _ := tabular.NewPreset("small")
	ts := startServer(t, m, testTrainConfig(2, 2), nil)
	ctx := ctxT(t)
	clients := []*client.Client{ts.cli, ts.cli}
	opts := []client.BeginOptions{{TaskID: "x/agent1"}, {TaskID: "x/agent3"}}
	for k := 0; k < 2; k++ {
		_, err := client.RunWorkflow(ctx, clients, opts, "x", func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
			for _, ep := range eps {
				chatOnce(t, ep)
			}
			return []client.WorkflowResult{{Reward: float64(k)}, {Reward: float64(1 - k)}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a training step on two per-agent groups", func() bool { _, _, g := ts.s.Status(); return g == 1 })
	if a := ts.s.Accounting(); a.TrainedEpisodes != 4 {
		t.Fatalf("accounting %+v", a)
	}
}

// closeness is the test reward: the mean over maxTokens positions of
// 1 − |byte − target|/256 (an end-of-sequence or missing token scores 0).
func closeness(toks []int, target, maxTokens int) float64 {
	var s float64
	for _, t := range toks {
		if t < 256 {
			d := t - target
			if d < 0 {
				d = -d
			}
			s += 1 - float64(d)/256
		}
	}
	return s / float64(maxTokens)
}
