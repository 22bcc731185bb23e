package tensor

import (
	"fmt"
	"math"
)

// Reductions. Whole-slice sums accumulate in four float32 lanes over blocks
// of 512 elements and add the block sums in float64, so long sums keep
// float64-like accuracy at float32 speed.

const kSumBlock = 512

func kSum(x []float32) float64 {
	var total float64
	for len(x) > 0 {
		n := min(len(x), kSumBlock)
		blk := x[:n]
		x = x[n:]
		var s0, s1, s2, s3 float32
		i := 0
		if kUseAVX2 && n >= 8 {
			s0 = sumAVX2(blk) // 16 lanes
			i = n &^ 7
		}
		for ; i+4 <= len(blk); i += 4 {
			s0 += blk[i]
			s1 += blk[i+1]
			s2 += blk[i+2]
			s3 += blk[i+3]
		}
		for ; i < len(blk); i++ {
			s0 += blk[i]
		}
		total += float64((s0 + s1) + (s2 + s3))
	}
	return total
}

func kSumSq(x []float32) float64 {
	var total float64
	for len(x) > 0 {
		n := min(len(x), kSumBlock)
		blk := x[:n]
		x = x[n:]
		var s0, s1, s2, s3 float32
		i := 0
		for ; i+4 <= len(blk); i += 4 {
			s0 += blk[i] * blk[i]
			s1 += blk[i+1] * blk[i+1]
			s2 += blk[i+2] * blk[i+2]
			s3 += blk[i+3] * blk[i+3]
		}
		for ; i < len(blk); i++ {
			s0 += blk[i] * blk[i]
		}
		total += float64((s0 + s1) + (s2 + s3))
	}
	return total
}

// VecSum returns the sum of x (0 for an empty slice).
func VecSum(x []float32) float32 { return float32(kSum(x)) }

// VecMean returns the mean of x; it panics on an empty slice.
func VecMean(x []float32) float32 {
	if len(x) == 0 {
		panic("tensor: VecMean: empty slice")
	}
	return float32(kSum(x) / float64(len(x)))
}

// VecMax returns the largest element of x; it panics on an empty slice.
// NaNs are ignored unless every element is NaN.
func VecMax(x []float32) float32 {
	if len(x) == 0 {
		panic("tensor: VecMax: empty slice")
	}
	m0, m1, m2, m3 := x[0], x[0], x[0], x[0]
	i := 0
	if kUseAVX2 && len(x) >= 8 {
		i = len(x) &^ 7
		m := maxAVX2(x) // NaNs skipped; -Inf if all NaN or -Inf
		if m == float32(math.Inf(-1)) {
			i = 0 // let the Go loop decide between -Inf and NaN
		} else {
			m0, m1, m2, m3 = m, m, m, m
		}
	}
	for ; i+4 <= len(x); i += 4 {
		m0 = kMax(m0, x[i])
		m1 = kMax(m1, x[i+1])
		m2 = kMax(m2, x[i+2])
		m3 = kMax(m3, x[i+3])
	}
	for ; i < len(x); i++ {
		m0 = kMax(m0, x[i])
	}
	return kMax(kMax(m0, m1), kMax(m2, m3))
}

// kMax is max that skips NaN in b (and replaces a NaN a).
func kMax(a, b float32) float32 {
	if b > a || a != a {
		return b
	}
	return a
}

// VecArgMax returns the index of the first largest element of x (NaNs
// ignored); it panics on an empty slice.
func VecArgMax(x []float32) int {
	if len(x) == 0 {
		panic("tensor: VecArgMax: empty slice")
	}
	best, m := 0, x[0]
	for i, v := range x {
		if v > m || (m != m && v == v) {
			best, m = i, v
		}
	}
	return best
}

// ReduceOp names a reduction.
type ReduceOp int

const (
	ReduceSum ReduceOp = iota
	ReduceMean
	ReduceMax
)

func (op ReduceOp) String() string {
	switch op {
	case ReduceSum:
		return "sum"
	case ReduceMean:
		return "mean"
	case ReduceMax:
		return "max"
	}
	return fmt.Sprintf("ReduceOp(%d)", int(op))
}

// ReduceAxis reduces the middle axis of src seen as an outer×n×inner array,
// writing the outer×inner result to dst. Reducing axis k of a shape s means
// outer = s[0]·…·s[k-1], n = s[k], inner = s[k+1]·…. Mean and max need n > 0.
func ReduceAxis(op ReduceOp, dst, src []float32, outer, n, inner int) {
	if outer < 0 || n < 0 || inner < 0 || len(src) != outer*n*inner || len(dst) != outer*inner {
		panic(fmt.Sprintf("tensor: ReduceAxis: src (len %d) is not %d×%d×%d or dst (len %d) is not %d×%d", len(src), outer, n, inner, len(dst), outer, inner))
	}
	if n == 0 && op != ReduceSum {
		panic(fmt.Sprintf("tensor: ReduceAxis: %v over an empty axis (%d×%d×%d)", op, outer, n, inner))
	}
	if inner == 1 {
		for o := 0; o < outer; o++ {
			row := src[o*n : (o+1)*n]
			switch op {
			case ReduceSum:
				dst[o] = float32(kSum(row))
			case ReduceMean:
				dst[o] = float32(kSum(row) / float64(n))
			case ReduceMax:
				dst[o] = VecMax(row)
			}
		}
		return
	}
	for o := 0; o < outer; o++ {
		d := dst[o*inner : (o+1)*inner]
		base := src[o*n*inner : (o+1)*n*inner]
		if n == 0 {
			clear(d)
			continue
		}
		copy(d, base[:inner])
		for k := 1; k < n; k++ {
			s := base[k*inner : (k+1)*inner]
			if op == ReduceMax {
				for j := range d {
					d[j] = kMax(d[j], s[j])
				}
			} else {
				VecAdd(d, d, s)
			}
		}
		if op == ReduceMean {
			VecMulScalar(d, d, 1/float32(n))
		}
	}
}

// ArgMaxAxis writes to dst (outer×inner) the index along the middle axis of
// the first largest element, for src seen as outer×n×inner (n > 0).
func ArgMaxAxis(dst []int, src []float32, outer, n, inner int) {
	if outer < 0 || n <= 0 || inner < 0 || len(src) != outer*n*inner || len(dst) != outer*inner {
		panic(fmt.Sprintf("tensor: ArgMaxAxis: src (len %d) is not %d×%d×%d with n > 0 or dst (len %d) is not %d×%d", len(src), outer, n, inner, len(dst), outer, inner))
	}
	for o := 0; o < outer; o++ {
		base := src[o*n*inner : (o+1)*n*inner]
		if inner == 1 {
			dst[o] = VecArgMax(base)
			continue
		}
		for j := 0; j < inner; j++ {
			best, m := 0, base[j]
			for k := 1; k < n; k++ {
				v := base[k*inner+j]
				if v > m || (m != m && v == v) {
					best, m = k, v
				}
			}
			dst[o*inner+j] = best
		}
	}
}

// SumRows writes the sum of each row of src (rows×cols) to dst (length rows).
func SumRows(dst, src []float32, rows, cols int) { ReduceAxis(ReduceSum, dst, src, rows, cols, 1) }

// MeanRows writes the mean of each row.
func MeanRows(dst, src []float32, rows, cols int) { ReduceAxis(ReduceMean, dst, src, rows, cols, 1) }

// MaxRows writes the maximum of each row.
func MaxRows(dst, src []float32, rows, cols int) { ReduceAxis(ReduceMax, dst, src, rows, cols, 1) }

// ArgMaxRows writes the index of the maximum of each row.
func ArgMaxRows(dst []int, src []float32, rows, cols int) { ArgMaxAxis(dst, src, rows, cols, 1) }

// SumSquares returns Σ x² in float64.
func SumSquares(x []float32) float64 { return kSumSq(x) }

// GlobalNorm returns the Euclidean norm of all the slices taken together,
// √(Σ_k Σ_i g_k[i]²), accumulated in float64: the quantity gradient clipping
// by global norm (Pascanu et al. 2013) compares with its threshold.
func GlobalNorm(grads ...[]float32) float64 {
	var s float64
	for _, g := range grads {
		s += kSumSq(g)
	}
	return math.Sqrt(s)
}

// ClipScale returns the factor min(1, maxNorm/norm) that scales gradients of
// global norm norm down to at most maxNorm (1 when norm is 0 or maxNorm ≤ 0).
func ClipScale(norm float64, maxNorm float64) float32 {
	if maxNorm <= 0 || norm <= maxNorm || norm == 0 {
		return 1
	}
	return float32(maxNorm / norm)
}

func sqrt64(x float64) float64 { return math.Sqrt(x) }
