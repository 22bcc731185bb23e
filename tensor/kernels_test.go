package tensor

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Shapes every row-wise kernel is checked on: odd and edge sizes, including
// sizes large enough to take the parallel path.
var ktRowShapes = []struct{ rows, cols int }{
	{0, 7}, {1, 1}, {1, 7}, {7, 1}, {7, 33}, {33, 7}, {3, 257}, {257, 33}, {1, 1000}, {300, 512},
}

var ktFlatSizes = []int{0, 1, 7, 33, 257, 1000, 70000}

func ktApprox(rel, abs float64) cmp.Option {
	return cmp.Options{cmpopts.EquateApprox(rel, abs), cmpopts.EquateEmpty(), cmpopts.EquateNaNs()}
}

// ktCheckClose compares with go-cmp's EquateApprox semantics (|x-y| ≤
// max(abs, rel·min(|x|, |y|))). Reflection over 10⁵ elements is slow, so a
// plain loop with the same rule screens first and cmp.Diff reports.
func ktCheckClose(t *testing.T, name string, want, got []float32, rel, abs float64) {
	t.Helper()
	ok := len(want) == len(got)
	for i := 0; ok && i < len(want); i++ {
		x, y := float64(want[i]), float64(got[i])
		if x != y && !(x != x && y != y) && math.Abs(x-y) > max(abs, rel*min(math.Abs(x), math.Abs(y))) {
			ok = false
		}
	}
	if ok {
		return
	}
	if diff := cmp.Diff(want, got, ktApprox(rel, abs)); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", name, ktFirstLines(diff, 20))
	} else {
		t.Errorf("%s: screening loop and go-cmp disagree", name)
	}
}

func ktFirstLines(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = append(l[:n], "...")
	}
	return strings.Join(l, "\n")
}

func ktMustPanic(t *testing.T, name string, contains []string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("%s: no panic", name)
			return
		}
		msg := fmt.Sprint(r)
		for _, c := range contains {
			if !strings.Contains(msg, c) {
				t.Errorf("%s: panic %q does not mention %q", name, msg, c)
			}
		}
	}()
	f()
}

func TestExp32Accuracy(t *testing.T) {
	var worst float64
	for x := float32(-87); x <= 88; x += 0.00731 {
		got := float64(Exp32(x))
		want := math.Exp(float64(x))
		worst = max(worst, math.Abs(got-want)/want)
	}
	if worst > 1e-6 {
		t.Errorf("Exp32: max relative error %.3g > 1e-6", worst)
	}
	t.Logf("Exp32 max relative error on [-87, 88]: %.3g", worst)
	for _, tc := range []struct{ x, want float32 }{
		{0, 1}, {-200, 0}, {float32(math.Inf(-1)), 0}, {1000, Exp32(88)},
	} {
		if got := Exp32(tc.x); got != tc.want {
			t.Errorf("Exp32(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if v := Exp32(float32(math.NaN())); v == v {
		t.Errorf("Exp32(NaN) = %v, want NaN", v)
	}
}

func TestLog32Accuracy(t *testing.T) {
	var worst float64
	for x := float32(1e-30); x < 1e30; x *= 1.0137 {
		got, want := float64(Log32(x)), math.Log(float64(x))
		worst = max(worst, math.Abs(got-want)/max(math.Abs(want), 1e-3))
	}
	for x := float32(0.5); x < 2; x += 1e-4 { // near 1, where log cancels
		got, want := float64(Log32(x)), math.Log(float64(x))
		if want != 0 {
			worst = max(worst, math.Abs(got-want)/math.Abs(want))
		}
	}
	if worst > 1e-6 {
		t.Errorf("Log32: max relative error %.3g > 1e-6", worst)
	}
	t.Logf("Log32 max relative error: %.3g", worst)
	if Log32(1) != 0 || !math.IsInf(float64(Log32(0)), -1) || Log32(-1) == Log32(-1) || !math.IsInf(float64(Log32(float32(math.Inf(1)))), 1) {
		t.Errorf("Log32 special values: log1=%v log0=%v log-1=%v", Log32(1), Log32(0), Log32(-1))
	}
}

func TestTanhSigmoidAccuracy(t *testing.T) {
	var wt, ws float64
	for x := float32(-20); x <= 20; x += 0.000913 {
		x64 := float64(x)
		tw := math.Tanh(x64)
		wt = max(wt, math.Abs(float64(Tanh32(x))-tw)/max(math.Abs(tw), 1e-30))
		sw := ktRefSigmoid(x64)
		ws = max(ws, math.Abs(float64(Sigmoid32(x))-sw)/sw)
	}
	for _, x := range []float32{1e-3, -1e-5, 1e-8, 3e-38} {
		tw := math.Tanh(float64(x))
		wt = max(wt, math.Abs(float64(Tanh32(x))-tw)/math.Abs(tw))
	}
	if wt > 1e-6 || ws > 1e-6 {
		t.Errorf("max relative error: tanh %.3g, sigmoid %.3g (want ≤ 1e-6)", wt, ws)
	}
	t.Logf("max relative error: Tanh32 %.3g, Sigmoid32 %.3g", wt, ws)
}

func TestElementwise(t *testing.T) {
	rng := ktNewRNG(1)
	type un struct {
		name string
		f    func(dst, src []float32)
		ref  func(float64) float64
		pos  bool    // needs positive inputs
		abs  float64 // absolute margin (GELU's tiny negative tail: exp of a large, rounded argument)
	}
	unary := []un{
		{"VecExp", VecExp, math.Exp, false, 1e-30},
		{"VecLog", VecLog, math.Log, true, 1e-30},
		{"VecTanh", VecTanh, math.Tanh, false, 1e-30},
		{"VecSigmoid", VecSigmoid, ktRefSigmoid, false, 1e-30},
		{"VecReLU", VecReLU, func(x float64) float64 { return math.Max(x, 0) }, false, 0},
		{"GELU", GELU, ktRefGELU, false, 1e-10},
	}
	type bin struct {
		name string
		f    func(dst, a, b []float32)
		ref  func(a, b float64) float64
	}
	binary := []bin{
		{"VecAdd", VecAdd, func(a, b float64) float64 { return a + b }},
		{"VecSub", VecSub, func(a, b float64) float64 { return a - b }},
		{"VecMul", VecMul, func(a, b float64) float64 { return a * b }},
		{"VecDiv", VecDiv, func(a, b float64) float64 { return a / b }},
	}
	type sc struct {
		name string
		f    func(dst, a []float32, s float32)
		ref  func(a, s float64) float64
	}
	scalar := []sc{
		{"VecAddScalar", VecAddScalar, func(a, s float64) float64 { return a + s }},
		{"VecMulScalar", VecMulScalar, func(a, s float64) float64 { return a * s }},
		{"VecScalarSub", VecScalarSub, func(a, s float64) float64 { return s - a }},
		{"VecScalarDiv", VecScalarDiv, func(a, s float64) float64 { return s / a }},
	}
	for _, n := range ktFlatSizes {
		x := ktRandSlice(rng, n, 3)
		y := ktRandSlice(rng, n, 3)
		pos := make([]float32, n)
		for i := range pos {
			pos[i] = float32(math.Exp(float64(x[i]) * 5))
		}
		for _, u := range unary {
			in := x
			if u.pos {
				in = pos
			}
			want := make([]float32, n)
			for i, v := range in {
				want[i] = float32(u.ref(float64(v)))
			}
			got := make([]float32, n)
			u.f(got, in)
			ktCheckClose(t, fmt.Sprintf("%s n=%d", u.name, n), want, got, 2e-6, u.abs)
			// in place
			cp := append([]float32(nil), in...)
			u.f(cp, cp)
			ktCheckClose(t, fmt.Sprintf("%s in place n=%d", u.name, n), want, cp, 2e-6, u.abs)
		}
		for _, b := range binary {
			want := make([]float32, n)
			for i := range x {
				want[i] = float32(b.ref(float64(x[i]), float64(y[i])))
			}
			got := make([]float32, n)
			b.f(got, x, y)
			ktCheckClose(t, fmt.Sprintf("%s n=%d", b.name, n), want, got, 1e-7, 0)
		}
		for _, s := range scalar {
			want := make([]float32, n)
			for i := range x {
				want[i] = float32(s.ref(float64(x[i]), 1.75))
			}
			got := make([]float32, n)
			s.f(got, x, 1.75)
			ktCheckClose(t, fmt.Sprintf("%s n=%d", s.name, n), want, got, 1e-7, 0)
		}
		// Axpy
		want := make([]float32, n)
		for i := range x {
			want[i] = float32(float64(y[i]) + 0.5*float64(x[i]))
		}
		got := append([]float32(nil), y...)
		Axpy(0.5, x, got)
		ktCheckClose(t, fmt.Sprintf("Axpy n=%d", n), want, got, 1e-6, 1e-7)
	}
	ktMustPanic(t, "VecAdd", []string{"[3 3 2]"}, func() { VecAdd(make([]float32, 3), make([]float32, 3), make([]float32, 2)) })
	ktMustPanic(t, "Axpy", []string{"[2 3]"}, func() { Axpy(1, make([]float32, 2), make([]float32, 3)) })
}

func TestElementwiseBackwardFiniteDiff(t *testing.T) {
	rng := ktNewRNG(2)
	const n = 33
	x := ktRandSlice(rng, n, 1.5)
	dy := ktRandSlice(rng, n, 1)
	pos := make([]float32, n)
	for i := range pos {
		pos[i] = 0.1 + float32(math.Abs(float64(x[i])))
	}
	for _, tc := range []struct {
		name string
		in   []float32
		fwd  func(float64) float64
		bwd  func(dx, dy, x, y []float32)
	}{
		{"Exp", x, math.Exp, func(dx, dy, x, y []float32) { ExpBackward(dx, dy, y) }},
		{"Log", pos, math.Log, func(dx, dy, x, y []float32) { LogBackward(dx, dy, x) }},
		{"Tanh", x, math.Tanh, func(dx, dy, x, y []float32) { TanhBackward(dx, dy, y) }},
		{"Sigmoid", x, ktRefSigmoid, func(dx, dy, x, y []float32) { SigmoidBackward(dx, dy, y) }},
		{"ReLU", x, func(v float64) float64 { return math.Max(v, 0) }, func(dx, dy, x, y []float32) { ReLUBackward(dx, dy, x) }},
		{"GELU", x, ktRefGELU, func(dx, dy, x, y []float32) { GELUBackward(dx, dy, x) }},
	} {
		y := make([]float32, n)
		for i, v := range tc.in {
			y[i] = float32(tc.fwd(float64(v)))
		}
		got := make([]float32, n)
		tc.bwd(got, dy, tc.in, y)
		dy64 := ktTo64(dy)
		f := func(v []float64) float64 {
			var s float64
			for i := range v {
				s += dy64[i] * tc.fwd(v[i])
			}
			return s
		}
		want := ktTo32(ktCentralDiff(f, ktTo64(tc.in), 1e-6))
		ktCheckClose(t, tc.name+"Backward vs finite differences", want, got, 1e-4, 1e-5)
	}
	// GELUBackward against the analytic float64 derivative over many sizes.
	for _, n := range ktFlatSizes {
		x := ktRandSlice(rng, n, 3)
		dy := ktRandSlice(rng, n, 1)
		want := make([]float32, n)
		for i := range x {
			u := float64(x[i])
			th := math.Tanh(0.7978845608028654 * (u + 0.044715*u*u*u))
			d := 0.5*(1+th) + 0.5*u*(1-th*th)*0.7978845608028654*(1+3*0.044715*u*u)
			want[i] = float32(float64(dy[i]) * d)
		}
		got := make([]float32, n)
		GELUBackward(got, dy, x)
		ktCheckClose(t, fmt.Sprintf("GELUBackward n=%d", n), want, got, 1e-5, 1e-6)
	}
}

func TestSoftmaxRows(t *testing.T) {
	rng := ktNewRNG(3)
	for _, sh := range ktRowShapes {
		for _, log := range []bool{false, true} {
			x := ktRandSlice(rng, sh.rows*sh.cols, 4)
			want := ktTo32(ktRefSoftmax(ktTo64(x), sh.rows, sh.cols, log))
			got := make([]float32, len(x))
			name := "SoftmaxRows"
			if log {
				name = "LogSoftmaxRows"
				LogSoftmaxRows(got, x, sh.rows, sh.cols)
			} else {
				SoftmaxRows(got, x, sh.rows, sh.cols)
			}
			ktCheckClose(t, fmt.Sprintf("%s %d×%d", name, sh.rows, sh.cols), want, got, 1e-5, 1e-7)
			// aliasing dst = src
			if log {
				LogSoftmaxRows(x, x, sh.rows, sh.cols)
			} else {
				SoftmaxRows(x, x, sh.rows, sh.cols)
			}
			ktCheckClose(t, fmt.Sprintf("%s in place %d×%d", name, sh.rows, sh.cols), want, x, 1e-5, 1e-7)
		}
	}
	// Extreme logits: no overflow, exact one-hot.
	x := []float32{1000, 0, -1000, 50}
	got := make([]float32, 4)
	SoftmaxRows(got, x, 1, 4)
	ktCheckClose(t, "SoftmaxRows extreme", []float32{1, 0, 0, 0}, got, 0, 1e-30)
	ktMustPanic(t, "SoftmaxRows shape", []string{"3×4", "12", "[11 12]"}, func() { SoftmaxRows(make([]float32, 11), make([]float32, 12), 3, 4) })
}

func TestSoftmaxAxis(t *testing.T) {
	rng := ktNewRNG(4)
	for _, g := range [][3]int{{1, 5, 1}, {2, 7, 3}, {3, 1, 33}, {1, 33, 257}, {4, 0, 2}, {0, 3, 3}} {
		outer, n, inner := g[0], g[1], g[2]
		for _, log := range []bool{false, true} {
			x := ktRandSlice(rng, outer*n*inner, 3)
			want := ktTo32(ktRefSoftmaxAxis(ktTo64(x), outer, n, inner, log))
			got := make([]float32, len(x))
			SoftmaxAxis(got, x, outer, n, inner, log)
			ktCheckClose(t, fmt.Sprintf("SoftmaxAxis log=%v %v", log, g), want, got, 1e-5, 1e-7)
			SoftmaxAxis(x, x, outer, n, inner, log) // in place
			ktCheckClose(t, fmt.Sprintf("SoftmaxAxis in place log=%v %v", log, g), want, x, 1e-5, 1e-7)
		}
	}
}

func TestSoftmaxBackward(t *testing.T) {
	rng := ktNewRNG(5)
	// finite differences on small shapes, both layouts
	for _, g := range [][3]int{{2, 7, 1}, {2, 5, 3}, {1, 1, 4}} {
		outer, n, inner := g[0], g[1], g[2]
		for _, log := range []bool{false, true} {
			x := ktRandSlice(rng, outer*n*inner, 2)
			dy := ktRandSlice(rng, len(x), 1)
			y := make([]float32, len(x))
			SoftmaxAxis(y, x, outer, n, inner, log)
			got := make([]float32, len(x))
			SoftmaxBackwardAxis(got, dy, y, outer, n, inner, log)
			dy64 := ktTo64(dy)
			f := func(v []float64) float64 { return ktDot64(dy64, ktRefSoftmaxAxis(v, outer, n, inner, log)) }
			want := ktTo32(ktCentralDiff(f, ktTo64(x), 1e-6))
			ktCheckClose(t, fmt.Sprintf("SoftmaxBackwardAxis log=%v %v vs finite differences", log, g), want, got, 1e-4, 1e-5)
		}
	}
	// analytic float64 reference on the row shapes
	for _, sh := range ktRowShapes {
		for _, log := range []bool{false, true} {
			x := ktRandSlice(rng, sh.rows*sh.cols, 2)
			dy := ktRandSlice(rng, len(x), 1)
			y64 := ktRefSoftmax(ktTo64(x), sh.rows, sh.cols, log)
			y := ktTo32(y64)
			want := make([]float32, len(x))
			for r := 0; r < sh.rows; r++ {
				var s float64
				for i := r * sh.cols; i < (r+1)*sh.cols; i++ {
					if log {
						s += float64(dy[i])
					} else {
						s += float64(dy[i]) * y64[i]
					}
				}
				for i := r * sh.cols; i < (r+1)*sh.cols; i++ {
					if log {
						want[i] = float32(float64(dy[i]) - math.Exp(y64[i])*s)
					} else {
						want[i] = float32(y64[i] * (float64(dy[i]) - s))
					}
				}
			}
			got := make([]float32, len(x))
			if log {
				LogSoftmaxBackwardRows(got, dy, y, sh.rows, sh.cols)
			} else {
				SoftmaxBackwardRows(got, dy, y, sh.rows, sh.cols)
			}
			ktCheckClose(t, fmt.Sprintf("Softmax backward log=%v %d×%d", log, sh.rows, sh.cols), want, got, 1e-4, 1e-6)
		}
	}
}

func TestLayerNorm(t *testing.T) {
	rng := ktNewRNG(6)
	const eps = 1e-5
	for _, sh := range ktRowShapes {
		rows, cols := sh.rows, sh.cols
		x := ktRandSlice(rng, rows*cols, 2)
		for i := range x {
			x[i] += 3 // offset mean: the variance must not cancel
		}
		gamma, beta := ktRandSlice(rng, cols, 1), ktRandSlice(rng, cols, 1)
		y64, mu64, rs64 := ktRefLayerNorm(ktTo64(x), ktTo64(gamma), ktTo64(beta), rows, cols, eps)
		y, mu, rs := make([]float32, len(x)), make([]float32, rows), make([]float32, rows)
		LayerNormRows(y, mu, rs, x, gamma, beta, rows, cols, eps)
		name := fmt.Sprintf("%d×%d", rows, cols)
		// cols = 1: the centred row is exactly 0, output = beta.
		ktCheckClose(t, "LayerNormRows y "+name, ktTo32(y64), y, 1e-4, 1e-5)
		ktCheckClose(t, "LayerNormRows mean "+name, ktTo32(mu64), mu, 1e-5, 1e-6)
		ktCheckClose(t, "LayerNormRows rstd "+name, ktTo32(rs64), rs, 1e-4, 0)

		// Backward against the analytic float64 gradient.
		dy := ktRandSlice(rng, len(x), 1)
		dx := make([]float32, len(x))
		dg, db := ktRandSlice(rng, cols, 1), ktRandSlice(rng, cols, 1) // accumulate onto these
		dg0, db0 := ktTo64(dg), ktTo64(db)
		LayerNormBackwardRows(dx, dg, db, dy, x, mu, rs, gamma, rows, cols)
		wdx := make([]float64, len(x))
		for r := 0; r < rows; r++ {
			var sdy, sdyx float64
			for i := 0; i < cols; i++ {
				o := r*cols + i
				xh := (float64(x[o]) - mu64[r]) * rs64[r]
				g := float64(dy[o]) * float64(gamma[i])
				sdy += g
				sdyx += g * xh
				dg0[i] += float64(dy[o]) * xh
				db0[i] += float64(dy[o])
			}
			for i := 0; i < cols; i++ {
				o := r*cols + i
				xh := (float64(x[o]) - mu64[r]) * rs64[r]
				g := float64(dy[o]) * float64(gamma[i])
				wdx[o] = rs64[r] * (g - sdy/float64(cols) - xh*sdyx/float64(cols))
			}
		}
		ktCheckClose(t, "LayerNormBackwardRows dx "+name, ktTo32(wdx), dx, 1e-3, 1e-4)
		ktCheckClose(t, "LayerNormBackwardRows dgamma "+name, ktTo32(dg0), dg, 1e-4, 1e-3)
		ktCheckClose(t, "LayerNormBackwardRows dbeta "+name, ktTo32(db0), db, 1e-5, 1e-4)
	}
	ktMustPanic(t, "LayerNormRows gamma", []string{"4×5", "[5 4]"}, func() {
		LayerNormRows(make([]float32, 20), make([]float32, 4), make([]float32, 4), make([]float32, 20), make([]float32, 5), make([]float32, 4), 4, 5, 1e-5)
	})
}

func TestLayerNormBackwardFiniteDiff(t *testing.T) {
	rng := ktNewRNG(7)
	const rows, cols, eps = 3, 7, 1e-5
	x := ktRandSlice(rng, rows*cols, 1)
	gamma, beta := ktRandSlice(rng, cols, 1), ktRandSlice(rng, cols, 1)
	dy := ktRandSlice(rng, rows*cols, 1)
	y, mu, rs := make([]float32, len(x)), make([]float32, rows), make([]float32, rows)
	LayerNormRows(y, mu, rs, x, gamma, beta, rows, cols, eps)
	dx, dg, db := make([]float32, len(x)), make([]float32, cols), make([]float32, cols)
	LayerNormBackwardRows(dx, dg, db, dy, x, mu, rs, gamma, rows, cols)

	x64, g64, b64, dy64 := ktTo64(x), ktTo64(gamma), ktTo64(beta), ktTo64(dy)
	loss := func(x, g, b []float64) float64 {
		out, _, _ := ktRefLayerNorm(x, g, b, rows, cols, eps)
		return ktDot64(dy64, out)
	}
	wdx := ktCentralDiff(func(v []float64) float64 { return loss(v, g64, b64) }, x64, 1e-5)
	wdg := ktCentralDiff(func(v []float64) float64 { return loss(x64, v, b64) }, g64, 1e-5)
	wdb := ktCentralDiff(func(v []float64) float64 { return loss(x64, g64, v) }, b64, 1e-5)
	ktCheckClose(t, "LayerNorm dx vs finite differences", ktTo32(wdx), dx, 1e-3, 1e-4)
	ktCheckClose(t, "LayerNorm dgamma vs finite differences", ktTo32(wdg), dg, 1e-3, 1e-4)
	ktCheckClose(t, "LayerNorm dbeta vs finite differences", ktTo32(wdb), db, 1e-3, 1e-4)
}

func TestReductions(t *testing.T) {
	rng := ktNewRNG(8)
	for _, n := range ktFlatSizes {
		x := ktRandSlice(rng, n, 2)
		var s float64
		m, am := math.Inf(-1), -1
		for i, v := range x {
			s += float64(v)
			if float64(v) > m {
				m, am = float64(v), i
			}
		}
		if got := VecSum(x); math.Abs(float64(got)-s) > 1e-6*math.Sqrt(float64(n))+1e-6 {
			t.Errorf("VecSum n=%d = %v, want %v", n, got, s)
		}
		if n == 0 {
			continue
		}
		if got := VecMean(x); math.Abs(float64(got)-s/float64(n)) > 1e-6 {
			t.Errorf("VecMean n=%d = %v, want %v", n, got, s/float64(n))
		}
		if got := VecMax(x); float64(got) != m {
			t.Errorf("VecMax n=%d = %v, want %v", n, got, m)
		}
		if got := VecArgMax(x); got != am {
			t.Errorf("VecArgMax n=%d = %v, want %v", n, got, am)
		}
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		if got := SumSquares(x); math.Abs(got-ss) > 1e-6*ss {
			t.Errorf("SumSquares n=%d = %v, want %v", n, got, ss)
		}
	}
	// argmax: first of equal maxima; NaN ignored
	if got := VecArgMax([]float32{1, 3, 3, 2}); got != 1 {
		t.Errorf("VecArgMax ties = %d, want 1", got)
	}
	nan := float32(math.NaN())
	if got := VecArgMax([]float32{nan, 1, 2}); got != 2 {
		t.Errorf("VecArgMax with NaN = %d, want 2", got)
	}
	if got := VecMax([]float32{nan, 1, 2}); got != 2 {
		t.Errorf("VecMax with NaN = %v, want 2", got)
	}
	ktMustPanic(t, "VecMax empty", []string{"empty"}, func() { VecMax(nil) })

	// Along an axis: outer×n×inner against a float64 loop.
	for _, g := range [][3]int{{1, 7, 1}, {7, 33, 1}, {3, 5, 4}, {2, 257, 3}, {1, 1, 9}, {3, 0, 2}} {
		outer, n, inner := g[0], g[1], g[2]
		x := ktRandSlice(rng, outer*n*inner, 2)
		for _, op := range []ReduceOp{ReduceSum, ReduceMean, ReduceMax} {
			if n == 0 && op != ReduceSum {
				continue
			}
			want := make([]float32, outer*inner)
			for o := 0; o < outer; o++ {
				for j := 0; j < inner; j++ {
					var acc float64
					if op == ReduceMax {
						acc = math.Inf(-1)
					}
					for k := 0; k < n; k++ {
						v := float64(x[(o*n+k)*inner+j])
						if op == ReduceMax {
							acc = math.Max(acc, v)
						} else {
							acc += v
						}
					}
					if op == ReduceMean {
						acc /= float64(n)
					}
					want[o*inner+j] = float32(acc)
				}
			}
			got := make([]float32, outer*inner)
			ReduceAxis(op, got, x, outer, n, inner)
			ktCheckClose(t, fmt.Sprintf("ReduceAxis %v %v", op, g), want, got, 1e-5, 1e-5)
		}
		if n > 0 {
			want := make([]int, outer*inner)
			for o := 0; o < outer; o++ {
				for j := 0; j < inner; j++ {
					best := 0
					for k := 1; k < n; k++ {
						if x[(o*n+k)*inner+j] > x[(o*n+best)*inner+j] {
							best = k
						}
					}
					want[o*inner+j] = best
				}
			}
			got := make([]int, outer*inner)
			ArgMaxAxis(got, x, outer, n, inner)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ArgMaxAxis %v (-want +got):\n%s", g, diff)
			}
		}
	}
	// rows helpers and SumCols / AddRowVec
	x := ktRandSlice(rng, 7*33, 1)
	v := ktRandSlice(rng, 33, 1)
	sums, colSums, added := make([]float32, 7), make([]float32, 33), make([]float32, 7*33)
	SumRows(sums, x, 7, 33)
	SumCols(colSums, x, 7, 33)
	AddRowVec(added, x, v, 7, 33)
	wantRows, wantCols, wantAdded := make([]float32, 7), make([]float32, 33), make([]float32, 7*33)
	for r := 0; r < 7; r++ {
		var s float64
		for c := 0; c < 33; c++ {
			s += float64(x[r*33+c])
			wantCols[c] += x[r*33+c]
			wantAdded[r*33+c] = x[r*33+c] + v[c]
		}
		wantRows[r] = float32(s)
	}
	ktCheckClose(t, "SumRows", wantRows, sums, 1e-5, 1e-6)
	ktCheckClose(t, "SumCols", wantCols, colSums, 1e-5, 1e-6)
	ktCheckClose(t, "AddRowVec", wantAdded, added, 0, 0)
}

func TestEmbedding(t *testing.T) {
	rng := ktNewRNG(9)
	for _, dim := range []int{1, 7, 33, 257} {
		const rows = 11
		table := ktRandSlice(rng, rows*dim, 1)
		ids := []int{3, 0, 10, 3, 7, 3}
		dst := make([]float32, len(ids)*dim)
		EmbeddingGather(dst, table, ids, dim)
		for i, id := range ids {
			if diff := cmp.Diff(table[id*dim:(id+1)*dim], dst[i*dim:(i+1)*dim]); diff != "" {
				t.Errorf("EmbeddingGather dim=%d row %d:\n%s", dim, i, diff)
			}
		}
		dy := ktRandSlice(rng, len(ids)*dim, 1)
		dt := ktRandSlice(rng, rows*dim, 1)
		want := ktTo64(dt)
		for i, id := range ids {
			for j := 0; j < dim; j++ {
				want[id*dim+j] += float64(dy[i*dim+j])
			}
		}
		EmbeddingScatterAdd(dt, dy, ids, dim)
		ktCheckClose(t, fmt.Sprintf("EmbeddingScatterAdd dim=%d", dim), ktTo32(want), dt, 1e-6, 1e-6)
	}
	ktMustPanic(t, "EmbeddingGather id", []string{"ids[1] = 5", "5×2"}, func() {
		EmbeddingGather(make([]float32, 4), make([]float32, 10), []int{0, 5}, 2)
	})
	ktMustPanic(t, "EmbeddingGather dst", []string{"length 3", "2 ids"}, func() {
		EmbeddingGather(make([]float32, 3), make([]float32, 10), []int{0, 1}, 2)
	})
}

func TestAdamW(t *testing.T) {
	rng := ktNewRNG(10)
	for _, n := range []int{0, 1, 7, 257} {
		p := ktRandSlice(rng, n, 1)
		p64 := ktTo64(p)
		m, v := make([]float32, n), make([]float32, n)
		m64, v64 := make([]float64, n), make([]float64, n)
		hp := AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, GradScale: 0.5}
		for step := 1; step <= 5; step++ {
			g := ktRandSlice(rng, n, 1)
			hp.Step = step
			AdamW(p, g, m, v, hp)
			b1, b2, lr, wd := 0.9, 0.999, float64(hp.LR), float64(hp.WeightDecay)
			for i := range p64 {
				gi := float64(g[i]) * 0.5
				m64[i] = b1*m64[i] + (1-b1)*gi
				v64[i] = b2*v64[i] + (1-b2)*gi*gi
				mh := m64[i] / (1 - math.Pow(b1, float64(step)))
				vh := v64[i] / (1 - math.Pow(b2, float64(step)))
				p64[i] = p64[i] - lr*wd*p64[i] - lr*mh/(math.Sqrt(vh)+1e-8)
			}
		}
		ktCheckClose(t, fmt.Sprintf("AdamW params n=%d", n), ktTo32(p64), p, 1e-5, 1e-6)
		ktCheckClose(t, fmt.Sprintf("AdamW m n=%d", n), ktTo32(m64), m, 1e-5, 1e-7)
		ktCheckClose(t, fmt.Sprintf("AdamW v n=%d", n), ktTo32(v64), v, 1e-4, 1e-9)
	}
	ktMustPanic(t, "AdamW lengths", []string{"[3 2 3 3]"}, func() {
		AdamW(make([]float32, 3), make([]float32, 2), make([]float32, 3), make([]float32, 3), AdamWParams{Step: 1})
	})
	// global norm and clip scale
	a, b := []float32{3}, []float32{0, 4}
	if got := GlobalNorm(a, b); got != 5 {
		t.Errorf("GlobalNorm = %v, want 5", got)
	}
	if got := ClipScale(5, 1); got != 0.2 {
		t.Errorf("ClipScale(5, 1) = %v, want 0.2", got)
	}
	if got := ClipScale(0.5, 1); got != 1 {
		t.Errorf("ClipScale(0.5, 1) = %v, want 1", got)
	}
}
