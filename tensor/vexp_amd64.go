//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

// AVX2/FMA versions of the exp-heavy loops (vexp_amd64.s), eight lanes at a
// time, with the same algorithm and constants as Exp32. Each processes the
// largest multiple of 8 elements; the Go wrappers finish the tail. The build
// tag purego, or a CPU without AVX2 and FMA, selects the pure-Go loops.

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
