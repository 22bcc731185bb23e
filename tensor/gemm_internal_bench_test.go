package tensor

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkGemmKernel times each micro-kernel of this build through the
// blocked driver on one goroutine (square sizes), for tuning.
func BenchmarkGemmKernel(b *testing.B) {
	for _, ka := range gemmKernels() {
		for _, n := range []int{128, 512} {
			b.Run(fmt.Sprintf("%s/%d", ka.k.name, n), func(b *testing.B) {
				if !ka.ok {
					b.Skipf("CPU lacks %s", ka.k.name)
				}
				r := rand.New(rand.NewPCG(1, 1))
				x, y, z := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
				for b.Loop() {
					gemmSerial(ka.k, false, false, n, n, n, 1, x, n, y, n, 0, z, n)
				}
				b.ReportMetric(2*float64(n*n*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkMicroKernel times each micro-kernel alone on L1-resident panels.
func BenchmarkMicroKernel(b *testing.B) {
	for _, ka := range gemmKernels() {
		b.Run(ka.k.name, func(b *testing.B) {
			if !ka.ok {
				b.Skipf("CPU lacks %s", ka.k.name)
			}
			const kc = 128
			k := ka.k
			r := rand.New(rand.NewPCG(1, 1))
			ap, bp, c := aligned(k.mr*kc), aligned(k.nr*kc), aligned(k.mr*k.nr)
			copy(ap, randSlice(r, len(ap)))
			copy(bp, randSlice(r, len(bp)))
			for b.Loop() {
				k.fn(kc, &ap[0], &bp[0], &c[0], k.nr, 1, 1)
			}
			b.ReportMetric(2*float64(k.mr*k.nr*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkPack times packing a 168×256 block of A (both layouts) into 14-row
// panels and a 256×512 block of B into 32-column panels.
func BenchmarkPack(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	src := randSlice(r, 512*512)
	dst := aligned(512 * 512)
	for _, tr := range []bool{false, true} {
		b.Run(fmt.Sprintf("A/trans=%v", tr), func(b *testing.B) {
			for b.Loop() {
				packA(dst, tr, src, 512, 0, 0, 168, 256, 14, nil)
			}
			b.ReportMetric(float64(168*256)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
		b.Run(fmt.Sprintf("B/trans=%v", tr), func(b *testing.B) {
			for b.Loop() {
				packB(dst, tr, src, 512, 0, 0, 256, 512, 32)
			}
			b.ReportMetric(float64(256*512)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}
