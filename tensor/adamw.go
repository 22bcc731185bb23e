package tensor

import (
	"fmt"
	"math"
)

// AdamWParams are the hyper-parameters of one AdamW step (Loshchilov &
// Hutter 2019, "Decoupled Weight Decay Regularization"; Adam: Kingma & Ba
// 2015).
type AdamWParams struct {
	LR          float32 // learning rate η (schedule already applied)
	Beta1       float32 // first-moment decay, typically 0.9
	Beta2       float32 // second-moment decay, typically 0.999
	Eps         float32 // added to √v̂, typically 1e-8
	WeightDecay float32 // decoupled weight decay λ; 0 gives Adam
	Step        int     // 1-based step number, for the bias corrections
	// GradScale multiplies every gradient before use (for example the
	// ClipScale of global-norm clipping); 0 means 1.
	GradScale float32
}

// AdamW applies one AdamW update in place to param, given grad and the
// moment buffers m and v (same length, zero before the first step):
//
//	g ← s·grad
//	m ← β₁m + (1-β₁)g,   v ← β₂v + (1-β₂)g²
//	param ← param - η·λ·param - η·(m/(1-β₁ᵗ)) / (√(v/(1-β₂ᵗ)) + ε)
//
// The decay term uses the parameter before the step, as PyTorch's AdamW does.
func AdamW(param, grad, m, v []float32, p AdamWParams) {
	if len(grad) != len(param) || len(m) != len(param) || len(v) != len(param) {
		panic(fmt.Sprintf("tensor: AdamW: lengths of (param, grad, m, v) differ: [%d %d %d %d]", len(param), len(grad), len(m), len(v)))
	}
	if p.Step < 1 {
		panic(fmt.Sprintf("tensor: AdamW: step %d must be ≥ 1", p.Step))
	}
	gs := p.GradScale
	if gs == 0 {
		gs = 1
	}
	b1, b2 := p.Beta1, p.Beta2
	c1 := 1 / (1 - math.Pow(float64(b1), float64(p.Step)))
	c2 := 1 / (1 - math.Pow(float64(b2), float64(p.Step)))
	stepSize := p.LR * float32(c1)
	rc2 := float32(math.Sqrt(c2)) // √v̂ = √v·√c2
	decay := 1 - p.LR*p.WeightDecay
	grad, m, v = grad[:len(param)], m[:len(param)], v[:len(param)]
	if kUseAVX2 && len(param) >= 8 {
		adamwAVX2(param, grad, m, v, b1, b2, gs, rc2, p.Eps, decay, stepSize)
		k := len(param) &^ 7
		param, grad, m, v = param[k:], grad[k:], m[k:], v[k:]
	}
	for i := range param {
		g := grad[i] * gs
		mi := b1*m[i] + (1-b1)*g
		vi := b2*v[i] + (1-b2)*g*g
		m[i], v[i] = mi, vi
		den := float32(math.Sqrt(float64(vi)))*rc2 + p.Eps
		param[i] = param[i]*decay - stepSize*mi/den
	}
}
