package lm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/rl"
)

// TestReverseKLGradient: the on-policy loss's gradient, averaged over
// samples of a softmax policy π_θ, is the exact gradient of
// KL(π_θ‖q) with respect to the logits θ, computed in float64 and checked
// by central finite differences; the recorded KL is its Monte Carlo
// estimate.
func TestReverseKLGradient(t *testing.T) {
	theta := []float64{0.3, -1.2, 0.8, 0.0, -0.4}
	q := []float64{0.1, 0.4, 0.05, 0.25, 0.2}
	V := len(theta)
	logSoftmax := func(th []float64) []float64 {
		m := math.Inf(-1)
		for _, x := range th {
			m = math.Max(m, x)
		}
		var z float64
		for _, x := range th {
			z += math.Exp(x - m)
		}
		out := make([]float64, len(th))
		for i, x := range th {
			out[i] = x - m - math.Log(z)
		}
		return out
	}
	kl := func(th []float64) float64 {
		lp := logSoftmax(th)
		var s float64
		for i := range lp {
			s += math.Exp(lp[i]) * (lp[i] - math.Log(q[i]))
		}
		return s
	}
	exact := make([]float64, V)
	for k := range theta {
		const h = 1e-6
		p, m := append([]float64(nil), theta...), append([]float64(nil), theta...)
		p[k] += h
		m[k] -= h
		exact[k] = (kl(p) - kl(m)) / (2 * h)
	}
	lp := logSoftmax(theta)
	rng := rand.New(rand.NewPCG(1, 2))
	const N = 200000
	batch := make([]rl.Sample, N)
	teacher := make([][]float32, N)
	logp := make([][]float32, N)
	for i := range batch {
		u, y := rng.Float64(), 0
		for c := math.Exp(lp[0]); u > c && y < V-1; {
			y++
			c += math.Exp(lp[y])
		}
		batch[i] = rl.Sample{Actions: []int{y}, LogProbs: []float32{float32(lp[y])}}
		teacher[i] = []float32{float32(math.Log(q[y]))}
		logp[i] = []float32{float32(lp[y])}
	}
	var st Stats
	_, dlogp, _ := reverseKL(batch, teacher, &st)(logp, nil)
	// ∂L/∂θ_k = Σ_i dlogp_i · ∂log π(y_i)/∂θ_k = Σ_i dlogp_i (1[y_i = k] − π_k).
	est := make([]float64, V)
	for i, s := range batch {
		for k := range est {
			ind := 0.0
			if s.Actions[0] == k {
				ind = 1
			}
			est[k] += float64(dlogp[i][0]) * (ind - math.Exp(lp[k]))
		}
	}
	for k := range est {
		if math.Abs(est[k]-exact[k]) > 0.01 {
			t.Errorf("∂KL/∂θ_%d: estimate %.5f, exact %.5f", k, est[k], exact[k])
		}
	}
	if math.Abs(st.KL-kl(theta)) > 0.01 {
		t.Errorf("recorded KL %.5f, exact %.5f", st.KL, kl(theta))
	}
}
