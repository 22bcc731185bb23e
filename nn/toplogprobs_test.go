package nn

import (
	"math"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/troupe-ml/troupe/textgen"
)

// TestGenerateTopLogProbs checks Generation.TopLogProbs against the full
// log-softmax computed by the training graph (LMTrainer.TokenLogProbs of
// every vocabulary token at every generated position): the lists hold the
// N most likely tokens, sorted, with the reference's log-probabilities, under
// a tempered, top-k-truncated sampler (the list must ignore both).
func TestGenerateTopLogProbs(t *testing.T) {
	const V, N = 23, 5
	cfg := LMConfig{Vocab: V, Dim: 16, Layers: 2, Heads: 2, MaxLen: 24, Positions: Rotary}
	store := NewStore(5)
	m := NewLM(store, cfg)
	roughen(store, 0.3, 6)
	prompts := [][]int{{1, 2, 3}, {4}}
	gens, err := m.Generate(prompts, textgen.GenerateOptions{Temperature: 1.7, TopK: 12, MaxTokens: 6, Seed: 3, TopLogProbs: N})
	if err != nil {
		t.Fatal(err)
	}
	tr := NewLMTrainer(m, NewAdamW(Constant(1e-3), 0), TrainConfig{})
	inTop, notInTop := 0, 0
	for gi, g := range gens {
		if len(g.TopLogProbs) != len(g.Tokens) {
			t.Fatalf("generation %d: %d top lists for %d tokens", gi, len(g.TopLogProbs), len(g.Tokens))
		}
		for i, tok := range g.Tokens {
			// Reference: log p(v | prefix) for every v from the training graph.
			prefix := append(append([]int(nil), prompts[gi]...), g.Tokens[:i]...)
			batch := make([]SeqExample, V)
			for v := range batch {
				batch[v] = SeqExample{Prompt: prefix, Target: []int{v}}
			}
			lp, err := tr.TokenLogProbs(batch)
			if err != nil {
				t.Fatal(err)
			}
			ref := make([]textgen.TokenLogProb, V)
			var z float64
			for v := range ref {
				ref[v] = textgen.TokenLogProb{Token: v, LogProb: lp[v][0]}
				z += math.Exp(float64(lp[v][0]))
			}
			if math.Abs(z-1) > 1e-4 {
				t.Fatalf("reference is not a distribution: sum %v", z)
			}
			rank := 0
			for _, r := range ref {
				if r.LogProb > ref[tok].LogProb {
					rank++
				}
			}
			sort.SliceStable(ref, func(a, b int) bool { return ref[a].LogProb > ref[b].LogProb })
			top := g.TopLogProbs[i]
			if len(top) != N {
				t.Fatalf("gen %d pos %d: %d alternatives, want %d", gi, i, len(top), N)
			}
			for j := 1; j < N; j++ {
				if top[j].LogProb > top[j-1].LogProb {
					t.Errorf("gen %d pos %d: not sorted: %v", gi, i, top)
				}
			}
			// The values equal the reference's top N, and each token's value
			// equals the reference's value for that token.
			got, want := make([]float32, N), make([]float32, N)
			for j := range top {
				got[j], want[j] = top[j].LogProb, ref[j].LogProb
				if d := math.Abs(float64(top[j].LogProb - lp[top[j].Token][0])); d > 1e-4 {
					t.Errorf("gen %d pos %d: token %d log-prob %v, reference %v", gi, i, top[j].Token, top[j].LogProb, lp[top[j].Token][0])
				}
			}
			if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-4)); d != "" {
				t.Errorf("gen %d pos %d: top log-probs (-ref +gen):\n%s", gi, i, d)
			}
			found := false
			for _, a := range top {
				if a.Token == tok {
					found = true
					if a.LogProb != g.LogProbs[i] {
						t.Errorf("gen %d pos %d: sampled token's top entry %v != LogProbs %v", gi, i, a.LogProb, g.LogProbs[i])
					}
				}
			}
			if rank < N {
				inTop++
				if !found {
					t.Errorf("gen %d pos %d: sampled token %d (rank %d) missing from %v", gi, i, tok, rank, top)
				}
			} else {
				notInTop++
				if found {
					t.Errorf("gen %d pos %d: sampled token %d has rank %d but is listed", gi, i, tok, rank)
				}
			}
		}
	}
	if inTop == 0 {
		t.Error("no sampled token was in the top list: the membership check never ran")
	}
	t.Logf("sampled tokens in top %d: %d, outside: %d", N, inTop, notInTop)

	// Off by default; capped at MaxTopLogProbs; negative rejected.
	g0, _ := m.Generate(prompts[:1], textgen.GenerateOptions{MaxTokens: 2})
	if g0[0].TopLogProbs != nil {
		t.Error("TopLogProbs returned without being asked for")
	}
	g1, err := m.Generate(prompts[:1], textgen.GenerateOptions{MaxTokens: 2, TopLogProbs: 50})
	if err != nil || len(g1[0].TopLogProbs[0]) != textgen.MaxTopLogProbs {
		t.Errorf("TopLogProbs 50: err %v, got %d alternatives, want %d", err, len(g1[0].TopLogProbs[0]), textgen.MaxTopLogProbs)
	}
	if _, err := m.Generate(prompts[:1], textgen.GenerateOptions{TopLogProbs: -1}); err == nil {
		t.Error("negative TopLogProbs accepted")
	}
}
