package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Float64 references for the kernels package tensor has no CPU version of
// (fused attention, AdamW). They are checked here against central finite
// differences / the textbook update, so the GPU tests (build tag cuda)
// compare against something that is itself tested.

// refAttention returns O and the row log-sum-exp for [bh][T][D] inputs.
func refAttention(q, k, v []float64, bh, T, D int, scale float64, causal bool) (o, lse []float64) {
	o = make([]float64, bh*T*D)
	lse = make([]float64, bh*T)
	for h := 0; h < bh; h++ {
		base := h * T * D
		for i := 0; i < T; i++ {
			s := make([]float64, T)
			m := math.Inf(-1)
			for j := 0; j < T; j++ {
				if causal && j > i {
					s[j] = math.Inf(-1)
					continue
				}
				var d float64
				for x := 0; x < D; x++ {
					d += q[base+i*D+x] * k[base+j*D+x]
				}
				s[j] = d * scale
				m = math.Max(m, s[j])
			}
			var z float64
			for j := range s {
				z += math.Exp(s[j] - m)
			}
			lse[h*T+i] = m + math.Log(z)
			for j := range s {
				p := math.Exp(s[j] - lse[h*T+i])
				for x := 0; x < D; x++ {
					o[base+i*D+x] += p * v[base+j*D+x]
				}
			}
		}
	}
	return o, lse
}

// refAttentionBackward returns dq, dk, dv for output gradient do.
func refAttentionBackward(q, k, v, do []float64, bh, T, D int, scale float64, causal bool) (dq, dk, dv []float64) {
	_, lse := refAttention(q, k, v, bh, T, D, scale, causal)
	dq, dk, dv = make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
	for h := 0; h < bh; h++ {
		base := h * T * D
		for i := 0; i < T; i++ {
			p := make([]float64, T)
			dp := make([]float64, T)
			var delta float64
			for j := 0; j < T; j++ {
				if causal && j > i {
					continue
				}
				var s float64
				for x := 0; x < D; x++ {
					s += q[base+i*D+x] * k[base+j*D+x]
					dp[j] += do[base+i*D+x] * v[base+j*D+x]
				}
				p[j] = math.Exp(s*scale - lse[h*T+i])
				delta += p[j] * dp[j]
			}
			for j := 0; j < T; j++ {
				ds := p[j] * (dp[j] - delta)
				for x := 0; x < D; x++ {
					dv[base+j*D+x] += p[j] * do[base+i*D+x]
					dq[base+i*D+x] += scale * ds * k[base+j*D+x]
					dk[base+j*D+x] += scale * ds * q[base+i*D+x]
				}
			}
		}
	}
	return dq, dk, dv
}

// refAdamW applies one AdamW step in float64.
func refAdamW(p, g, m, v []float64, step int, lr, b1, b2, eps, wd float64) {
	bc1, bc2 := 1-math.Pow(b1, float64(step)), 1-math.Pow(b2, float64(step))
	for i := range p {
		m[i] = b1*m[i] + (1-b1)*g[i]
		v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
		p[i] = p[i]*(1-lr*wd) - lr*(m[i]/bc1)/(math.Sqrt(v[i]/bc2)+eps)
	}
}

func randF64(r *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	return x
}

func TestRefAttentionGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, causal := range []bool{false, true} {
		bh, T, D := 2, 5, 3
		n := bh * T * D
		q, k, v, w := randF64(r, n), randF64(r, n), randF64(r, n), randF64(r, n)
		scale := 1 / math.Sqrt(float64(D))
		loss := func() float64 {
			o, _ := refAttention(q, k, v, bh, T, D, scale, causal)
			var s float64
			for i := range o {
				s += o[i] * w[i]
			}
			return s
		}
		dq, dk, dv := refAttentionBackward(q, k, v, w, bh, T, D, scale, causal)
		for _, c := range []struct {
			name string
			x, g []float64
		}{{"q", q, dq}, {"k", k, dk}, {"v", v, dv}} {
			for i := range c.x {
				const h = 1e-6
				old := c.x[i]
				c.x[i] = old + h
				lp := loss()
				c.x[i] = old - h
				lm := loss()
				c.x[i] = old
				fd := (lp - lm) / (2 * h)
				if math.Abs(fd-c.g[i]) > 1e-6*(1+math.Abs(fd)) {
					t.Fatalf("causal=%v d%s[%d]: analytic %g, finite difference %g", causal, c.name, i, c.g[i], fd)
				}
			}
		}
	}
}

func TestRefAttentionCausalRowIsPrefixSoftmax(t *testing.T) {
	// Row 0 of a causal attention attends only to key 0: O[0] = V[0].
	r := rand.New(rand.NewPCG(3, 4))
	T, D := 4, 2
	q, k, v := randF64(r, T*D), randF64(r, T*D), randF64(r, T*D)
	o, lse := refAttention(q, k, v, 1, T, D, 0.5, true)
	if math.Abs(o[0]-v[0]) > 1e-12 || math.Abs(o[1]-v[1]) > 1e-12 {
		t.Errorf("O[0] = %v, want V[0] = %v", o[:2], v[:2])
	}
	if want := 0.5 * (q[0]*k[0] + q[1]*k[1]); math.Abs(lse[0]-want) > 1e-12 {
		t.Errorf("lse[0] = %g, want %g", lse[0], want)
	}
}

func TestRefAdamW(t *testing.T) {
	// First step with zero moments moves each parameter by lr·sign(g)
	// (up to eps), after decay.
	p, g := []float64{1, -2}, []float64{0.5, -3}
	m, v := make([]float64, 2), make([]float64, 2)
	refAdamW(p, g, m, v, 1, 0.1, 0.9, 0.999, 1e-12, 0.01)
	want := []float64{1*(1-0.001) - 0.1, -2*(1-0.001) + 0.1}
	for i := range p {
		if math.Abs(p[i]-want[i]) > 1e-9 {
			t.Errorf("p[%d] = %g, want %g", i, p[i], want[i])
		}
	}
}
