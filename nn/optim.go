package nn

import (
	"fmt"
	"math"

	kern "github.com/troupe-ml/troupe/tensor"
)

// Schedule gives the learning rate for optimizer step t (0-based).
type Schedule func(step int) float64

// Constant is a fixed learning rate.
func Constant(lr float64) Schedule { return func(int) float64 { return lr } }

// WarmupCosine rises linearly from 0 to peak over warmup steps, then decays
// along a half cosine to minLR at step total (Loshchilov & Hutter 2017,
// SGDR, without restarts), staying at minLR afterwards.
func WarmupCosine(peak float64, warmup, total int, minLR float64) Schedule {
	return func(t int) float64 {
		if t < warmup {
			return peak * float64(t+1) / float64(warmup)
		}
		if t >= total || total <= warmup {
			return minLR
		}
		p := float64(t-warmup) / float64(total-warmup)
		return minLR + 0.5*(peak-minLR)*(1+math.Cos(math.Pi*p))
	}
}

// Optimizer updates parameters from their accumulated gradients.
type Optimizer interface {
	// Update applies one step to params using p.Grad (it does not clear them).
	Update(params []*Param)
	// Steps is the number of updates applied so far.
	Steps() int
	// State returns the optimizer's state tensors by name (for checkpoints);
	// SetState restores them.
	State() map[string][]float32
	SetState(map[string][]float32) error
}

// Adam is Adam (Kingma & Ba 2015) or, with WeightDecay > 0 and Decoupled,
// AdamW (Loshchilov & Hutter 2019): decay is applied to the weights
// directly, lr·wd·w, and skipped for parameters marked NoDecay.
type Adam struct {
	LR                Schedule
	Beta1, Beta2, Eps float64
	WeightDecay       float64
	Decoupled         bool
	step              int
	m, v              map[string][]float32
}

// NewAdam returns Adam with β = (0.9, 0.999), ε = 1e-8 and no weight decay.
func NewAdam(lr Schedule) *Adam {
	return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, m: map[string][]float32{}, v: map[string][]float32{}}
}

// NewAdamW returns AdamW with β = (0.9, 0.999), ε = 1e-8 and decoupled
// weight decay wd.
func NewAdamW(lr Schedule, wd float64) *Adam {
	a := NewAdam(lr)
	a.WeightDecay, a.Decoupled = wd, true
	return a
}

// Steps implements Optimizer.
func (a *Adam) Steps() int { return a.step }

// Update implements Optimizer.
func (a *Adam) Update(params []*Param) {
	lr := a.LR(a.step)
	a.step++
	b1, b2 := a.Beta1, a.Beta2
	c1 := 1 - math.Pow(b1, float64(a.step))
	c2 := 1 - math.Pow(b2, float64(a.step))
	stepSize := float32(lr / c1)
	rc2 := float32(1 / math.Sqrt(c2))
	eps := float32(a.Eps)
	fb1, fb2 := float32(b1), float32(b2)
	for _, p := range params {
		m, ok := a.m[p.Name]
		if !ok {
			m = make([]float32, len(p.Grad))
			a.m[p.Name] = m
			a.v[p.Name] = make([]float32, len(p.Grad))
		}
		v := a.v[p.Name]
		w := p.Data()
		wd := float32(0)
		if !p.NoDecay {
			wd = float32(a.WeightDecay)
		}
		if a.Decoupled || wd == 0 {
			kern.AdamW(w, p.Grad, m, v, kern.AdamWParams{LR: float32(lr), Beta1: fb1, Beta2: fb2,
				Eps: eps, WeightDecay: wd, Step: a.step})
			continue
		}
		decay := float32(1)
		if a.Decoupled {
			decay = 1 - float32(lr)*wd
		}
		for i, g := range p.Grad {
			if !a.Decoupled && wd != 0 {
				g += wd * w[i]
			}
			mi := fb1*m[i] + (1-fb1)*g
			vi := fb2*v[i] + (1-fb2)*g*g
			m[i], v[i] = mi, vi
			w[i] = w[i]*decay - stepSize*mi/(float32(math.Sqrt(float64(vi)))*rc2+eps)
		}
	}
}

// State implements Optimizer: m.<name>, v.<name> and "step".
func (a *Adam) State() map[string][]float32 {
	st := map[string][]float32{"step": {float32(a.step)}}
	for n, m := range a.m {
		st["m."+n] = m
		st["v."+n] = a.v[n]
	}
	return st
}

// SetState implements Optimizer.
func (a *Adam) SetState(st map[string][]float32) error {
	s, ok := st["step"]
	if !ok || len(s) != 1 {
		return fmt.Errorf("nn: Adam state has no step")
	}
	a.step = int(s[0])
	a.m, a.v = map[string][]float32{}, map[string][]float32{}
	for k, v := range st {
		switch {
		case len(k) > 2 && k[:2] == "m.":
			a.m[k[2:]] = append([]float32(nil), v...)
		case len(k) > 2 && k[:2] == "v.":
			a.v[k[2:]] = append([]float32(nil), v...)
		}
	}
	for n := range a.m {
		if _, ok := a.v[n]; !ok {
			return fmt.Errorf("nn: Adam state has m but no v for %q", n)
		}
	}
	return nil
}

// SGD is stochastic gradient descent with (heavy-ball) momentum and
// optional L2 weight decay added to the gradient.
type SGD struct {
	LR          Schedule
	Momentum    float64
	WeightDecay float64
	step        int
	vel         map[string][]float32
}

// NewSGD returns SGD with the given momentum (0 for plain SGD).
func NewSGD(lr Schedule, momentum float64) *SGD {
	return &SGD{LR: lr, Momentum: momentum, vel: map[string][]float32{}}
}

// Steps implements Optimizer.
func (o *SGD) Steps() int { return o.step }

// Update implements Optimizer.
func (o *SGD) Update(params []*Param) {
	lr := float32(o.LR(o.step))
	o.step++
	mu := float32(o.Momentum)
	for _, p := range params {
		w := p.Data()
		wd := float32(0)
		if !p.NoDecay {
			wd = float32(o.WeightDecay)
		}
		v, ok := o.vel[p.Name]
		if !ok {
			v = make([]float32, len(p.Grad))
			o.vel[p.Name] = v
		}
		for i, g := range p.Grad {
			g += wd * w[i]
			v[i] = mu*v[i] + g
			w[i] -= lr * v[i]
		}
	}
}

// State implements Optimizer.
func (o *SGD) State() map[string][]float32 {
	st := map[string][]float32{"step": {float32(o.step)}}
	for n, v := range o.vel {
		st["vel."+n] = v
	}
	return st
}

// SetState implements Optimizer.
func (o *SGD) SetState(st map[string][]float32) error {
	s, ok := st["step"]
	if !ok || len(s) != 1 {
		return fmt.Errorf("nn: SGD state has no step")
	}
	o.step = int(s[0])
	o.vel = map[string][]float32{}
	for k, v := range st {
		if len(k) > 4 && k[:4] == "vel." {
			o.vel[k[4:]] = append([]float32(nil), v...)
		}
	}
	return nil
}

// GradNorm returns the global L2 norm of the parameters' gradients.
func GradNorm(params []*Param) float64 {
	var s float64
	for _, p := range params {
		for _, g := range p.Grad {
			s += float64(g) * float64(g)
		}
	}
	return math.Sqrt(s)
}

// ClipGradNorm scales all gradients so their global norm is at most maxNorm
// (Pascanu et al. 2013) and returns the norm before clipping.
func ClipGradNorm(params []*Param, maxNorm float64) float64 {
	n := GradNorm(params)
	if maxNorm > 0 && n > maxNorm {
		f := float32(maxNorm / n)
		for _, p := range params {
			for i := range p.Grad {
				p.Grad[i] *= f
			}
		}
	}
	return n
}
