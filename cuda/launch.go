package cuda

import "fmt"

// Launch-geometry and argument-checking helpers shared by the device
// wrappers (ops.go, build tag cuda). They are pure Go so that their logic is
// tested on machines without a GPU.

// GridBlocks returns the number of blocks of size threads for a grid-stride
// loop over n elements, at most maxBlocks (and at least 1).
func GridBlocks(n, threads, maxBlocks int) int {
	b := (n + threads - 1) / threads
	if maxBlocks > 0 && b > maxBlocks {
		b = maxBlocks
	}
	return max(b, 1)
}

// RowThreads returns the block size for the one-block-per-row kernels
// (softmax, layer norm, reductions): a multiple of 32 that covers short rows
// with one element per thread, and up to 1024 threads for long rows (large
// vocabularies).
func RowThreads(cols int) int {
	switch {
	case cols >= 8192:
		return 1024
	case cols >= 2048:
		return 512
	case cols >= 256:
		return 256
	}
	return max(32, (cols+31)/32*32)
}

// GemmKernel returns the name of the GEMM kernel for the transposes.
func GemmKernel(tf32, transA, transB bool) string {
	name := "sgemm_"
	if tf32 {
		name = "tf32gemm_"
	}
	for _, t := range []bool{transA, transB} {
		if t {
			name += "t"
		} else {
			name += "n"
		}
	}
	return name
}

// GemmVec4 reports whether the TF32 GEMM may copy 16 bytes at a time: no
// transposes, and every row of A and B starts 16-byte aligned (base
// addresses, leading dimensions and, for batches, strides in whole float4s).
func GemmVec4(transA, transB bool, batch int, a uintptr, lda, strideA int, b uintptr, ldb, strideB int) bool {
	if transA || transB || a%16 != 0 || b%16 != 0 || lda%4 != 0 || ldb%4 != 0 {
		return false
	}
	return batch <= 1 || (strideA%4 == 0 && strideB%4 == 0)
}

// CheckGemm validates a (batched) row-major GEMM against the buffer lengths,
// with tensor.Gemm's conventions: op(A) is m×k, op(B) is k×n, C is m×n.
func CheckGemm(transA, transB bool, batch, m, n, k, lenA, lda, strideA, lenB, ldb, strideB, lenC, ldc, strideC int) error {
	if batch < 0 || m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("cuda: Gemm: negative size batch=%d m=%d n=%d k=%d", batch, m, n, k)
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	check := func(name string, rows, cols, ld, stride, have int) error {
		if ld < max(cols, 1) {
			return fmt.Errorf("cuda: Gemm: ld%s=%d < %d columns of the %d×%d %s", name, ld, cols, rows, cols, name)
		}
		if rows == 0 || cols == 0 || batch == 0 {
			return nil
		}
		if batch > 1 && stride < 0 {
			return fmt.Errorf("cuda: Gemm: negative stride%s %d", name, stride)
		}
		if need := (batch-1)*stride + (rows-1)*ld + cols; have < need {
			return fmt.Errorf("cuda: Gemm: %s has %d elements, need %d for batch %d of %d×%d (ld %d, stride %d)", name, have, need, batch, rows, cols, ld, stride)
		}
		return nil
	}
	if err := check("A", ar, ac, lda, strideA, lenA); err != nil {
		return err
	}
	if err := check("B", br, bc, ldb, strideB, lenB); err != nil {
		return err
	}
	return check("C", m, n, ldc, strideC, lenC)
}

// AttentionKernels returns the forward and backward kernel names for head
// size D; it panics for D outside 1..128.
func AttentionKernels(D int) (fwd, bwd string) {
	switch {
	case D >= 1 && D <= 64:
		return "attn_fwd_d64", "attn_bwd_d64"
	case D > 64 && D <= 128:
		return "attn_fwd_d128", "attn_bwd_d128"
	}
	panic(fmt.Sprintf("cuda: attention head size %d outside 1..128", D))
}

// AttentionBackwardTile returns the key tile of the backward kernel for D.
func AttentionBackwardTile(D int) int {
	if D <= 64 {
		return 32
	}
	return 16
}
