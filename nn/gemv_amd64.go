package nn

import "golang.org/x/sys/cpu"

var gemvUseAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// gemv64AVX2 adds Σ_i x[i]·w[i*ldw : i*ldw+64] to y[0:64] (gemv_amd64.s).
//
//go:noescape
func gemv64AVX2(x []float32, w *float32, ldw int, y *float32)
