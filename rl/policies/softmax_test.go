package policies

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/rl"
)

// lossOf evaluates Σ c·logp + Σ d·v in float64 with the current parameters.
func lossOf(p *Softmax, batch []rl.Sample, c, d [][]float64) float64 {
	h := make([]float64, p.feat)
	lp := make([]float64, p.cfg.Actions)
	var L float64
	for i := range batch {
		s := &batch[i]
		for t, a := range s.Actions {
			v := p.forward(p.obsAt(s, t), h, lp)
			L += c[i][t] * lp[a]
			if d != nil {
				L += d[i][t] * v
			}
		}
	}
	return L
}

func TestSoftmaxGradientFiniteDifference(t *testing.T) {
	cases := []struct {
		name    string
		cfg     SoftmaxConfig
		perStep bool
	}{
		{"linear", SoftmaxConfig{In: 3, Actions: 4}, false},
		{"linear-value", SoftmaxConfig{In: 3, Actions: 4, Value: true}, false},
		{"mlp", SoftmaxConfig{In: 3, Hidden: 5, Actions: 4}, false},
		{"mlp-value-perstep", SoftmaxConfig{In: 3, Hidden: 5, Actions: 4, Value: true}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			tc.cfg.Seed = 3
			p := NewSoftmax(tc.cfg)
			for i := range p.params { // move away from the zero init
				p.params[i] = 0.5 * rng.NormFloat64()
			}
			var batch []rl.Sample
			var c, d [][]float64
			for i := 0; i < 4; i++ {
				n := 1 + rng.IntN(3)
				s := rl.Sample{}
				steps := 1
				if tc.perStep {
					steps = n
				}
				for k := 0; k < steps*3; k++ {
					s.Obs = append(s.Obs, float32(rng.NormFloat64()))
				}
				ci := make([]float64, n)
				di := make([]float64, n)
				for k := 0; k < n; k++ {
					s.Actions = append(s.Actions, rng.IntN(4))
					ci[k] = rng.NormFloat64()
					di[k] = rng.NormFloat64()
				}
				batch = append(batch, s)
				c = append(c, ci)
				d = append(d, di)
			}
			if !tc.cfg.Value {
				d = nil
			}
			loss := func(logp, values [][]float32) (float64, [][]float32, [][]float32) {
				dl := make([][]float32, len(c))
				var dv [][]float32
				for i := range c {
					dl[i] = make([]float32, len(c[i]))
					for k := range c[i] {
						dl[i][k] = float32(c[i][k])
					}
				}
				if d != nil {
					if values == nil {
						t.Fatal("values nil with a value head")
					}
					dv = make([][]float32, len(d))
					for i := range d {
						dv[i] = make([]float32, len(d[i]))
						for k := range d[i] {
							dv[i][k] = float32(d[i][k])
						}
					}
				}
				return 0, dl, dv
			}
			// float32 loss gradients: compare against the float32-rounded
			// coefficients.
			for i := range c {
				for k := range c[i] {
					c[i][k] = float64(float32(c[i][k]))
					if d != nil {
						d[i][k] = float64(float32(d[i][k]))
					}
				}
			}
			if err := p.ForwardBackward(batch, loss); err != nil {
				t.Fatal(err)
			}
			const h = 1e-6
			var maxErr float64
			for j := range p.params {
				old := p.params[j]
				p.params[j] = old + h
				lp := lossOf(p, batch, c, d)
				p.params[j] = old - h
				lm := lossOf(p, batch, c, d)
				p.params[j] = old
				num := (lp - lm) / (2 * h)
				e := math.Abs(num-p.grads[j]) / math.Max(1, math.Abs(num))
				maxErr = math.Max(maxErr, e)
			}
			if maxErr > 1e-6 {
				t.Errorf("max relative gradient error %.3g over %d params", maxErr, len(p.params))
			}
		})
	}
}

func TestSoftmaxErrors(t *testing.T) {
	p := NewSoftmax(SoftmaxConfig{In: 2, Actions: 3})
	if _, err := p.LogProbs([]rl.Sample{{Obs: []float32{1}, Actions: []int{0}}}); err == nil {
		t.Error("short observation accepted")
	}
	if _, err := p.LogProbs([]rl.Sample{{Obs: []float32{1, 2}, Actions: []int{3}}}); err == nil {
		t.Error("out-of-range action accepted")
	}
}

func TestSoftmaxStepSkipsNaN(t *testing.T) {
	p := NewSoftmax(SoftmaxConfig{In: 1, Actions: 2})
	p.grads[0] = math.NaN()
	info, err := p.Step()
	if err != nil || !info.Skipped || p.Version() != 0 {
		t.Fatalf("info %+v err %v version %d", info, err, p.Version())
	}
	for _, x := range p.params {
		if x != 0 {
			t.Fatal("parameters changed by a skipped step")
		}
	}
}

func TestSoftmaxInitialUniform(t *testing.T) {
	p := NewSoftmax(SoftmaxConfig{In: 3, Hidden: 4, Actions: 5, Seed: 9})
	pr := p.Probs(nil, []float32{1, -2, 0.5})
	for _, q := range pr {
		if math.Abs(q-0.2) > 1e-12 {
			t.Fatalf("initial policy not uniform: %v", pr)
		}
	}
}

func ExampleSoftmax() {
	p := NewSoftmax(SoftmaxConfig{In: 2, Actions: 3, LR: 0.1})
	obs := []float32{1, 0}
	batch := []rl.Sample{{Obs: obs, Actions: []int{2}}}
	// ascend log π(2|obs) for 50 steps: loss = −log π, dloss/dlogπ = −1
	for i := 0; i < 50; i++ {
		p.ForwardBackward(batch, func(logp, _ [][]float32) (float64, [][]float32, [][]float32) {
			return -float64(logp[0][0]), [][]float32{{-1}}, nil
		})
		p.Step()
	}
	fmt.Printf("π(2) = %.2f after %d steps\n", p.Probs(nil, obs)[2], p.Version())
	// Output: π(2) = 1.00 after 50 steps
}
