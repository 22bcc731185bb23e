package nn

import (
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
)

func tabular(rng *rand.Rand, n int) ([][]float32, []int, [][]float32) {
	var x [][]float32
	var lab []int
	var y [][]float32
	for i := 0; i < n; i++ {
		r := []float32{float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())}
		x = append(x, r)
		l := 0
		if r[0]*r[1] > 0 { // XOR-like: needs interaction between features
			l = 1
		}
		lab = append(lab, l)
		y = append(y, []float32{2*r[0] - r[2]})
	}
	return x, lab, y
}

func TestTrainerClassifiesWithTokenSetEncoder(t *testing.T) {
	if testing.Short() {
		t.Skip("training run; skipped with -short (it runs in the normal suite)")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	store := NewStore(5)
	model := func(s *Scope, x *G.Node) *G.Node {
		h := TokenSetEncoder(s.Sub("enc"), x, EncoderConfig{Dim: 16, Layers: 1, Heads: 2})
		return ClassificationHead(s.Sub("head"), h, 2)
	}
	tr := NewTrainer(store, model, NewAdamW(Constant(3e-3), 0), TrainConfig{ClipNorm: 5})
	for step := 0; step < 300; step++ {
		x, lab, _ := tabular(rng, 32)
		if _, err := tr.ClassifyStep(x, lab); err != nil {
			t.Fatal(err)
		}
	}
	x, lab, _ := tabular(rand.New(rand.NewPCG(9, 9)), 200)
	out, err := tr.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	correct := 0
	for i, o := range out {
		p := 0
		if o[1] > o[0] {
			p = 1
		}
		if p == lab[i] {
			correct++
		}
	}
	// The label is the sign of x0·x1: no linear function of the features
	// beats chance (50%); the bar needs the encoder to model the interaction.
	acc := float64(correct) / 200
	t.Logf("held-out accuracy %.3f", acc)
	if acc < 0.85 {
		t.Errorf("accuracy %.3f, want ≥ 0.85", acc)
	}
}

func TestTrainerRegresses(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 2))
	store := NewStore(6)
	tr := NewTrainer(store, func(s *Scope, x *G.Node) *G.Node { return RegressionHead(s.Sub("head"), x, 1) },
		NewSGD(Constant(0.1), 0.9), TrainConfig{})
	var l float64
	for step := 0; step < 200; step++ {
		x, _, y := tabular(rng, 16)
		var err error
		if l, err = tr.RegressStep(x, y); err != nil {
			t.Fatal(err)
		}
	}
	if l > 1e-3 {
		t.Errorf("final MSE %v on an exactly linear target", l)
	}
}
