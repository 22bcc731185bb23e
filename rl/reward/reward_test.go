package reward

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/troupe-ml/troupe/rl/internal/stats"
)

func TestSchedules(t *testing.T) {
	approx := cmpopts.EquateApprox(0, 1e-12)
	s, e := []float64{1, 0}, []float64{0, 2}
	for _, tc := range []struct {
		name string
		s    Schedule
		p    float64
		want []float64
	}{
		{"constant", Constant{0.3, 0.7}, 0.9, []float64{0.3, 0.7}},
		{"linear/0", Linear(s, e), 0, []float64{1, 0}},
		{"linear/0.25", Linear(s, e), 0.25, []float64{0.75, 0.5}},
		{"linear/1", Linear(s, e), 1, []float64{0, 2}},
		{"linear/clamped", Linear(s, e), 1.5, []float64{0, 2}},
		{"cosine/0.5", Cosine(s, e), 0.5, []float64{0.5, 1}},
		{"cosine/0.25", Cosine(s, e), 0.25, []float64{1 - (1-math.Cos(math.Pi/4))/2, 2 * (1 - math.Cos(math.Pi/4)) / 2}},
		{"step/before", NewStep([]float64{0.3, 0.6}, []float64{1, 0}, []float64{0.5, 0.5}, []float64{0, 1}), 0.29, []float64{1, 0}},
		{"step/middle", NewStep([]float64{0.3, 0.6}, []float64{1, 0}, []float64{0.5, 0.5}, []float64{0, 1}), 0.3, []float64{0.5, 0.5}},
		{"step/after", NewStep([]float64{0.3, 0.6}, []float64{1, 0}, []float64{0.5, 0.5}, []float64{0, 1}), 0.99, []float64{0, 1}},
	} {
		if d := cmp.Diff(tc.want, tc.s.Weights(tc.p), approx); d != "" {
			t.Errorf("%s: (-want +got)\n%s", tc.name, d)
		}
	}
}

func TestAdaptiveShiftsWhenVarianceDrops(t *testing.T) {
	a := &Adaptive{Initial: []float64{1, 0.6, 0.1}, From: 1, To: 2, Threshold: 0.5, Rate: 0.1, MinFrom: 0.1}
	for i := 0; i < 30; i++ {
		a.Observe(1 + 0.1*float64(i%2)) // variance stays high
	}
	if w := a.Weights(0); w[1] != 0.6 || w[2] != 0.1 || a.Shifted != 0 {
		t.Fatalf("weights moved while the variance stayed high: %v", w)
	}
	for i := 0; i < 200; i++ {
		a.Observe(0.01) // collapsed
	}
	w := a.Weights(0)
	if a.Shifted == 0 || math.Abs(w[1]-0.1) > 1e-9 || math.Abs(w[1]+w[2]-0.7) > 1e-12 || w[0] != 1 {
		t.Fatalf("after collapse: weights %v, shifted %d", w, a.Shifted)
	}
}

func TestWelford(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	var w Welford
	var xs []float64
	for i := 0; i < 1000; i++ {
		x := 1e6 + rng.NormFloat64()*3 // large offset: naive Σx² loses digits
		xs = append(xs, x)
		w.Add(x)
	}
	m, s := stats.MeanStd(xs)
	if math.Abs(w.Mean-m) > 1e-6 || math.Abs(w.Std()-s) > 1e-6 {
		t.Fatalf("Welford %g±%g, two-pass %g±%g", w.Mean, w.Std(), m, s)
	}
}

// TestMultiNormalises: a component on a 1000× larger scale does not dominate
// once normalised; the log carries every weight and component.
func TestMultiNormalises(t *testing.T) {
	type out struct{ a, b float64 }
	m := NewMulti(Constant{1, 1},
		Component[out]{Name: "small", Score: func(o out) float64 { return o.a }},
		Component[out]{Name: "big", Score: func(o out) float64 { return 1000 * o.b }},
	)
	rng := rand.New(rand.NewPCG(2, 2))
	var lg Log
	var corrA, corrB float64
	for step := 0; step < 50; step++ {
		batch := make([]out, 64)
		for i := range batch {
			batch[i] = out{rng.NormFloat64(), rng.NormFloat64()}
		}
		var r []float64
		r, lg = m.Score(float64(step)/50, batch)
		for i, o := range batch {
			corrA += r[i] * o.a
			corrB += r[i] * o.b
		}
	}
	if ratio := corrA / corrB; ratio < 0.8 || ratio > 1.25 {
		t.Errorf("normalised components should weigh alike: covariance ratio %.3f", ratio)
	}
	mp := lg.Map()
	for _, k := range []string{"w_small", "w_big", "small_mean", "big_std", "big_norm", "reward", "reward_std", "progress"} {
		if _, ok := mp[k]; !ok {
			t.Errorf("log lacks %q", k)
		}
	}
	if math.Abs(mp["big_std"]/mp["small_std"]-1000) > 300 {
		t.Errorf("raw std ratio %.1f, want about 1000", mp["big_std"]/mp["small_std"])
	}
}

func TestTextNovelty(t *testing.T) {
	n := NewTextNovelty(2, 3)
	if s := n.Score([]int{1, 2, 3}); s != 1 {
		t.Fatalf("empty memory: %g", s)
	}
	n.Add([]int{1, 2, 3, 4})
	for _, tc := range []struct {
		x    []int
		want float64
	}{
		{[]int{1, 2, 3, 4}, 0},         // identical
		{[]int{5, 6, 7}, 1},            // disjoint
		{[]int{1, 2, 3, 9}, 1 - 2.0/4}, // {12,23,39} vs {12,23,34}: 2 shared of 4
	} {
		if s := n.Score(tc.x); math.Abs(s-tc.want) > 1e-12 {
			t.Errorf("Score(%v) = %g, want %g", tc.x, s, tc.want)
		}
	}
	n.Add([]int{5, 6, 7}, []int{8, 8}, []int{9, 9}) // window 3 evicts {1,2,3,4}
	if s := n.Score([]int{1, 2, 3, 4}); s != 1 {
		t.Errorf("evicted output still remembered: %g", s)
	}
}

func TestVectorNovelty(t *testing.T) {
	v := NewVectorNovelty(2, 10)
	v.Add([]float64{0, 0}, []float64{3, 4}, []float64{10, 0})
	// distances from (0,0): 0, 5, 10 → two nearest mean 2.5
	if s := v.Score([]float64{0, 0}); s != 2.5 {
		t.Errorf("Score = %g, want 2.5", s)
	}
}

func ExampleMulti() {
	// Outputs are token sequences; the task prefers token 7, novelty prefers
	// sequences unlike recent ones. The task weight grows linearly.
	nov := NewTextNovelty(2, 16)
	task := Component[[]int]{Name: "task", Score: func(x []int) float64 {
		c := 0.0
		for _, t := range x {
			if t == 7 {
				c++
			}
		}
		return c / float64(len(x))
	}}
	m := NewMulti(Linear([]float64{0.2, 0.8}, []float64{1, 0}), task, nov.Component("novelty"))
	_, lg := m.Score(0.5, [][]int{{7, 7, 7}, {1, 2, 3}, {7, 1, 7}})
	fmt.Printf("w_task=%.1f w_novelty=%.1f task_mean=%.3f novelty_mean=%.1f\n",
		lg.Weights[0], lg.Weights[1], lg.RawMean[0], lg.RawMean[1])
	// Output: w_task=0.6 w_novelty=0.4 task_mean=0.556 novelty_mean=1.0
}
