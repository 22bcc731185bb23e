package tensor

import (
	"fmt"
	"math"
)

// kExpSubSum sets d[i] = exp(s[i] - m) and returns Σ d[i].
func kExpSubSum(d, s []float32, m float32) float32 {
	s = s[:len(d)]
	var z0, z1 float32
	i := 0
	if kUseAVX2 && len(d) >= 8 {
		z0 = kExpShiftSum(d, s, m)
		i = len(d) &^ 7
	}
	for ; i+2 <= len(d); i += 2 {
		p, q := Exp32(s[i]-m), Exp32(s[i+1]-m)
		d[i], d[i+1] = p, q
		z0 += p
		z1 += q
	}
	for ; i < len(d); i++ {
		p := Exp32(s[i] - m)
		d[i] = p
		z0 += p
	}
	return z0 + z1
}

// kExpSubSumNoStore returns Σ exp(s[i] - m), accumulated in float64: the
// log-softmax takes its logarithm, and near z = 1 a float32 sum would lose
// the small terms' digits.
func kExpSubSumNoStore(s []float32, m float32) float64 {
	var z0, z1 float64
	i := 0
	if kUseAVX2 && len(s) >= 8 {
		var buf [512]float32
		for ; i+8 <= len(s); i += len(buf) {
			n := min(len(buf), (len(s)-i)&^7)
			z0 += float64(kExpShiftSum(buf[:n], s[i:i+n], m))
			if n < len(buf) {
				i += n
				break
			}
		}
	}
	for ; i+2 <= len(s); i += 2 {
		z0 += float64(Exp32(s[i] - m))
		z1 += float64(Exp32(s[i+1] - m))
	}
	for ; i < len(s); i++ {
		z0 += float64(Exp32(s[i] - m))
	}
	return z0 + z1
}

func kSoftmaxRow(d, s []float32) {
	if len(s) == 0 {
		return
	}
	m := VecMax(s)
	z := kExpSubSum(d, s, m)
	VecMulScalar(d, d, 1/z)
}

func kLogSoftmaxRow(d, s []float32) {
	if len(s) == 0 {
		return
	}
	m := VecMax(s)
	lz := float32(math.Log(kExpSubSumNoStore(s, m)))
	s = s[:len(d)]
	for i := range d {
		d[i] = (s[i] - m) - lz // s-m first: exact near the maximum
	}
}

// SoftmaxAxis writes the softmax along the middle axis of src seen as
// outer×n×inner (softmax over axis k of a shape: see ReduceAxis). With
// inner = 1 it is SoftmaxRows. If log is set it writes the log-softmax.
func SoftmaxAxis(dst, src []float32, outer, n, inner int, log bool) {
	if outer < 0 || n < 0 || inner < 0 || len(src) != outer*n*inner || len(dst) != len(src) {
		panic(fmt.Sprintf("tensor: SoftmaxAxis: src (len %d) or dst (len %d) is not %d×%d×%d", len(src), len(dst), outer, n, inner))
	}
	if inner == 1 {
		kParallelRows(outer, n, kParMinTranscendental, func(_, lo, hi int) {
			for r := lo; r < hi; r++ {
				d, s := dst[r*n:(r+1)*n], src[r*n:(r+1)*n]
				if log {
					kLogSoftmaxRow(d, s)
				} else {
					kSoftmaxRow(d, s)
				}
			}
		})
		return
	}
	if n == 0 {
		return
	}
	// Strided: walk the n slices of length inner, vectorised across inner.
	m, z := make([]float32, inner), make([]float32, inner)
	var z64 []float64
	if log {
		z64 = make([]float64, inner)
	}
	for o := 0; o < outer; o++ {
		s := src[o*n*inner : (o+1)*n*inner]
		d := dst[o*n*inner : (o+1)*n*inner]
		copy(m, s[:inner])
		for k := 1; k < n; k++ {
			sk := s[k*inner : (k+1)*inner]
			for j := range m {
				m[j] = kMax(m[j], sk[j])
			}
		}
		clear(z)
		clear(z64)
		for k := 0; k < n; k++ {
			sk, dk := s[k*inner:(k+1)*inner], d[k*inner:(k+1)*inner]
			if log {
				// exp into scratch: the output is formed from src below,
				// and dst may alias src.
				VecSub(z, sk, m)
				VecExp(z, z)
				for j, v := range z {
					z64[j] += float64(v)
				}
				continue
			}
			VecSub(dk, sk, m)
			VecExp(dk, dk)
			VecAdd(z, z, dk)
		}
		if log {
			for j, v := range z64 {
				z[j] = float32(math.Log(v))
			}
			for k := 0; k < n; k++ {
				dk, sk := d[k*inner:(k+1)*inner], s[k*inner:(k+1)*inner]
				for j := range dk {
					dk[j] = (sk[j] - m[j]) - z[j]
				}
			}
		} else {
			VecScalarDiv(z, z, 1)
			for k := 0; k < n; k++ {
				dk := d[k*inner : (k+1)*inner]
				VecMul(dk, dk, z)
			}
		}
	}
}

// SoftmaxBackwardAxis computes dx from dy and the forward output y of
// SoftmaxAxis (same geometry). Softmax: dx = y·(dy - Σ dy·y); log-softmax:
// dx = dy - exp(y)·Σ dy, the sums running along the softmax axis.
func SoftmaxBackwardAxis(dx, dy, y []float32, outer, n, inner int, log bool) {
	if outer < 0 || n < 0 || inner < 0 || len(y) != outer*n*inner || len(dx) != len(y) || len(dy) != len(y) {
		panic(fmt.Sprintf("tensor: SoftmaxBackwardAxis: dx, dy, y (lens %d, %d, %d) are not %d×%d×%d", len(dx), len(dy), len(y), outer, n, inner))
	}
	if inner == 1 {
		kParallelRows(outer, n, kParMinTranscendental, func(_, lo, hi int) {
			for r := lo; r < hi; r++ {
				kSoftmaxBackwardRow(dx[r*n:(r+1)*n], dy[r*n:(r+1)*n], y[r*n:(r+1)*n], log)
			}
		})
		return
	}
	acc := make([]float32, inner)
	for o := 0; o < outer; o++ {
		base := o * n * inner
		clear(acc)
		for k := 0; k < n; k++ {
			off := base + k*inner
			dyk, yk := dy[off:off+inner], y[off:off+inner]
			for j := range acc {
				if log {
					acc[j] += dyk[j]
				} else {
					acc[j] += dyk[j] * yk[j]
				}
			}
		}
		for k := 0; k < n; k++ {
			off := base + k*inner
			dxk, dyk, yk := dx[off:off+inner], dy[off:off+inner], y[off:off+inner]
			for j := range acc {
				if log {
					dxk[j] = dyk[j] - Exp32(yk[j])*acc[j]
				} else {
					dxk[j] = yk[j] * (dyk[j] - acc[j])
				}
			}
		}
	}
}

func kSoftmaxBackwardRow(dx, dy, y []float32, log bool) {
	dy, y = dy[:len(dx)], y[:len(dx)]
	if log {
		s := float32(kSum(dy))
		for i := range dx { // element by element: dx may alias dy
			dx[i] = dy[i] - Exp32(y[i])*s
		}
		return
	}
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(dx); i += 2 {
		s0 += dy[i] * y[i]
		s1 += dy[i+1] * y[i+1]
	}
	for ; i < len(dx); i++ {
		s0 += dy[i] * y[i]
	}
	s := s0 + s1
	for i := range dx {
		dx[i] = y[i] * (dy[i] - s)
	}
}

// SoftmaxBackwardRows computes dx = y·(dy - Σ_row dy·y) for y = SoftmaxRows(x).
func SoftmaxBackwardRows(dx, dy, y []float32, rows, cols int) {
	kCheckRows("SoftmaxBackwardRows", rows, cols, len(dx), len(dy), len(y))
	SoftmaxBackwardAxis(dx, dy, y, rows, cols, 1, false)
}

// LogSoftmaxBackwardRows computes dx = dy - exp(y)·Σ_row dy for
// y = LogSoftmaxRows(x).
func LogSoftmaxBackwardRows(dx, dy, y []float32, rows, cols int) {
	kCheckRows("LogSoftmaxBackwardRows", rows, cols, len(dx), len(dy), len(y))
	SoftmaxBackwardAxis(dx, dy, y, rows, cols, 1, true)
}
