package ensemble

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// fusionGraph builds a float64 fusion over random member embeddings with the
// given mask; when joint, member 0's embedding comes from a tanh layer whose
// weight is learnable (joint training).
type fusionGraph struct {
	g      *G.ExprGraph
	att    *Attention
	fused  *Fused
	cost   *G.Node
	params G.Nodes
	embs   []*tensor.Dense
}

func newFusionGraph(t testing.TB, B int, dims []int, mask []float64, joint bool, seed uint64) *fusionGraph {
	rng := rand.New(rand.NewPCG(seed, 1))
	randT := func(shape ...int) *tensor.Dense {
		n := 1
		for _, s := range shape {
			n *= s
		}
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
	}
	f := &fusionGraph{g: G.NewGraph()}
	f.att = NewAttention(f.g, AttentionConfig{EmbDims: dims, Dim: 8, Heads: 2, Dtype: tensor.Float64, Seed: seed})
	var embs []*G.Node
	for m, d := range dims {
		v := randT(B, d)
		f.embs = append(f.embs, v)
		n := G.NewMatrix(f.g, tensor.Float64, G.WithShape(B, d), G.WithName(fmt.Sprintf("e%d", m)), G.WithValue(v))
		if joint && m == 0 {
			w := G.NewMatrix(f.g, tensor.Float64, G.WithShape(d, d), G.WithName("member0.W"), G.WithValue(randT(d, d)))
			f.params = append(f.params, w)
			n = G.Must(G.Tanh(G.Must(G.Mul(n, w))))
		}
		embs = append(embs, n)
	}
	M := len(dims)
	logits := G.NewMatrix(f.g, tensor.Float64, G.WithShape(B, M), G.WithName("logits"), G.WithValue(randT(B, M)))
	maskN := G.NewMatrix(f.g, tensor.Float64, G.WithShape(B, M), G.WithName("mask"),
		G.WithValue(tensor.New(tensor.WithShape(B, M), tensor.WithBacking(append([]float64(nil), mask...)))))
	fused, err := f.att.Fuse(embs, logits, maskN)
	if err != nil {
		t.Fatal(err)
	}
	f.fused = fused
	coef := G.NewVector(f.g, tensor.Float64, G.WithShape(B), G.WithName("coef"), G.WithValue(randT(B)))
	f.cost = G.Must(G.Sum(G.Must(G.HadamardProd(G.Must(G.Sigmoid(fused.Logit)), coef))))
	f.params = append(f.params, f.att.Learnables()...)
	return f
}

func (f *fusionGraph) run(t testing.TB, grad bool) float64 {
	var vm G.VM
	if grad {
		if _, err := G.Grad(f.cost, f.params...); err != nil {
			t.Fatal(err)
		}
		vm = G.NewTapeMachine(f.g, G.BindDualValues(f.params...))
	} else {
		vm = G.NewTapeMachine(f.g)
	}
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	return f.cost.Value().Data().(float64)
}

func TestAttentionGradient(t *testing.T) {
	for _, joint := range []bool{false, true} {
		t.Run(fmt.Sprintf("joint=%v", joint), func(t *testing.T) {
			B, dims := 3, []int{4, 3, 5}
			mask := []float64{1, 1, 1, 1, 0, 1, 0, 1, 1}
			f := newFusionGraph(t, B, dims, mask, joint, 11)
			f.run(t, true)
			// Analytic gradients, copied out (the machine reuses buffers).
			var analytic [][]float64
			for _, p := range f.params {
				gv, err := p.Grad()
				if err != nil {
					t.Fatal(err)
				}
				analytic = append(analytic, append([]float64(nil), gv.Data().([]float64)...))
			}
			// Central differences on a fresh forward-only graph with the same values.
			g := newFusionGraph(t, B, dims, mask, joint, 11)
			const h = 1e-6
			stride := 1
			if testing.Short() {
				stride = 7 // a sample of the entries (the race detector is slow)
			}
			for pi, p := range g.params {
				data := p.Value().Data().([]float64)
				for i := 0; i < len(data); i += stride {
					old := data[i]
					data[i] = old + h
					up := g.run(t, false)
					data[i] = old - h
					down := g.run(t, false)
					data[i] = old
					num := (up - down) / (2 * h)
					if d := math.Abs(num - analytic[pi][i]); d > 1e-6*math.Max(1, math.Abs(num)) {
						t.Fatalf("%s[%d]: analytic %.9g numeric %.9g", p.Name(), i, analytic[pi][i], num)
					}
				}
			}
		})
	}
}

func TestAttentionMasking(t *testing.T) {
	B, dims := 4, []int{3, 2, 4}
	mask := []float64{1, 1, 1, 1, 0, 1, 0, 1, 1, 0, 0, 1}
	f := newFusionGraph(t, B, dims, mask, false, 5)
	f.run(t, false)
	w := append([]float64(nil), f.fused.Weights.Value().Data().([]float64)...) // (B, M, H)
	logit := append([]float64(nil), f.fused.Logit.Value().Data().([]float64)...)
	M, H := 3, 2
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			var s float64
			for m := 0; m < M; m++ {
				v := w[(b*M+m)*H+h]
				if mask[b*M+m] == 0 && v != 0 {
					t.Fatalf("example %d member %d missing but weight %g", b, m, v)
				}
				s += v
			}
			if math.Abs(s-1) > 1e-12 {
				t.Fatalf("weights of example %d head %d sum to %g", b, h, s)
			}
		}
	}
	// Changing a missing member's embedding changes nothing.
	emb := f.embs[1].Data().([]float64) // member 1 is missing for example 1
	for j := 0; j < dims[1]; j++ {
		emb[1*dims[1]+j] += 10
	}
	f.run(t, false)
	got := f.fused.Logit.Value().Data().([]float64)
	if got[1] != logit[1] {
		t.Fatalf("missing member moved the output: %g -> %g", logit[1], got[1])
	}
	// Examples are fused independently: the other examples' embeddings did
	// not change, so neither did their outputs.
	for b := 0; b < B; b++ {
		if b != 1 && math.Abs(got[b]-logit[b]) > 1e-12 {
			t.Fatalf("example %d moved when only example 1's input changed: %g -> %g", b, logit[b], got[b])
		}
	}
	// Changing a present member's embedding does change the output.
	emb[0] += 10
	f.run(t, false)
	if f.fused.Logit.Value().Data().([]float64)[0] == logit[0] {
		t.Fatal("present member ignored")
	}
}

func TestSchedulerFloorAndTemperature(t *testing.T) {
	for _, tc := range []struct {
		temp, floor float64
	}{{0.01, 0.1}, {1, 0.05}, {100, 0}, {0.1, 0.25}} {
		s := NewScheduler(4, tc.temp, tc.floor, 0)
		for i, c := range []float64{1, 0.5, -2, 0.9} {
			s.Observe(i, c)
		}
		sh := s.Shares()
		var sum float64
		for i, v := range sh {
			sum += v
			if v < tc.floor-1e-12 {
				t.Fatalf("T=%g floor=%g: agent %d share %g below floor", tc.temp, tc.floor, i, v)
			}
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Fatalf("shares sum %g", sum)
		}
		if !(sh[0] >= sh[3] && sh[3] >= sh[1] && sh[1] >= sh[2]) {
			t.Fatalf("shares not ordered by contribution: %v", sh)
		}
		alloc := s.Allocate(100)
		tot := 0
		for i, a := range alloc {
			tot += a
			if a < int(tc.floor*100) {
				t.Fatalf("agent %d got %d units, floor %g", i, a, tc.floor)
			}
		}
		if tot != 100 {
			t.Fatalf("allocated %d", tot)
		}
		switch {
		case tc.temp <= 0.01: // winner takes all above the floor
			if math.Abs(sh[0]-(1-3*tc.floor)) > 1e-3 {
				t.Fatalf("low temperature: %v", sh)
			}
		case tc.temp >= 100: // nearly uniform
			if math.Abs(sh[0]-sh[2]) > 0.02 {
				t.Fatalf("high temperature: %v", sh)
			}
		}
	}
	// The moving average forgets with Decay.
	s := NewScheduler(2, 1, 0, 0.5)
	s.Observe(0, 2)
	s.Observe(0, 0)
	if c := s.Contributions(); c[0] != 1 {
		t.Fatalf("EMA %v", c)
	}
}

func TestRolesReassignment(t *testing.T) {
	r := NewRoles(4, 0)
	for i, c := range []float64{0.1, 0.9, 0.5, 0.3} {
		r.Observe(i, c)
	}
	got := r.Reassign(0)
	want := []Role{Optimizer, Optimizer, Validator, Optimizer}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("easy round: %v, want %v", got, want)
	}
	// Hard task: both non-leading non-validators explore, weakest first.
	got = r.Reassign(1)
	want = []Role{Explorer, Optimizer, Validator, Explorer}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hard round: %v, want %v", got, want)
	}
	// Contributions change: agent 0 becomes best.
	for i, c := range []float64{2, 0.1, 0.5, 0.3} {
		r.Observe(i, c)
	}
	got = r.Reassign(0.3)
	want = []Role{Optimizer, Explorer, Validator, Optimizer}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after change: %v, want %v", got, want)
	}
	if len(r.History) == 0 || r.History[len(r.History)-1].Round != 3 {
		t.Fatalf("history %+v", r.History)
	}
	for _, a := range r.History {
		if a.From == a.To {
			t.Fatalf("logged a non-change %+v", a)
		}
	}
}

func ExampleScheduler() {
	s := NewScheduler(3, 0.5, 0.1, 0)
	s.Observe(0, 1.0) // recent reward contributions
	s.Observe(1, 0.2)
	s.Observe(2, 0.0)
	fmt.Println(s.Allocate(100))
	// Output: [62 21 17]
}

func ExampleRoles() {
	r := NewRoles(3, 0)
	for i, c := range []float64{0.2, 0.8, 0.5} {
		r.Observe(i, c)
	}
	fmt.Println(r.Reassign(0.9))
	for _, a := range r.History {
		fmt.Println(a.Agent, a.From, "->", a.To)
	}
	// Output:
	// [explorer optimizer validator]
	// 0 optimizer -> explorer
	// 2 optimizer -> validator
}

func ExampleAttention() {
	// Fuse two members for a batch of 2 examples; member 1 is missing for
	// example 1.
	g := G.NewGraph()
	att := NewAttention(g, AttentionConfig{EmbDims: []int{3, 2}, Dim: 4, Heads: 2, Seed: 1})
	e0 := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 3), G.WithName("e0"),
		G.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, 0, -1, 0.5, 0.5, 0}))))
	e1 := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 2), G.WithName("e1"),
		G.WithValue(tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{0.2, -0.3, 9, 9}))))
	logits := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 2), G.WithName("z"),
		G.WithValue(tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1.5, -0.5, 2, 100}))))
	mask := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 2), G.WithName("mask"),
		G.WithValue(tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1, 1, 1, 0}))))
	fused, err := att.Fuse([]*G.Node{e0, e1}, logits, mask)
	if err != nil {
		panic(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		panic(err)
	}
	w := fused.Weights.Value().Data().([]float32) // (example, member, head)
	fmt.Printf("example 1, member 1 (missing): weights %.1f %.1f\n", w[6], w[7])
	fmt.Printf("example 1 weights sum per head: %.1f %.1f\n", w[4]+w[6], w[5]+w[7])
	// Output:
	// example 1, member 1 (missing): weights 0.0 0.0
	// example 1 weights sum per head: 1.0 1.0
}
