package tensor

import (
	"testing"
)

// BenchmarkVecPaths times the exp-based kernels through each code path on
// the same 512×512 input, to show where the assembly pays:
//
//	go test ./tensor -run '^$' -bench VecPaths -cpu 1
func BenchmarkVecPaths(b *testing.B) {
	has2, has512 := kUseAVX2, kUseAVX512
	defer func() { kUseAVX2, kUseAVX512 = has2, has512 }()
	const rows, cols = 512, 512
	n := rows * cols
	x, dy, out := ktRandSlice(ktNewRNG(1), n, 2), ktRandSlice(ktNewRNG(2), n, 1), make([]float32, n)
	kernels := []struct {
		name string
		f    func()
	}{
		{"exp", func() { VecExp(out, x) }},
		{"softmax", func() { SoftmaxRows(out, x, rows, cols) }},
		{"gelu", func() { GELU(out, x) }},
		{"geluBackward", func() { GELUBackward(out, dy, x) }},
		{"sigmoid", func() { VecSigmoid(out, x) }},
		{"tanh", func() { VecTanh(out, x) }}, // AVX2 only: the avx512 row repeats it
	}
	paths := []struct {
		name         string
		avx2, avx512 bool
		ok           bool
	}{
		{"go", false, false, true},
		{"avx2", true, false, has2},
		{"avx512", true, true, has512},
	}
	for _, k := range kernels {
		for _, p := range paths {
			if !p.ok {
				continue
			}
			b.Run(k.name+"/"+p.name, func(b *testing.B) {
				kUseAVX2, kUseAVX512 = p.avx2, p.avx512
				for b.Loop() {
					k.f()
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Melem/s")
			})
		}
	}
}
