package tensor

// This file fixes the kernel API that the rest of troupe codes against. The
// bodies here are straightforward reference loops; the fast versions replace
// them without changing a signature.

import (
	"fmt"
	"math"
)

// Gemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices, where
// op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb, ldc are
// the row strides (leading dimensions) of the stored matrices.
func Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += av * bv
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}

// GemmBatched runs batch independent Gemm calls; matrix i of A starts at
// a[i*strideA], and likewise for B and C.
func GemmBatched(transA, transB bool, batch, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int) {
	if batch < 0 || strideA < 0 || strideB < 0 || strideC < 0 {
		panic(fmt.Sprintf("tensor: GemmBatched: negative batch %d or stride (%d, %d, %d)", batch, strideA, strideB, strideC))
	}
	for i := 0; i < batch; i++ {
		Gemm(transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
	}
}

func checkGemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("tensor: Gemm: negative size m=%d n=%d k=%d", m, n, k))
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	need := func(name string, rows, cols, ld, have int) {
		if ld < max(cols, 1) {
			panic(fmt.Sprintf("tensor: Gemm: %s is %d×%d but leading dimension is %d", name, rows, cols, ld))
		}
		if rows > 0 && cols > 0 && have < (rows-1)*ld+cols {
			panic(fmt.Sprintf("tensor: Gemm: %s is %d×%d with ld %d, needs %d elements, has %d", name, rows, cols, ld, (rows-1)*ld+cols, have))
		}
	}
	need("A", ar, ac, lda, len(a))
	need("B", br, bc, ldb, len(b))
	need("C", m, n, ldc, len(c))
}

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
