package agents

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
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

func TestMLPAndTransformerLearn(t *testing.T) {
	x, y := toy(300, 1)
	xt, yt := toy(200, 2)
	nets := []Net{NewMLP("m", 4, 8, 1)}
	if !testing.Short() { // the transformer is the slow one (most of this test under -race)
		// 4 tokens of 4 features (token a holds feature a only): the
		// Encoder.Tokens layout.
		nets = append(nets, NewTokenTransformer("t", 4, 4, 8, 2, 16, 1))
	}
	for _, net := range nets {
		xin, xtin := x, xt
		if tf, ok := net.(*TokenTransformer); ok {
			xin, xtin = tokens(x, tf.Tokens), tokens(xt, tf.Tokens)
		}
		inf := NewInfer(net, 64)
		before, _, err := inf.Run(xtin, 200)
		if err != nil {
			t.Fatal(err)
		}
		before = append([]float32(nil), before...)
		tr, err := NewTrainer(net, TrainConfig{Batch: 50, LR: 1e-2, L2: 1e-4, Loss: BCE, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		first, err := tr.Epoch(xin, y, 300, 0)
		if err != nil {
			t.Fatal(err)
		}
		var last float64
		for ep := 0; ep < 30; ep++ {
			if last, err = tr.Epoch(xin, y, 300, 0); err != nil {
				t.Fatal(err)
			}
		}
		tr.Close()
		// The inference graph shares the parameters: it sees the training.
		after, emb, err := inf.Run(xtin, 200)
		if err != nil {
			t.Fatal(err)
		}
		acc := accuracy(after, yt)
		t.Logf("%T: loss %.3f -> %.3f, test accuracy %.3f (untrained %.3f)", net, first, last, acc, accuracy(before, yt))
		if !(last < first*0.6) || acc < 0.9 {
			t.Fatalf("%T did not learn: loss %.3f -> %.3f, accuracy %.3f", net, first, last, acc)
		}
		if len(emb) != 200*net.EmbDim() {
			t.Fatalf("embedding size %d", len(emb))
		}
		inf.Close()
	}
}

func tokens(x []float32, A int) []float32 {
	n := len(x) / A
	out := make([]float32, n*A*A)
	for i := 0; i < n; i++ {
		for a := 0; a < A; a++ {
			out[(i*A+a)*A+a] = x[i*A+a]
		}
	}
	return out
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
	net := NewLSTM("l", T, 8, 1)
	tr, err := NewTrainer(net, TrainConfig{Batch: 50, LR: 1e-2, Loss: MSE, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	first, err := tr.Epoch(x, y, n, 0)
	if err != nil {
		t.Fatal(err)
	}
	var last float64
	for ep := 0; ep < 40; ep++ {
		if last, err = tr.Epoch(x, y, n, 0); err != nil {
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

func TestParamsShapeMismatchPanics(t *testing.T) {
	p := NewParams(1)
	p.Get("w", 1, 2, 3)
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("no panic")
		}
		// The message names both shapes (the project's convention for
		// programmer errors while building graphs).
		if msg := fmt.Sprint(r); !strings.Contains(msg, "(2, 3)") || !strings.Contains(msg, "[3 2]") {
			t.Fatalf("panic message %q does not name both shapes", msg)
		}
	}()
	p.Get("w", 1, 3, 2)
}

func TestNNNetLearns(t *testing.T) {
	x, y := toy(300, 1)
	xt, yt := toy(200, 2)
	rng := rand.New(rand.NewPCG(5, 6))
	nets := []*NNNet{NewNNMLP(4, 8, 1, 1e-2, 0)}
	if !testing.Short() {
		nets = append(nets, NewNNTransformer(4, 8, 1, 2, 1, 3e-3, 0))
	}
	for _, net := range nets {
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
		t.Logf("%s: loss %.3f -> %.3f, accuracy %.3f, %d params", net.Name, first, last, acc, net.ParamCount())
		if last > 0.6*first || acc < 0.9 || len(emb) != 200*net.EmbDim() {
			t.Fatalf("%s did not learn: %.3f -> %.3f, accuracy %.3f", net.Name, first, last, acc)
		}
	}
}
