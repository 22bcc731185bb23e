package nn

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	ts "gorgonia.org/tensor"
)

func testParams() []*Param {
	s := NewStore(1)
	w := s.GetOrCreate("w", ts.Shape{2, 2}, Normal(1))
	b := s.GetOrCreate("b", ts.Shape{2}, Normal(1))
	copy(w.Grad, []float32{0.5, -1, 2, 0.1})
	copy(b.Grad, []float32{-0.3, 0.7})
	return []*Param{w, b}
}

// refAdam is a float64 Adam/AdamW step.
func refAdam(w, g, m, v []float64, lr, b1, b2, eps, wd float64, t int, decoupled bool) {
	for i := range w {
		gi := g[i]
		if !decoupled {
			gi += wd * w[i]
		}
		m[i] = b1*m[i] + (1-b1)*gi
		v[i] = b2*v[i] + (1-b2)*gi*gi
		mh := m[i] / (1 - math.Pow(b1, float64(t)))
		vh := v[i] / (1 - math.Pow(b2, float64(t)))
		if decoupled {
			w[i] -= lr * wd * w[i]
		}
		w[i] -= lr * mh / (math.Sqrt(vh) + eps)
	}
}

func TestAdamMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wd        float64
		decoupled bool
	}{{"adam", 0, false}, {"adam-l2", 0.1, false}, {"adamw", 0.1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ps := testParams()
			opt := NewAdam(Constant(0.01))
			opt.WeightDecay, opt.Decoupled = tc.wd, tc.decoupled
			type st struct{ w, g, m, v []float64 }
			ref := make([]st, len(ps))
			for i, p := range ps {
				for j := range p.Grad {
					ref[i].w = append(ref[i].w, float64(p.Data()[j]))
					ref[i].g = append(ref[i].g, float64(p.Grad[j]))
				}
				ref[i].m, ref[i].v = make([]float64, len(p.Grad)), make([]float64, len(p.Grad))
			}
			for step := 1; step <= 3; step++ {
				opt.Update(ps)
				for i, p := range ps {
					wd := tc.wd
					if p.NoDecay {
						wd = 0
					}
					refAdam(ref[i].w, ref[i].g, ref[i].m, ref[i].v, 0.01, 0.9, 0.999, 1e-8, wd, step, tc.decoupled)
				}
			}
			for i, p := range ps {
				got := make([]float64, len(p.Grad))
				for j, v := range p.Data() {
					got[j] = float64(v)
				}
				if d := cmp.Diff(ref[i].w, got, cmpopts.EquateApprox(0, 1e-6)); d != "" {
					t.Errorf("%s:\n%s", p.Name, d)
				}
			}
		})
	}
}

func TestSGDMomentum(t *testing.T) {
	ps := testParams()
	w0 := float64(ps[0].Data()[0])
	opt := NewSGD(Constant(0.1), 0.9)
	opt.Update(ps)
	opt.Update(ps)
	// v1 = g, v2 = 0.9g + g; w = w0 − 0.1(g + 1.9g)
	want := w0 - 0.1*(0.5+1.9*0.5)
	if got := float64(ps[0].Data()[0]); math.Abs(got-want) > 1e-6 {
		t.Fatalf("SGD momentum: got %v want %v", got, want)
	}
}

func TestSchedulesAndClip(t *testing.T) {
	s := WarmupCosine(1, 4, 14, 0.1)
	for _, c := range []struct {
		step int
		want float64
	}{{0, 0.25}, {3, 1}, {4, 1}, {9, 0.55}, {14, 0.1}, {100, 0.1}} {
		if got := s(c.step); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("WarmupCosine(%d) = %v, want %v", c.step, got, c.want)
		}
	}
	ps := testParams()
	n := GradNorm(ps)
	want := math.Sqrt(0.25 + 1 + 4 + 0.01 + 0.09 + 0.49)
	if math.Abs(n-want) > 1e-6 {
		t.Fatalf("GradNorm %v want %v", n, want)
	}
	ClipGradNorm(ps, 1)
	if n := GradNorm(ps); math.Abs(n-1) > 1e-6 {
		t.Fatalf("clipped norm %v", n)
	}
}

func TestOptimizerStateRoundTrip(t *testing.T) {
	ps := testParams()
	a := NewAdamW(Constant(0.01), 0.1)
	a.Update(ps)
	b := NewAdamW(Constant(0.01), 0.1)
	if err := b.SetState(a.State()); err != nil {
		t.Fatal(err)
	}
	if b.Steps() != 1 || !cmp.Equal(a.State(), b.State()) {
		t.Fatal("state did not round-trip")
	}
}
