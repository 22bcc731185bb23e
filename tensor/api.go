package tensor

// This file fixes the kernel API that the rest of troupe codes against. The
// bodies here are straightforward reference loops; the fast versions replace
// them without changing a signature.

import (
	"math"
)

// Axpy computes y += alpha·x.
func Axpy(alpha float32, x, y []float32) {
	for i := range x {
		y[i] += alpha * x[i]
	}
}

// SoftmaxRows writes the softmax of each of the rows×cols rows of src to dst.
func SoftmaxRows(dst, src []float32, rows, cols int) {
	for r := 0; r < rows; r++ {
		s, d := src[r*cols:(r+1)*cols], dst[r*cols:(r+1)*cols]
		m := float32(math.Inf(-1))
		for _, v := range s {
			m = max(m, v)
		}
		var z float32
		for i, v := range s {
			d[i] = float32(math.Exp(float64(v - m)))
			z += d[i]
		}
		for i := range d {
			d[i] /= z
		}
	}
}

// LogSoftmaxRows writes the log-softmax of each row of src to dst.
func LogSoftmaxRows(dst, src []float32, rows, cols int) {
	for r := 0; r < rows; r++ {
		s, d := src[r*cols:(r+1)*cols], dst[r*cols:(r+1)*cols]
		m := float32(math.Inf(-1))
		for _, v := range s {
			m = max(m, v)
		}
		var z float64
		for _, v := range s {
			z += math.Exp(float64(v - m))
		}
		lz := m + float32(math.Log(z))
		for i, v := range s {
			d[i] = v - lz
		}
	}
}

// LayerNormRows normalises each row of src (rows×cols) to zero mean and unit
// variance, then scales by gamma and shifts by beta (both of length cols).
// mean and rstd (length rows) receive the statistics the backward pass needs.
func LayerNormRows(dst, mean, rstd, src, gamma, beta []float32, rows, cols int, eps float32) {
	for r := 0; r < rows; r++ {
		s, d := src[r*cols:(r+1)*cols], dst[r*cols:(r+1)*cols]
		var mu float64
		for _, v := range s {
			mu += float64(v)
		}
		mu /= float64(cols)
		var va float64
		for _, v := range s {
			va += (float64(v) - mu) * (float64(v) - mu)
		}
		va /= float64(cols)
		rs := 1 / math.Sqrt(va+float64(eps))
		mean[r], rstd[r] = float32(mu), float32(rs)
		for i, v := range s {
			d[i] = float32((float64(v)-mu)*rs)*gamma[i] + beta[i]
		}
	}
}

// LayerNormBackwardRows computes dx and accumulates dgamma and dbeta (+=) for
// LayerNormRows, given dy, the input x and the saved mean and rstd.
func LayerNormBackwardRows(dx, dgamma, dbeta, dy, x, mean, rstd, gamma []float32, rows, cols int) {
	for r := 0; r < rows; r++ {
		xs, dys, dxs := x[r*cols:(r+1)*cols], dy[r*cols:(r+1)*cols], dx[r*cols:(r+1)*cols]
		var sdy, sdyx float64
		for i := range xs {
			xh := float64(xs[i]-mean[r]) * float64(rstd[r])
			g := float64(dys[i]) * float64(gamma[i])
			sdy += g
			sdyx += g * xh
			dgamma[i] += dys[i] * float32(xh)
			dbeta[i] += dys[i]
		}
		n := float64(cols)
		for i := range xs {
			xh := float64(xs[i]-mean[r]) * float64(rstd[r])
			g := float64(dys[i]) * float64(gamma[i])
			dxs[i] = float32(float64(rstd[r]) * (g - sdy/n - xh*sdyx/n))
		}
	}
}

// GELU applies the tanh approximation of the Gaussian error linear unit
// (Hendrycks & Gimpel 2016) element-wise.
func GELU(dst, src []float32) {
	for i, x := range src {
		x64 := float64(x)
		dst[i] = float32(0.5 * x64 * (1 + math.Tanh(0.7978845608028654*(x64+0.044715*x64*x64*x64))))
	}
}

// GELUBackward writes dx = dy·GELU'(x).
func GELUBackward(dx, dy, x []float32) {
	for i, xv := range x {
		u := float64(xv)
		t := math.Tanh(0.7978845608028654 * (u + 0.044715*u*u*u))
		d := 0.5*(1+t) + 0.5*u*(1-t*t)*0.7978845608028654*(1+3*0.044715*u*u)
		dx[i] = dy[i] * float32(d)
	}
}

// EmbeddingGather copies row ids[i] of table (rows of width dim) to row i of dst.
func EmbeddingGather(dst, table []float32, ids []int, dim int) {
	for i, id := range ids {
		copy(dst[i*dim:(i+1)*dim], table[id*dim:(id+1)*dim])
	}
}

// EmbeddingScatterAdd adds row i of dy into row ids[i] of dtable.
func EmbeddingScatterAdd(dtable, dy []float32, ids []int, dim int) {
	for i, id := range ids {
		Axpy(1, dy[i*dim:(i+1)*dim], dtable[id*dim:(id+1)*dim])
	}
}
