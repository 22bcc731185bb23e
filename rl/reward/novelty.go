package reward

import (
	"math"
	"sort"
	"sync"
)

// TextNovelty scores a token sequence by how different its n-grams are from
// those of the last Window outputs: 1 − max_j J(G(x), G(y_j)), with G the set
// of n-grams and J the Jaccard index. An empty memory scores 1; sequences
// shorter than N use the whole sequence as their only n-gram. Safe for
// concurrent use.
type TextNovelty struct {
	N, Window int

	mu   sync.Mutex
	mem  []map[uint64]struct{}
	next int
}

// NewTextNovelty returns a TextNovelty over n-grams of length n (default 2)
// remembering window outputs (default 64).
func NewTextNovelty(n, window int) *TextNovelty {
	if n <= 0 {
		n = 2
	}
	if window <= 0 {
		window = 64
	}
	return &TextNovelty{N: n, Window: window}
}

func (t *TextNovelty) grams(x []int) map[uint64]struct{} {
	g := map[uint64]struct{}{}
	n := min(t.N, len(x))
	for i := 0; i+n <= len(x); i++ {
		h := uint64(14695981039346656037) // FNV-1a over the n-gram
		for _, tok := range x[i : i+n] {
			for s := 0; s < 64; s += 8 {
				h ^= uint64(tok>>s) & 0xff
				h *= 1099511628211
			}
		}
		h ^= uint64(n)
		g[h] = struct{}{}
	}
	return g
}

func jaccard(a, b map[uint64]struct{}) float64 {
	if len(a) == 0 && len(b) == 0 {
		return 1
	}
	inter := 0
	for k := range a {
		if _, ok := b[k]; ok {
			inter++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}

// Score returns the novelty of x against the memory (x is not added).
func (t *TextNovelty) Score(x []int) float64 {
	g := t.grams(x)
	t.mu.Lock()
	defer t.mu.Unlock()
	best := 0.0
	for _, m := range t.mem {
		best = math.Max(best, jaccard(g, m))
	}
	return 1 - best
}

// Add remembers the outputs, evicting the oldest beyond Window.
func (t *TextNovelty) Add(xs ...[]int) {
	for _, x := range xs {
		g := t.grams(x)
		t.mu.Lock()
		if len(t.mem) < t.Window {
			t.mem = append(t.mem, g)
		} else {
			t.mem[t.next] = g
			t.next = (t.next + 1) % t.Window
		}
		t.mu.Unlock()
	}
}

// Component returns a reward component named name that scores with t and
// remembers each batch after scoring it.
func (t *TextNovelty) Component(name string) Component[[]int] {
	return Component[[]int]{Name: name, Score: t.Score, After: func(b [][]int) { t.Add(b...) }}
}

// VectorNovelty scores a vector by its mean Euclidean distance to its K
// nearest neighbours among the last Window vectors (the novelty search score
// of Lehman & Stanley 2011). An empty memory scores 0. Safe for concurrent
// use.
type VectorNovelty struct {
	K, Window int

	mu   sync.Mutex
	mem  [][]float64
	next int
}

// NewVectorNovelty returns a VectorNovelty (defaults K = 5, window = 256).
func NewVectorNovelty(k, window int) *VectorNovelty {
	if k <= 0 {
		k = 5
	}
	if window <= 0 {
		window = 256
	}
	return &VectorNovelty{K: k, Window: window}
}

// Score returns the novelty of x against the memory (x is not added).
func (v *VectorNovelty) Score(x []float64) float64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.mem) == 0 {
		return 0
	}
	d := make([]float64, len(v.mem))
	for i, m := range v.mem {
		var s float64
		for j := range m {
			e := m[j] - x[j]
			s += e * e
		}
		d[i] = math.Sqrt(s)
	}
	sort.Float64s(d)
	k := min(v.K, len(d))
	var s float64
	for _, e := range d[:k] {
		s += e
	}
	return s / float64(k)
}

// Add remembers the vectors (copied), evicting the oldest beyond Window.
func (v *VectorNovelty) Add(xs ...[]float64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, x := range xs {
		c := append([]float64(nil), x...)
		if len(v.mem) < v.Window {
			v.mem = append(v.mem, c)
		} else {
			v.mem[v.next] = c
			v.next = (v.next + 1) % v.Window
		}
	}
}

// Component returns a reward component named name that scores with v and
// remembers each batch after scoring it.
func (v *VectorNovelty) Component(name string) Component[[]float64] {
	return Component[[]float64]{Name: name, Score: v.Score, After: func(b [][]float64) { v.Add(b...) }}
}
