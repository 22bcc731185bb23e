package benchmarks

// Kernel throughput at transformer sizes (rows×cols = tokens×features):
// troupe's kernels beside a naive float64-math loop (the reference bodies the
// tensor package started from) and, where one exists, the Gorgonia
// equivalent (a SoftMax node on a TapeMachine; gorgonia.org/tensor's Exp).
// Each troupe sub-benchmark also measures its naive counterpart once and
// reports the ratio as x_vs_naive, so one run gives the side-by-side figure.
// Parallel kernels use GOMAXPROCS workers: run with -cpu 1,2 to see
// single-threaded and all-core figures.
//
//	go test ./benchmarks -run '^$' -bench 'Softmax|LayerNorm|GELU|Exp' -cpu 1,2

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/tensor"
)

var kernelShapes = []struct{ rows, cols int }{{512, 128}, {512, 512}}

func benchData(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64() * 2)
	}
	return s
}

// report sets throughput metrics: elements/s and GB/s of float32 traffic
// (bytesPerElem bytes read+written per element).
func report(b *testing.B, elems int, bytesPerElem int) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(elems)/sec/1e6, "Melem/s")
	b.ReportMetric(float64(elems*bytesPerElem)/sec/1e9, "GB/s")
}

var naiveNs sync.Map // key → ns/op of the naive version

// reportVsNaive measures f (the naive version) for at least 200 ms once per
// key and reports troupe's speedup over it.
func reportVsNaive(b *testing.B, key string, f func()) {
	v, ok := naiveNs.Load(key)
	if !ok {
		f()
		iters, start := 0, time.Now()
		for time.Since(start) < 200*time.Millisecond || iters < 3 {
			f()
			iters++
		}
		v = float64(time.Since(start).Nanoseconds()) / float64(iters)
		naiveNs.Store(key, v)
	}
	own := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(v.(float64)/own, "x_vs_naive")
}

// ---- naive references (float64 math per element) -------------------------

func naiveSoftmax(dst, src []float32, rows, cols int) {
	for r := 0; r < rows; r++ {
		s, d := src[r*cols:(r+1)*cols], dst[r*cols:(r+1)*cols]
		m := float32(math.Inf(-1))
		for _, v := range s {
			m = max(m, v)
		}
		var z float32
		for i, v := range s {
			d[i] = float32(math.Exp(float64(v - m)))
			z += d[i]
		}
		for i := range d {
			d[i] /= z
		}
	}
}

func naiveLayerNorm(dst, mean, rstd, src, gamma, beta []float32, rows, cols int, eps float32) {
	for r := 0; r < rows; r++ {
		s, d := src[r*cols:(r+1)*cols], dst[r*cols:(r+1)*cols]
		var mu float64
		for _, v := range s {
			mu += float64(v)
		}
		mu /= float64(cols)
		var va float64
		for _, v := range s {
			va += (float64(v) - mu) * (float64(v) - mu)
		}
		va /= float64(cols)
		rs := 1 / math.Sqrt(va+float64(eps))
		mean[r], rstd[r] = float32(mu), float32(rs)
		for i, v := range s {
			d[i] = float32((float64(v)-mu)*rs)*gamma[i] + beta[i]
		}
	}
}

func naiveLayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma []float32, rows, cols int) {
	for r := 0; r < rows; r++ {
		xs, dys, dxs := x[r*cols:(r+1)*cols], dy[r*cols:(r+1)*cols], dx[r*cols:(r+1)*cols]
		var sdy, sdyx float64
		for i := range xs {
			xh := float64(xs[i]-mean[r]) * float64(rstd[r])
			g := float64(dys[i]) * float64(gamma[i])
			sdy += g
			sdyx += g * xh
			dgamma[i] += dys[i] * float32(xh)
			dbeta[i] += dys[i]
		}
		n := float64(cols)
		for i := range xs {
			xh := float64(xs[i]-mean[r]) * float64(rstd[r])
			g := float64(dys[i]) * float64(gamma[i])
			dxs[i] = float32(float64(rstd[r]) * (g - sdy/n - xh*sdyx/n))
		}
	}
}

func naiveGELU(dst, src []float32) {
	for i, x := range src {
		x64 := float64(x)
		dst[i] = float32(0.5 * x64 * (1 + math.Tanh(0.7978845608028654*(x64+0.044715*x64*x64*x64))))
	}
}

func naiveGELUBackward(dx, dy, x []float32) {
	for i, xv := range x {
		u := float64(xv)
		t := math.Tanh(0.7978845608028654 * (u + 0.044715*u*u*u))
		d := 0.5*(1+t) + 0.5*u*(1-t*t)*0.7978845608028654*(1+3*0.044715*u*u)
		dx[i] = dy[i] * float32(d)
	}
}

func naiveExp(dst, src []float32) {
	for i, x := range src {
		dst[i] = float32(math.Exp(float64(x)))
	}
}

// ---- benchmarks ----------------------------------------------------------

func BenchmarkSoftmax(b *testing.B) {
	for _, sh := range kernelShapes {
		n := sh.rows * sh.cols
		src, dst := benchData(n, 1), make([]float32, n)
		name := fmt.Sprintf("%dx%d", sh.rows, sh.cols)
		b.Run(name+"/troupe", func(b *testing.B) {
			for b.Loop() {
				tensor.SoftmaxRows(dst, src, sh.rows, sh.cols)
			}
			report(b, n, 8)
			reportVsNaive(b, "softmax"+name, func() { naiveSoftmax(dst, src, sh.rows, sh.cols) })
		})
		b.Run(name+"/naive", func(b *testing.B) {
			for b.Loop() {
				naiveSoftmax(dst, src, sh.rows, sh.cols)
			}
			report(b, n, 8)
		})
		b.Run(name+"/gorgonia", func(b *testing.B) {
			g := G.NewGraph()
			x := G.NewMatrix(g, gt.Float32, G.WithShape(sh.rows, sh.cols), G.WithValue(tensor.FromSlice(append([]float32(nil), src...), sh.rows, sh.cols)))
			G.Must(G.SoftMax(x))
			vm := G.NewTapeMachine(g)
			defer vm.Close()
			for b.Loop() {
				if err := vm.RunAll(); err != nil {
					b.Fatal(err)
				}
				vm.Reset()
			}
			report(b, n, 8)
		})
	}
}

func BenchmarkLogSoftmax(b *testing.B) {
	for _, sh := range kernelShapes {
		n := sh.rows * sh.cols
		src, dst := benchData(n, 1), make([]float32, n)
		b.Run(fmt.Sprintf("%dx%d/troupe", sh.rows, sh.cols), func(b *testing.B) {
			for b.Loop() {
				tensor.LogSoftmaxRows(dst, src, sh.rows, sh.cols)
			}
			report(b, n, 8)
		})
	}
}

func BenchmarkLayerNorm(b *testing.B) {
	for _, sh := range kernelShapes {
		n := sh.rows * sh.cols
		src, dst := benchData(n, 2), make([]float32, n)
		gamma, beta := benchData(sh.cols, 3), benchData(sh.cols, 4)
		mean, rstd := make([]float32, sh.rows), make([]float32, sh.rows)
		name := fmt.Sprintf("%dx%d", sh.rows, sh.cols)
		b.Run(name+"/troupe", func(b *testing.B) {
			for b.Loop() {
				tensor.LayerNormRows(dst, mean, rstd, src, gamma, beta, sh.rows, sh.cols, 1e-5)
			}
			report(b, n, 8)
			reportVsNaive(b, "ln"+name, func() { naiveLayerNorm(dst, mean, rstd, src, gamma, beta, sh.rows, sh.cols, 1e-5) })
		})
		b.Run(name+"/naive", func(b *testing.B) {
			for b.Loop() {
				naiveLayerNorm(dst, mean, rstd, src, gamma, beta, sh.rows, sh.cols, 1e-5)
			}
			report(b, n, 8)
		})
	}
}

func BenchmarkLayerNormBackward(b *testing.B) {
	for _, sh := range kernelShapes {
		n := sh.rows * sh.cols
		x, dy, dx := benchData(n, 5), benchData(n, 6), make([]float32, n)
		gamma, beta := benchData(sh.cols, 3), benchData(sh.cols, 4)
		mean, rstd := make([]float32, sh.rows), make([]float32, sh.rows)
		tensor.LayerNormRows(make([]float32, n), mean, rstd, x, gamma, beta, sh.rows, sh.cols, 1e-5)
		dg, db := make([]float32, sh.cols), make([]float32, sh.cols)
		name := fmt.Sprintf("%dx%d", sh.rows, sh.cols)
		b.Run(name+"/troupe", func(b *testing.B) {
			for b.Loop() {
				tensor.LayerNormBackwardRows(dx, dg, db, dy, x, mean, rstd, gamma, sh.rows, sh.cols)
			}
			report(b, n, 12)
			reportVsNaive(b, "lnb"+name, func() { naiveLayerNormBackward(dx, dg, db, dy, x, mean, rstd, gamma, sh.rows, sh.cols) })
		})
		b.Run(name+"/naive", func(b *testing.B) {
			for b.Loop() {
				naiveLayerNormBackward(dx, dg, db, dy, x, mean, rstd, gamma, sh.rows, sh.cols)
			}
			report(b, n, 12)
		})
	}
}

func BenchmarkGELU(b *testing.B) {
	for _, sh := range kernelShapes {
		n := sh.rows * sh.cols
		src, dst := benchData(n, 7), make([]float32, n)
		name := fmt.Sprintf("%dx%d", sh.rows, sh.cols)
		b.Run(name+"/troupe", func(b *testing.B) {
			for b.Loop() {
				tensor.GELU(dst, src)
			}
			report(b, n, 8)
			reportVsNaive(b, "gelu"+name, func() { naiveGELU(dst, src) })
		})
		b.Run(name+"/naive", func(b *testing.B) {
			for b.Loop() {
				naiveGELU(dst, src)
			}
			report(b, n, 8)
		})
	}
}

func BenchmarkGELUBackward(b *testing.B) {
	for _, sh := range kernelShapes {
		n := sh.rows * sh.cols
		x, dy, dx := benchData(n, 8), benchData(n, 9), make([]float32, n)
		name := fmt.Sprintf("%dx%d", sh.rows, sh.cols)
		b.Run(name+"/troupe", func(b *testing.B) {
			for b.Loop() {
				tensor.GELUBackward(dx, dy, x)
			}
			report(b, n, 12)
			reportVsNaive(b, "geluB"+name, func() { naiveGELUBackward(dx, dy, x) })
		})
		b.Run(name+"/naive", func(b *testing.B) {
			for b.Loop() {
				naiveGELUBackward(dx, dy, x)
			}
			report(b, n, 12)
		})
	}
}

func BenchmarkExp(b *testing.B) {
	for _, sh := range kernelShapes {
		n := sh.rows * sh.cols
		src, dst := benchData(n, 10), make([]float32, n)
		name := fmt.Sprintf("%dx%d", sh.rows, sh.cols)
		b.Run(name+"/troupe", func(b *testing.B) {
			for b.Loop() {
				tensor.VecExp(dst, src)
			}
			report(b, n, 8)
			reportVsNaive(b, "exp"+name, func() { naiveExp(dst, src) })
		})
		b.Run(name+"/naive", func(b *testing.B) {
			for b.Loop() {
				naiveExp(dst, src)
			}
			report(b, n, 8)
		})
		b.Run(name+"/gorgonia-tensor", func(b *testing.B) {
			t := tensor.FromSlice(append([]float32(nil), src...), sh.rows, sh.cols)
			out := tensor.New(sh.rows, sh.cols)
			for b.Loop() {
				if _, err := gt.Exp(t, gt.WithReuse(out)); err != nil {
					b.Fatal(err)
				}
			}
			report(b, n, 8)
		})
	}
}

// BenchmarkDenseAddBias is the broadcasting bias add at a transformer shape
// through the Dense API, beside gorgonia.org/tensor's Add of a pre-tiled bias
// (gorgonia.org/tensor does not broadcast).
func BenchmarkDenseAddBias(b *testing.B) {
	rows, cols := 512, 512
	x := tensor.FromSlice(benchData(rows*cols, 11), rows, cols)
	bias := tensor.FromSlice(benchData(cols, 12), cols)
	out := tensor.New(rows, cols)
	b.Run("troupe", func(b *testing.B) {
		for b.Loop() {
			tensor.Add(out, x, bias)
		}
		report(b, rows*cols, 8)
	})
	b.Run("gorgonia-tensor-tiled", func(b *testing.B) {
		tiled := tensor.Add(nil, tensor.Zeros(rows, cols), bias)
		for b.Loop() {
			if _, err := gt.Add(x, tiled, gt.WithReuse(out)); err != nil {
				b.Fatal(err)
			}
		}
		report(b, rows*cols, 12)
	})
}

func naiveAdamW(p, g, m, v []float32, lr, b1, b2, eps, wd float64, step int) {
	c1 := 1 - math.Pow(b1, float64(step))
	c2 := 1 - math.Pow(b2, float64(step))
	for i := range p {
		gi := float64(g[i])
		mi := b1*float64(m[i]) + (1-b1)*gi
		vi := b2*float64(v[i]) + (1-b2)*gi*gi
		m[i], v[i] = float32(mi), float32(vi)
		p[i] = float32(float64(p[i])*(1-lr*wd) - lr*(mi/c1)/(math.Sqrt(vi/c2)+eps))
	}
}

// BenchmarkAdamW updates one million parameters (the size of a small
// transformer) per op; elements/s counts parameters.
func BenchmarkAdamW(b *testing.B) {
	const n = 1 << 20
	p, g := benchData(n, 13), benchData(n, 14)
	m, v := make([]float32, n), make([]float32, n)
	hp := tensor.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: 10}
	b.Run("troupe", func(b *testing.B) {
		for b.Loop() {
			tensor.AdamW(p, g, m, v, hp)
		}
		report(b, n, 28) // read p, g, m, v; write p, m, v
		reportVsNaive(b, "adamw", func() { naiveAdamW(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, 10) })
	})
	b.Run("naive", func(b *testing.B) {
		for b.Loop() {
			naiveAdamW(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, 10)
		}
		report(b, n, 28)
	})
}
