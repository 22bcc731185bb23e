package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/tensor"
)

// cpuBlock runs the same pre-LN block as Block on the CPU with package
// tensor's kernels (attention in float64 via refAttention), returning y, dx
// and the flat parameter gradient for output gradient dy.
func cpuBlock(p, x, dy []float32, c BlockConfig) (y, dx, grad []float32) {
	N, D, F, H, T, B := c.B*c.T, c.D, 4*c.D, c.H, c.T, c.B
	hd := D / H
	P, G := map[string][]float32{}, map[string][]float32{}
	grad = make([]float32, len(p))
	off := 0
	for _, s := range BlockParamShapes(D) {
		P[s.Name], G[s.Name] = p[off:off+s.Len], grad[off:off+s.Len]
		off += s.Len
	}
	addRow := func(m, v []float32, rows, cols int) {
		for r := 0; r < rows; r++ {
			for j := 0; j < cols; j++ {
				m[r*cols+j] += v[j]
			}
		}
	}
	sumCols := func(dst, m []float32, rows, cols int) {
		for r := 0; r < rows; r++ {
			for j := 0; j < cols; j++ {
				dst[j] += m[r*cols+j]
			}
		}
	}
	mk := func(n int) []float32 { return make([]float32, n) }
	h1, mean1, rstd1 := mk(N*D), mk(N), mk(N)
	tensor.LayerNormRows(h1, mean1, rstd1, x, P["ln1.g"], P["ln1.b"], N, D, 1e-5)
	qkv := mk(N * 3 * D)
	tensor.Gemm(false, false, N, 3*D, D, 1, h1, D, P["wqkv"], 3*D, 0, qkv, 3*D)
	addRow(qkv, P["bqkv"], N, 3*D)
	// split to [B][H][T][hd] in float64
	split := func(src []float32, ld, off int) []float64 {
		out := make([]float64, N*D)
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				for t := 0; t < T; t++ {
					for d := 0; d < hd; d++ {
						out[((b*H+h)*T+t)*hd+d] = float64(src[(b*T+t)*ld+off+h*hd+d])
					}
				}
			}
		}
		return out
	}
	merge := func(src []float64) []float32 {
		out := mk(N * D)
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				for t := 0; t < T; t++ {
					for d := 0; d < hd; d++ {
						out[(b*T+t)*D+h*hd+d] = float32(src[((b*H+h)*T+t)*hd+d])
					}
				}
			}
		}
		return out
	}
	q, k, v := split(qkv, 3*D, 0), split(qkv, 3*D, D), split(qkv, 3*D, 2*D)
	scale := 1 / math.Sqrt(float64(hd))
	o, _ := refAttention(q, k, v, B*H, T, hd, scale, true)
	a := merge(o)
	x2 := mk(N * D)
	tensor.Gemm(false, false, N, D, D, 1, a, D, P["wo"], D, 0, x2, D)
	addRow(x2, P["bo"], N, D)
	for i := range x2 {
		x2[i] += x[i]
	}
	h2, mean2, rstd2 := mk(N*D), mk(N), mk(N)
	tensor.LayerNormRows(h2, mean2, rstd2, x2, P["ln2.g"], P["ln2.b"], N, D, 1e-5)
	f1, g := mk(N*F), mk(N*F)
	tensor.Gemm(false, false, N, F, D, 1, h2, D, P["w1"], F, 0, f1, F)
	addRow(f1, P["b1"], N, F)
	tensor.GELU(g, f1)
	y = mk(N * D)
	tensor.Gemm(false, false, N, D, F, 1, g, F, P["w2"], D, 0, y, D)
	addRow(y, P["b2"], N, D)
	for i := range y {
		y[i] += x2[i]
	}
	// backward
	tensor.Gemm(true, false, F, D, N, 1, g, F, dy, D, 0, G["w2"], D)
	sumCols(G["b2"], dy, N, D)
	dg, df1 := mk(N*F), mk(N*F)
	tensor.Gemm(false, true, N, F, D, 1, dy, D, P["w2"], D, 0, dg, F)
	tensor.GELUBackward(df1, dg, f1)
	tensor.Gemm(true, false, D, F, N, 1, h2, D, df1, F, 0, G["w1"], F)
	sumCols(G["b1"], df1, N, F)
	dh2, dx2 := mk(N*D), mk(N*D)
	tensor.Gemm(false, true, N, D, F, 1, df1, F, P["w1"], F, 0, dh2, D)
	tensor.LayerNormBackwardRows(dx2, G["ln2.g"], G["ln2.b"], dh2, x2, mean2, rstd2, P["ln2.g"], N, D)
	tensor.Axpy(1, dy, dx2)
	tensor.Gemm(true, false, D, D, N, 1, a, D, dx2, D, 0, G["wo"], D)
	sumCols(G["bo"], dx2, N, D)
	da := mk(N * D)
	tensor.Gemm(false, true, N, D, D, 1, dx2, D, P["wo"], D, 0, da, D)
	dq, dk, dv := refAttentionBackward(q, k, v, split(da, D, 0), B*H, T, hd, scale, true)
	dh1 := mk(N * D)
	for i, dh := range [][]float64{dq, dk, dv} {
		dm := merge(dh)
		tensor.Gemm(true, false, D, D, N, 1, h1, D, dm, D, 0, G["wqkv"][i*D:], 3*D)
		sumCols(G["bqkv"][i*D:(i+1)*D], dm, N, D)
		tensor.Gemm(false, true, N, D, D, 1, dm, D, P["wqkv"][i*D:], 3*D, 1, dh1, D)
	}
	dx = mk(N * D)
	tensor.LayerNormBackwardRows(dx, G["ln1.g"], G["ln1.b"], dh1, x, mean1, rstd1, P["ln1.g"], N, D)
	tensor.Axpy(1, dx2, dx)
	return y, dx, grad
}

// TestCPUBlockGradient checks the CPU mirror that TestDeviceBlock compares
// the GPU block with: every parameter gradient and dx against central finite
// differences of Σ y⊙dy (float32 forward, so h is large and the tolerance loose).
func TestCPUBlockGradient(t *testing.T) {
	cfg := BlockConfig{B: 2, T: 3, D: 8, H: 2}
	r := rand.New(rand.NewPCG(12, 1))
	N := cfg.B * cfg.T * cfg.D
	x, dy := make([]float32, N), make([]float32, N)
	for i := range x {
		x[i], dy[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	p := BlockInit(cfg.D, 5)
	for i := range p {
		p[i] = p[i]*5 + float32(0.05*r.NormFloat64()) // signal through every path
	}
	_, dx, grad := cpuBlock(p, x, dy, cfg)
	loss := func() float64 {
		y, _, _ := cpuBlock(p, x, dy, cfg)
		var s float64
		for i := range y {
			s += float64(y[i]) * float64(dy[i])
		}
		return s
	}
	const h = 3e-3
	// Every entry normally; in -short mode (the race detector makes each
	// forward slow) every 7th, which still samples every parameter tensor.
	stride := 1
	if testing.Short() {
		stride = 7
	}
	check := func(name string, v []float32, g []float32) {
		for i := 0; i < len(v); i += stride {
			old := v[i]
			v[i] = old + h
			lp := loss()
			v[i] = old - h
			lm := loss()
			v[i] = old
			fd := (lp - lm) / (2 * h)
			if math.Abs(fd-float64(g[i])) > 2e-2*math.Abs(fd)+2e-2 {
				t.Errorf("%s[%d]: analytic %g, finite difference %g", name, i, g[i], fd)
				return
			}
		}
	}
	check("x", x, dx)
	check("params", p, grad)
}
