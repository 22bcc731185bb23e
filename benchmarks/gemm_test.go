package benchmarks

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
	G "gorgonia.org/gorgonia"
	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/tensor"
)

// gemmShape is one product: A is M×K, B is K×N. Its name, MxKxN, is the key
// benchmarks/compare joins on.
type gemmShape struct{ m, k, n int }

func (s gemmShape) String() string { return fmt.Sprintf("%dx%dx%d", s.m, s.k, s.n) }

// gemmShapes are the square sizes and the transformer feed-forward shapes
// (B·T)×D times D×4D with B·T = 512 and D = 128, 256.
var gemmShapes = []gemmShape{
	{64, 64, 64}, {128, 128, 128}, {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024},
	{512, 128, 512}, {512, 256, 1024},
}

// gemmThreadCounts is one thread and all cores.
func gemmThreadCounts() []int {
	if n := runtime.NumCPU(); n > 1 {
		return []int{1, n}
	}
	return []int{1}
}

// withThreads runs f with GOMAXPROCS and troupe's GEMM thread count set to
// threads, so "t1" is single-threaded for every implementation (gonum's Sgemm
// parallelises over GOMAXPROCS).
func withThreads(threads int, f func()) {
	prevProcs := runtime.GOMAXPROCS(threads)
	prevT := tensor.SetThreads(threads)
	defer func() {
		runtime.GOMAXPROCS(prevProcs)
		tensor.SetThreads(prevT)
	}()
	f()
}

func randFloat32s(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.Float64()*2 - 1)
	}
	return s
}

// cpuSeconds is the CPU time (user + system) the process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// reportGFLOPs reports GFLOP/s (wall clock) and GFLOP/cpu-s: flops per
// second of CPU time the whole process used during the loop, cpu0 being
// cpuSeconds() taken just before it. On a machine shared with other jobs
// the second is the steadier single-thread figure (time slices taken by
// other processes do not count); with several threads it counts every
// thread's time, so it is a per-core efficiency, not a speed.
func reportGFLOPs(b *testing.B, s gemmShape, cpu0 float64) {
	flops := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if cpu := cpuSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(flops/cpu/1e9, "GFLOP/cpu-s")
	}
}

// BenchmarkGemm measures C = A·B at each shape, on one thread and on all
// cores, through
//
//	troupe          tensor.Gemm
//	gonum           gonum's pure-Go blas Sgemm (the library's default)
//	gorgonia        a Gorgonia graph y = Mul(x, w) on a TapeMachine with
//	                Gorgonia's default BLAS (gonum)
//	gorgonia-troupe the same graph after tensor.Install()
//
// Names are BenchmarkGemm/<impl>/MxKxN/t<threads>; ratios come from one run:
//
//	go test ./benchmarks -run '^$' -bench 'Gemm/.*/512x512x512/t1$'
func BenchmarkGemm(b *testing.B) {
	impls := []struct {
		name string
		run  func(b *testing.B, s gemmShape)
	}{
		{"troupe", benchTroupe},
		{"gonum", benchGonum},
		{"gorgonia", func(b *testing.B, s gemmShape) { benchGorgonia(b, s, false) }},
		{"gorgonia-troupe", func(b *testing.B, s gemmShape) { benchGorgonia(b, s, true) }},
	}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			for _, s := range gemmShapes {
				b.Run(s.String(), func(b *testing.B) {
					for _, t := range gemmThreadCounts() {
						b.Run(fmt.Sprintf("t%d", t), func(b *testing.B) {
							withThreads(t, func() { impl.run(b, s) })
						})
					}
				})
			}
		})
	}
}

func benchTroupe(b *testing.B, s gemmShape) {
	r := rand.New(rand.NewPCG(1, 2))
	a, bb, c := randFloat32s(r, s.m*s.k), randFloat32s(r, s.k*s.n), make([]float32, s.m*s.n)
	cpu0 := cpuSeconds()
	for b.Loop() {
		tensor.Gemm(false, false, s.m, s.n, s.k, 1, a, s.k, bb, s.n, 0, c, s.n)
	}
	reportGFLOPs(b, s, cpu0)
}

func benchGonum(b *testing.B, s gemmShape) {
	r := rand.New(rand.NewPCG(1, 2))
	a, bb, c := randFloat32s(r, s.m*s.k), randFloat32s(r, s.k*s.n), make([]float32, s.m*s.n)
	var impl gonum.Implementation
	cpu0 := cpuSeconds()
	for b.Loop() {
		impl.Sgemm(blas.NoTrans, blas.NoTrans, s.m, s.n, s.k, 1, a, s.k, bb, s.n, 0, c, s.n)
	}
	reportGFLOPs(b, s, cpu0)
}

func benchGorgonia(b *testing.B, s gemmShape, install bool) {
	prevG, prevT := G.WhichBLAS(), gt.WhichBLAS()
	defer func() { G.Use(prevG); gt.Use(prevT) }()
	if install {
		tensor.Install()
	} else {
		G.Use(gonum.Implementation{})
	}
	r := rand.New(rand.NewPCG(1, 2))
	g := G.NewGraph()
	x := G.NewMatrix(g, G.Float32, G.WithShape(s.m, s.k), G.WithName("x"),
		G.WithValue(gt.New(gt.WithShape(s.m, s.k), gt.WithBacking(randFloat32s(r, s.m*s.k)))))
	w := G.NewMatrix(g, G.Float32, G.WithShape(s.k, s.n), G.WithName("w"),
		G.WithValue(gt.New(gt.WithShape(s.k, s.n), gt.WithBacking(randFloat32s(r, s.k*s.n)))))
	G.Must(G.Mul(x, w))
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	cpu0 := cpuSeconds()
	for b.Loop() {
		if err := vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		vm.Reset()
	}
	reportGFLOPs(b, s, cpu0)
}

// BenchmarkGemmWeightGrad measures the weight-gradient product of a linear
// layer, dW = xᵀ·dy (op(A) = Aᵀ), at the thin shapes of small models'
// backward passes (x is (B·T)×in with B·T = 2048 and in = 64 or 128, as in
// examples/translation), which run far below the square shapes' rate
// (docs/experiments/2026-12-03-gemm.md). One thread:
//
//	go test ./benchmarks -run '^$' -bench GemmWeightGrad
func BenchmarkGemmWeightGrad(b *testing.B) {
	for _, s := range []gemmShape{{64, 2048, 192}, {64, 2048, 768}, {128, 2048, 512}} {
		b.Run(s.String(), func(b *testing.B) {
			withThreads(1, func() {
				r := rand.New(rand.NewPCG(1, 3))
				x, dy, dw := randFloat32s(r, s.k*s.m), randFloat32s(r, s.k*s.n), make([]float32, s.m*s.n)
				cpu0 := cpuSeconds()
				for b.Loop() {
					tensor.Gemm(true, false, s.m, s.n, s.k, 1, x, s.m, dy, s.n, 0, dw, s.n)
				}
				reportGFLOPs(b, s, cpu0)
			})
		})
	}
}
