package tensor

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkGemmHalf times y = x·Wᵀ on one goroutine for the weight shapes of
// a Qwen2.5-0.5B-sized model (in×out: attention 896×896, MLP 896×4864 and
// 4864×896, the tied LM head 896×151936) with m rows of x (1 and 8: decoding;
// 128: prefill and training), for bfloat16 and binary16 weights and, as the
// baseline, float32 weights through Gemm. GB/s counts the weight bytes read
// once per product; small weights stay in the last-level cache between
// iterations, so only the LM head measures memory bandwidth.
func BenchmarkGemmHalf(b *testing.B) {
	type shape struct{ in, out int }
	shapes := []shape{{896, 896}, {896, 4864}, {4864, 896}, {896, 151936}}
	prev := SetThreads(1)
	defer SetThreads(prev)
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range shapes {
		k, n := s.in, s.out
		w32 := randSlice(r, n*k)
		wb, wh := make([]uint16, n*k), make([]uint16, n*k)
		Float32sToBF16(wb, w32)
		Float32sToF16(wh, w32)
		for _, format := range []string{"bf16", "f16", "f32"} {
			for _, m := range []int{1, 8, 128} {
				b.Run(fmt.Sprintf("%s/m=%d/%dx%d", format, m, k, n), func(b *testing.B) {
					x, y := randSlice(r, m*k), make([]float32, m*n)
					bytes := 2
					for b.Loop() {
						switch format {
						case "bf16":
							GemmHalf(true, m, n, k, 1, x, k, wb, k, BF16, 0, y, n)
						case "f16":
							GemmHalf(true, m, n, k, 1, x, k, wh, k, F16, 0, y, n)
						default:
							bytes = 4
							Gemm(false, true, m, n, k, 1, x, k, w32, k, 0, y, n)
						}
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(2*float64(m*n*k)/sec/1e9, "GFLOP/s")
					b.ReportMetric(float64(bytes*n*k)/sec/1e9, "GB/s")
				})
			}
		}
	}
}

// BenchmarkHalfToFloat32 times widening 1 Mi values (in L2/L3).
func BenchmarkHalfToFloat32(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 1<<20)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	src, dst := make([]uint16, len(x)), make([]float32, len(x))
	for _, f := range []Half{BF16, F16} {
		b.Run(f.String(), func(b *testing.B) {
			if f == BF16 {
				Float32sToBF16(src, x)
			} else {
				Float32sToF16(src, x)
			}
			for b.Loop() {
				HalfToFloat32(dst, src, f)
			}
			b.ReportMetric(float64(len(src))*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}
