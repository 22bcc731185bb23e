package policies

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/rl"
)

// SoftmaxConfig configures a Softmax policy.
type SoftmaxConfig struct {
	// In is the observation size (use 1 with Obs = [1] for a bandit).
	In int
	// Hidden is the width of one tanh hidden layer; 0 makes the policy
	// linear in the observation.
	Hidden int
	// Actions is the number of discrete actions.
	Actions int
	// Value adds a linear value head on the features (hidden layer or
	// observation), returned through LossFunc's values.
	Value bool
	// Adam optimizer: learning rate (default 0.01), β1 (0.9), β2 (0.999),
	// ε (1e-8).
	LR, Beta1, Beta2, Eps float64
	// MaxGradNorm clips the global gradient norm before the step (0: none).
	MaxGradNorm float64
	// InitScale is the std of the initial weights (default 1/sqrt(fan-in));
	// output-layer weights start at zero so the initial policy is uniform.
	InitScale float64
	// Seed seeds the initial weights.
	Seed uint64
}

// Softmax is a classic stochastic policy π(a|x) = softmax(W·h(x) + b)_a over
// discrete actions, with h(x) = x (linear) or tanh(W₁x + b₁) (one hidden
// layer), and an optional value head V(x) = v·h(x) + c. Gradients are exact
// and analytic, parameters are float64 and the optimizer is Adam (Kingma & Ba
// 2015). It implements rl.Policy and rl.Evaluator.
//
// A Sample's Obs holds either one observation of size In shared by all its
// actions, or len(Actions) observations back to back (one per step).
//
// A Softmax is not safe for concurrent use.
type Softmax struct {
	cfg     SoftmaxConfig
	params  []float64
	grads   []float64
	m, v    []float64
	t       int
	version int64

	// offsets into params
	w1, b1, w2, b2, vw, vb int
	feat                   int
}

// NewSoftmax returns a Softmax policy. It panics on non-positive sizes.
func NewSoftmax(cfg SoftmaxConfig) *Softmax {
	if cfg.In <= 0 || cfg.Actions <= 0 || cfg.Hidden < 0 {
		panic(fmt.Sprintf("policies: NewSoftmax: bad sizes In=%d Hidden=%d Actions=%d", cfg.In, cfg.Hidden, cfg.Actions))
	}
	if cfg.LR == 0 {
		cfg.LR = 0.01
	}
	if cfg.Beta1 == 0 {
		cfg.Beta1 = 0.9
	}
	if cfg.Beta2 == 0 {
		cfg.Beta2 = 0.999
	}
	if cfg.Eps == 0 {
		cfg.Eps = 1e-8
	}
	p := &Softmax{cfg: cfg}
	n := 0
	take := func(k int) int { o := n; n += k; return o }
	p.feat = cfg.In
	if cfg.Hidden > 0 {
		p.w1 = take(cfg.Hidden * cfg.In)
		p.b1 = take(cfg.Hidden)
		p.feat = cfg.Hidden
	}
	p.w2 = take(cfg.Actions * p.feat)
	p.b2 = take(cfg.Actions)
	if cfg.Value {
		p.vw = take(p.feat)
		p.vb = take(1)
	}
	p.params = make([]float64, n)
	p.grads = make([]float64, n)
	p.m = make([]float64, n)
	p.v = make([]float64, n)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	if cfg.Hidden > 0 {
		s := cfg.InitScale
		if s == 0 {
			s = 1 / math.Sqrt(float64(cfg.In))
		}
		for i := 0; i < cfg.Hidden*cfg.In; i++ {
			p.params[p.w1+i] = rng.NormFloat64() * s
		}
	}
	return p
}

// NumParams is the number of parameters.
func (p *Softmax) NumParams() int { return len(p.params) }

// Params returns the flat parameter vector (not a copy).
func (p *Softmax) Params() []float64 { return p.params }

// Grads returns the flat accumulated gradient (not a copy).
func (p *Softmax) Grads() []float64 { return p.grads }

// Clone returns an independent copy of the parameters and optimizer state,
// e.g. to freeze a reference policy.
func (p *Softmax) Clone() *Softmax {
	c := *p
	c.params = append([]float64(nil), p.params...)
	c.grads = append([]float64(nil), p.grads...)
	c.m = append([]float64(nil), p.m...)
	c.v = append([]float64(nil), p.v...)
	return &c
}

// forward computes the features h, the log-softmax of the logits into logp
// and returns the value (0 without a value head).
func (p *Softmax) forward(x []float32, h, logp []float64) float64 {
	In, A, F := p.cfg.In, p.cfg.Actions, p.feat
	if p.cfg.Hidden > 0 {
		for j := 0; j < F; j++ {
			s := p.params[p.b1+j]
			row := p.params[p.w1+j*In : p.w1+(j+1)*In]
			for i, xi := range x {
				s += row[i] * float64(xi)
			}
			h[j] = math.Tanh(s)
		}
	} else {
		for i, xi := range x {
			h[i] = float64(xi)
		}
	}
	mx := math.Inf(-1)
	for a := 0; a < A; a++ {
		s := p.params[p.b2+a]
		row := p.params[p.w2+a*F : p.w2+(a+1)*F]
		for j, hj := range h {
			s += row[j] * hj
		}
		logp[a] = s
		if s > mx {
			mx = s
		}
	}
	var z float64
	for a := 0; a < A; a++ {
		z += math.Exp(logp[a] - mx)
	}
	lz := mx + math.Log(z)
	for a := 0; a < A; a++ {
		logp[a] -= lz
	}
	if !p.cfg.Value {
		return 0
	}
	v := p.params[p.vb]
	for j, hj := range h {
		v += p.params[p.vw+j] * hj
	}
	return v
}

// obsAt returns the observation of step t of sample s.
func (p *Softmax) obsAt(s *rl.Sample, t int) []float32 {
	if len(s.Obs) == p.cfg.In {
		return s.Obs
	}
	return s.Obs[t*p.cfg.In : (t+1)*p.cfg.In]
}

func (p *Softmax) check(batch []rl.Sample) error {
	for i := range batch {
		s := &batch[i]
		if len(s.Obs) != p.cfg.In && len(s.Obs) != p.cfg.In*len(s.Actions) {
			return fmt.Errorf("policies: sample %d: observation of length %d, want %d or %d×%d actions", i, len(s.Obs), p.cfg.In, p.cfg.In, len(s.Actions))
		}
		for t, a := range s.Actions {
			if a < 0 || a >= p.cfg.Actions {
				return fmt.Errorf("policies: sample %d: action %d at step %d out of range [0,%d)", i, a, t, p.cfg.Actions)
			}
		}
	}
	return nil
}

// Evaluate returns the log-probs of every sample's actions and, with a value
// head, the values (nil otherwise). It implements rl.Evaluator.
func (p *Softmax) Evaluate(batch []rl.Sample) (logp, values [][]float32, err error) {
	if err := p.check(batch); err != nil {
		return nil, nil, err
	}
	h := make([]float64, p.feat)
	lp := make([]float64, p.cfg.Actions)
	logp = make([][]float32, len(batch))
	if p.cfg.Value {
		values = make([][]float32, len(batch))
	}
	for i := range batch {
		s := &batch[i]
		logp[i] = make([]float32, len(s.Actions))
		if values != nil {
			values[i] = make([]float32, len(s.Actions))
		}
		for t, a := range s.Actions {
			v := p.forward(p.obsAt(s, t), h, lp)
			logp[i][t] = float32(lp[a])
			if values != nil {
				values[i][t] = float32(v)
			}
		}
	}
	return logp, values, nil
}

// LogProbs implements rl.Policy.
func (p *Softmax) LogProbs(batch []rl.Sample) ([][]float32, error) {
	lp, _, err := p.Evaluate(batch)
	return lp, err
}

// ForwardBackward implements rl.Policy: it evaluates log-probs and values,
// calls loss and accumulates ∂loss/∂θ into Grads.
func (p *Softmax) ForwardBackward(batch []rl.Sample, loss rl.LossFunc) error {
	logp, values, err := p.Evaluate(batch)
	if err != nil {
		return err
	}
	_, dlogp, dvalues := loss(logp, values)
	if len(dlogp) != len(batch) {
		return fmt.Errorf("policies: loss returned %d gradient rows for %d samples", len(dlogp), len(batch))
	}
	In, A, F := p.cfg.In, p.cfg.Actions, p.feat
	h := make([]float64, F)
	lp := make([]float64, A)
	dz := make([]float64, A)
	dh := make([]float64, F)
	for i := range batch {
		s := &batch[i]
		if len(dlogp[i]) != len(s.Actions) {
			return fmt.Errorf("policies: loss returned %d gradients for %d actions", len(dlogp[i]), len(s.Actions))
		}
		for t, a := range s.Actions {
			g := float64(dlogp[i][t])
			var gv float64
			if dvalues != nil && dvalues[i] != nil {
				gv = float64(dvalues[i][t])
			}
			if g == 0 && gv == 0 {
				continue
			}
			x := p.obsAt(s, t)
			p.forward(x, h, lp)
			// d logp_a / d z_k = [k=a] − π_k
			for k := 0; k < A; k++ {
				dz[k] = -g * math.Exp(lp[k])
			}
			dz[a] += g
			for j := range dh {
				dh[j] = 0
			}
			for k := 0; k < A; k++ {
				p.grads[p.b2+k] += dz[k]
				row := p.params[p.w2+k*F : p.w2+(k+1)*F]
				grow := p.grads[p.w2+k*F : p.w2+(k+1)*F]
				for j := 0; j < F; j++ {
					grow[j] += dz[k] * h[j]
					dh[j] += dz[k] * row[j]
				}
			}
			if p.cfg.Value && gv != 0 {
				p.grads[p.vb] += gv
				for j := 0; j < F; j++ {
					p.grads[p.vw+j] += gv * h[j]
					dh[j] += gv * p.params[p.vw+j]
				}
			}
			if p.cfg.Hidden > 0 {
				for j := 0; j < F; j++ {
					dp := dh[j] * (1 - h[j]*h[j])
					p.grads[p.b1+j] += dp
					grow := p.grads[p.w1+j*In : p.w1+(j+1)*In]
					for k, xk := range x {
						grow[k] += dp * float64(xk)
					}
				}
			}
		}
	}
	return nil
}

// Step implements rl.Policy: one Adam step on the accumulated gradients
// (clipped to MaxGradNorm), which are then cleared. A non-finite gradient
// skips the step, leaving parameters and version unchanged.
func (p *Softmax) Step() (rl.StepInfo, error) {
	var n2 float64
	for _, g := range p.grads {
		n2 += g * g
	}
	norm := math.Sqrt(n2)
	info := rl.StepInfo{GradNorm: norm}
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		info.Skipped = true
		clear(p.grads)
		return info, nil
	}
	scale := 1.0
	if p.cfg.MaxGradNorm > 0 && norm > p.cfg.MaxGradNorm {
		scale = p.cfg.MaxGradNorm / norm
	}
	p.t++
	b1, b2 := p.cfg.Beta1, p.cfg.Beta2
	c1 := 1 - math.Pow(b1, float64(p.t))
	c2 := 1 - math.Pow(b2, float64(p.t))
	for i, g := range p.grads {
		g *= scale
		p.m[i] = b1*p.m[i] + (1-b1)*g
		p.v[i] = b2*p.v[i] + (1-b2)*g*g
		p.params[i] -= p.cfg.LR * (p.m[i] / c1) / (math.Sqrt(p.v[i]/c2) + p.cfg.Eps)
	}
	clear(p.grads)
	p.version++
	return info, nil
}

// Version implements rl.Policy.
func (p *Softmax) Version() int64 { return p.version }

// Probs writes π(·|obs) into dst (allocated when nil or short) and returns it.
func (p *Softmax) Probs(dst []float64, obs []float32) []float64 {
	if len(obs) != p.cfg.In {
		panic(fmt.Sprintf("policies: Probs: observation of length %d, want %d", len(obs), p.cfg.In))
	}
	if len(dst) < p.cfg.Actions {
		dst = make([]float64, p.cfg.Actions)
	}
	dst = dst[:p.cfg.Actions]
	h := make([]float64, p.feat)
	p.forward(obs, h, dst)
	for i := range dst {
		dst[i] = math.Exp(dst[i])
	}
	return dst
}

// Value returns V(obs), or 0 without a value head.
func (p *Softmax) Value(obs []float32) float64 {
	h := make([]float64, p.feat)
	lp := make([]float64, p.cfg.Actions)
	return p.forward(obs, h, lp)
}

// Act samples an action for obs and returns it with its log-probability.
func (p *Softmax) Act(obs []float32, rng *rand.Rand) (action int, logp float32) {
	pr := p.Probs(nil, obs)
	u := rng.Float64()
	var c float64
	action = len(pr) - 1
	for a, q := range pr {
		c += q
		if u < c {
			action = a
			break
		}
	}
	return action, float32(math.Log(pr[action]))
}

var (
	_ rl.Policy    = (*Softmax)(nil)
	_ rl.Evaluator = (*Softmax)(nil)
)
