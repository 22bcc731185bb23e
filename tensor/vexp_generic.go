//go:build !amd64 || purego

package tensor

// Pure-Go build: no assembly loops.

var kUseAVX2 = false

func expShiftSumAVX2(dst, src []float32, shift float32) float32 { panic("unreachable") }
func geluAVX2(dst, src []float32)                               { panic("unreachable") }
func geluBackwardAVX2(dx, dy, x []float32)                      { panic("unreachable") }

func maxAVX2(x []float32) float32             { panic("unreachable") }
func scaleAVX2(dst, src []float32, s float32) { panic("unreachable") }

func sumAVX2(x []float32) float32                                       { panic("unreachable") }
func sumSqDevAVX2(x []float32, mu float32) float32                      { panic("unreachable") }
func lnApplyAVX2(dst, x, gamma, beta []float32, mu, rs float32)         { panic("unreachable") }
func lnBwdDxAVX2(dx, dy, x, gamma []float32, mu, rs, mdy, mdyx float32) { panic("unreachable") }
func lnBwdReduceAVX2(dgamma, dbeta, dy, x, gamma []float32, mu, rs float32) (sdy, sdyx float32) {
	panic("unreachable")
}

func sigmoidAVX2(dst, src []float32) { panic("unreachable") }

var kUseAVX512 = false

func expShiftSumAVX512(dst, src []float32, shift float32) float32 { panic("unreachable") }
func geluAVX512(dst, src []float32)                               { panic("unreachable") }
func geluBackwardAVX512(dx, dy, x []float32)                      { panic("unreachable") }
func sigmoidAVX512(dst, src []float32)                            { panic("unreachable") }

func addAVX2(dst, a, b []float32)                 { panic("unreachable") }
func subAVX2(dst, a, b []float32)                 { panic("unreachable") }
func mulAVX2(dst, a, b []float32)                 { panic("unreachable") }
func divAVX2(dst, a, b []float32)                 { panic("unreachable") }
func axpyAVX2(alpha float32, x, y []float32)      { panic("unreachable") }
func addScalarAVX2(dst, src []float32, s float32) { panic("unreachable") }

func adamwAVX2(param, grad, m, v []float32, b1, b2, gs, rc2, eps, decay, step float32) {
	panic("unreachable")
}

func tanhAVX2(dst, src []float32) { panic("unreachable") }
