package agents

import (
	"math"
	"math/rand/v2"
	"testing"
)

// toy: label = 1 when x0 + x1 > 0 (features in a (n, 4) matrix).
func toy(n int, seed uint64) ([]float32, []float32) {
	rng := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n*4)
	y := make([]float32, n)
	for i := 0; i < n; i++ {
		for j := 0; j < 4; j++ {
			x[i*4+j] = float32(rng.NormFloat64())
		}
		if x[i*4]+x[i*4+1] > 0 {
			y[i] = 1
		}
	}
	return x, y
}

func accuracy(out, y []float32) float64 {
	ok := 0
	for i := range y {
		if (out[i] > 0) == (y[i] == 1) {
			ok++
		}
	}
	return float64(ok) / float64(len(y))
}

func TestClassifiersLearn(t *testing.T) {
	x, y := toy(300, 1)
	xt, yt := toy(200, 2)
	rng := rand.New(rand.NewPCG(5, 6))
	nets := []*Net{NewMLP(4, 8, 1, 1e-2, 0)}
	if !testing.Short() { // the transformer is the slow one (most of this test under -race)
		nets = append(nets, NewTransformer(4, 8, 1, 2, 1, 3e-3, 0))
	}
	for _, net := range nets {
		before, _, err := net.Run(xt, 200)
		if err != nil {
			t.Fatal(err)
		}
		first, err := net.Epoch(x, y, 50, BCE, rng)
		if err != nil {
			t.Fatal(err)
		}
		var last float64
		for ep := 0; ep < 30; ep++ {
			if last, err = net.Epoch(x, y, 50, BCE, rng); err != nil {
				t.Fatal(err)
			}
		}
		out, emb, err := net.Run(xt, 200)
		if err != nil {
			t.Fatal(err)
		}
		acc := accuracy(out, yt)
		t.Logf("%s: loss %.3f -> %.3f, test accuracy %.3f (untrained %.3f), %d params", net.Name, first, last, acc, accuracy(before, yt), net.ParamCount())
		if last > 0.6*first || acc < 0.9 {
			t.Errorf("%s did not learn: loss %.3f -> %.3f, accuracy %.3f", net.Name, first, last, acc)
		}
		if len(emb) != 200*net.EmbDim() {
			t.Errorf("%s: embedding size %d, want %d", net.Name, len(emb), 200*net.EmbDim())
		}
	}
}

func TestLSTMRegression(t *testing.T) {
	// Target: the mean absolute value of the sequence (a volatility proxy).
	rng := rand.New(rand.NewPCG(3, 4))
	n, T := 400, 8
	x := make([]float32, n*T)
	y := make([]float32, n)
	for i := 0; i < n; i++ {
		s := 0.5 + rng.Float64()*1.5
		var m float64
		for k := 0; k < T; k++ {
			v := rng.NormFloat64() * s
			x[i*T+k] = float32(v)
			m += math.Abs(v) / float64(T)
		}
		y[i] = float32(m - 1)
	}
	net := NewLSTM(T, 8, 1, 1e-2)
	first, err := net.Epoch(x, y, 50, MSE, rng)
	if err != nil {
		t.Fatal(err)
	}
	var last float64
	for ep := 0; ep < 40; ep++ {
		if last, err = net.Epoch(x, y, 50, MSE, rng); err != nil {
			t.Fatal(err)
		}
	}
	var varY float64
	for _, v := range y {
		varY += float64(v*v) / float64(n)
	}
	t.Logf("LSTM MSE %.4f -> %.4f (target second moment %.4f)", first, last, varY)
	if last > 0.5*varY {
		t.Fatalf("LSTM did not learn: MSE %.4f vs %.4f", last, varY)
	}
}

// TestInputErrors: a wrong input size or loss kind is an error naming the
// member, not a panic.
func TestInputErrors(t *testing.T) {
	net := NewMLP(4, 8, 1, 1e-2, 0)
	rng := rand.New(rand.NewPCG(1, 1))
	for name, err := range map[string]error{
		"run width":  func() error { _, _, err := net.Run(make([]float32, 7), 2); return err }(),
		"epoch size": func() error { _, err := net.Epoch(make([]float32, 12), make([]float32, 2), 10, BCE, rng); return err }(),
		"loss kind":  func() error { _, err := net.Epoch(make([]float32, 8), make([]float32, 2), 10, 7, rng); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
