package main

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/distill"
	"github.com/troupe-ml/troupe/nn"
	G "gorgonia.org/gorgonia"
)

// Student is the distilled model: a small MLP (package nn: Linear → GELU →
// Linear) over the encoded applicant features.
type Student struct {
	Store   *nn.Store
	Trainer *nn.Trainer
	Width   int
}

// studentModel is the student's nn.FeatureModel.
func studentModel(hidden int) nn.FeatureModel {
	return func(s *nn.Scope, x *G.Node) *G.Node { return nn.MLP(s.Sub("student"), x, hidden, 1) }
}

// trainStudent distils the ensemble's fused logits (teacher, on the
// training applicants x, row-major with width features) into the student
// with distill.Binary (soft targets at temperature T plus the hard labels,
// mixed by Alpha) as the loss callback of nn.Trainer.ForwardBackward.
func trainStudent(x []float32, width int, teacher []float32, labels []int, hidden, epochs int, opt distill.Options, seed uint64) (*Student, error) {
	store := nn.NewStore(seed)
	tr := nn.NewTrainer(store, studentModel(hidden), nn.NewAdamW(nn.Constant(3e-3), 1e-3), nn.TrainConfig{ClipNorm: 5})
	rng := rand.New(rand.NewPCG(seed, 0x57d))
	n := len(labels)
	const B = 100
	for ep := 0; ep < epochs; ep++ {
		perm := rng.Perm(n)
		for start := 0; start < n; start += B {
			idx := perm[start:min(start+B, n)]
			rows := make([][]float32, len(idx))
			zt := make([]float32, len(idx))
			lab := make([]int, len(idx))
			for k, i := range idx {
				rows[k], zt[k], lab[k] = x[i*width:(i+1)*width], teacher[i], labels[i]
			}
			loss := func(out [][]float32) (float64, [][]float32) {
				zs := make([]float32, len(out))
				for k := range out {
					zs[k] = out[k][0]
				}
				g := make([]float32, len(out))
				l, _ := distill.Binary(g, zs, zt, lab, opt)
				grad := make([][]float32, len(out))
				for k := range grad {
					grad[k] = []float32{g[k]}
				}
				return l, grad
			}
			if _, err := tr.ForwardBackward(rows, loss); err != nil && !errors.Is(err, nn.ErrNonFinite) {
				return nil, fmt.Errorf("student: %w", err)
			}
			if _, _, err := tr.Step(); err != nil {
				return nil, fmt.Errorf("student: %w", err)
			}
		}
	}
	return &Student{Store: store, Trainer: tr, Width: width}, nil
}

// Logits returns the student's logits for row-major x.
func (s *Student) Logits(x []float32) ([]float32, error) {
	n := len(x) / s.Width
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = x[i*s.Width : (i+1)*s.Width]
	}
	out, err := s.Trainer.Predict(rows)
	if err != nil {
		return nil, err
	}
	z := make([]float32, n)
	for i := range out {
		z[i] = out[i][0]
	}
	return z, nil
}
