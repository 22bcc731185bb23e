package swarm

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/troupe-ml/troupe/rl"
)

// TestSortBatchCanonical checks that a training batch's order depends on
// its episodes' content alone: every permutation of the same episodes sorts
// to the same sequence (ties are episodes with equal content).
func TestSortBatchCanonical(t *testing.T) {
	ep := func(id, task string, reward float64, prompt, actions []int, lp []float32) *finishedEpisode {
		return &finishedEpisode{id: id, taskID: task, reward: reward,
			samples: []rl.Sample{{TaskID: task, Prompt: prompt, Actions: actions, LogProbs: lp, Reward: reward}}}
	}
	base := []*finishedEpisode{
		ep("a", "t1", 0.5, []int{1, 2}, []int{3}, []float32{-0.1}),
		ep("b", "t1", 0.5, []int{1, 2}, []int{4}, []float32{-0.2}),
		ep("c", "t1", 0.2, []int{1, 2}, []int{3}, []float32{-0.1}),
		ep("d", "t0", 0.9, []int{5}, []int{6, 7}, []float32{-0.3, -0.4}),
		ep("e", "t1", 0.5, []int{1, 2}, []int{3}, []float32{-0.05}),
		ep("f", "t2", 0.5, []int{1}, []int{3}, []float32{-0.1}),
	}
	content := func(b []*finishedEpisode) [][]rl.Sample {
		var out [][]rl.Sample
		for _, fe := range b {
			out = append(out, fe.samples)
		}
		return out
	}
	want := append([]*finishedEpisode(nil), base...)
	sortBatch(want)
	var ids []string
	for _, fe := range want {
		ids = append(ids, fe.id)
	}
	if diff := cmp.Diff([]string{"d", "c", "a", "e", "b", "f"}, ids); diff != "" {
		t.Errorf("sorted order (-want +got):\n%s", diff)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 50; trial++ {
		b := append([]*finishedEpisode(nil), base...)
		r.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
		sortBatch(b)
		if diff := cmp.Diff(content(want), content(b)); diff != "" {
			t.Fatalf("trial %d: a permutation sorts differently (-want +got):\n%s", trial, diff)
		}
	}
}
