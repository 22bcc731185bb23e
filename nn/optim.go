package nn

import (
	"fmt"
	"math"

	ts "gorgonia.org/tensor"

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
	dev               map[string]*devOptState // parameters on a device
}

// devOptState is an optimizer's state for a parameter whose value lives on
// a device (a non-CPU tensor backend): the moments (Adam's m and v, SGD's
// velocity in m) and scratch, on the parameter's engine. The update runs
// there through package tensor's Dense-level functions; the gradient, which
// Param keeps in Go memory, is copied over each step.
type devOptState struct {
	m, v, g, tmp *ts.Dense
}

// newDevOptState allocates the state of p on its engine, with the moments
// taken from host (State/SetState) when present and zero otherwise.
func newDevOptState(p *Param, m, v []float32) *devOptState {
	st := &devOptState{}
	alloc := func(t **ts.Dense, init []float32) {
		onEngine(t, p.Value, p.Shape())
		if init != nil {
			mustDev(p, "restoring optimizer state", upload(*t, init))
		} else {
			kern.BackendOf(*t).Fill(*t, 0)
		}
	}
	alloc(&st.m, m)
	alloc(&st.v, v)
	onEngine(&st.g, p.Value, p.Shape())
	onEngine(&st.tmp, p.Value, p.Shape())
	return st
}

// grad copies p.Grad to the device, adding the L2 term wd·w when wd ≠ 0.
func (st *devOptState) grad(p *Param, wd float32) *ts.Dense {
	mustDev(p, "copying the gradient", upload(st.g, p.Grad))
	if wd != 0 {
		kern.MulScalar(st.tmp, p.Value, wd)
		kern.Add(st.g, st.g, st.tmp)
	}
	return st.g
}

// mustDev panics on a failed copy to or from a device. Copies fail only
// when the device does (the Backend methods panic likewise).
func mustDev(p *Param, what string, err error) {
	if err != nil {
		panic(fmt.Sprintf("nn: parameter %q: %s: %v", p.Name, what, err))
	}
}

// onDevice reports whether p's value lives on a non-CPU backend.
func onDevice(p *Param) bool { return kern.BackendOf(p.Value) != kern.CPU }

// hostState copies device state tensors into m (name → values).
func hostState(dev map[string]*devOptState, m map[string][]float32, pick func(*devOptState) *ts.Dense) {
	for n, st := range dev {
		h, err := hostFloats(pick(st))
		if err != nil {
			panic(fmt.Sprintf("nn: optimizer state of %q: %v", n, err))
		}
		m[n] = append([]float32(nil), h...)
	}
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
		if onDevice(p) {
			a.updateDevice(p, lr, fb1, fb2, eps)
			continue
		}
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

// updateDevice is Update for a parameter on a device: AdamWStep there,
// with the L2 term of non-decoupled weight decay added to the gradient.
func (a *Adam) updateDevice(p *Param, lr float64, b1, b2, eps float32) {
	if a.dev == nil {
		a.dev = map[string]*devOptState{}
	}
	st, ok := a.dev[p.Name]
	if !ok {
		st = newDevOptState(p, a.m[p.Name], a.v[p.Name])
		a.dev[p.Name] = st
		delete(a.m, p.Name)
		delete(a.v, p.Name)
	}
	wd := float32(0)
	if !p.NoDecay {
		wd = float32(a.WeightDecay)
	}
	l2, decoupled := float32(0), wd
	if !a.Decoupled {
		l2, decoupled = wd, 0
	}
	kern.AdamWStep(p.Value, st.grad(p, l2), st.m, st.v, kern.AdamWParams{LR: float32(lr), Beta1: b1, Beta2: b2,
		Eps: eps, WeightDecay: decoupled, Step: a.step})
}

// State implements Optimizer: m.<name>, v.<name> and "step" (the moments of
// parameters on a device are copied to the host).
func (a *Adam) State() map[string][]float32 {
	hostState(a.dev, a.m, func(s *devOptState) *ts.Dense { return s.m })
	hostState(a.dev, a.v, func(s *devOptState) *ts.Dense { return s.v })
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
	a.m, a.v, a.dev = map[string][]float32{}, map[string][]float32{}, nil
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
	dev         map[string]*devOptState // parameters on a device (velocity in m)
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
		if onDevice(p) {
			o.updateDevice(p, lr, mu)
			continue
		}
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

// updateDevice is Update for a parameter on a device: v = μv + g + wd·w,
// w −= lr·v with package tensor's Dense-level functions.
func (o *SGD) updateDevice(p *Param, lr, mu float32) {
	if o.dev == nil {
		o.dev = map[string]*devOptState{}
	}
	st, ok := o.dev[p.Name]
	if !ok {
		st = newDevOptState(p, o.vel[p.Name], nil)
		o.dev[p.Name] = st
		delete(o.vel, p.Name)
	}
	wd := float32(0)
	if !p.NoDecay {
		wd = float32(o.WeightDecay)
	}
	g := st.grad(p, wd)
	kern.MulScalar(st.m, st.m, mu)
	kern.Add(st.m, st.m, g)
	kern.MulScalar(st.tmp, st.m, lr)
	kern.Sub(p.Value, p.Value, st.tmp)
}

// State implements Optimizer (velocities of parameters on a device are
// copied to the host).
func (o *SGD) State() map[string][]float32 {
	hostState(o.dev, o.vel, func(s *devOptState) *ts.Dense { return s.m })
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
	o.vel, o.dev = map[string][]float32{}, nil
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
