//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

//go:generate sh -c "go run half_gemm_asm_gen.go > half_gemm_amd64.s"

// The kernels of half_gemm_amd64.s (AVX2 and F16C). Counts are in blocks:
// n16 of 16 values, v8 and k8 and r8 of 8.

//go:noescape
func widenBF16AVX2(dst *float32, src *uint16, n16 int)

//go:noescape
func widenF16AVX2(dst *float32, src *uint16, n16 int)

//go:noescape
func packRunsBF16AVX2(panel *float32, src *uint16, ld, v8, kb int)

//go:noescape
func packRunsF16AVX2(panel *float32, src *uint16, ld, v8, kb int)

//go:noescape
func packTBF16AVX2(panel *float32, src *uint16, ld, width, r8, k8 int)

//go:noescape
func packTF16AVX2(panel *float32, src *uint16, ld, width, r8, k8 int)

//go:noescape
func packPairsRunsAVX2(panel, src *uint16, ld, kb int)

//go:noescape
func packPairsTAVX2(panel, src *uint16, ld, k8 int)

//go:noescape
func pairOrderAVX2(dst, src *float32, blocks, bs int)

//go:noescape
func hgemvBF16AVX2M1(nb, k16 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvBF16AVX2M2(nb, k16 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvBF16AVX2M3(nb, k16 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvF16AVX2M1(nb, k16 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvF16AVX2M2(nb, k16 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvF16AVX2M3(nb, k16 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvBF16AVX512M1(n, k32 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvBF16AVX512M2(n, k32 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvBF16AVX512M3(n, k32 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvBF16AVX512M4(n, k32 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvF16AVX512M1(n, k32 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvF16AVX512M2(n, k32 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvF16AVX512M3(n, k32 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

//go:noescape
func hgemvF16AVX512M4(n, k32 int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

// hasHalfAVX2 reports whether the CPU has the AVX2, FMA and F16C
// instructions of half_gemm_amd64.s.
var hasHalfAVX2 = hasAVX2 && cpu.X86.HasF16C

// The AVX-512 path runs Gemm's AVX-512 micro-kernel on panels packed by the
// AVX2 packers (32-column panels are four 8-column blocks) and has its own
// matrix-vector kernel, which streams the weights one row at a time;
// widening is the AVX2 kernel's, which reaches the bandwidth that bounds it.
var (
	halfAVX512 = &halfPath{name: "avx512", kern: kernelAVX512, packB: packBHalfAVX2, gemv: gemvHalfAVX512, gemvR: 1, gemvM: 4, gemvK: 32, gemvPair: 32, pairOrder: pairOrderVec, gemvXBytes: gemvXBytes, widen: widenAVX2}
	halfAVX2   = &halfPath{name: "avx2", kern: kernelAVX2, kernBF16: kernelAVX2BF16, packBF16: packPairsAVX2, packB: packBHalfAVX2, gemv: gemvHalfAVX2, gemvR: 4, gemvM: 3, gemvK: 16, gemvPair: 16, pairOrder: pairOrderVec, widen: widenAVX2}
)

// halfPaths lists the GemmHalf implementations of this build, fastest
// first, with whether the running CPU can execute each.
func halfPaths() []halfPathAvail {
	return []halfPathAvail{
		{halfAVX512, hasAVX512 && hasHalfAVX2},
		{halfAVX2, hasHalfAVX2},
		{halfGo, true},
	}
}

// pairOrderVec is pairOrder for bs a multiple of 16 (both paths' gemvPair).
func pairOrderVec(dst, src []float32, bs int) {
	if n := len(src) / bs; n > 0 {
		_ = dst[len(src)-1]
		pairOrderAVX2(&dst[0], &src[0], n, bs)
	}
}

func widenAVX2(dst []float32, src []uint16, f Half) {
	n := len(src) &^ 15
	if n > 0 {
		_ = dst[n-1]
		if f == BF16 {
			widenBF16AVX2(&dst[0], &src[0], n/16)
		} else {
			widenF16AVX2(&dst[0], &src[0], n/16)
		}
	}
	widenGo(dst[n:len(src)], src[n:], f)
}

// packBHalfAVX2 is packBHalfGo with the full panels (nr columns, nr a
// multiple of 8) packed by the assembly kernels; partial panels and the
// steps past a multiple of 8 of a transposed panel take the Go code.
func packBHalfAVX2(dst []float32, transB bool, b []uint16, ldb, p0, j0, kb, nb, nr int, f Half) {
	for jr := 0; jr < nb; jr += nr {
		nrr := min(nr, nb-jr)
		panel := dst[jr*kb : jr*kb+nr*kb]
		if !transB {
			off := p0*ldb + j0 + jr
			src := b[off : off+(kb-1)*ldb+nrr]
			if nrr < nr {
				packRunsHalfGo(panel, src, ldb, nrr, nr, kb, f)
				continue
			}
			if f == BF16 {
				packRunsBF16AVX2(&panel[0], &src[0], ldb, nr/8, kb)
			} else {
				packRunsF16AVX2(&panel[0], &src[0], ldb, nr/8, kb)
			}
			continue
		}
		off := (j0+jr)*ldb + p0
		src := b[off : off+(nrr-1)*ldb+kb]
		if nrr < nr {
			packTransposeHalfGo(panel, src, ldb, nrr, nr, kb, f)
			continue
		}
		k8 := kb / 8
		if k8 > 0 {
			if f == BF16 {
				packTBF16AVX2(&panel[0], &src[0], ldb, nr, nr/8, k8)
			} else {
				packTF16AVX2(&panel[0], &src[0], ldb, nr, nr/8, k8)
			}
		}
		if k8*8 < kb {
			packTransposeHalfGo(panel[k8*8*nr:], src[k8*8:], ldb, nr, nr, kb-k8*8, f)
		}
	}
}

// kernelAVX2BF16 is kernelAVX2 on panels of bfloat16 pairs (GemmHalf's
// bfloat16 products): the same tile; a panel step takes half the bytes, so
// a 384-step B micro-panel (12 KiB) stays in L1 beside the A panel, and C
// is read and written half as often as with 256 steps (the larger KC was
// the faster on 128-row products at the Qwen2.5-0.5B shapes, AMD EPYC
// Zen, AVX2).
var kernelAVX2BF16 = &gemmKernel{name: "avx2-bf16", mr: 6, nr: pairsNR, mc: 144, kc: 384, nc: 2048, bPairs: true, packAT: packA6, fn: sgemmKernelAVX2BF16,
	edges: []edgeKernel{{2, sgemmKernelAVX2BF16x2}, {4, sgemmKernelAVX2BF16x4}}}

// packPairsAVX2 is packPairsGo with full panels packed by the assembly
// kernels; partial panels, and the steps past a multiple of 8 of a
// transposed panel, take the Go code.
func packPairsAVX2(dst []uint16, transB bool, b []uint16, ldb, p0, j0, kb, nb int) {
	for jr := 0; jr < nb; jr += pairsNR {
		nrr := min(pairsNR, nb-jr)
		panel := dst[jr*kb : jr*kb+pairsNR*kb]
		if nrr < pairsNR || kb == 0 {
			packPairsPanelGo(panel, transB, b, ldb, p0, j0+jr, nrr, 0, kb)
			continue
		}
		if !transB {
			off := p0*ldb + j0 + jr
			src := b[off : off+(kb-1)*ldb+pairsNR]
			packPairsRunsAVX2(&panel[0], &src[0], ldb, kb)
			continue
		}
		off := (j0+jr)*ldb + p0
		src := b[off : off+(pairsNR-1)*ldb+kb]
		k8 := kb / 8
		if k8 > 0 {
			packPairsTAVX2(&panel[0], &src[0], ldb, k8)
		}
		if k8*8 < kb {
			packPairsPanelGo(panel, transB, b, ldb, p0, j0+jr, pairsNR, k8*8, kb)
		}
	}
}

// hgemvKernel is the signature of the matrix-vector kernels: rows blocks of
// rows of w by the rows of x the kernel is named for, over steps blocks of
// values.
type hgemvKernel func(rows, steps int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)

// gemvHalfAsm makes a halfPath's gemv from assembly kernels: bf16[M-1] and
// f16[M-1] take M rows of x, blocks of R rows of w and steps of K values.
// The checks bound what the kernels read and write.
func gemvHalfAsm(bf16, f16 []hgemvKernel, R, K int) func(mx, nb, k int, x []float32, ldx int, w []uint16, ldw int, f Half, dst []float32, ldo int) {
	return func(mx, nb, k int, x []float32, ldx int, w []uint16, ldw int, f Half, dst []float32, ldo int) {
		if nb == 0 {
			return
		}
		_ = x[(mx-1)*ldx+k-1]
		_ = w[(R*nb-1)*ldw+k-1]
		_ = dst[(mx-1)*ldo+R*nb-1]
		kern := f16
		if f == BF16 {
			kern = bf16
		}
		kern[mx-1](nb, k/K, &x[0], ldx, &w[0], ldw, &dst[0], ldo)
	}
}

// gemvHalfAVX2 is halfAVX2's: blocks of 4 rows of w by mx ≤ 3 rows of x, k
// a multiple of 16, x in pair order (blocks of 16) for bfloat16.
var gemvHalfAVX2 = gemvHalfAsm(
	[]hgemvKernel{hgemvBF16AVX2M1, hgemvBF16AVX2M2, hgemvBF16AVX2M3},
	[]hgemvKernel{hgemvF16AVX2M1, hgemvF16AVX2M2, hgemvF16AVX2M3}, 4, 16)

// gemvHalfAVX512 is halfAVX512's: single rows of w by mx ≤ 4 rows of x, k
// a multiple of 32, x in pair order (blocks of 32) for bfloat16.
var gemvHalfAVX512 = gemvHalfAsm(
	[]hgemvKernel{hgemvBF16AVX512M1, hgemvBF16AVX512M2, hgemvBF16AVX512M3, hgemvBF16AVX512M4},
	[]hgemvKernel{hgemvF16AVX512M1, hgemvF16AVX512M2, hgemvF16AVX512M3, hgemvF16AVX512M4}, 1, 32)
