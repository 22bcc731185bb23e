//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

//go:generate sh -c "go run gemm_asm_gen.go > gemm_amd64.s"

// sgemmKernelAVX512 is the 14×32 AVX-512 micro-kernel (gemm_amd64.s): 28 zmm
// accumulators, two zmm B loads and one broadcast A value per FMA pair.
//
//go:noescape
func sgemmKernelAVX512(kc int, a, b, c *float32, ldc int, alpha, beta float32)

// sgemmKernelAVX512x8 computes only the first 8 rows of a 14-row packed A
// panel: the edge kernel for blocks whose last panel has at most 8 rows.
//
//go:noescape
func sgemmKernelAVX512x8(kc int, a, b, c *float32, ldc int, alpha, beta float32)

// sgemmKernelAVX512x4 computes only the first 4 rows of a 14-row packed A
// panel.
//
//go:noescape
func sgemmKernelAVX512x4(kc int, a, b, c *float32, ldc int, alpha, beta float32)

// sgemmKernelAVX2 is the 6×16 AVX2/FMA micro-kernel (gemm_amd64.s): 12 ymm
// accumulators.
//
//go:noescape
func sgemmKernelAVX2(kc int, a, b, c *float32, ldc int, alpha, beta float32)

// sgemmKernelAVX2x2 and sgemmKernelAVX2x4 compute only the first 2 or 4
// rows of a 6-row packed A panel: the edge kernels for the last rows of a
// block (128 rows, a training batch, are 21·6 + 2).
//
//go:noescape
func sgemmKernelAVX2x2(kc int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func sgemmKernelAVX2x4(kc int, a, b, c *float32, ldc int, alpha, beta float32)

var (
	kernelAVX512 = &gemmKernel{name: "avx512", mr: 14, nr: 32, mc: 168, kc: 256, nc: 512, aOuter: true, fn: sgemmKernelAVX512, edges: []edgeKernel{{4, sgemmKernelAVX512x4}, {8, sgemmKernelAVX512x8}}}
	kernelAVX2   = &gemmKernel{name: "avx2", mr: 6, nr: 16, mc: 144, kc: 256, nc: 2048, fn: sgemmKernelAVX2, edges: []edgeKernel{{2, sgemmKernelAVX2x2}, {4, sgemmKernelAVX2x4}}, packAT: packA6}
)

// hasAVX512 and hasAVX2 report whether the CPU (and OS) support the
// instructions each micro-kernel uses.
var (
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA
)

// gemmKernels lists the micro-kernels this build has, fastest first, with
// whether the running CPU can execute each.
func gemmKernels() []kernelAvail {
	return []kernelAvail{
		{kernelAVX512, hasAVX512},
		{kernelAVX2, hasAVX2},
		{kernelGo, true},
	}
}

// sgemmKernelAVX2BF16 is sgemmKernelAVX2 on a B panel of bfloat16 pairs
// (see packBF16Pairs), widened in registers; the x2 and x4 variants are its
// edge kernels.
//
//go:noescape
func sgemmKernelAVX2BF16(kc int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func sgemmKernelAVX2BF16x2(kc int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func sgemmKernelAVX2BF16x4(kc int, a, b, c *float32, ldc int, alpha, beta float32)

// packA6AVX2 packs 8·k8 steps of a 6-row A panel from a row-major A
// (gemm_amd64.s).
//
//go:noescape
func packA6AVX2(panel, src *float32, lda, k8 int)

// packA6 is packTranspose for a whole 6-row panel: the assembly kernel for
// the steps in blocks of 8, Go for the rest. The slicing checks what the
// kernel reads and writes.
func packA6(panel, src []float32, lda, kb int) {
	k8 := kb / 8
	if k8 > 0 {
		_ = panel[6*8*k8-1]
		_ = src[5*lda+8*k8-1]
		packA6AVX2(&panel[0], &src[0], lda, k8)
	}
	if rest := kb - 8*k8; rest > 0 {
		packTranspose(panel[6*8*k8:], src[8*k8:], lda, 6, 6, rest)
	}
}
