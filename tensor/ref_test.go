package tensor

// float64 reference implementations the kernels are checked against.

import (
	"math"
	"math/rand/v2"
)

func ktNewRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x7e57)) }

func ktRandSlice(rng *rand.Rand, n int, scale float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64() * scale)
	}
	return s
}

func ktTo64(s []float32) []float64 {
	d := make([]float64, len(s))
	for i, v := range s {
		d[i] = float64(v)
	}
	return d
}

func ktTo32(s []float64) []float32 {
	d := make([]float32, len(s))
	for i, v := range s {
		d[i] = float32(v)
	}
	return d
}

func ktRefSoftmax(x []float64, rows, cols int, log bool) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < rows; r++ {
		s := x[r*cols : (r+1)*cols]
		m := math.Inf(-1)
		for _, v := range s {
			m = math.Max(m, v)
		}
		var z float64
		for _, v := range s {
			z += math.Exp(v - m)
		}
		for i, v := range s {
			if log {
				out[r*cols+i] = v - m - math.Log(z)
			} else {
				out[r*cols+i] = math.Exp(v-m) / z
			}
		}
	}
	return out
}

// ktRefSoftmaxAxis moves the axis to the end, applies ktRefSoftmax and moves it back.
func ktRefSoftmaxAxis(x []float64, outer, n, inner int, log bool) []float64 {
	t := make([]float64, len(x))
	for o := 0; o < outer; o++ {
		for k := 0; k < n; k++ {
			for j := 0; j < inner; j++ {
				t[(o*inner+j)*n+k] = x[(o*n+k)*inner+j]
			}
		}
	}
	s := ktRefSoftmax(t, outer*inner, n, log)
	out := make([]float64, len(x))
	for o := 0; o < outer; o++ {
		for k := 0; k < n; k++ {
			for j := 0; j < inner; j++ {
				out[(o*n+k)*inner+j] = s[(o*inner+j)*n+k]
			}
		}
	}
	return out
}

func ktRefLayerNorm(x, gamma, beta []float64, rows, cols int, eps float64) (y, mean, rstd []float64) {
	y = make([]float64, len(x))
	mean, rstd = make([]float64, rows), make([]float64, rows)
	for r := 0; r < rows; r++ {
		s := x[r*cols : (r+1)*cols]
		var mu float64
		for _, v := range s {
			mu += v
		}
		mu /= float64(cols)
		var va float64
		for _, v := range s {
			va += (v - mu) * (v - mu)
		}
		va /= float64(cols)
		rs := 1 / math.Sqrt(va+eps)
		mean[r], rstd[r] = mu, rs
		for i, v := range s {
			y[r*cols+i] = (v-mu)*rs*gamma[i] + beta[i]
		}
	}
	return y, mean, rstd
}

// ktRefGELU is ½x(1 + tanh u) written as x·σ(2u), which keeps its relative
// accuracy for very negative x, where 1 + tanh u rounds to 0.
func ktRefGELU(x float64) float64 {
	return x * ktRefSigmoid(2*0.7978845608028654*(x+0.044715*x*x*x))
}

func ktRefSigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// ktCentralDiff returns the gradient of f at x by central differences.
func ktCentralDiff(f func([]float64) float64, x []float64, h float64) []float64 {
	g := make([]float64, len(x))
	for i := range x {
		old := x[i]
		x[i] = old + h
		fp := f(x)
		x[i] = old - h
		fm := f(x)
		x[i] = old
		g[i] = (fp - fm) / (2 * h)
	}
	return g
}

func ktDot64(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
