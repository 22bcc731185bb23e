package tensor

import (
	"fmt"
	"math"
	"testing"
)

// TestAsmMatchesPureGo runs the exp-based kernels through the assembly loops
// (when this CPU and build have them) and through the pure-Go loops on the
// same inputs, including special values, and checks both against float64.
func TestAsmMatchesPureGo(t *testing.T) {
	if !kUseAVX2 {
		t.Skip("no assembly loops in this build or on this CPU (purego tag or no AVX2/FMA)")
	}
	has512 := kUseAVX512
	defer func() { kUseAVX2, kUseAVX512 = true, has512 }()
	modes := []string{"avx2"}
	if has512 {
		modes = append(modes, "avx512")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) { testAsmMatchesPureGo(t, mode == "avx512") })
	}
}

func testAsmMatchesPureGo(t *testing.T, use512 bool) {
	defer func() { kUseAVX2, kUseAVX512 = true, use512 }()
	rng := ktNewRNG(30)
	inf := float32(math.Inf(1))
	special := []float32{0, -0, 1, -1, 88, 88.5, 100, -87, -87.5, -103, -200, inf, -inf, 1e-30, -1e-30, 20, -20, 9, -9}
	for _, n := range []int{8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 257, 1000} {
		x := ktRandSlice(rng, n, 4)
		copy(x, special)
		dy := ktRandSlice(rng, n, 1)
		ths := map[bool][]float32{}
		run := func(asm bool) (e, g, gb, sm, lsm, sg []float32) {
			kUseAVX2, kUseAVX512 = asm, asm && use512
			sg = make([]float32, n)
			VecSigmoid(sg, x)
			th := make([]float32, n)
			VecTanh(th, x)
			ths[asm] = th
			e, g, gb = make([]float32, n), make([]float32, n), make([]float32, n)
			sm, lsm = make([]float32, n), make([]float32, n)
			VecExp(e, x)
			GELU(g, x)
			GELUBackward(gb, dy, x)
			xs := ktRandSlice(ktNewRNG(uint64(n)), n, 4)
			SoftmaxRows(sm, xs, 1, n)
			LogSoftmaxRows(lsm, xs, 1, n)
			return
		}
		name := fmt.Sprintf("n=%d", n)
		e0, g0, gb0, sm0, lsm0, sg0 := run(false)
		e1, g1, gb1, sm1, lsm1, sg1 := run(true)
		ktCheckClose(t, "VecSigmoid asm vs Go "+name, sg0, sg1, 1e-6, 0)
		ktCheckClose(t, "VecTanh asm vs Go "+name, ths[false], ths[true], 1e-6, 0)
		for i, v := range x {
			if want := math.Tanh(float64(v)); math.Abs(float64(ths[true][i])-want) > 1e-6*math.Abs(want) {
				t.Errorf("asm tanh(%v) = %v, want %v", v, ths[true][i], want)
			}
		}
		// exp saturates at exp(88) for x > 88 and flushes x < -87 to 0 in both paths.
		ktCheckClose(t, "VecExp asm vs Go "+name, e0, e1, 1e-6, 0)
		// GELU's far negative tail (|gelu| < 1e-9) is exp of a large argument
		// rounded to float32, so it carries a few 1e-6 of relative error.
		ktCheckClose(t, "GELU asm vs Go "+name, g0, g1, 2e-6, 1e-9)
		ktCheckClose(t, "GELUBackward asm vs Go "+name, gb0, gb1, 1e-5, 1e-9)
		ktCheckClose(t, "SoftmaxRows asm vs Go "+name, sm0, sm1, 1e-6, 1e-30)
		ktCheckClose(t, "LogSoftmaxRows asm vs Go "+name, lsm0, lsm1, 1e-6, 1e-7)
		for i, v := range x {
			if math.IsInf(float64(v), 0) || v > 88 || v < -87 {
				continue
			}
			if want := math.Exp(float64(v)); math.Abs(float64(e1[i])-want) > 1e-6*want {
				t.Errorf("asm exp(%v) = %v, want %v", v, e1[i], want)
			}
			if want := ktRefGELU(float64(v)); math.Abs(float64(g1[i])-want) > 2e-6*math.Abs(want)+1e-9 {
				t.Errorf("asm gelu(%v) = %v, want %v", v, g1[i], want)
			}
		}
	}
	// layer norm forward and backward on both paths
	for _, sh := range ktRowShapes {
		rows, cols := sh.rows, sh.cols
		x := ktRandSlice(rng, rows*cols, 2)
		g, b, dy := ktRandSlice(rng, cols, 1), ktRandSlice(rng, cols, 1), ktRandSlice(rng, rows*cols, 1)
		run := func(asm bool) (y, mu, rs, dx, dg, db []float32) {
			kUseAVX2 = asm
			y, mu, rs = make([]float32, rows*cols), make([]float32, rows), make([]float32, rows)
			dx, dg, db = make([]float32, rows*cols), make([]float32, cols), make([]float32, cols)
			LayerNormRows(y, mu, rs, x, g, b, rows, cols, 1e-5)
			LayerNormBackwardRows(dx, dg, db, dy, x, mu, rs, g, rows, cols)
			return
		}
		y1, mu1, rs1, dx1, dg1, db1 := run(true)
		y0, mu0, rs0, dx0, dg0, db0 := run(false)
		name := fmt.Sprintf(" %d×%d", rows, cols)
		ktCheckClose(t, "LayerNorm y asm vs Go"+name, y0, y1, 1e-4, 1e-5)
		ktCheckClose(t, "LayerNorm mean asm vs Go"+name, mu0, mu1, 1e-5, 1e-6)
		ktCheckClose(t, "LayerNorm rstd asm vs Go"+name, rs0, rs1, 1e-5, 0)
		ktCheckClose(t, "LayerNorm dx asm vs Go"+name, dx0, dx1, 1e-3, 1e-4)
		ktCheckClose(t, "LayerNorm dgamma asm vs Go"+name, dg0, dg1, 1e-4, 1e-3)
		ktCheckClose(t, "LayerNorm dbeta asm vs Go"+name, db0, db1, 1e-5, 1e-4)
	}
	kUseAVX2, kUseAVX512 = true, use512

	// max and scale, with NaNs and infinities in the vector part
	nan := float32(math.NaN())
	for _, tc := range []struct {
		x    []float32
		want float32
	}{
		{[]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 1}, 9},
		{[]float32{1, nan, 3, 4, 5, 60, 7, 8, 9}, 60},
		{[]float32{nan, nan, nan, nan, nan, nan, nan, nan, -5}, -5},
		{[]float32{-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf}, -inf},
		{[]float32{-inf, -inf, -inf, -inf, -inf, -inf, -inf, inf, -3}, inf},
		{[]float32{-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, -13, -14, -15, -16, -17, -0.5}, -0.5},
	} {
		for _, asm := range []bool{true, false} {
			kUseAVX2 = asm
			if got := VecMax(tc.x); got != tc.want {
				t.Errorf("VecMax(%v) asm=%v = %v, want %v", tc.x, asm, got, tc.want)
			}
		}
	}
	kUseAVX2, kUseAVX512 = true, use512
	allNaN := []float32{nan, nan, nan, nan, nan, nan, nan, nan}
	if got := VecMax(allNaN); got == got {
		t.Errorf("VecMax(all NaN) = %v, want NaN", got)
	}
	x := ktRandSlice(rng, 37, 1)
	s1, s0 := make([]float32, 37), make([]float32, 37)
	VecMulScalar(s1, x, 1.5)
	kUseAVX2 = false
	VecMulScalar(s0, x, 1.5)
	kUseAVX2, kUseAVX512 = true, use512
	ktCheckClose(t, "VecMulScalar asm vs Go", s0, s1, 0, 0)

	// AdamW on both paths, a few steps
	for _, n := range []int{8, 17, 100} {
		var ps [2][]float32
		for mode := range 2 {
			kUseAVX2 = mode == 1
			r := ktNewRNG(40)
			p := ktRandSlice(r, n, 1)
			m, v := make([]float32, n), make([]float32, n)
			for step := 1; step <= 3; step++ {
				AdamW(p, ktRandSlice(r, n, 1), m, v, AdamWParams{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Step: step, GradScale: 0.7})
			}
			ps[mode] = p
		}
		kUseAVX2 = true
		ktCheckClose(t, fmt.Sprintf("AdamW asm vs Go n=%d", n), ps[0], ps[1], 1e-6, 1e-7)
	}

	// element-wise binary ops, scalar add and axpy on both paths (exact
	// except axpy, whose assembly fuses the multiply-add)
	for _, n := range []int{8, 15, 16, 17, 33, 100} {
		a, b := ktRandSlice(rng, n, 1), ktRandSlice(rng, n, 1)
		for _, op := range []struct {
			name string
			f    func(dst, a, b []float32)
		}{{"VecAdd", VecAdd}, {"VecSub", VecSub}, {"VecMul", VecMul}, {"VecDiv", VecDiv},
			{"VecAddScalar", func(d, a, _ []float32) { VecAddScalar(d, a, 0.75) }},
			{"Axpy", func(d, a, b []float32) { copy(d, b); Axpy(-1.25, a, d) }}} {
			want, got := make([]float32, n), make([]float32, n)
			kUseAVX2 = false
			op.f(want, a, b)
			kUseAVX2 = true
			op.f(got, a, b)
			ktCheckClose(t, fmt.Sprintf("%s asm vs Go n=%d", op.name, n), want, got, 1e-6, 1e-7)
		}
	}
	out := make([]float32, 8)
	VecExp(out, []float32{nan, 0, 0, 0, 0, 0, 0, 0})
	if out[0] == out[0] || out[1] != 1 {
		t.Errorf("asm exp(NaN), exp(0) = %v, %v; want NaN, 1", out[0], out[1])
	}
}
