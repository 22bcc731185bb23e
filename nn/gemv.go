package nn

import (
	"fmt"
	"sync/atomic"

	kern "github.com/troupe-ml/troupe/tensor"
)

// Matrix-vector products for decoding. A decoding step of one request
// multiplies a single row by each weight matrix; tensor.Gemm packs the
// whole weight matrix into panels on every call (BLIS-style, Van Zee & van
// de Geijn 2015), which is pure overhead when the packed panels are used for
// one row only. For a few rows, y = x·W with W row-major (in×out) is
// computed instead as y += x[i]·W[i,:] over the rows i of W (the Axpy form
// of GEMV, "saxpy" ordering in Golub & Van Loan, Matrix Computations, §1.1):
// W is streamed once, contiguously, and every row update is a vectorised
// tensor.Axpy.

// decodeGEMVRows is the largest row count that takes the matrix-vector path.
var decodeGEMVRows atomic.Int32

func init() { decodeGEMVRows.Store(defaultDecodeGEMVRows) }

// defaultDecodeGEMVRows: up to this many rows the streaming Axpy form beats
// packing (measured with BenchmarkNNGenerate's gemv sub-benchmarks).
const defaultDecodeGEMVRows = 4

// SetDecodeGEMVRows sets the largest number of rows (tokens in one forward
// pass of LM.Generate) for which generation multiplies by the weights with
// the matrix-vector path instead of tensor.Gemm; 0 disables the path, a
// negative n restores the default (4). It returns the previous setting. It
// changes speed only, not results beyond float32 rounding; it exists for
// benchmarks and tuning.
func SetDecodeGEMVRows(n int) int {
	if n < 0 {
		n = defaultDecodeGEMVRows
	}
	return int(decodeGEMVRows.Swap(int32(n)))
}

// gemvRows computes y = x·w (+ y when accumulate) for rows×in x and in×out
// row-major w. Each row is one matrix-vector product: with AVX2/FMA, blocks
// of 64 output columns are accumulated in registers over all of w's rows
// (gemv64AVX2: w streamed once, y loaded and stored once per block); the
// remaining columns, and CPUs without AVX2, take the Axpy form.
func gemvRows(y, x, w []float32, rows, in, out int, accumulate bool) {
	if len(x) < rows*in || len(w) < in*out || len(y) < rows*out {
		panic(fmt.Sprintf("nn: gemvRows: x %d, w %d, y %d too short for %d×%d · %d×%d", len(x), len(w), len(y), rows, in, in, out))
	}
	if !accumulate {
		clear(y[:rows*out])
	}
	if rows == 0 || in == 0 || out == 0 {
		return
	}
	j0 := 0
	if gemvUseAVX2 {
		j0 = out &^ 63
		for r := 0; r < rows; r++ {
			xr, yr := x[r*in:(r+1)*in], y[r*out:(r+1)*out]
			for j := 0; j < j0; j += 64 {
				gemv64AVX2(xr, &w[j], out, &yr[j])
			}
		}
		if j0 == out {
			return
		}
	}
	for i := 0; i < in; i++ {
		wi := w[i*out+j0 : (i+1)*out]
		for r := 0; r < rows; r++ {
			if a := x[r*in+i]; a != 0 {
				kern.Axpy(a, wi, y[r*out+j0:(r+1)*out])
			}
		}
	}
}

// matmulRows is y = x·w (overwriting y, or adding to it when accumulate) for
// rows×in x and in×out w, choosing the matrix-vector path for few rows.
func matmulRows(y, x, w []float32, rows, in, out int, accumulate bool) {
	if rows <= int(decodeGEMVRows.Load()) {
		gemvRows(y, x, w, rows, in, out, accumulate)
		return
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	kern.Gemm(false, false, rows, out, in, 1, x, in, w, out, beta, y, out)
}

// dot32 is the float32 dot product of a and b[:len(a)].
func dot32(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
