package tensor

import (
	"fmt"
	"sync/atomic"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
	G "gorgonia.org/gorgonia"
	gt "gorgonia.org/tensor"
)

// BLAS is a gonum blas.Float32/Float64 (and Complex64/128) implementation
// whose Sgemm is troupe's Gemm; every other routine is gonum's pure-Go one
// (embedded). Like gonum's, it is row-major. It satisfies the BLAS interfaces
// of both gorgonia.org/gorgonia and gorgonia.org/tensor, so Install can make
// every Gorgonia Mul and BatchedMatMul on float32 run on Gemm.
type BLAS struct {
	gonum.Implementation
}

var (
	_ blas.Float32 = BLAS{}
	_ blas.Float64 = BLAS{}
	_ G.BLAS       = BLAS{}
	_ gt.BLAS      = BLAS{}
)

// sgemmCalls counts Sgemm calls through BLAS (tests use it to prove that
// Gorgonia's products reach Gemm).
var sgemmCalls atomic.Int64

// Sgemm computes C = alpha·op(A)·op(B) + beta·C with Gemm. It panics, like
// gonum's, on a bad transpose flag, and otherwise on the bad sizes Gemm
// rejects.
func (BLAS) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemmCalls.Add(1)
	Gemm(isTrans(tA, "A"), isTrans(tB, "B"), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func isTrans(t blas.Transpose, name string) bool {
	switch t {
	case blas.NoTrans:
		return false
	case blas.Trans, blas.ConjTrans:
		return true
	}
	panic(fmt.Sprintf("tensor: Sgemm: bad transpose %d for %s", t, name))
}

// Install makes BLAS the implementation that Gorgonia (gorgonia.Use) and
// gorgonia.org/tensor (tensor.Use) call, so float32 matrix products in
// Gorgonia graphs and on *tensor.Dense run on Gemm. Call it once at start,
// before building graphs; it is safe to call again.
func Install() {
	G.Use(BLAS{}) // also calls gorgonia.org/tensor's Use
	gt.Use(BLAS{})
}
