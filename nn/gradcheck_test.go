package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

// gcInput is one input of a gradient check: float64 values (rounded to
// float32 for the op under test) and whether to differentiate.
type gcInput struct {
	shape ts.Shape
	vals  []float64
	diff  bool
}

func randIn(rng *rand.Rand, scale float64, diff bool, shape ...int) gcInput {
	s := ts.Shape(shape)
	v := make([]float64, s.TotalSize())
	for i := range v {
		v[i] = float64(float32(rng.NormFloat64() * scale))
	}
	return gcInput{shape: s, vals: v, diff: diff}
}

func constIn(vals []float64, shape ...int) gcInput {
	return gcInput{shape: ts.Shape(shape), vals: vals}
}

func toDense(shape ts.Shape, v []float64) *ts.Dense {
	d := newDense(shape)
	f := d.Float32s()
	for i := range f {
		f[i] = float32(v[i])
	}
	return d
}

// runOp evaluates build over the inputs in a Gorgonia graph with loss
// Σ r·out and returns the output and the gradients of the differentiable
// inputs.
func runOp(t testing.TB, ins []gcInput, r []float64, build func([]*G.Node) *G.Node) ([]float32, [][]float32) {
	g := G.NewGraph()
	nodes := make([]*G.Node, len(ins))
	var wrt G.Nodes
	for i, in := range ins {
		nodes[i] = G.NewTensor(g, ts.Float32, in.shape.Dims(), G.WithShape(in.shape...), G.WithValue(toDense(in.shape, in.vals)), G.WithName(fmt.Sprintf("in%d", i)))
		if in.diff {
			wrt = append(wrt, nodes[i])
		}
	}
	out := build(nodes)
	lf := LossFunc(func(v []float32) (float64, []float32) {
		var s float64
		gr := make([]float32, len(v))
		for i := range v {
			s += r[i] * float64(v[i])
			gr[i] = float32(r[i])
		}
		return s, gr
	})
	cost := ExternalLoss(out, &lf)
	grads, err := G.Grad(cost, wrt...)
	if err != nil {
		t.Fatalf("Grad: %v", err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatalf("RunAll: %v", err)
	}
	o := append([]float32(nil), f32s(out.Value())...)
	var gs [][]float32
	for _, gn := range grads {
		gs = append(gs, append([]float32(nil), f32s(gn.Value())...))
	}
	return o, gs
}

// gradCheck compares an op's forward with a float64 reference and its
// gradients with central finite differences of the reference.
func gradCheck(t *testing.T, ins []gcInput, build func([]*G.Node) *G.Node, ref func([][]float64) []float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	vals := make([][]float64, len(ins))
	for i, in := range ins {
		vals[i] = in.vals
	}
	want := ref(vals)
	r := make([]float64, len(want))
	for i := range r {
		r[i] = rng.NormFloat64()
	}
	got, grads := runOp(t, ins, r, build)
	if len(got) != len(want) {
		t.Fatalf("output has %d values, reference %d", len(got), len(want))
	}
	scale := 1e-3
	for _, v := range want {
		scale = max(scale, math.Abs(v))
	}
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > 1e-4*scale+1e-5 {
			t.Fatalf("forward[%d] = %v, float64 reference %v", i, got[i], want[i])
		}
	}
	loss := func() float64 {
		o := ref(vals)
		var s float64
		for i := range o {
			s += r[i] * o[i]
		}
		return s
	}
	gi := 0
	for i, in := range ins {
		if !in.diff {
			continue
		}
		an := grads[gi]
		gi++
		num := make([]float64, len(in.vals))
		idx := rng.Perm(len(in.vals))
		if len(idx) > 80 {
			idx = idx[:80]
		}
		gscale := 1e-3
		for _, j := range idx {
			h := 1e-6 * max(1, math.Abs(vals[i][j]))
			old := vals[i][j]
			vals[i][j] = old + h
			lp := loss()
			vals[i][j] = old - h
			lm := loss()
			vals[i][j] = old
			num[j] = (lp - lm) / (2 * h)
			gscale = max(gscale, math.Abs(num[j]))
		}
		for _, j := range idx {
			if d := math.Abs(float64(an[j]) - num[j]); d > 2e-3*gscale+1e-3*math.Abs(num[j]) {
				t.Errorf("input %d grad[%d] = %v, finite difference %v (scale %v)", i, j, an[j], num[j], gscale)
			}
		}
	}
}

// float64 references.

func refLinear(x, w, b []float64, rows, in, out int) []float64 {
	y := make([]float64, rows*out)
	for r := 0; r < rows; r++ {
		for j := 0; j < out; j++ {
			s := 0.0
			if b != nil {
				s = b[j]
			}
			for k := 0; k < in; k++ {
				s += x[r*in+k] * w[k*out+j]
			}
			y[r*out+j] = s
		}
	}
	return y
}

func refLayerNorm(x, g, b []float64, rows, cols int) []float64 {
	y := make([]float64, len(x))
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		var mu, va float64
		for _, v := range row {
			mu += v
		}
		mu /= float64(cols)
		for _, v := range row {
			va += (v - mu) * (v - mu)
		}
		va /= float64(cols)
		rs := 1 / math.Sqrt(va+1e-5)
		for i, v := range row {
			y[r*cols+i] = (v-mu)*rs*g[i] + b[i]
		}
	}
	return y
}

func refGELU(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(0.7978845608028654*(x+0.044715*x*x*x)))
}

func refLogSoftmax(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	var z float64
	for _, v := range x {
		z += math.Exp(v - m)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v - m - math.Log(z)
	}
	return out
}

func refRope(x []float64, pos, dh int) {
	for i := 0; i < dh/2; i++ {
		th := float64(pos) * math.Pow(10000, -2*float64(i)/float64(dh))
		a, b := x[2*i], x[2*i+1]
		x[2*i], x[2*i+1] = a*math.Cos(th)-b*math.Sin(th), a*math.Sin(th)+b*math.Cos(th)
	}
}

// refAttention: q (B×Tq×D), k, v (B×Tk×D) as accessor functions.
func refAttention(q, k, v func(b, t, c int) float64, B, Tq, Tk, D, H int, causal, rotary bool, lens []float64) []float64 {
	dh := D / H
	out := make([]float64, B*Tq*D)
	for b := 0; b < B; b++ {
		lim := Tk
		if lens != nil {
			lim = int(lens[b])
		}
		for h := 0; h < H; h++ {
			for i := 0; i < Tq; i++ {
				qi := make([]float64, dh)
				for e := range qi {
					qi[e] = q(b, i, h*dh+e)
				}
				if rotary {
					refRope(qi, i, dh)
				}
				s := make([]float64, Tk)
				for j := 0; j < Tk; j++ {
					kj := make([]float64, dh)
					for e := range kj {
						kj[e] = k(b, j, h*dh+e)
					}
					if rotary {
						refRope(kj, j, dh)
					}
					for e := range kj {
						s[j] += qi[e] * kj[e]
					}
					s[j] /= math.Sqrt(float64(dh))
					if j >= lim || (causal && j > i) {
						s[j] = -1e30
					}
				}
				p := refLogSoftmax(s)
				for j := range p {
					p[j] = math.Exp(p[j])
				}
				for e := 0; e < dh; e++ {
					var o float64
					for j := 0; j < Tk; j++ {
						o += p[j] * v(b, j, h*dh+e)
					}
					out[(b*Tq+i)*D+h*dh+e] = o
				}
			}
		}
	}
	return out
}

func TestLinearOpGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, bias := range []bool{true, false} {
		ins := []gcInput{randIn(rng, 1, true, 2, 3, 5), randIn(rng, 1, true, 5, 4)}
		if bias {
			ins = append(ins, randIn(rng, 1, true, 4))
		}
		gradCheck(t, ins, func(n []*G.Node) *G.Node {
			if bias {
				return LinearOp(n[0], n[1], n[2])
			}
			return LinearOp(n[0], n[1], nil)
		}, func(v [][]float64) []float64 {
			var b []float64
			if bias {
				b = v[2]
			}
			return refLinear(v[0], v[1], b, 6, 5, 4)
		})
	}
}

func TestEmbeddingOpGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 1))
	ids := []float64{3, 0, 3, 6, 1, 2}
	gradCheck(t, []gcInput{randIn(rng, 1, true, 7, 4), constIn(ids, 2, 3)},
		func(n []*G.Node) *G.Node { return EmbeddingOp(n[0], n[1]) },
		func(v [][]float64) []float64 {
			var out []float64
			for _, id := range v[1] {
				out = append(out, v[0][int(id)*4:int(id)*4+4]...)
			}
			return out
		})
}

func TestLayerNormOpGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	gradCheck(t, []gcInput{randIn(rng, 2, true, 2, 3, 8), randIn(rng, 1, true, 8), randIn(rng, 1, true, 8)},
		func(n []*G.Node) *G.Node { return LayerNormOp(n[0], n[1], n[2], 1e-5) },
		func(v [][]float64) []float64 { return refLayerNorm(v[0], v[1], v[2], 6, 8) })
}

func TestGELUOpGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 1))
	gradCheck(t, []gcInput{randIn(rng, 2, true, 3, 7)},
		func(n []*G.Node) *G.Node { return GELUOp(n[0]) },
		func(v [][]float64) []float64 {
			out := make([]float64, len(v[0]))
			for i, x := range v[0] {
				out[i] = refGELU(x)
			}
			return out
		})
}

func TestSelfAttentionOpGrad(t *testing.T) {
	for _, tc := range []struct {
		name           string
		causal, rotary bool
		lens           bool
	}{{"causal", true, false, false}, {"rotary", true, true, false}, {"padded", false, false, true}, {"causal-padded-rotary", true, true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 1))
			B, T, D, H := 2, 5, 8, 2
			ins := []gcInput{randIn(rng, 1, true, B, T, 3*D)}
			lens := []float64{3, 5}
			if tc.lens {
				ins = append(ins, constIn(lens, B))
			}
			gradCheck(t, ins, func(n []*G.Node) *G.Node {
				var l *G.Node
				if tc.lens {
					l = n[1]
				}
				return SelfAttentionOp(n[0], l, AttentionOpConfig{Heads: H, Causal: tc.causal, Rotary: tc.rotary})
			}, func(v [][]float64) []float64 {
				at := func(off int) func(b, t, c int) float64 {
					return func(b, t, c int) float64 { return v[0][(b*T+t)*3*D+off+c] }
				}
				var l []float64
				if tc.lens {
					l = v[1]
				}
				return refAttention(at(0), at(D), at(2*D), B, T, T, D, H, tc.causal, tc.rotary, l)
			})
		})
	}
}

func TestCrossAttentionOpGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 1))
	B, Tq, Tk, D, H := 2, 3, 4, 8, 2
	gradCheck(t, []gcInput{randIn(rng, 1, true, B, Tq, D), randIn(rng, 1, true, B, Tk, 2*D), constIn([]float64{4, 2}, B)},
		func(n []*G.Node) *G.Node { return CrossAttentionOp(n[0], n[1], n[2], AttentionOpConfig{Heads: H}) },
		func(v [][]float64) []float64 {
			q := func(b, t, c int) float64 { return v[0][(b*Tq+t)*D+c] }
			k := func(b, t, c int) float64 { return v[1][(b*Tk+t)*2*D+c] }
			vv := func(b, t, c int) float64 { return v[1][(b*Tk+t)*2*D+D+c] }
			return refAttention(q, k, vv, B, Tq, Tk, D, H, false, false, v[2])
		})
}

func TestLogSoftmaxGatherOpGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1))
	targets := []float64{2, -1, 0, 5, 5, 1}
	gradCheck(t, []gcInput{randIn(rng, 2, true, 2, 3, 6), constIn(targets, 2, 3)},
		func(n []*G.Node) *G.Node { return LogSoftmaxGatherOp(n[0], n[1]) },
		func(v [][]float64) []float64 {
			out := make([]float64, 6)
			for r, tg := range v[1] {
				if tg < 0 {
					continue
				}
				out[r] = refLogSoftmax(v[0][r*6 : r*6+6])[int(tg)]
			}
			return out
		})
}

func TestTemperedLogSoftmaxGatherOpGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 2))
	targets := []float64{2, -1, 0, 5, 5, 1}
	inv := []float64{2, 2, 1, 0.5, 1.25, 4}
	gradCheck(t, []gcInput{randIn(rng, 2, true, 2, 3, 6), constIn(targets, 2, 3), constIn(inv, 2, 3)},
		func(n []*G.Node) *G.Node { return TemperedLogSoftmaxGatherOp(n[0], n[1], n[2]) },
		func(v [][]float64) []float64 {
			out := make([]float64, 6)
			for r, tg := range v[1] {
				if tg < 0 {
					continue
				}
				row := make([]float64, 6)
				for i := range row {
					row[i] = v[0][r*6+i] * v[2][r]
				}
				out[r] = refLogSoftmax(row)[int(tg)]
			}
			return out
		})
}

// At inverse temperature 1 the tempered op is LogSoftmaxGatherOp, to the bit.
func TestTemperedLogSoftmaxGatherOpAtOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 3))
	x := randIn(rng, 2, true, 4, 7)
	tg := constIn([]float64{3, 0, -1, 6}, 4)
	r := []float64{0.3, -1.2, 0.7, 2}
	o1, g1 := runOp(t, []gcInput{x, tg}, r, func(n []*G.Node) *G.Node { return LogSoftmaxGatherOp(n[0], n[1]) })
	o2, g2 := runOp(t, []gcInput{x, tg, constIn([]float64{1, 1, 1, 1}, 4)}, r, func(n []*G.Node) *G.Node { return TemperedLogSoftmaxGatherOp(n[0], n[1], n[2]) })
	if diff := cmp.Diff(o1, o2); diff != "" {
		t.Errorf("outputs differ (-untempered +tempered):\n%s", diff)
	}
	if diff := cmp.Diff(g1, g2); diff != "" {
		t.Errorf("gradients differ (-untempered +tempered):\n%s", diff)
	}
}

func TestTemperedLogSoftmaxGatherOpRejectsBadTemperature(t *testing.T) {
	g := G.NewGraph()
	x := G.NewMatrix(g, ts.Float32, G.WithShape(2, 3), G.WithValue(toDense(ts.Shape{2, 3}, []float64{1, 2, 3, 4, 5, 6})), G.WithName("x"))
	tg := G.NewVector(g, ts.Float32, G.WithShape(2), G.WithValue(toDense(ts.Shape{2}, []float64{0, 1})), G.WithName("tg"))
	inv := G.NewVector(g, ts.Float32, G.WithShape(2), G.WithValue(toDense(ts.Shape{2}, []float64{1, 0})), G.WithName("inv"))
	TemperedLogSoftmaxGatherOp(x, tg, inv)
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err == nil || !strings.Contains(err.Error(), "inverse temperature 0 at row 1") {
		t.Fatalf("RunAll = %v, want an inverse-temperature error", err)
	}
}

func TestCrossEntropyOpGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	targets := []float64{2, -1, 0, 4}
	gradCheck(t, []gcInput{randIn(rng, 2, true, 4, 5), constIn(targets, 4)},
		func(n []*G.Node) *G.Node { return CrossEntropyOp(n[0], n[1]) },
		func(v [][]float64) []float64 {
			var s float64
			c := 0
			for r, tg := range v[1] {
				if tg < 0 {
					continue
				}
				s -= refLogSoftmax(v[0][r*5 : r*5+5])[int(tg)]
				c++
			}
			return []float64{s / float64(c)}
		})
}

func TestKLDivergenceOpGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1))
	gradCheck(t, []gcInput{randIn(rng, 1.5, true, 3, 6), randIn(rng, 1.5, true, 3, 6)},
		func(n []*G.Node) *G.Node { return KLDivergenceOp(n[0], n[1]) },
		func(v [][]float64) []float64 {
			var s float64
			for r := 0; r < 3; r++ {
				lp, lq := refLogSoftmax(v[0][r*6:r*6+6]), refLogSoftmax(v[1][r*6:r*6+6])
				for i := range lp {
					s += math.Exp(lp[i]) * (lp[i] - lq[i])
				}
			}
			return []float64{s / 3}
		})
}

func TestLSTMCellOpGrad(t *testing.T) {
	for _, masked := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(10, 1))
		B, H := 3, 4
		ins := []gcInput{randIn(rng, 1, true, B, 4*H), randIn(rng, 1, true, B, H), randIn(rng, 1, true, B, H)}
		if masked {
			ins = append(ins, constIn([]float64{1, 0, 1}, B))
		}
		gradCheck(t, ins, func(n []*G.Node) *G.Node {
			var m *G.Node
			if masked {
				m = n[3]
			}
			return LSTMCellOp(n[0], n[1], n[2], m)
		}, func(v [][]float64) []float64 {
			sg := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
			out := make([]float64, B*2*H)
			for b := 0; b < B; b++ {
				m := 1.0
				if masked {
					m = v[3][b]
				}
				for j := 0; j < H; j++ {
					z := v[0][b*4*H:]
					i, f, g, o := sg(z[j]), sg(z[H+j]), math.Tanh(z[2*H+j]), sg(z[3*H+j])
					c := f*v[1][b*H+j] + i*g
					out[b*2*H+j] = m*o*math.Tanh(c) + (1-m)*v[2][b*H+j]
					out[b*2*H+H+j] = m*c + (1-m)*v[1][b*H+j]
				}
			}
			return out
		})
	}
}

func TestSmallOpsGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 1))
	t.Run("MeanPool", func(t *testing.T) {
		gradCheck(t, []gcInput{randIn(rng, 1, true, 2, 3, 4)}, func(n []*G.Node) *G.Node { return MeanPoolOp(n[0]) },
			func(v [][]float64) []float64 {
				out := make([]float64, 8)
				for b := 0; b < 2; b++ {
					for t := 0; t < 3; t++ {
						for d := 0; d < 4; d++ {
							out[b*4+d] += v[0][(b*3+t)*4+d] / 3
						}
					}
				}
				return out
			})
	})
	t.Run("FeatureTokens", func(t *testing.T) {
		gradCheck(t, []gcInput{randIn(rng, 1, true, 2, 3), randIn(rng, 1, true, 3, 4), randIn(rng, 1, true, 3, 4)},
			func(n []*G.Node) *G.Node { return FeatureTokensOp(n[0], n[1], n[2]) },
			func(v [][]float64) []float64 {
				out := make([]float64, 24)
				for b := 0; b < 2; b++ {
					for f := 0; f < 3; f++ {
						for d := 0; d < 4; d++ {
							out[(b*3+f)*4+d] = v[0][b*3+f]*v[1][f*4+d] + v[2][f*4+d]
						}
					}
				}
				return out
			})
	})
	t.Run("SliceStackAdd", func(t *testing.T) {
		gradCheck(t, []gcInput{randIn(rng, 1, true, 2, 3, 4), randIn(rng, 1, true, 2, 2)},
			func(n []*G.Node) *G.Node {
				a := ColSliceOp(TimeSliceOp(n[0], 2), 1, 3)
				b := AddOp(a, n[1])
				return TimeStackOp(b, ColSliceOp(TimeSliceOp(n[0], 0), 0, 2))
			},
			func(v [][]float64) []float64 {
				x := func(b, t, c int) float64 { return v[0][(b*3+t)*4+c] }
				var out []float64
				for b := 0; b < 2; b++ {
					out = append(out, x(b, 2, 1)+v[1][b*2], x(b, 2, 2)+v[1][b*2+1], x(b, 0, 0), x(b, 0, 1))
				}
				return out
			})
	})
}

// TestLinearMatchesGorgonia compares the fused Linear and log-softmax ops
// with the same computation composed from Gorgonia's own ops.
func TestFusedMatchesGorgonia(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 1))
	x, w, b := randIn(rng, 1, true, 6, 5), randIn(rng, 1, true, 5, 4), randIn(rng, 1, true, 4)
	r := make([]float64, 6)
	for i := range r {
		r[i] = rng.NormFloat64()
	}
	targets := []float64{0, 3, 1, 2, 2, 0}
	tg := constIn(targets, 6)
	fused := func(n []*G.Node) *G.Node { return LogSoftmaxGatherOp(GELUOp(LinearOp(n[0], n[1], n[2])), n[3]) }
	oneHot := make([]float64, 24)
	for i, v := range targets {
		oneHot[i*4+int(v)] = 1
	}
	composed := func(n []*G.Node) *G.Node {
		y := G.Must(G.BroadcastAdd(G.Must(G.Mul(n[0], n[1])), n[2], nil, []byte{0}))
		// GELU, tanh form, from Gorgonia primitives.
		c := func(v float64) *G.Node { return G.NewConstant(float32(v)) }
		y3 := G.Must(G.HadamardProd(y, G.Must(G.HadamardProd(y, y))))
		in := G.Must(G.Mul(c(0.7978845608028654), G.Must(G.Add(y, G.Must(G.Mul(c(0.044715), y3))))))
		gl := G.Must(G.HadamardProd(G.Must(G.Mul(c(0.5), y)), G.Must(G.Add(c(1), G.Must(G.Tanh(in))))))
		ls := G.Must(G.LogSoftMax(gl))
		oh := G.NewTensor(n[0].Graph(), ts.Float32, 2, G.WithShape(6, 4), G.WithValue(toDense(ts.Shape{6, 4}, oneHot)), G.WithName("onehot"))
		return G.Must(G.Sum(G.Must(G.HadamardProd(ls, oh)), 1))
	}
	ins := []gcInput{x, w, b, tg}
	o1, g1 := runOp(t, ins, r, fused)
	o2, g2 := runOp(t, ins, r, composed)
	for i := range o1 {
		if math.Abs(float64(o1[i]-o2[i])) > 1e-4 {
			t.Fatalf("forward[%d]: fused %v, Gorgonia %v", i, o1[i], o2[i])
		}
	}
	for k := range g1 {
		for i := range g1[k] {
			if math.Abs(float64(g1[k][i]-g2[k][i])) > 1e-4 {
				t.Fatalf("grad %d[%d]: fused %v, Gorgonia %v", k, i, g1[k][i], g2[k][i])
			}
		}
	}
}

func TestLSTMLayerOpGrad(t *testing.T) {
	for _, masked := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(13, 1))
		B, T, H := 2, 4, 3
		ins := []gcInput{randIn(rng, 1, true, B, T, 4*H), randIn(rng, 0.5, true, H, 4*H)}
		mk := []float64{1, 1, 1, 1, 1, 0, 1, 0}
		if masked {
			ins = append(ins, constIn(mk, B, T))
		}
		gradCheck(t, ins, func(n []*G.Node) *G.Node {
			var m *G.Node
			if masked {
				m = n[2]
			}
			return LSTMLayerOp(n[0], n[1], m)
		}, func(v [][]float64) []float64 {
			sg := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
			out := make([]float64, B*T*H)
			for b := 0; b < B; b++ {
				h, c := make([]float64, H), make([]float64, H)
				for s := 0; s < T; s++ {
					m := 1.0
					if masked {
						m = mk[b*T+s]
					}
					z := make([]float64, 4*H)
					for j := range z {
						z[j] = v[0][(b*T+s)*4*H+j]
						for k := 0; k < H; k++ {
							z[j] += h[k] * v[1][k*4*H+j]
						}
					}
					nh, nc := make([]float64, H), make([]float64, H)
					for j := 0; j < H; j++ {
						i, f, g, o := sg(z[j]), sg(z[H+j]), math.Tanh(z[2*H+j]), sg(z[3*H+j])
						cc := f*c[j] + i*g
						nh[j] = m*o*math.Tanh(cc) + (1-m)*h[j]
						nc[j] = m*cc + (1-m)*c[j]
					}
					h, c = nh, nc
					copy(out[(b*T+s)*H:], h)
				}
			}
			return out
		})
	}
}

// refCopyMix is CopyMixOp in float64: the pointer-generator log-mixture.
func refCopyMix(z, q, k, u, ids []float64, B, T, V, C int) []float64 {
	out := make([]float64, B*T*V)
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			row := b*T + t
			ls := refLogSoftmax(z[row*V : (row+1)*V])
			g := 1 / (1 + math.Exp(-u[row]))
			s := make([]float64, t+1)
			mx := math.Inf(-1)
			for j := range s {
				for c := 0; c < C; c++ {
					s[j] += q[row*C+c] * k[(b*T+j)*C+c]
				}
				s[j] /= math.Sqrt(float64(C))
				mx = max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			for v := 0; v < V; v++ {
				p := g * math.Exp(ls[v])
				for j := range s {
					if int(ids[b*T+j]) == v {
						p += (1 - g) * s[j] / sum
					}
				}
				out[row*V+v] = math.Log(p)
			}
		}
	}
	return out
}

func TestCopyMixOpGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 3))
	const B, T, V, C = 2, 5, 7, 3
	// Repeated tokens (3 twice in the first row) and tokens never seen.
	ids := []float64{3, 1, 3, 0, 6, 2, 2, 5, 4, 2}
	gradCheck(t, []gcInput{randIn(rng, 1.5, true, B, T, V), randIn(rng, 1, true, B, T, C), randIn(rng, 1, true, B, T, C),
		randIn(rng, 1, true, B, T, 1), constIn(ids, B, T)},
		func(n []*G.Node) *G.Node { return CopyMixOp(n[0], n[1], n[2], n[3], n[4]) },
		func(v [][]float64) []float64 { return refCopyMix(v[0], v[1], v[2], v[3], v[4], B, T, V, C) })
}

func TestCopyMixOpNormalisedAndRejectsBadIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 4))
	const B, T, V, C = 1, 4, 6, 2
	ins := []gcInput{randIn(rng, 3, true, B, T, V), randIn(rng, 2, false, B, T, C), randIn(rng, 2, false, B, T, C),
		randIn(rng, 2, false, B, T, 1), constIn([]float64{5, 5, 0, 1}, B, T)}
	out, _ := runOp(t, ins, make([]float64, B*T*V), func(n []*G.Node) *G.Node { return CopyMixOp(n[0], n[1], n[2], n[3], n[4]) })
	for r := 0; r < B*T; r++ {
		var s float64
		for _, lp := range out[r*V : (r+1)*V] {
			s += math.Exp(float64(lp))
		}
		if math.Abs(s-1) > 1e-5 {
			t.Errorf("row %d: probabilities sum to %v", r, s)
		}
	}
	g := G.NewGraph()
	mk := func(name string, v []float32, shape ...int) *G.Node {
		return G.NewTensor(g, ts.Float32, len(shape), G.WithShape(shape...), G.WithValue(ts.New(ts.WithShape(shape...), ts.WithBacking(v))), G.WithName(name))
	}
	o := CopyMixOp(mk("z", make([]float32, T*V), B, T, V), mk("q", make([]float32, T*C), B, T, C), mk("k", make([]float32, T*C), B, T, C),
		mk("u", make([]float32, T), B, T, 1), mk("ids", []float32{0, 1, 6, 2}, B, T))
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err == nil || !strings.Contains(err.Error(), "outside vocabulary") {
		t.Errorf("token id 6 with V=6: got error %v", err)
	}
	_ = o
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "CopyMixOp") {
			t.Errorf("mismatched shapes: recovered %v", r)
		}
	}()
	CopyMixOp(mk("z2", make([]float32, T*V), B, T, V), mk("q2", make([]float32, T*C), B, T, C), mk("k2", make([]float32, T*3), B, T, 3),
		mk("u2", make([]float32, T), B, T, 1), mk("ids2", make([]float32, T), B, T))
}
