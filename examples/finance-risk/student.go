package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/distill"
	"github.com/troupe-ml/troupe/examples/finance-risk/agents"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// trainStudent distils the ensemble's fused logits (teacher, on the
// training applicants x) into a small MLP with distill.Binary (soft targets
// at temperature T plus the hard labels), backpropagated through the
// student's Gorgonia graph by distill.Surrogate.
func trainStudent(x []float32, width int, teacher []float32, labels []int, hidden, epochs int, opt distill.Options, seed uint64) (*agents.MLP, error) {
	st := agents.NewMLP("student", width, hidden, seed)
	B := 100
	g := G.NewGraph()
	s := &agents.Scope{G: g, P: st.Params()}
	xn := G.NewMatrix(g, tensor.Float32, G.WithShape(B, width), G.WithName("x"), G.WithInit(G.Zeroes()))
	logit, _ := st.Build(s, xn, B)
	dz := G.NewVector(g, tensor.Float32, G.WithShape(B), G.WithName("dlogit"), G.WithInit(G.Zeroes()))
	cost, err := distill.Surrogate(logit, dz)
	if err != nil {
		return nil, err
	}
	for _, p := range s.Decay {
		cost = G.Must(G.Add(cost, G.Must(G.Mul(G.Must(G.Sum(G.Must(G.Square(p)))), G.NewConstant(float32(1e-3))))))
	}
	if _, err := G.Grad(cost, s.Nodes...); err != nil {
		return nil, fmt.Errorf("student grad: %w", err)
	}
	vm := G.NewTapeMachine(g, G.BindDualValues(s.Nodes...))
	defer vm.Close()
	solver := G.NewAdamSolver(G.WithLearnRate(3e-3), G.WithClip(5))
	rng := rand.New(rand.NewPCG(seed, 0x57d))
	n := len(labels)
	xv := xn.Value().Data().([]float32)
	dv := dz.Value().Data().([]float32)
	zs, zt := make([]float32, B), make([]float32, B)
	lab := make([]int, B)
	grad := make([]float32, B)
	for ep := 0; ep < epochs; ep++ {
		perm := rng.Perm(n)
		for start := 0; start < n; start += B {
			m := min(B, n-start)
			for k := 0; k < B; k++ {
				if k < m {
					i := perm[start+k]
					copy(xv[k*width:(k+1)*width], x[i*width:(i+1)*width])
				} else {
					clear(xv[k*width : (k+1)*width])
				}
			}
			// Pass 1: the student's logits (dlogit = 0).
			clear(dv)
			if err := vm.RunAll(); err != nil {
				return nil, err
			}
			copy(zs, logit.Value().Data().([]float32))
			vm.Reset()
			for k := 0; k < m; k++ {
				i := perm[start+k]
				zt[k], lab[k] = teacher[i], labels[i]
			}
			distill.Binary(grad[:m], zs[:m], zt[:m], lab[:m], opt)
			clear(dv)
			// Binary averages over m; the padding rows get zero gradient.
			copy(dv, grad[:m])
			// Pass 2: backpropagate dL/dlogit.
			if err := vm.RunAll(); err != nil {
				return nil, err
			}
			if err := solver.Step(G.NodesToValueGrads(s.Nodes)); err != nil {
				return nil, err
			}
			vm.Reset()
		}
	}
	return st, nil
}
