package tensor

import "fmt"

// PackedB is the B operand of Gemm packed once into the panels its
// micro-kernels read, for a B that many products share while each has few
// rows of A: a LoRA adapter's matrices in decoding, where packing B anew
// at every call costs as much as the product. GemmPacked with it gives
// Gemm's bits. A PackedB is read-only and safe for concurrent use.
type PackedB struct {
	kern *gemmKernel
	k, n int
	nR   int       // n rounded up to whole panels
	data []float32 // for each block of kc rows of op(B), its panels: [panel][row][nr]
}

// PackB packs op(B) (k×n: B itself, row stride ldb, or with transB B
// n×k transposed) for GemmPacked. Bad arguments panic as Gemm's do.
func PackB(transB bool, k, n int, b []float32, ldb int) *PackedB {
	if k < 0 || n < 0 {
		panic(fmt.Sprintf("tensor: PackB: negative size k=%d n=%d", k, n))
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	// As the B of a one-row product, so that an empty B needs no data.
	checkOperand("PackB", "B", br, bc, ldb, b, 1, n, k)
	kern := gemmDefault
	if kern.bPairs {
		panic("tensor: PackB: the float32 kernel packs pairs") // no float32 kernel does
	}
	nr := kern.nr
	p := &PackedB{kern: kern, k: k, n: n, nR: (n + nr - 1) / nr * nr}
	p.data = aligned(k * p.nR)
	for pc := 0; pc < k; pc += kern.kc {
		kb := min(kern.kc, k-pc)
		packB(p.data[pc*p.nR:(pc+kb)*p.nR], transB, b, ldb, pc, 0, kb, n, nr)
	}
	return p
}

// K is the number of rows of op(B), N of its columns.
func (p *PackedB) K() int { return p.k }

// N is the number of columns of op(B).
func (p *PackedB) N() int { return p.n }

// GemmPacked computes C = alpha·op(A)·op(B) + beta·C as Gemm does, with
// op(B) (K×N) packed by PackB: op(A) is m×K, C is m×N. The result is
// Gemm's, bit for bit. Bad arguments panic naming the shapes.
func GemmPacked(transA bool, m int, alpha float32, a []float32, lda int, b *PackedB, beta float32, c []float32, ldc int) {
	if b == nil {
		panic(fmt.Sprintf("tensor: GemmPacked: nil PackedB for %d rows of A", m))
	}
	if m < 0 {
		panic(fmt.Sprintf("tensor: GemmPacked: negative size m=%d", m))
	}
	ar, ac := m, b.k
	if transA {
		ar, ac = b.k, m
	}
	checkOperand("GemmPacked", "A", ar, ac, lda, a, m, b.n, b.k)
	checkOperand("GemmPacked", "C", m, b.n, ldc, c, m, b.n, b.k)
	gemmParallelFrom(b.kern, Threads(), transA, m, b.n, b.k, alpha, a, lda, bSource{packed: b}, beta, c, ldc)
}
