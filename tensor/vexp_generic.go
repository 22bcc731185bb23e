//go:build !amd64 || purego

package tensor

// Pure-Go build: no assembly loops.

var kUseAVX2 = false

func expShiftSumAVX2(dst, src []float32, shift float32) float32 { panic("unreachable") }
func geluAVX2(dst, src []float32)                               { panic("unreachable") }
func geluBackwardAVX2(dx, dy, x []float32)                      { panic("unreachable") }

func maxAVX2(x []float32) float32             { panic("unreachable") }
func scaleAVX2(dst, src []float32, s float32) { panic("unreachable") }
