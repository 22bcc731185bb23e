//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

//go:generate sh -c "go run vexp_asm_gen.go > vexp_amd64.s"

// AVX2/FMA versions of the exp-heavy loops (vexp_amd64.s, written by
// vexp_asm_gen.go), eight lanes at a time, with the same algorithm and
// constants as Exp32. Each processes the largest multiple of 8 elements; the
// Go wrappers finish the tail. The build tag purego, or a CPU without AVX2
// and FMA, selects the pure-Go loops.

//go:noescape
func expShiftSumAVX2(dst, src []float32, shift float32) float32

//go:noescape
func geluAVX2(dst, src []float32)

//go:noescape
func geluBackwardAVX2(dx, dy, x []float32)

// kUseAVX2 selects the assembly loops; tests switch it off to check the
// pure-Go path on the same inputs.
var kUseAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func maxAVX2(x []float32) float32

//go:noescape
func scaleAVX2(dst, src []float32, s float32)

//go:noescape
func sumAVX2(x []float32) float32

//go:noescape
func sumSqDevAVX2(x []float32, mu float32) float32

//go:noescape
func lnApplyAVX2(dst, x, gamma, beta []float32, mu, rs float32)

//go:noescape
func lnBwdReduceAVX2(dgamma, dbeta, dy, x, gamma []float32, mu, rs float32) (sdy, sdyx float32)

//go:noescape
func lnBwdDxAVX2(dx, dy, x, gamma []float32, mu, rs, mdy, mdyx float32)

//go:noescape
func sigmoidAVX2(dst, src []float32)

//go:noescape
func expShiftSumAVX512(dst, src []float32, shift float32) float32

//go:noescape
func geluAVX512(dst, src []float32)

//go:noescape
func geluBackwardAVX512(dx, dy, x []float32)

//go:noescape
func sigmoidAVX512(dst, src []float32)

// kUseAVX512 selects the 16-lane loops for exp, softmax, GELU and sigmoid
// (the AVX2 flag must be set too: the AVX-512 loops leave a block of 8 to the
// AVX2 ones). The loops use VXORPS and VANDPS on zmm registers, which are
// AVX512DQ instructions.
var kUseAVX512 = kUseAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ

//go:noescape
func addAVX2(dst, a, b []float32)

//go:noescape
func subAVX2(dst, a, b []float32)

//go:noescape
func mulAVX2(dst, a, b []float32)

//go:noescape
func divAVX2(dst, a, b []float32)

//go:noescape
func axpyAVX2(alpha float32, x, y []float32)

//go:noescape
func addScalarAVX2(dst, src []float32, s float32)

//go:noescape
func adamwAVX2(param, grad, m, v []float32, b1, b2, gs, rc2, eps, decay, step float32)

//go:noescape
func tanhAVX2(dst, src []float32)
