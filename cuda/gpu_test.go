//go:build troupecuda

package cuda

// Device tests: every kernel against package tensor's CPU kernel or a float64
// reference, within float32 tolerance. They need a GPU. NOTE: importing
// gorgonia.org/cu runs cuInit in its package init, which exits the whole test
// binary (status 1, "Error in initialization") on a machine without a
// working NVIDIA driver and GPU, before any test can skip. So this binary is
// only run on GPU machines (scripts/device-check.sh); CI only vets and builds
// the cuda tag. With a driver but no visible device, the tests skip.

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	gtensor "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/tensor"
)

func newTestEngine(t testing.TB, tf32 bool) *Engine {
	t.Helper()
	if !GPUPresent() {
		t.Skip("skipped: no NVIDIA GPU (/dev/nvidia[0-9]* absent)")
	}
	e, err := NewEngine(Options{TF32: tf32})
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func randF32(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func up(t testing.TB, e *Engine, x []float32) Buffer {
	t.Helper()
	b, err := e.ToDevice(x)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func upIDs(t testing.TB, e *Engine, ids []int) Buffer {
	t.Helper()
	b, err := e.IDsToDevice(ids)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func down(t testing.TB, e *Engine, b Buffer, n int) []float32 {
	t.Helper()
	h := make([]float32, n)
	if err := e.ToHost(h, b); err != nil {
		t.Fatal(err)
	}
	return h
}

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// approx compares got with want within rel/abs tolerance and reports the
// first mismatches.
func approx(t testing.TB, name string, got, want []float32, rel, abs float64) {
	t.Helper()
	if d := cmp.Diff(f64(want), f64(got), cmpopts.EquateApprox(rel, abs)); d != "" {
		t.Errorf("%s: device differs from CPU (-want +got):\n%.2000s", name, d)
	}
}

func approx64(t testing.TB, name string, got []float32, want []float64, rel, abs float64) {
	t.Helper()
	if d := cmp.Diff(want, f64(got), cmpopts.EquateApprox(rel, abs)); d != "" {
		t.Errorf("%s: device differs from float64 reference (-want +got):\n%.2000s", name, d)
	}
}

func TestDeviceGemm(t *testing.T) {
	for _, tf32 := range []bool{false, true} {
		e := newTestEngine(t, tf32)
		if tf32 && !e.TF32() {
			t.Logf("TF32 unavailable on %s (sm_%d)", e.Name(), e.ComputeCapability())
			continue
		}
		r := rand.New(rand.NewPCG(1, 1))
		rel, abs := 1e-4, 1e-4
		if tf32 {
			rel, abs = 5e-3, 5e-2 // TF32 rounds inputs to 10 mantissa bits
		}
		for _, sz := range [][3]int{{1, 1, 1}, {17, 33, 9}, {128, 128, 128}, {130, 257, 70}, {64, 300, 513}} {
			m, n, k := sz[0], sz[1], sz[2]
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					lda, ldb := k, n
					if ta {
						lda = m
					}
					if tb {
						ldb = k
					}
					a, b, c := randF32(r, m*k), randF32(r, k*n), randF32(r, m*n)
					want := append([]float32(nil), c...)
					tensor.Gemm(ta, tb, m, n, k, 0.5, a, lda, b, ldb, 0.25, want, n)
					da, db, dc := up(t, e, a), up(t, e, b), up(t, e, c)
					ok(t, e.Gemm(ta, tb, m, n, k, 0.5, da, lda, db, ldb, 0.25, dc, n))
					approx(t, "Gemm", down(t, e, dc, m*n), want, rel, abs)
				}
			}
		}
		// Padded leading dimensions (multiples of 4 with ragged m, n, k): the
		// TF32 kernel's 16-byte path with partial vectors at the edges.
		{
			m, n, k, lda, ldb, ldc := 70, 130, 37, 40, 132, 131
			a, b, c := randF32(r, m*lda), randF32(r, k*ldb), randF32(r, m*ldc)
			want := append([]float32(nil), c...)
			tensor.Gemm(false, false, m, n, k, 1, a, lda, b, ldb, 0.5, want, ldc)
			dc := up(t, e, c)
			ok(t, e.Gemm(false, false, m, n, k, 1, up(t, e, a), lda, up(t, e, b), ldb, 0.5, dc, ldc))
			approx(t, "Gemm padded", down(t, e, dc, m*ldc), want, rel, abs)
		}
		// Batched.
		batch, m, n, k := 3, 40, 50, 60
		a, b, c := randF32(r, batch*m*k), randF32(r, batch*k*n), make([]float32, batch*m*n)
		want := make([]float32, len(c))
		tensor.GemmBatched(false, true, batch, m, n, k, 1, a, k, m*k, b, k, k*n, 0, want, n, m*n)
		da, db, dc := up(t, e, a), up(t, e, b), up(t, e, c)
		ok(t, e.GemmBatched(false, true, batch, m, n, k, 1, da, k, m*k, db, k, k*n, 0, dc, n, m*n))
		approx(t, "GemmBatched", down(t, e, dc, len(c)), want, rel, abs)
	}
}

func TestDeviceElementwise(t *testing.T) {
	e := newTestEngine(t, false)
	r := rand.New(rand.NewPCG(2, 1))
	rows, cols := 37, 53
	a, b, bias := randF32(r, rows*cols), randF32(r, rows*cols), randF32(r, cols)
	da, db, dbias := up(t, e, a), up(t, e, b), up(t, e, bias)
	out, _ := e.NewBuffer(rows * cols)
	ops := []func(x, y float32) float32{
		func(x, y float32) float32 { return x + y }, func(x, y float32) float32 { return x - y },
		func(x, y float32) float32 { return x * y }, func(x, y float32) float32 { return x / y },
		func(x, y float32) float32 { return max(x, y) }, func(x, y float32) float32 { return min(x, y) },
	}
	for op, f := range ops {
		want := make([]float32, len(a))
		for i := range a {
			want[i] = f(a[i], b[i])
		}
		ok(t, e.Binary(op, out, da, db))
		approx(t, "Binary", down(t, e, out, len(a)), want, 1e-6, 1e-6)
		for i := range a {
			want[i] = f(a[i], bias[i%cols])
		}
		ok(t, e.BinaryBroadcast(op, out, da, dbias, []int{rows, cols}, []int{cols, 1}, []int{0, 1}))
		approx(t, "BinaryBroadcast", down(t, e, out, len(a)), want, 1e-6, 1e-6)
	}
	// Column broadcast in 3-D: out[i][j][k] = a[i][j][k] * c[i][k].
	c := randF32(r, 2*5)
	dcv := up(t, e, c)
	a3 := a[:2*3*5]
	want := make([]float32, 30)
	for i := 0; i < 2; i++ {
		for j := 0; j < 3; j++ {
			for k := 0; k < 5; k++ {
				want[i*15+j*5+k] = a3[i*15+j*5+k] * c[i*5+k]
			}
		}
	}
	ok(t, e.BinaryBroadcast(OpMul, out, da, dcv, []int{2, 3, 5}, []int{15, 5, 1}, []int{5, 0, 1}))
	approx(t, "BinaryBroadcast 3-D", down(t, e, out, 30), want, 1e-6, 1e-6)

	pos := make([]float32, len(a))
	for i := range a {
		pos[i] = float32(math.Abs(float64(a[i]))) + 0.1
	}
	dpos := up(t, e, pos)
	unary := []struct {
		op int
		x  []float32
		dx Buffer
		f  func(float64) float64
	}{
		{UnaryScale, a, da, func(x float64) float64 { return 1.5 * x }},
		{UnaryExp, a, da, math.Exp}, {UnaryLog, pos, dpos, math.Log}, {UnaryTanh, a, da, math.Tanh},
		{UnaryReLU, a, da, func(x float64) float64 { return math.Max(x, 0) }},
		{UnaryNeg, a, da, func(x float64) float64 { return -x }}, {UnarySqrt, pos, dpos, math.Sqrt},
		{UnarySquare, a, da, func(x float64) float64 { return x * x }},
		{UnaryAddC, a, da, func(x float64) float64 { return x + 1.5 }},
		{UnarySigmoid, a, da, func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }},
	}
	for _, u := range unary {
		want := make([]float64, len(u.x))
		for i, v := range u.x {
			want[i] = u.f(float64(v))
		}
		ok(t, e.Unary(u.op, out, u.dx, 1.5))
		approx64(t, "Unary", down(t, e, out, len(a)), want, 1e-5, 1e-6)
	}
	// Axpy, Fill.
	y := append([]float32(nil), b...)
	tensor.Axpy(0.7, a, y)
	ok(t, e.Axpy(0.7, da, db))
	approx(t, "Axpy", down(t, e, db, len(y)), y, 1e-6, 1e-6)
	ok(t, e.Fill(out, 3))
	for _, v := range down(t, e, out, len(a)) {
		if v != 3 {
			t.Fatalf("Fill: got %v", v)
		}
	}
	// GELU forward/backward vs tensor.
	g := make([]float32, len(a))
	tensor.GELU(g, a)
	ok(t, e.GELU(out, da))
	approx(t, "GELU", down(t, e, out, len(a)), g, 1e-5, 1e-6)
	dy := randF32(r, len(a))
	tensor.GELUBackward(g, dy, a)
	ok(t, e.GELUBackward(out, up(t, e, dy), da))
	approx(t, "GELUBackward", down(t, e, out, len(a)), g, 1e-5, 1e-6)
}

func TestDeviceReduce(t *testing.T) {
	e := newTestEngine(t, false)
	r := rand.New(rand.NewPCG(3, 1))
	for _, sz := range [][2]int{{1, 1}, {7, 300}, {300, 7}, {64, 5000}} {
		rows, cols := sz[0], sz[1]
		x := randF32(r, rows*cols)
		dx := up(t, e, x)
		sr, mr, sc := make([]float64, rows), make([]float64, rows), make([]float64, cols)
		var all float64
		for i := 0; i < rows; i++ {
			mr[i] = math.Inf(-1)
			for j := 0; j < cols; j++ {
				v := float64(x[i*cols+j])
				sr[i] += v
				mr[i] = math.Max(mr[i], v)
				sc[j] += v
				all += v
			}
		}
		out, _ := e.NewBuffer(max(rows, cols))
		ok(t, e.SumRows(out, dx, rows, cols))
		approx64(t, "SumRows", down(t, e, out, rows), sr, 1e-4, 1e-3)
		ok(t, e.MaxRows(out, dx, rows, cols))
		approx64(t, "MaxRows", down(t, e, out, rows), mr, 0, 0)
		ok(t, e.SumCols(out, dx, rows, cols, 0))
		approx64(t, "SumCols", down(t, e, out, cols), sc, 1e-4, 1e-3)
		ok(t, e.Sum(out, dx))
		approx64(t, "Sum", down(t, e, out, 1), []float64{all}, 1e-4, 1e-2)
	}
}

func TestDeviceSoftmax(t *testing.T) {
	e := newTestEngine(t, false)
	r := rand.New(rand.NewPCG(4, 1))
	for _, sz := range [][2]int{{1, 1}, {5, 31}, {33, 1000}, {4, 50257}} {
		rows, cols := sz[0], sz[1]
		x := randF32(r, rows*cols)
		for i := range x {
			x[i] *= 4
		}
		dx, out := up(t, e, x), up(t, e, make([]float32, rows*cols))
		want := make([]float32, len(x))
		tensor.SoftmaxRows(want, x, rows, cols)
		ok(t, e.SoftmaxRows(out, dx, rows, cols))
		approx(t, "SoftmaxRows", down(t, e, out, len(x)), want, 1e-4, 1e-7)
		y := append([]float32(nil), want...)
		dy := randF32(r, len(x))
		// softmax backward reference
		sb := make([]float32, len(x))
		for i := 0; i < rows; i++ {
			var s float64
			for j := 0; j < cols; j++ {
				s += float64(dy[i*cols+j]) * float64(y[i*cols+j])
			}
			for j := 0; j < cols; j++ {
				sb[i*cols+j] = float32(float64(y[i*cols+j]) * (float64(dy[i*cols+j]) - s))
			}
		}
		ddy, dgrad := up(t, e, dy), up(t, e, make([]float32, len(x)))
		ok(t, e.SoftmaxBackwardRows(dgrad, ddy, out, rows, cols))
		approx(t, "SoftmaxBackwardRows", down(t, e, dgrad, len(x)), sb, 1e-3, 1e-6)

		tensor.LogSoftmaxRows(want, x, rows, cols)
		ok(t, e.LogSoftmaxRows(out, dx, rows, cols))
		approx(t, "LogSoftmaxRows", down(t, e, out, len(x)), want, 1e-5, 1e-5)
		lb := make([]float32, len(x))
		for i := 0; i < rows; i++ {
			var s float64
			for j := 0; j < cols; j++ {
				s += float64(dy[i*cols+j])
			}
			for j := 0; j < cols; j++ {
				lb[i*cols+j] = float32(float64(dy[i*cols+j]) - math.Exp(float64(want[i*cols+j]))*s)
			}
		}
		ok(t, e.LogSoftmaxBackwardRows(dgrad, ddy, out, rows, cols))
		approx(t, "LogSoftmaxBackwardRows", down(t, e, dgrad, len(x)), lb, 1e-4, 1e-5)

		// Gather and cross-entropy, with an ignored row.
		ids := make([]int, rows)
		for i := range ids {
			ids[i] = r.IntN(cols)
		}
		if rows > 1 {
			ids[1] = -1
		}
		dids := upIDs(t, e, ids)
		g, lse, xe := make([]float64, rows), make([]float32, rows), make([]float64, rows)
		for i, id := range ids {
			if id >= 0 {
				g[i] = float64(want[i*cols+id])
				xe[i] = -g[i]
			}
		}
		dout, dlse := up(t, e, make([]float32, rows)), up(t, e, lse)
		ok(t, e.LogSoftmaxGather(dout, dlse, dx, dids, rows, cols))
		approx64(t, "LogSoftmaxGather", down(t, e, dout, rows), g, 1e-5, 1e-5)
		ok(t, e.CrossEntropy(dout, dlse, dx, dids, rows, cols))
		approx64(t, "CrossEntropy", down(t, e, dout, rows), xe, 1e-5, 1e-5)
		// Backward: dx = dl·(softmax − onehot), and the gather's is its negation.
		dl := randF32(r, rows)
		tensor.SoftmaxRows(want, x, rows, cols)
		xb := make([]float32, len(x))
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				if ids[i] < 0 {
					continue
				}
				oh := float32(0)
				if j == ids[i] {
					oh = 1
				}
				xb[i*cols+j] = dl[i] * (want[i*cols+j] - oh)
			}
		}
		ddl := up(t, e, dl)
		ok(t, e.CrossEntropyBackward(dgrad, ddl, dx, dlse, dids, rows, cols))
		approx(t, "CrossEntropyBackward", down(t, e, dgrad, len(x)), xb, 1e-4, 1e-6)
		for i := range xb {
			xb[i] = -xb[i]
		}
		ok(t, e.LogSoftmaxGatherBackward(dgrad, ddl, dx, dlse, dids, rows, cols))
		approx(t, "LogSoftmaxGatherBackward", down(t, e, dgrad, len(x)), xb, 1e-4, 1e-6)
	}
}

func TestDeviceLayerNorm(t *testing.T) {
	e := newTestEngine(t, false)
	r := rand.New(rand.NewPCG(5, 1))
	for _, sz := range [][2]int{{1, 3}, {17, 128}, {64, 768}, {3, 5000}} {
		rows, cols := sz[0], sz[1]
		x, gamma, beta, dy := randF32(r, rows*cols), randF32(r, cols), randF32(r, cols), randF32(r, rows*cols)
		y, mean, rstd := make([]float32, rows*cols), make([]float32, rows), make([]float32, rows)
		tensor.LayerNormRows(y, mean, rstd, x, gamma, beta, rows, cols, 1e-5)
		dxw, dgw, dbw := make([]float32, rows*cols), make([]float32, cols), make([]float32, cols)
		for i := range dgw {
			dgw[i], dbw[i] = 1, 2 // accumulate onto nonzero
		}
		dgd, dbd := up(t, e, dgw), up(t, e, dbw)
		tensor.LayerNormBackwardRows(dxw, dgw, dbw, dy, x, mean, rstd, gamma, rows, cols)

		dX, dG, dB := up(t, e, x), up(t, e, gamma), up(t, e, beta)
		dY, dM, dR := up(t, e, y), up(t, e, mean), up(t, e, rstd)
		ok(t, e.LayerNormRows(dY, dM, dR, dX, dG, dB, rows, cols, 1e-5))
		approx(t, "LayerNormRows", down(t, e, dY, len(y)), y, 1e-4, 1e-4)
		approx(t, "LayerNormRows mean", down(t, e, dM, rows), mean, 1e-5, 1e-5)
		approx(t, "LayerNormRows rstd", down(t, e, dR, rows), rstd, 1e-4, 1e-5)
		ddx := up(t, e, make([]float32, rows*cols))
		ok(t, e.LayerNormBackwardRows(ddx, dgd, dbd, up(t, e, dy), dX, dM, dR, dG, rows, cols))
		approx(t, "LayerNormBackwardRows dx", down(t, e, ddx, len(x)), dxw, 1e-3, 1e-4)
		approx(t, "LayerNormBackwardRows dgamma", down(t, e, dgd, cols), dgw, 1e-3, 1e-3)
		approx(t, "LayerNormBackwardRows dbeta", down(t, e, dbd, cols), dbw, 1e-4, 1e-3)
	}
}

func TestDeviceEmbedding(t *testing.T) {
	e := newTestEngine(t, false)
	r := rand.New(rand.NewPCG(6, 1))
	vocab, dim, n := 50, 33, 200
	table := randF32(r, vocab*dim)
	ids := make([]int, n)
	for i := range ids {
		ids[i] = r.IntN(vocab) // many repeats: exercises the atomics
	}
	want := make([]float32, n*dim)
	tensor.EmbeddingGather(want, table, ids, dim)
	dt, di, out := up(t, e, table), upIDs(t, e, ids), up(t, e, make([]float32, n*dim))
	ok(t, e.EmbeddingGather(out, dt, di, dim))
	approx(t, "EmbeddingGather", down(t, e, out, n*dim), want, 0, 0)
	dy := randF32(r, n*dim)
	dtab := randF32(r, vocab*dim)
	ddt := up(t, e, dtab)
	tensor.EmbeddingScatterAdd(dtab, dy, ids, dim)
	ok(t, e.EmbeddingScatterAdd(ddt, up(t, e, dy), di, dim))
	approx(t, "EmbeddingScatterAdd", down(t, e, ddt, vocab*dim), dtab, 1e-5, 1e-5)
}

func TestDeviceAdamW(t *testing.T) {
	e := newTestEngine(t, false)
	r := rand.New(rand.NewPCG(7, 1))
	n := 10007
	p, m, v := randF32(r, n), make([]float32, n), make([]float32, n)
	P, M, V := f64(p), make([]float64, n), make([]float64, n)
	dp, dm, dv := up(t, e, p), up(t, e, m), up(t, e, v)
	cfg := AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}
	for step := 1; step <= 3; step++ {
		g := randF32(r, n)
		refAdamW(P, f64(g), M, V, step, 1e-3, 0.9, 0.999, 1e-8, 0.1)
		ok(t, e.AdamW(dp, up(t, e, g), dm, dv, step, cfg))
	}
	approx64(t, "AdamW p", down(t, e, dp, n), P, 1e-5, 1e-6)
	approx64(t, "AdamW m", down(t, e, dm, n), M, 1e-5, 1e-6)
	approx64(t, "AdamW v", down(t, e, dv, n), V, 1e-4, 1e-7)
}

func TestDeviceAttention(t *testing.T) {
	e := newTestEngine(t, false)
	r := rand.New(rand.NewPCG(8, 1))
	for _, c := range []struct{ bh, T, D int }{{1, 1, 8}, {2, 33, 16}, {3, 100, 64}, {2, 70, 40}, {2, 65, 128}, {1, 129, 80}} {
		for _, causal := range []bool{false, true} {
			n := c.bh * c.T * c.D
			q, k, v, do := randF32(r, n), randF32(r, n), randF32(r, n), randF32(r, n)
			scale := float32(1 / math.Sqrt(float64(c.D)))
			wo, wl := refAttention(f64(q), f64(k), f64(v), c.bh, c.T, c.D, float64(scale), causal)
			dq, dk, dv := refAttentionBackward(f64(q), f64(k), f64(v), f64(do), c.bh, c.T, c.D, float64(scale), causal)
			Q, K, V, O, L := up(t, e, q), up(t, e, k), up(t, e, v), up(t, e, make([]float32, n)), up(t, e, make([]float32, c.bh*c.T))
			ok(t, e.Attention(O, L, Q, K, V, c.bh, c.T, c.D, scale, causal))
			approx64(t, "Attention O", down(t, e, O, n), wo, 1e-4, 1e-4)
			approx64(t, "Attention lse", down(t, e, L, c.bh*c.T), wl, 1e-5, 1e-4)
			DQ, DK, DV := up(t, e, make([]float32, n)), up(t, e, make([]float32, n)), up(t, e, make([]float32, n))
			ok(t, e.AttentionBackward(DQ, DK, DV, Q, K, V, O, up(t, e, do), L, c.bh, c.T, c.D, scale, causal))
			approx64(t, "Attention dq", down(t, e, DQ, n), dq, 1e-3, 1e-3)
			approx64(t, "Attention dk", down(t, e, DK, n), dk, 1e-3, 1e-3)
			approx64(t, "Attention dv", down(t, e, DV, n), dv, 1e-3, 1e-3)
			if t.Failed() {
				t.Fatalf("failed at bh=%d T=%d D=%d causal=%v", c.bh, c.T, c.D, causal)
			}
		}
	}
}

func TestDeviceAttentionDecode(t *testing.T) {
	e := newTestEngine(t, false)
	r := rand.New(rand.NewPCG(13, 1))
	for _, c := range []struct{ bh, L, maxT, D int }{{1, 1, 4, 8}, {3, 5, 9, 64}, {2, 130, 200, 128}, {4, 77, 77, 40}} {
		n := c.bh * c.maxT * c.D
		kc, vc := randF32(r, n), randF32(r, n)
		q := randF32(r, c.bh*c.D)
		scale := float32(1 / math.Sqrt(float64(c.D)))
		// Reference: causal attention over the first L rows, query in row L-1.
		want := make([]float64, 0, c.bh*c.D)
		for h := 0; h < c.bh; h++ {
			qq := make([]float64, c.L*c.D)
			copy(qq[(c.L-1)*c.D:], f64(q[h*c.D:(h+1)*c.D]))
			ks := f64(kc[h*c.maxT*c.D : h*c.maxT*c.D+c.L*c.D])
			vs := f64(vc[h*c.maxT*c.D : h*c.maxT*c.D+c.L*c.D])
			o, _ := refAttention(qq, ks, vs, 1, c.L, c.D, float64(scale), true)
			want = append(want, o[(c.L-1)*c.D:]...)
		}
		O := up(t, e, make([]float32, c.bh*c.D))
		ok(t, e.AttentionDecode(O, up(t, e, q), up(t, e, kc), up(t, e, vc), c.bh, c.L, c.maxT, c.D, scale))
		approx64(t, "AttentionDecode", down(t, e, O, c.bh*c.D), want, 1e-4, 1e-4)
	}
}

// TestDeviceTensorEngine uses Engine as a gorgonia.org/tensor Engine.
func TestDeviceTensorEngine(t *testing.T) {
	e := newTestEngine(t, false)
	h := gtensor.New(gtensor.WithShape(2, 3), gtensor.WithBacking([]float32{1, 2, 3, 4, 5, 6}))
	d, err := e.DenseToDevice(h)
	ok(t, err)
	if d.Engine() != gtensor.Engine(e) || d.Shape()[0] != 2 || d.Shape()[1] != 3 {
		t.Fatalf("device tensor: engine %T shape %v", d.Engine(), d.Shape())
	}
	ok(t, e.Unary(UnaryScale, DenseBuffer(d), DenseBuffer(d), 2))
	back, err := e.DenseToHost(d)
	ok(t, err)
	approx(t, "DenseToHost", back.Data().([]float32), []float32{2, 4, 6, 8, 10, 12}, 0, 0)
	// Memset / Memclr / Memcpy through the Engine interface.
	ok(t, e.Memset(DenseBuffer(d), float32(1.5)))
	approx(t, "Memset", down(t, e, DenseBuffer(d), 6), []float32{1.5, 1.5, 1.5, 1.5, 1.5, 1.5}, 0, 0)
	host := gtensor.New(gtensor.WithShape(6), gtensor.Of(gtensor.Float32))
	ok(t, e.Memcpy(host, DenseBuffer(d))) // device → host
	approx(t, "Memcpy DtoH", host.Data().([]float32), []float32{1.5, 1.5, 1.5, 1.5, 1.5, 1.5}, 0, 0)
	e.Memclr(DenseBuffer(d))
	ok(t, e.Memcpy(host, DenseBuffer(d)))
	approx(t, "Memclr", host.Data().([]float32), make([]float32, 6), 0, 0)
	if _, err := e.Accessible(DenseBuffer(d)); err == nil {
		t.Error("Accessible(device memory) returned no error")
	}
	// gorgonia.org/tensor's own MatMul and Add dispatch to the device.
	ha := gtensor.New(gtensor.WithShape(2, 3), gtensor.WithBacking([]float32{1, 2, 3, 4, 5, 6}))
	hb := gtensor.New(gtensor.WithShape(3, 2), gtensor.WithBacking([]float32{1, 0, 0, 1, 1, 1}))
	da, err := e.DenseToDevice(ha)
	ok(t, err)
	db, err := e.DenseToDevice(hb)
	ok(t, err)
	dc, err := da.MatMul(db)
	ok(t, err)
	hc, err := e.DenseToHost(dc)
	ok(t, err)
	approx(t, "Dense.MatMul", hc.Data().([]float32), []float32{4, 5, 10, 11}, 1e-6, 0)
	sum, err := gtensor.Add(dc, dc)
	ok(t, err)
	hs, err := e.DenseToHost(sum.(*gtensor.Dense))
	ok(t, err)
	approx(t, "tensor.Add", hs.Data().([]float32), []float32{8, 10, 20, 22}, 1e-6, 0)
}

func TestDeviceAllocatorAndEvents(t *testing.T) {
	e := newTestEngine(t, false)
	b1, err := e.NewBuffer(1000)
	ok(t, err)
	ok(t, e.FreeBuffer(b1))
	b2, err := e.NewBuffer(1010)
	ok(t, err)
	if b2.Uintptr() != b1.Uintptr() {
		t.Errorf("caching allocator did not reuse the freed block")
	}
	s, err := e.NewStream()
	ok(t, err)
	old := e.SetStream(s)
	start, _ := e.NewEvent()
	end, _ := e.NewEvent()
	ok(t, start.Record(nil))
	ok(t, e.Fill(b2, 7))
	ok(t, end.Record(nil))
	ok(t, end.Synchronize())
	dt, err := start.Elapsed(end)
	ok(t, err)
	if dt < 0 {
		t.Errorf("elapsed %v", dt)
	}
	// Cross-stream ordering: old waits for end.
	ok(t, old.Wait(end))
	e.SetStream(old)
	approx(t, "Fill on side stream", down(t, e, b2, 1010)[:3], []float32{7, 7, 7}, 0, 0)
	ok(t, s.Destroy())
	ok(t, start.Destroy())
	ok(t, end.Destroy())
}
