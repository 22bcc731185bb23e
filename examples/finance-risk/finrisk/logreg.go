package finrisk

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// LogReg is L2-regularised logistic regression, the classic credit-scoring
// baseline. Fit minimises the mean negative log-likelihood plus L2/2 times
// the squared weights (bias unpenalised) by Newton's method (IRLS) with a
// Cholesky solve (gonum/mat); the problem is strictly convex for L2 > 0.
type LogReg struct {
	W  []float64
	B  float64
	L2 float64
}

// Fit fits the model on row-major x (n, d) and labels y in {0,1}.
func (m *LogReg) Fit(x []float32, n, d int, y []int) error {
	theta := make([]float64, d+1)
	grad := make([]float64, d+1)
	h := mat.NewSymDense(d+1, nil)
	row := make([]float64, d+1)
	for it := 0; it < 50; it++ {
		clear(grad)
		h.Zero()
		for i := 0; i < n; i++ {
			for j := 0; j < d; j++ {
				row[j] = float64(x[i*d+j])
			}
			row[d] = 1
			z := 0.0
			for j, v := range row {
				z += theta[j] * v
			}
			p := sigmoid(z)
			g := p - float64(y[i])
			for j, v := range row {
				grad[j] += g * v
			}
			h.SymRankOne(h, p*(1-p), mat.NewVecDense(d+1, row))
		}
		for j := range grad {
			grad[j] /= float64(n)
		}
		h.ScaleSym(1/float64(n), h)
		for j := 0; j < d; j++ {
			grad[j] += m.L2 * theta[j]
			h.SetSym(j, j, h.At(j, j)+m.L2)
		}
		h.SetSym(d, d, h.At(d, d)+1e-9)
		var ch mat.Cholesky
		if !ch.Factorize(h) {
			return fmt.Errorf("logreg: Hessian not positive definite at iteration %d", it)
		}
		var step mat.VecDense
		if err := ch.SolveVecTo(&step, mat.NewVecDense(d+1, grad)); err != nil {
			return fmt.Errorf("logreg: %w", err)
		}
		norm := 0.0
		for j := range theta {
			theta[j] -= step.AtVec(j)
			norm += step.AtVec(j) * step.AtVec(j)
		}
		if norm < 1e-16 {
			break
		}
	}
	m.W, m.B = append([]float64(nil), theta[:d]...), theta[d]
	return nil
}

// Logit returns the log-odds of label 1 for row-major x (n, d).
func (m *LogReg) Logit(x []float32, n int) []float64 {
	d := len(m.W)
	out := make([]float64, n)
	for i := range out {
		z := m.B
		for j, v := range x[i*d : (i+1)*d] {
			z += m.W[j] * float64(v)
		}
		out[i] = z
	}
	return out
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

// Sigmoid is the logistic function.
func Sigmoid(z float64) float64 { return sigmoid(z) }
