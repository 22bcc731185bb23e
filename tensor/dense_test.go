package tensor

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	gt "gorgonia.org/tensor"
)

// ktRefBroadcast computes a op b with numpy broadcasting in float64 by walking
// every output index.
func ktRefBroadcast(op func(x, y float64) float64, a []float32, as []int, b []float32, bs []int) ([]float32, []int) {
	r := max(len(as), len(bs))
	pad := func(s []int) []int { return append(slices.Repeat([]int{1}, r-len(s)), s...) }
	pa, pb := pad(as), pad(bs)
	out := make([]int, r)
	for i := range out {
		out[i] = pa[i]
		if pa[i] == 1 {
			out[i] = pb[i]
		}
	}
	n := kProd(out)
	res := make([]float32, n)
	idx := make([]int, r)
	for f := 0; f < n; f++ {
		rem := f
		for i := r - 1; i >= 0; i-- {
			idx[i] = rem % out[i]
			rem /= out[i]
		}
		ia, ib := 0, 0
		for i := 0; i < r; i++ {
			ia = ia*pa[i] + idx[i]%pa[i]
			ib = ib*pb[i] + idx[i]%pb[i]
		}
		res[f] = float32(op(float64(a[ia]), float64(b[ib])))
	}
	return res, out
}

func TestDenseBroadcast(t *testing.T) {
	rng := ktNewRNG(20)
	cases := []struct{ a, b []int }{
		{[]int{7}, []int{7}},
		{[]int{2, 3}, []int{2, 3}},
		{[]int{4, 33}, []int{33}},        // bias row
		{[]int{4, 33}, []int{4, 1}},      // per-row scalar
		{[]int{1}, []int{3, 5}},          // scalar-like left
		{[]int{3, 1, 5}, []int{1, 4, 1}}, // both broadcast
		{[]int{2, 3, 4, 5}, []int{3, 1, 5}},
		{[]int{1, 1}, []int{1, 1}},
		{[]int{0, 3}, []int{3}}, // zero-size
		{[]int{257, 1}, []int{1, 7}},
		{[]int{2, 1, 3}, []int{2, 5, 3}},
	}
	ops := []struct {
		name string
		f    func(dst, a, b *gt.Dense) *gt.Dense
		ref  func(x, y float64) float64
	}{
		{"Add", Add, func(x, y float64) float64 { return x + y }},
		{"Sub", Sub, func(x, y float64) float64 { return x - y }},
		{"Mul", Mul, func(x, y float64) float64 { return x * y }},
		{"Div", Div, func(x, y float64) float64 { return x / y }},
	}
	for _, c := range cases {
		for _, swap := range []bool{false, true} {
			as, bs := c.a, c.b
			if swap {
				as, bs = bs, as
			}
			a, b := RandN(rng, as...), RandN(rng, bs...)
			for _, op := range ops {
				want, wshape := ktRefBroadcast(op.ref, Data(a), as, Data(b), bs)
				got := op.f(nil, a, b)
				name := fmt.Sprintf("%s %v %v", op.name, as, bs)
				if !slices.Equal([]int(got.Shape()), wshape) {
					t.Errorf("%s: shape %v, want %v", name, got.Shape(), wshape)
					continue
				}
				ktCheckClose(t, name, want, Data(got), 1e-6, 0)
				// into a given destination
				dst := New(wshape...)
				if op.f(dst, a, b) != dst {
					t.Errorf("%s: dst not returned", name)
				}
				ktCheckClose(t, name+" (dst)", want, Data(dst), 1e-6, 0)
			}
		}
	}
	ktMustPanic(t, "Add mismatch", []string{"(2, 3)", "(4)"}, func() { Add(nil, New(2, 3), New(4)) })
	ktMustPanic(t, "Add dst", []string{"(3, 3)", "[2 3]"}, func() { Add(New(3, 3), New(2, 3), New(3)) })
	// scalar forms
	a := RandN(rng, 3, 7)
	for _, tc := range []struct {
		name string
		got  *gt.Dense
		ref  func(x float64) float64
	}{
		{"AddScalar", AddScalar(nil, a, 2), func(x float64) float64 { return x + 2 }},
		{"SubScalar", SubScalar(nil, a, 2), func(x float64) float64 { return x - 2 }},
		{"MulScalar", MulScalar(nil, a, 2), func(x float64) float64 { return x * 2 }},
		{"DivScalar", DivScalar(nil, a, 3), func(x float64) float64 { return x / 3 }},
		{"ScalarSub", ScalarSub(nil, a, 2), func(x float64) float64 { return 2 - x }},
		{"ScalarDiv", ScalarDiv(nil, a, 2), func(x float64) float64 { return 2 / x }},
	} {
		want := make([]float32, 21)
		for i, v := range Data(a) {
			want[i] = float32(tc.ref(float64(v)))
		}
		ktCheckClose(t, tc.name, want, Data(tc.got), 1e-7, 0)
	}
}

func TestDenseTransposedInput(t *testing.T) {
	a := FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	if err := a.T(); err != nil {
		t.Fatal(err)
	}
	got := Add(nil, a, FromSlice([]float32{10, 20}, 2))
	want := []float32{11, 24, 12, 25, 13, 26}
	if diff := cmp.Diff(want, Data(got)); diff != "" {
		t.Errorf("Add on transposed view (-want +got):\n%s", diff)
	}
	ktMustPanic(t, "Data of view", []string{"(3, 2)", "non-contiguous"}, func() { Data(a) })
}

func TestDenseReduceSoftmax(t *testing.T) {
	rng := ktNewRNG(21)
	for _, shape := range [][]int{{7}, {3, 5}, {2, 3, 4}, {1, 33, 2}, {4, 1, 257}} {
		a := RandN(rng, shape...)
		for axis := -1; axis < len(shape); axis++ {
			ax := axis
			if ax < 0 {
				ax += len(shape)
			}
			outer, n, inner := kSplitAxis(gt.Shape(shape), ax)
			wantShape := slices.Delete(slices.Clone(shape), ax, ax+1)
			// float64 reference along the axis
			x := Data(a)
			sum, mx := make([]float32, outer*inner), make([]float32, outer*inner)
			am := make([]int, outer*inner)
			for o := 0; o < outer; o++ {
				for j := 0; j < inner; j++ {
					var s float64
					m := math.Inf(-1)
					for k := 0; k < n; k++ {
						v := float64(x[(o*n+k)*inner+j])
						s += v
						if v > m {
							m, am[o*inner+j] = v, k
						}
					}
					sum[o*inner+j], mx[o*inner+j] = float32(s), float32(m)
				}
			}
			name := fmt.Sprintf("%v axis %d", shape, axis)
			for _, tc := range []struct {
				op   string
				got  *gt.Dense
				want []float32
			}{
				{"Sum", Sum(nil, a, axis), sum},
				{"Max", Max(nil, a, axis), mx},
			} {
				if !slices.Equal([]int(tc.got.Shape()), wantShape) && !(len(wantShape) == 0 && tc.got.IsScalar()) {
					t.Errorf("%s %s: shape %v, want %v", tc.op, name, tc.got.Shape(), wantShape)
				}
				ktCheckClose(t, tc.op+" "+name, tc.want, Data(tc.got), 1e-5, 1e-6)
			}
			mean := Data(Mean(nil, a, axis))
			for i := range sum {
				if d := math.Abs(float64(mean[i]) - float64(sum[i])/float64(n)); d > 1e-6 {
					t.Errorf("Mean %s [%d]: %v, want %v", name, i, mean[i], float64(sum[i])/float64(n))
				}
			}
			if diff := cmp.Diff(am, ArgMax(a, axis).Ints()[:len(am)]); diff != "" {
				t.Errorf("ArgMax %s:\n%s", name, diff)
			}
			for _, log := range []bool{false, true} {
				want := ktTo32(ktRefSoftmaxAxis(ktTo64(x), outer, n, inner, log))
				var got *gt.Dense
				if log {
					got = LogSoftmax(nil, a, axis)
				} else {
					got = Softmax(nil, a, axis)
				}
				ktCheckClose(t, fmt.Sprintf("Softmax log=%v %s", log, name), want, Data(got), 1e-5, 1e-7)
			}
		}
	}
	if got := SumAll(FromSlice([]float32{1, 2, 3.5}, 3)); got != 6.5 {
		t.Errorf("SumAll = %v, want 6.5", got)
	}
	ktMustPanic(t, "Sum axis", []string{"axis 2", "(3, 4)"}, func() { Sum(nil, New(3, 4), 2) })
	ktMustPanic(t, "Max empty", []string{"(3, 0)"}, func() { Max(nil, New(3, 0), 1) })
}

func TestDenseUnaryLayerNormMatMul(t *testing.T) {
	rng := ktNewRNG(22)
	a := RandN(rng, 5, 33)
	for _, tc := range []struct {
		op  UnaryOp
		f   func(dst, a *gt.Dense) *gt.Dense
		ref func(float64) float64
	}{
		{OpExp, Exp, math.Exp},
		{OpTanh, Tanh, math.Tanh},
		{OpSigmoid, Sigmoid, ktRefSigmoid},
		{OpReLU, ReLU, func(x float64) float64 { return math.Max(x, 0) }},
		{OpGELU, Gelu, ktRefGELU},
	} {
		want := make([]float32, 5*33)
		for i, v := range Data(a) {
			want[i] = float32(tc.ref(float64(v)))
		}
		ktCheckClose(t, tc.op.String(), want, Data(tc.f(nil, a)), 2e-6, 1e-10)
		// backward via the Dense API against a central difference of the float64 function
		dy := RandN(rng, 5, 33)
		y := tc.f(nil, a)
		dx := ApplyBackward(tc.op, nil, dy, a, y)
		wd := make([]float32, len(want))
		for i, v := range Data(a) {
			x := float64(v)
			wd[i] = float32(float64(Data(dy)[i]) * (tc.ref(x+1e-6) - tc.ref(x-1e-6)) / 2e-6)
		}
		ktCheckClose(t, tc.op.String()+" backward", wd, Data(dx), 1e-4, 1e-5)
	}
	logIn := Exp(nil, a)
	ktCheckClose(t, "Log(Exp)", Data(a), Data(Log(nil, logIn)), 1e-5, 1e-6)

	// LayerNorm over the last axis of a 3-D tensor
	x := RandN(rng, 2, 3, 7)
	g, b := RandN(rng, 7), RandN(rng, 7)
	y, mean, rstd := LayerNorm(nil, x, g, b, 1e-5)
	wy, _, _ := ktRefLayerNorm(ktTo64(Data(x)), ktTo64(Data(g)), ktTo64(Data(b)), 6, 7, 1e-5)
	ktCheckClose(t, "LayerNorm", ktTo32(wy), Data(y), 1e-4, 1e-5)
	if !slices.Equal([]int(mean.Shape()), []int{2, 3}) || !slices.Equal([]int(rstd.Shape()), []int{2, 3}) {
		t.Errorf("LayerNorm stats shapes %v %v, want (2, 3)", mean.Shape(), rstd.Shape())
	}
	dy := RandN(rng, 2, 3, 7)
	dx, dg, db := LayerNormBackward(nil, nil, nil, dy, x, mean, rstd, g)
	dxs, dgs, dbs := make([]float32, 42), make([]float32, 7), make([]float32, 7)
	LayerNormBackwardRows(dxs, dgs, dbs, Data(dy), Data(x), Data(mean), Data(rstd), Data(g), 6, 7)
	ktCheckClose(t, "LayerNormBackward dx", dxs, Data(dx), 0, 0)
	ktCheckClose(t, "LayerNormBackward dgamma", dgs, Data(dg), 0, 0)
	ktCheckClose(t, "LayerNormBackward dbeta", dbs, Data(db), 0, 0)
	ktMustPanic(t, "LayerNorm gamma", []string{"(2, 3, 7)", "(6)"}, func() { LayerNorm(nil, x, New(6), b, 1e-5) })

	// MatMul: 2-D, transposes, batched, shared b
	for _, tc := range []struct {
		as, bs []int
		ta, tb bool
	}{
		{[]int{7, 33}, []int{33, 5}, false, false},
		{[]int{33, 7}, []int{33, 5}, true, false},
		{[]int{7, 33}, []int{5, 33}, false, true},
		{[]int{33, 7}, []int{5, 33}, true, true},
		{[]int{3, 4, 6}, []int{3, 6, 2}, false, false},
		{[]int{3, 4, 6}, []int{6, 2}, false, false},
		{[]int{1, 1}, []int{1, 1}, false, false},
	} {
		a, b := RandN(rng, tc.as...), RandN(rng, tc.bs...)
		got := MatMulTrans(nil, a, b, tc.ta, tc.tb)
		// reference: materialised transposes, float64 triple loop
		ad, bd := Data(a), Data(b)
		batch := 1
		if len(tc.as) == 3 {
			batch = tc.as[0]
		}
		ar, ac := tc.as[len(tc.as)-2], tc.as[len(tc.as)-1]
		br, bc := tc.bs[len(tc.bs)-2], tc.bs[len(tc.bs)-1]
		m, k, n := ar, ac, bc
		if tc.ta {
			m, k = ac, ar
		}
		if tc.tb {
			n = br
		}
		want := make([]float32, batch*m*n)
		for p := 0; p < batch; p++ {
			boff := 0
			if len(tc.bs) == 3 {
				boff = p * br * bc
			}
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var s float64
					for q := 0; q < k; q++ {
						var av, bv float32
						if tc.ta {
							av = ad[p*ar*ac+q*ac+i]
						} else {
							av = ad[p*ar*ac+i*ac+q]
						}
						if tc.tb {
							bv = bd[boff+j*bc+q]
						} else {
							bv = bd[boff+q*bc+j]
						}
						s += float64(av) * float64(bv)
					}
					want[(p*m+i)*n+j] = float32(s)
				}
			}
		}
		ktCheckClose(t, fmt.Sprintf("MatMul %v %v %v %v", tc.as, tc.bs, tc.ta, tc.tb), want, Data(got), 1e-5, 1e-5)
	}
	ktMustPanic(t, "MatMul shapes", []string{"(2, 3)", "(4, 5)"}, func() { MatMul(nil, New(2, 3), New(4, 5)) })
}

func TestDenseEmbeddingAdamW(t *testing.T) {
	rng := ktNewRNG(23)
	table := RandN(rng, 10, 4)
	ids := []int{9, 0, 9}
	e := Embedding(nil, table, ids)
	for i, id := range ids {
		if diff := cmp.Diff(Data(table)[id*4:id*4+4], Data(e)[i*4:i*4+4]); diff != "" {
			t.Errorf("Embedding row %d:\n%s", i, diff)
		}
	}
	dt := New(10, 4)
	EmbeddingBackward(dt, Full(1, 3, 4), ids)
	if got := Data(dt)[9*4]; got != 2 {
		t.Errorf("EmbeddingBackward row 9 = %v, want 2", got)
	}
	ktMustPanic(t, "EmbeddingBackward", []string{"(10, 4)", "(2, 4)", "3 ids"}, func() { EmbeddingBackward(dt, New(2, 4), ids) })

	p, g := RandN(rng, 3, 3), RandN(rng, 3, 3)
	ps := slices.Clone(Data(p))
	m, v := New(3, 3), New(3, 3)
	ms, vs := make([]float32, 9), make([]float32, 9)
	hp := AdamWParams{LR: 0.1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.01, Step: 1}
	AdamWStep(p, g, m, v, hp)
	AdamW(ps, Data(g), ms, vs, hp)
	ktCheckClose(t, "AdamWStep", ps, Data(p), 0, 0)
	if got, want := GlobalNormOf(g, g), math.Sqrt(2*SumSquares(Data(g))); math.Abs(got-want) > 1e-9*want {
		t.Errorf("GlobalNormOf = %v, want %v", got, want)
	}
	ktMustPanic(t, "AdamWStep shapes", []string{"(3, 3)", "(9)"}, func() { AdamWStep(p, New(9), m, v, hp) })
}

// ktRecordingEngine stands in for a device engine (say CUDA): a distinct
// engine type whose tensors must be routed to its own backend.
type ktRecordingEngine struct{ gt.StdEng }

type ktRecordingBackend struct {
	CPUBackend
	calls []string
}

func (r *ktRecordingBackend) Name() string { return "recording" }
func (r *ktRecordingBackend) Softmax(dst, src *gt.Dense, axis int, log bool) {
	r.calls = append(r.calls, fmt.Sprintf("softmax axis=%d log=%v", axis, log))
	r.CPUBackend.Softmax(dst, src, axis, log)
}
func (r *ktRecordingBackend) Binary(op BinaryOp, dst, a, b *gt.Dense) {
	r.calls = append(r.calls, "binary "+op.String())
	r.CPUBackend.Binary(op, dst, a, b)
}

func TestBackendDispatch(t *testing.T) {
	rb := &ktRecordingBackend{}
	RegisterBackend(ktRecordingEngine{}, rb)
	defer RegisterBackend(ktRecordingEngine{}, nil)

	dev := gt.New(gt.WithShape(2, 3), gt.Of(gt.Float32), gt.WithEngine(ktRecordingEngine{}))
	copy(Data(dev), []float32{1, 2, 3, 4, 5, 6})
	host := FromSlice([]float32{1, 2, 3}, 3)
	if BackendOf(dev) != rb || BackendOf(host) != CPU {
		t.Fatalf("BackendOf: device %v, host %v", BackendOf(dev).Name(), BackendOf(host).Name())
	}
	out := Softmax(nil, dev, -1)
	if _, ok := out.Engine().(ktRecordingEngine); !ok {
		t.Errorf("Softmax result allocated on engine %T, want ktRecordingEngine", out.Engine())
	}
	Add(nil, dev, out)
	if diff := cmp.Diff([]string{"softmax axis=1 log=false", "binary add"}, rb.calls); diff != "" {
		t.Errorf("device backend calls (-want +got):\n%s", diff)
	}
	ktMustPanic(t, "mixed backends", []string{"recording", "cpu"}, func() { Add(nil, dev, host) })
}

func TestConstructors(t *testing.T) {
	if got := FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3); !slices.Equal([]int(got.Shape()), []int{2, 3}) {
		t.Errorf("FromSlice shape %v", got.Shape())
	}
	ktMustPanic(t, "FromSlice", []string{"[2 2]", "4", "3"}, func() { FromSlice([]float32{1, 2, 3}, 2, 2) })
	a, b := RandN(ktNewRNG(5), 4, 4), RandN(ktNewRNG(5), 4, 4)
	if diff := cmp.Diff(Data(a), Data(b)); diff != "" {
		t.Errorf("RandN with the same seed differs:\n%s", diff)
	}
	if z := Zeros(0, 3); len(Data(z)) != 0 {
		t.Errorf("Zeros(0, 3) has %d elements", len(Data(z)))
	}
	if f := Full(2.5, 2); Data(f)[1] != 2.5 {
		t.Errorf("Full = %v", Data(f))
	}
	ktMustPanic(t, "Data dtype", []string{"float64"}, func() { Data(gt.New(gt.WithShape(2), gt.Of(gt.Float64))) })
}
