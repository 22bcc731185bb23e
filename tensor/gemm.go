package tensor

import "fmt"

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
