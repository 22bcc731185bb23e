//go:build troupecuda

package benchmarks

// GPU benchmarks (build tag troupecuda): troupe's own CUDA kernels on the device.
// Run on a GPU machine with
//
//	go test -tags troupecuda ./benchmarks -run '^$' -bench CUDA
//
// or through scripts/device-check.sh, which also runs the PyTorch CUDA anchor
// (benchmarks/compare/cuda.py) and prints ratios. Sub-benchmark names are the
// keys cuda.py joins on. NOTE: the test binary built with -tags troupecuda exits at
// start-up (gorgonia.org/cu's init) on a machine without an NVIDIA driver and
// GPU; with a driver but no device the benchmarks skip.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/cuda"
	"github.com/troupe-ml/troupe/tensor"
)

var (
	cudaOnce sync.Once
	cudaEng  *cuda.Engine
	cudaErr  error
)

// cudaEngine returns one shared engine (module loading JIT-compiles the PTX,
// which takes a moment), or skips.
func cudaEngine(b *testing.B) *cuda.Engine {
	b.Helper()
	if !cuda.GPUPresent() {
		b.Skip("skipped: no NVIDIA GPU (/dev/nvidia[0-9]* absent)")
	}
	cudaOnce.Do(func() { cudaEng, cudaErr = cuda.NewEngine(cuda.Options{}) })
	if cudaErr != nil {
		b.Fatalf("NewEngine: %v", cudaErr)
	}
	return cudaEng
}

type devKey struct {
	n     int
	seed  uint64
	scale float64
}

// devBufs memoises devRand's inputs: the benchmark harness calls each
// sub-benchmark several times (growing b.N), and generating 8192² normals on
// the host takes longer than the GEMMs.
var devBufs = map[devKey]cuda.Buffer{}

// devRand returns a device buffer of n N(0, scale²) values for seed, shared
// between calls with the same arguments: callers must not free it, and
// buffers used as outputs must have a seed of their own.
func devRand(b *testing.B, e *cuda.Engine, n int, seed uint64, scale float64) cuda.Buffer {
	b.Helper()
	k := devKey{n, seed, scale}
	if d, ok := devBufs[k]; ok {
		return d
	}
	r := rand.New(rand.NewPCG(seed, 1))
	h := make([]float32, n)
	for i := range h {
		h[i] = float32(scale * r.NormFloat64())
	}
	d, err := e.ToDevice(h)
	if err != nil {
		b.Fatal(err)
	}
	devBufs[k] = d
	return d
}

func check(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCUDAGemm: square C = A·B, FP32 on the CUDA cores and TF32 on the
// tensor cores (compute capability 8.0+), reported in TFLOP/s (2n³ per product).
func BenchmarkCUDAGemm(b *testing.B) {
	for _, mode := range []string{"fp32", "tf32"} {
		for _, n := range []int{1024, 2048, 4096, 8192} {
			b.Run(fmt.Sprintf("%s/%d", mode, n), func(b *testing.B) {
				e := cudaEngine(b)
				e.SetTF32(mode == "tf32")
				defer e.SetTF32(false)
				if mode == "tf32" && !e.TF32() {
					b.Skipf("skipped: TF32 needs compute capability 8.0+, have %d", e.ComputeCapability())
				}
				A, B, C := devRand(b, e, n*n, 1, 1), devRand(b, e, n*n, 2, 1), devRand(b, e, n*n, 3, 0)
				check(b, e.Gemm(false, false, n, n, n, 1, A, n, B, n, 0, C, n)) // warm-up
				check(b, e.Synchronize())
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					check(b, e.Gemm(false, false, n, n, n, 1, A, n, B, n, 0, C, n))
				}
				check(b, e.Synchronize())
				b.ReportMetric(2*float64(n)*float64(n)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
			})
		}
	}
}

// BenchmarkCUDAAttention: fused causal attention, B=4, H=16, D=64, forward
// and forward+backward, in TFLOP/s counting the causal half of the work
// (forward 2·2·B·H·T²·D/2; backward 2.5× the forward, FlashAttention's convention).
func BenchmarkCUDAAttention(b *testing.B) {
	const B, H, D = 4, 16, 64
	for _, T := range []int{512, 1024, 2048, 4096} {
		for _, pass := range []string{"fwd", "fwdbwd"} {
			b.Run(fmt.Sprintf("%s/T%d", pass, T), func(b *testing.B) {
				e := cudaEngine(b)
				n := B * H * T * D
				q, k, v, dout := devRand(b, e, n, 1, 1), devRand(b, e, n, 2, 1), devRand(b, e, n, 3, 1), devRand(b, e, n, 4, 1)
				o, dq, dk, dv := devRand(b, e, n, 5, 0), devRand(b, e, n, 6, 0), devRand(b, e, n, 7, 0), devRand(b, e, n, 8, 0)
				lse := devRand(b, e, B*H*T, 9, 0)
				scale := float32(1 / math.Sqrt(D))
				run := func() {
					check(b, e.Attention(o, lse, q, k, v, B*H, T, D, scale, true))
					if pass == "fwdbwd" {
						check(b, e.AttentionBackward(dq, dk, dv, q, k, v, o, dout, lse, B*H, T, D, scale, true))
					}
				}
				run()
				check(b, e.Synchronize())
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					run()
				}
				check(b, e.Synchronize())
				flops := 2 * 2 * float64(B*H) * float64(T) * float64(T) * D / 2
				if pass == "fwdbwd" {
					flops *= 3.5
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
			})
		}
	}
}

// BenchmarkCUDAAttentionDecode: one KV-cache generation step of attention
// (batch 16, 12 heads, D=64) over L cached positions; reports the decode
// steps per second (tokens/s for the batch) and the cache bandwidth in GB/s.
func BenchmarkCUDAAttentionDecode(b *testing.B) {
	const B, H, D = 16, 12, 64
	for _, L := range []int{128, 1024, 4096} {
		b.Run(fmt.Sprintf("L%d", L), func(b *testing.B) {
			e := cudaEngine(b)
			kc, vc := devRand(b, e, B*H*L*D, 1, 1), devRand(b, e, B*H*L*D, 2, 1)
			q, o := devRand(b, e, B*H*D, 3, 1), devRand(b, e, B*H*D, 4, 0)
			scale := float32(1 / math.Sqrt(D))
			check(b, e.AttentionDecode(o, q, kc, vc, B*H, L, L, D, scale))
			check(b, e.Synchronize())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				check(b, e.AttentionDecode(o, q, kc, vc, B*H, L, L, D, scale))
			}
			check(b, e.Synchronize())
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(B/sec, "tokens/s")
			b.ReportMetric(2*4*float64(B*H*L*D)/sec/1e9, "GB/s")
		})
	}
}

// BenchmarkCUDABlockStep: one training step (forward, backward, AdamW) of a
// causal pre-LN transformer block entirely on the GPU, for the CPU anchor's
// shape (B=8, T=64, D=128, 4 heads) and a GPT-2-small-like one (B=16,
// T=512, D=768, 12 heads); reports ms/step and tokens/s.
func BenchmarkCUDABlockStep(b *testing.B) {
	for _, c := range []cuda.BlockConfig{{B: 8, T: 64, D: 128, H: 4}, {B: 16, T: 512, D: 768, H: 12}} {
		b.Run(fmt.Sprintf("B%d_T%d_D%d_H%d", c.B, c.T, c.D, c.H), func(b *testing.B) {
			e := cudaEngine(b)
			blk, err := cuda.NewBlock(e, c, 1)
			check(b, err)
			N := c.B * c.T * c.D
			x, dy := devRand(b, e, N, 2, 1), devRand(b, e, N, 3, 1)
			opt := cuda.AdamWConfig{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
			step := func() {
				_, err := blk.Forward(x)
				check(b, err)
				_, err = blk.Backward(dy)
				check(b, err)
				check(b, blk.Step(opt))
			}
			step()
			check(b, e.Synchronize())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
			check(b, e.Synchronize())
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(sec*1e3, "ms/step")
			b.ReportMetric(float64(c.B*c.T)/sec, "tokens/s")
		})
	}
}

// BenchmarkCUDADense: package tensor's Dense-level API on device tensors
// (dispatched through cuda.DenseBackend) beside the device kernel it maps
// to, on a 4096×1024 float32 matrix, in GB/s of one read and one write. The
// "_kernel" and "_dense" pairs measure the dispatch overhead; softmax along
// axis 0 adds the two strided_copy permutes the backend uses for a non-last
// axis. Destinations are preallocated (device tensors are not freed by the
// garbage collector).
func BenchmarkCUDADense(b *testing.B) {
	const rows, cols = 4096, 1024
	rng := rand.New(rand.NewPCG(21, 1))
	hx, hbias := tensor.RandN(rng, rows, cols), tensor.RandN(rng, cols)
	var x, bias, dst *gt.Dense
	setup := func(b *testing.B) *cuda.Engine {
		e := cudaEngine(b)
		if x == nil {
			var err error
			x, err = e.DenseToDevice(hx)
			check(b, err)
			bias, err = e.DenseToDevice(hbias)
			check(b, err)
			dst, err = e.DenseToDevice(tensor.Zeros(rows, cols))
			check(b, err)
		}
		return e
	}
	cases := []struct {
		name string
		run  func(e *cuda.Engine) error
	}{
		{"softmax_kernel", func(e *cuda.Engine) error {
			return e.SoftmaxRows(cuda.DenseBuffer(dst), cuda.DenseBuffer(x), rows, cols)
		}},
		{"softmax_dense", func(*cuda.Engine) error { tensor.Softmax(dst, x, -1); return nil }},
		{"softmax_dense_axis0", func(*cuda.Engine) error { tensor.Softmax(dst, x, 0); return nil }},
		{"addbias_kernel", func(e *cuda.Engine) error {
			return e.AddRowVector(cuda.DenseBuffer(dst), cuda.DenseBuffer(x), cuda.DenseBuffer(bias), rows, cols)
		}},
		{"addbias_dense", func(*cuda.Engine) error { tensor.Add(dst, x, bias); return nil }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			e := setup(b)
			check(b, c.run(e)) // warm-up
			check(b, e.Synchronize())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				check(b, c.run(e))
			}
			check(b, e.Synchronize())
			b.ReportMetric(2*4*rows*cols*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
