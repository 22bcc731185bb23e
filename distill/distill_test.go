package distill

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func randLogits(rng *rand.Rand, n int, scale float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64() * scale
	}
	return v
}

func TestLossGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		rows, classes int
		opt           Options
	}{
		{5, 3, Options{Temperature: 1, Alpha: 0.5, IgnoreIndex: -1}},
		{4, 7, Options{Temperature: 4, Alpha: 0.9, IgnoreIndex: -1}},
		{6, 2, Options{Temperature: 0, Alpha: 0, IgnoreIndex: -1}},
		{8, 11, Options{Temperature: 2, Alpha: 1, IgnoreIndex: -100}}, // token-level, with padding
	} {
		t.Run(fmt.Sprintf("%dx%d_T%g_a%g", tc.rows, tc.classes, tc.opt.Temperature, tc.opt.Alpha), func(t *testing.T) {
			s := randLogits(rng, tc.rows*tc.classes, 2)
			te := randLogits(rng, tc.rows*tc.classes, 2)
			labels := make([]int, tc.rows)
			for i := range labels {
				labels[i] = rng.IntN(tc.classes)
			}
			if tc.opt.IgnoreIndex == -100 {
				labels[1], labels[5] = -100, -100
			}
			grad := make([]float64, len(s))
			_, n := Loss(grad, s, te, labels, tc.classes, tc.opt)
			if tc.opt.IgnoreIndex == -100 && n != tc.rows-2 {
				t.Fatalf("counted %d rows", n)
			}
			const h = 1e-6
			for i := range s {
				old := s[i]
				s[i] = old + h
				up, _ := Loss(nil, s, te, labels, tc.classes, tc.opt)
				s[i] = old - h
				down, _ := Loss(nil, s, te, labels, tc.classes, tc.opt)
				s[i] = old
				num := (up - down) / (2 * h)
				if math.Abs(num-grad[i]) > 1e-7 {
					t.Fatalf("d/ds[%d]: analytic %.10g numeric %.10g", i, grad[i], num)
				}
			}
		})
	}
}

func TestBinaryGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s, te := randLogits(rng, 9, 2), randLogits(rng, 9, 2)
	labels := []int{0, 1, 1, 0, 0, 1, 0, 1, 1}
	opt := Options{Temperature: 3, Alpha: 0.7, IgnoreIndex: -1}
	grad := make([]float64, 9)
	Binary(grad, s, te, labels, opt)
	for i := range s {
		old := s[i]
		s[i] = old + 1e-6
		up, _ := Binary(nil, s, te, labels, opt)
		s[i] = old - 1e-6
		down, _ := Binary(nil, s, te, labels, opt)
		s[i] = old
		if num := (up - down) / 2e-6; math.Abs(num-grad[i]) > 1e-7 {
			t.Fatalf("d/dz[%d]: analytic %g numeric %g", i, grad[i], num)
		}
	}
}

func TestLossProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	x := randLogits(rng, 12, 1)
	labels := []int{0, 2, 1, 1}
	// A student equal to its teacher has zero soft loss and zero soft gradient.
	g := make([]float64, 12)
	if l, _ := Loss(g, x, x, labels, 3, Options{Alpha: 1, IgnoreIndex: -1}); math.Abs(l) > 1e-12 {
		t.Fatalf("KL(p||p) = %g", l)
	}
	for _, v := range g {
		if math.Abs(v) > 1e-12 {
			t.Fatal("nonzero gradient at the teacher")
		}
	}
	// Alpha 0 is plain cross-entropy, whatever the teacher.
	l0, _ := Loss(nil, x, randLogits(rng, 12, 5), labels, 3, Options{Alpha: 0, IgnoreIndex: -1})
	var ce float64
	for r, y := range labels {
		row := x[r*3 : r*3+3]
		z := math.Log(math.Exp(row[0]) + math.Exp(row[1]) + math.Exp(row[2]))
		ce += (z - row[y]) / 4
	}
	if math.Abs(l0-ce) > 1e-12 {
		t.Fatalf("alpha 0: %g, CE %g", l0, ce)
	}
	// float32 agrees with float64.
	x32, t32 := make([]float32, 12), make([]float32, 12)
	te := randLogits(rng, 12, 1)
	for i := range x {
		x32[i], t32[i] = float32(x[i]), float32(te[i])
		x[i], te[i] = float64(x32[i]), float64(t32[i])
	}
	l32, _ := Loss(nil, x32, t32, labels, 3, Options{Alpha: 0.5, Temperature: 2, IgnoreIndex: -1})
	l64, _ := Loss(nil, x, te, labels, 3, Options{Alpha: 0.5, Temperature: 2, IgnoreIndex: -1})
	if math.Abs(l32-l64) > 1e-6 {
		t.Fatalf("float32 %g float64 %g", l32, l64)
	}
}

// TestSurrogate checks that backpropagating Surrogate gives dL/dθ for a
// linear student trained on Loss computed outside the graph.
func TestSurrogate(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	n, d, k := 5, 4, 3
	x := randLogits(rng, n*d, 1)
	w0 := randLogits(rng, d*k, 0.5)
	teacher := randLogits(rng, n*k, 2)
	labels := []int{0, 1, 2, 1, 0}
	opt := Options{Temperature: 2, Alpha: 0.6, IgnoreIndex: -1}
	g := G.NewGraph()
	xn := G.NewMatrix(g, tensor.Float64, G.WithShape(n, d), G.WithName("x"), G.WithValue(tensor.New(tensor.WithShape(n, d), tensor.WithBacking(x))))
	wn := G.NewMatrix(g, tensor.Float64, G.WithShape(d, k), G.WithName("w"), G.WithValue(tensor.New(tensor.WithShape(d, k), tensor.WithBacking(append([]float64(nil), w0...)))))
	logits := G.Must(G.Mul(xn, wn))
	gradIn := G.NewMatrix(g, tensor.Float64, G.WithShape(n, k), G.WithName("dlogits"), G.WithInit(G.Zeroes()))
	cost, err := Surrogate(logits, gradIn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := G.Grad(cost, wn); err != nil {
		t.Fatal(err)
	}
	// Forward for the logits, fill dL/dlogits, then forward-backward again.
	vm := G.NewTapeMachine(g, G.BindDualValues(wn))
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	z := append([]float64(nil), logits.Value().Data().([]float64)...)
	dz := make([]float64, n*k)
	Loss(dz, z, teacher, labels, k, opt)
	copy(gradIn.Value().Data().([]float64), dz)
	vm.Reset()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	gw, _ := wn.Grad()
	got := append([]float64(nil), gw.Data().([]float64)...)
	lossAt := func(w []float64) float64 {
		zz := make([]float64, n*k)
		for i := 0; i < n; i++ {
			for j := 0; j < k; j++ {
				for a := 0; a < d; a++ {
					zz[i*k+j] += x[i*d+a] * w[a*k+j]
				}
			}
		}
		l, _ := Loss(nil, zz, teacher, labels, k, opt)
		return l
	}
	for i := range w0 {
		w := append([]float64(nil), w0...)
		w[i] += 1e-6
		up := lossAt(w)
		w[i] -= 2e-6
		num := (up - lossAt(w)) / 2e-6
		if math.Abs(num-got[i]) > 1e-7 {
			t.Fatalf("dL/dw[%d]: graph %g numeric %g", i, got[i], num)
		}
	}
}

func ExampleBinary() {
	student := []float64{0.0, 2.0}  // log-odds of class 1
	teacher := []float64{-1.0, 3.0} // the teacher is more confident
	labels := []int{0, 1}
	grad := make([]float64, 2)
	loss, n := Binary(grad, student, teacher, labels, Options{Temperature: 2, Alpha: 0.5, IgnoreIndex: -1})
	fmt.Printf("loss %.4f over %d examples, dL/dz = [%.4f %.4f]\n", loss, n, grad[0], grad[1])
	// Output: loss 0.2560 over 2 examples, dL/dz = [0.1862 -0.0731]
}

func ExampleReport() {
	r := Report{Metric: "AUC", TeacherQuality: 0.80, StudentQuality: 0.79,
		TeacherParams: 20000, StudentParams: 1000, TeacherTime: 50 * time.Microsecond, StudentTime: 5 * time.Microsecond}
	fmt.Printf("retention %.3f, speed-up %.0fx\n", r.Retention(), r.SpeedUp())
	// Output: retention 0.988, speed-up 10x
}

func ExampleLoss() {
	// Token-level distillation of a language model: 3 positions over a
	// vocabulary of 4, the last position is padding (label -1).
	student := []float32{2, 0, 0, 0, 0, 1, 0, 0, 5, 5, 5, 5}
	teacher := []float32{3, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0}
	labels := []int{0, 1, -1}
	grad := make([]float32, len(student))
	loss, n := Loss(grad, student, teacher, labels, 4, Options{Temperature: 2, Alpha: 0.5, IgnoreIndex: -1})
	fmt.Printf("loss %.4f over %d tokens; padding gradient %v\n", loss, n, grad[8:])
	// Output: loss 0.3302 over 2 tokens; padding gradient [0 0 0 0]
}
