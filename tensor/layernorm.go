package tensor

import (
	"fmt"
	"math"
)

// Layer normalisation (Ba, Kiros & Hinton 2016) over the rows of a
// rows×cols matrix: y = (x - μ)·rstd·γ + β with rstd = 1/√(σ² + ε), σ² the
// biased variance of the row. The forward pass takes two passes over each
// row (the mean, then the centred sum of squares, which is robust where
// E[x²] - μ² cancels) plus the write; the statistics are float32 sums in
// four lanes, which over rows of a few thousand elements stay within a few
// ulp of a float64 computation.

func kLayerNormRow(d, s, gamma, beta []float32, eps float32) (mu, rs float32) {
	n := len(s)
	d, gamma, beta = d[:n], gamma[:n], beta[:n]
	if kUseAVX2 && n >= 8 {
		k := n &^ 7
		sum := sumAVX2(s)
		for _, v := range s[k:] {
			sum += v
		}
		mu = sum / float32(n)
		ssq := sumSqDevAVX2(s, mu)
		for _, v := range s[k:] {
			ssq += (v - mu) * (v - mu)
		}
		rs = float32(1 / math.Sqrt(float64(ssq/float32(n)+eps)))
		lnApplyAVX2(d, s, gamma, beta, mu, rs)
		for i := k; i < n; i++ {
			d[i] = (s[i]-mu)*rs*gamma[i] + beta[i]
		}
		return mu, rs
	}
	var a0, a1, a2, a3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		a0 += s[i]
		a1 += s[i+1]
		a2 += s[i+2]
		a3 += s[i+3]
	}
	for ; i < n; i++ {
		a0 += s[i]
	}
	mu = ((a0 + a1) + (a2 + a3)) / float32(n)
	a0, a1, a2, a3 = 0, 0, 0, 0
	i = 0
	for ; i+4 <= n; i += 4 {
		c0, c1, c2, c3 := s[i]-mu, s[i+1]-mu, s[i+2]-mu, s[i+3]-mu
		a0 += c0 * c0
		a1 += c1 * c1
		a2 += c2 * c2
		a3 += c3 * c3
	}
	for ; i < n; i++ {
		c := s[i] - mu
		a0 += c * c
	}
	va := ((a0 + a1) + (a2 + a3)) / float32(n)
	rs = float32(1 / math.Sqrt(float64(va+eps)))
	for i := range d {
		d[i] = (s[i]-mu)*rs*gamma[i] + beta[i]
	}
	return mu, rs
}

// kLayerNormBackwardRow computes dx for one row and accumulates dgamma and dbeta.
func kLayerNormBackwardRow(dx, dgamma, dbeta, dy, x, gamma []float32, mu, rs float32) {
	n := len(x)
	dx, dgamma, dbeta, dy, gamma = dx[:n], dgamma[:n], dbeta[:n], dy[:n], gamma[:n]
	var s0, s1, t0, t1 float32
	i := 0
	if kUseAVX2 && n >= 8 {
		s0, t0 = lnBwdReduceAVX2(dgamma, dbeta, dy, x, gamma, mu, rs)
		i = n &^ 7
	}
	for ; i+2 <= n; i += 2 {
		xh0 := (x[i] - mu) * rs
		xh1 := (x[i+1] - mu) * rs
		g0 := dy[i] * gamma[i]
		g1 := dy[i+1] * gamma[i+1]
		s0 += g0
		s1 += g1
		t0 += g0 * xh0
		t1 += g1 * xh1
		dgamma[i] += dy[i] * xh0
		dgamma[i+1] += dy[i+1] * xh1
		dbeta[i] += dy[i]
		dbeta[i+1] += dy[i+1]
	}
	for ; i < n; i++ {
		xh := (x[i] - mu) * rs
		g := dy[i] * gamma[i]
		s0 += g
		t0 += g * xh
		dgamma[i] += dy[i] * xh
		dbeta[i] += dy[i]
	}
	inv := 1 / float32(n)
	mdy := (s0 + s1) * inv
	mdyx := (t0 + t1) * inv
	i = 0
	if kUseAVX2 && n >= 8 {
		lnBwdDxAVX2(dx, dy, x, gamma, mu, rs, mdy, mdyx)
		i = n &^ 7
	}
	for ; i < n; i++ {
		xh := (x[i] - mu) * rs
		dx[i] = rs * (dy[i]*gamma[i] - mdy - xh*mdyx)
	}
}

func kCheckLayerNorm(op string, rows, cols int, mats []int, vecsRows []int, vecsCols []int) {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("tensor: %s: negative shape %d×%d", op, rows, cols))
	}
	for _, l := range mats {
		if l != rows*cols {
			panic(fmt.Sprintf("tensor: %s: shape %d×%d needs %d elements; matrix lengths %v", op, rows, cols, rows*cols, mats))
		}
	}
	for _, l := range vecsRows {
		if l != rows {
			panic(fmt.Sprintf("tensor: %s: shape %d×%d needs per-row statistics of length %d; lengths %v", op, rows, cols, rows, vecsRows))
		}
	}
	for _, l := range vecsCols {
		if l != cols {
			panic(fmt.Sprintf("tensor: %s: shape %d×%d needs gamma/beta of length %d; lengths %v", op, rows, cols, cols, vecsCols))
		}
	}
}
