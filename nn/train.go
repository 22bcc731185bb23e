package nn

import (
	"errors"
	"fmt"
	"math"
	"slices"

	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"

	kern "github.com/troupe-ml/troupe/tensor"
)

// TrainConfig configures the trainers.
type TrainConfig struct {
	// ClipNorm clips gradients to this global L2 norm before each step
	// (0 = no clipping).
	ClipNorm float64
	// AccumSteps is the number of SupervisedStep calls whose gradients are
	// accumulated (each scaled by 1/AccumSteps) before one optimizer step
	// (default 1).
	AccumSteps int
	// LenBucket rounds padded sequence lengths up to a multiple of this
	// (default 16), so one graph serves many lengths.
	LenBucket int
}

// ErrNonFinite is wrapped by errors about NaN or Inf losses.
var ErrNonFinite = errors.New("non-finite value")

// graphRun is one compiled graph: inputs, an output, an optional
// ExternalLoss cost and the gradient nodes of the parameters used.
type graphRun struct {
	g      *G.ExprGraph
	vm     G.VM
	inputs []*G.Node
	out    *G.Node
	loss   *LossFunc
	cost   *G.Node
	params []*Param
	grads  G.Nodes
	// eng is the engine of parameters that live on a device (a tensor
	// backend other than the CPU's), nil when they are in Go memory. A
	// TapeMachine stamps its engine on every value it holds, so a device
	// graph runs on a machine with that engine, its inputs are copied to
	// the device (devIn, reused between runs), and its output and gradients
	// are copied back.
	eng   ts.Engine
	devIn []*ts.Dense
}

// deviceEngine returns the engine of the first parameter whose value lives
// on a non-CPU backend, or nil.
func deviceEngine(params []*Param) ts.Engine {
	for _, p := range params {
		if kern.BackendOf(p.Value) != kern.CPU {
			return p.Value.Engine()
		}
	}
	return nil
}

// newGraphRun compiles a graph built by build, which receives a scope and
// returns its input nodes and the output node. With withGrad the output
// feeds an ExternalLoss and parameter gradients are derived.
func newGraphRun(store *Store, withGrad bool, build func(s *Scope) ([]*G.Node, *G.Node)) *graphRun {
	g := G.NewGraph()
	s := NewScope(store, g)
	r := &graphRun{g: g}
	r.inputs, r.out = build(s)
	used, _ := s.Used()
	r.eng = deviceEngine(used)
	if withGrad {
		r.loss = new(LossFunc)
		r.cost = ExternalLoss(r.out, r.loss)
		var nodes G.Nodes
		r.params, nodes = s.Used()
		var err error
		if r.grads, err = G.Grad(r.cost, nodes...); err != nil {
			panic(fmt.Sprintf("nn: deriving gradients: %v", err))
		}
	}
	if r.eng != nil {
		r.vm = G.NewTapeMachine(g, G.WithEngine(r.eng))
		r.devIn = make([]*ts.Dense, len(r.inputs))
	} else {
		r.vm = G.NewTapeMachine(g)
	}
	return r
}

// valueFloats returns a graph value's elements in Go memory (copied from
// the device when it lives there).
func valueFloats(v G.Value) ([]float32, error) {
	if d, ok := v.(*ts.Dense); ok && !d.IsNativelyAccessible() {
		return hostFloats(d)
	}
	return f32s(v), nil
}

// run binds the input values, runs the machine, and (with gradients)
// accumulates scale·∂loss/∂p into every parameter's Grad. It returns a copy
// of the output and the loss.
func (r *graphRun) run(vals []*ts.Dense, lf LossFunc) ([]float32, float64, error) {
	for i, n := range r.inputs {
		v := vals[i]
		if r.eng != nil {
			h, err := hostFloats(v)
			if err != nil {
				return nil, 0, fmt.Errorf("nn: input %s: %w", n.Name(), err)
			}
			if r.devIn[i] == nil || !r.devIn[i].Shape().Eq(v.Shape()) {
				r.devIn[i] = ts.New(ts.WithShape(v.Shape().Clone()...), ts.Of(ts.Float32), ts.WithEngine(r.eng))
			}
			if err := upload(r.devIn[i], h); err != nil {
				return nil, 0, fmt.Errorf("nn: input %s: %w", n.Name(), err)
			}
			v = r.devIn[i]
		}
		if err := G.Let(n, v); err != nil {
			return nil, 0, fmt.Errorf("nn: binding input %s: %w", n.Name(), err)
		}
	}
	if r.loss != nil {
		*r.loss = lf
	}
	defer r.vm.Reset()
	if err := r.vm.RunAll(); err != nil {
		return nil, 0, fmt.Errorf("nn: running graph: %w", err)
	}
	ov, err := valueFloats(r.out.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("nn: output: %w", err)
	}
	out := append([]float32(nil), ov...)
	var loss float64
	if r.cost != nil {
		cv, err := valueFloats(r.cost.Value())
		if err != nil {
			return nil, 0, fmt.Errorf("nn: loss: %w", err)
		}
		loss = float64(cv[0])
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return out, loss, fmt.Errorf("nn: loss is %v: %w", loss, ErrNonFinite)
		}
		for i, p := range r.params {
			gv, err := valueFloats(r.grads[i].Value())
			if err != nil {
				return nil, 0, fmt.Errorf("nn: gradient of %s: %w", p.Name, err)
			}
			for j, v := range gv {
				p.Grad[j] += v
			}
		}
	}
	return out, loss, nil
}

// stepper applies optimizer steps with clipping and the non-finite guard.
type stepper struct {
	store   *Store
	opt     Optimizer
	cfg     TrainConfig
	bad     bool // a non-finite loss was seen since the last step
	Skipped int
}

func (s *stepper) step() (float64, bool, error) {
	params := s.store.Params()
	norm := GradNorm(params)
	if s.bad || math.IsNaN(norm) || math.IsInf(norm, 0) {
		s.bad = false
		s.store.ZeroGrad()
		s.Skipped++
		return norm, true, nil
	}
	if s.cfg.ClipNorm > 0 && norm > s.cfg.ClipNorm {
		ClipGradNorm(params, s.cfg.ClipNorm)
	}
	s.opt.Update(params)
	s.store.ZeroGrad()
	return norm, false, nil
}

// SeqExample is one sequence for the language-model trainer: the model is
// conditioned on Prompt (at least one token) and scored on Target.
type SeqExample struct {
	Prompt, Target []int
	// Temperature, when positive and not 1, scores Target under
	// softmax(logits/Temperature): the distribution LM.Generate samples from
	// at that temperature (without top-k or top-p truncation). Policy
	// gradients of samples drawn at a temperature need it
	// (TemperedLogSoftmaxGatherOp). 0 or 1: the model's own distribution.
	Temperature float64
}

// tempered reports whether ex is scored at a temperature other than 1.
func (ex SeqExample) tempered() bool { return ex.Temperature > 0 && ex.Temperature != 1 }

// LMTrainer trains an LM with graphs cached per (batch size, padded length)
// bucket. Gradients accumulate in the store's Param.Grad across
// ForwardBackward calls until Step. A trainer is not safe for concurrent
// use, and Step writes the store's parameters in place: callers that
// generate (LM.Generate) from the same store while training must not let
// the two overlap.
type LMTrainer struct {
	m     *LM
	cfg   TrainConfig
	st    stepper
	cache map[[3]int]*graphRun
	accum int
}

// NewLMTrainer returns a trainer for m with optimizer opt.
func NewLMTrainer(m *LM, opt Optimizer, cfg TrainConfig) *LMTrainer {
	if cfg.LenBucket <= 0 {
		cfg.LenBucket = 16
	}
	if cfg.AccumSteps <= 0 {
		cfg.AccumSteps = 1
	}
	return &LMTrainer{m: m, cfg: cfg, st: stepper{store: m.Store, opt: opt, cfg: cfg}, cache: map[[3]int]*graphRun{}}
}

// Skipped is the number of steps skipped because of NaN or Inf.
func (t *LMTrainer) Skipped() int { return t.st.Skipped }

// Optimizer returns the trainer's optimizer.
func (t *LMTrainer) Optimizer() Optimizer { return t.st.opt }

// graph returns the compiled graph of a b×T batch; with tempered it takes a
// third input, the inverse temperature of every position.
func (t *LMTrainer) graph(b, T int, withGrad, tempered bool) *graphRun {
	k := [3]int{b, T, 0}
	if withGrad {
		k[2] = 1
	}
	if tempered {
		k[2] |= 2
	}
	if r, ok := t.cache[k]; ok {
		return r
	}
	r := newGraphRun(t.m.Store, withGrad, func(s *Scope) ([]*G.Node, *G.Node) {
		ids := s.Input("ids", b, T)
		tg := s.Input("targets", b, T)
		logits := t.m.Logits(s, ids)
		if tempered {
			inv := s.Input("inv_temps", b, T)
			return []*G.Node{ids, tg, inv}, TemperedLogSoftmaxGatherOp(logits, tg, inv)
		}
		return []*G.Node{ids, tg}, LogSoftmaxGatherOp(logits, tg)
	})
	t.cache[k] = r
	return r
}

// pack lays out a batch as B×T ids and targets (−1 where not scored), and,
// when an example has a temperature, the inputs' third tensor: the inverse
// temperature of every position (1 for untempered examples).
func (t *LMTrainer) pack(batch []SeqExample) (vals []*ts.Dense, T int, err error) {
	ids, tg, T, err := t.packIDs(batch)
	if err != nil {
		return nil, 0, err
	}
	vals = []*ts.Dense{ids, tg}
	for i, ex := range batch {
		if ex.Temperature < 0 || math.IsNaN(ex.Temperature) || math.IsInf(ex.Temperature, 0) {
			return nil, 0, fmt.Errorf("nn: example %d has temperature %v", i, ex.Temperature)
		}
	}
	if !slices.ContainsFunc(batch, SeqExample.tempered) {
		return vals, T, nil
	}
	inv := newDense(ts.Shape{len(batch), T})
	iv := inv.Float32s()
	for i, ex := range batch {
		s := float32(1)
		if ex.tempered() {
			s = float32(1 / ex.Temperature)
		}
		for p := 0; p < T; p++ {
			iv[i*T+p] = s
		}
	}
	return append(vals, inv), T, nil
}

func (t *LMTrainer) packIDs(batch []SeqExample) (ids, tg *ts.Dense, T int, err error) {
	if len(batch) == 0 {
		return nil, nil, 0, fmt.Errorf("nn: empty batch")
	}
	maxL := 0
	V := t.m.Config.Vocab
	for i, ex := range batch {
		if len(ex.Prompt) == 0 {
			return nil, nil, 0, fmt.Errorf("nn: example %d has an empty prompt", i)
		}
		for _, tok := range append(append([]int(nil), ex.Prompt...), ex.Target...) {
			if tok < 0 || tok >= V {
				return nil, nil, 0, fmt.Errorf("nn: example %d: token %d outside vocabulary [0,%d)", i, tok, V)
			}
		}
		maxL = max(maxL, len(ex.Prompt)+len(ex.Target)-1)
	}
	if maxL > t.m.Config.MaxLen {
		return nil, nil, 0, fmt.Errorf("nn: sequence of %d positions exceeds MaxLen %d", maxL, t.m.Config.MaxLen)
	}
	T = min((max(maxL, 1)+t.cfg.LenBucket-1)/t.cfg.LenBucket*t.cfg.LenBucket, t.m.Config.MaxLen)
	B := len(batch)
	ids, tg = newDense(ts.Shape{B, T}), newDense(ts.Shape{B, T})
	id, td := ids.Float32s(), tg.Float32s()
	for i := range td {
		td[i] = -1
	}
	for i, ex := range batch {
		seq := append(append([]int(nil), ex.Prompt...), ex.Target...)
		for p := 0; p < len(seq)-1; p++ {
			id[i*T+p] = float32(seq[p])
		}
		for j, tok := range ex.Target {
			td[i*T+len(ex.Prompt)-1+j] = float32(tok)
		}
	}
	return ids, tg, T, nil
}

func unpack(batch []SeqExample, flat []float32, T int) [][]float32 {
	out := make([][]float32, len(batch))
	for i, ex := range batch {
		o := i*T + len(ex.Prompt) - 1
		out[i] = append([]float32(nil), flat[o:o+len(ex.Target)]...)
	}
	return out
}

// TokenLogProbs returns log p(Target[i] | Prompt, Target[:i]) for every
// example (at the example's Temperature), without gradients.
func (t *LMTrainer) TokenLogProbs(batch []SeqExample) ([][]float32, error) {
	vals, T, err := t.pack(batch)
	if err != nil {
		return nil, err
	}
	flat, _, err := t.graph(len(batch), T, false, len(vals) == 3).run(vals, nil)
	if err != nil {
		return nil, err
	}
	return unpack(batch, flat, T), nil
}

// ForwardBackward evaluates the per-token log-probabilities of the batch,
// calls loss once with them and accumulates the gradient of its loss (given
// by its second result, one slice per example) into the parameters'
// gradients. A NaN or Inf loss returns an error wrapping ErrNonFinite and
// makes the next Step skip.
func (t *LMTrainer) ForwardBackward(batch []SeqExample, loss func(logp [][]float32) (float64, [][]float32)) error {
	_, err := t.forwardBackward(batch, loss)
	return err
}

func (t *LMTrainer) forwardBackward(batch []SeqExample, loss func(logp [][]float32) (float64, [][]float32)) (float64, error) {
	vals, T, err := t.pack(batch)
	if err != nil {
		return 0, err
	}
	var cbErr error
	lf := func(vals []float32) (float64, []float32) {
		l, d := loss(unpack(batch, vals, T))
		g := make([]float32, len(vals))
		if len(d) != len(batch) {
			cbErr = fmt.Errorf("nn: loss returned %d gradient rows for %d examples", len(d), len(batch))
			return l, g
		}
		for i, ex := range batch {
			if len(d[i]) != len(ex.Target) {
				cbErr = fmt.Errorf("nn: loss returned %d gradients for example %d with %d targets", len(d[i]), i, len(ex.Target))
				return l, g
			}
			copy(g[i*T+len(ex.Prompt)-1:], d[i])
		}
		return l, g
	}
	_, l, err := t.graph(len(batch), T, true, len(vals) == 3).run(vals, lf)
	if cbErr != nil {
		return l, cbErr
	}
	if errors.Is(err, ErrNonFinite) {
		t.st.bad = true
	}
	return l, err
}

// Step applies the accumulated gradients (clipped to TrainConfig.ClipNorm)
// with the optimizer and clears them. It returns the global gradient norm
// before clipping; when the norm or a loss since the last step was NaN or
// Inf the update is skipped (skipped = true) and the gradients are dropped.
func (t *LMTrainer) Step() (gradNorm float64, skipped bool, err error) {
	t.accum = 0
	return t.st.step()
}

// MeanNLL is the loss callback for supervised training: the mean negative
// log-likelihood over all target tokens of the batch, times scale.
func MeanNLL(scale float64) func(logp [][]float32) (float64, [][]float32) {
	return func(logp [][]float32) (float64, [][]float32) {
		n := 0
		for _, r := range logp {
			n += len(r)
		}
		var s float64
		d := make([][]float32, len(logp))
		for i, r := range logp {
			d[i] = make([]float32, len(r))
			for j, v := range r {
				s -= float64(v)
				d[i][j] = float32(-scale / float64(max(n, 1)))
			}
		}
		return scale * s / float64(max(n, 1)), d
	}
}

// SupervisedStep is one step of cross-entropy (teacher-forced) training on
// the batch's targets. With TrainConfig.AccumSteps = k, gradients of k
// calls (each scaled by 1/k) are accumulated and the optimizer steps on
// every k-th call. It returns the batch's mean per-token loss (nats).
func (t *LMTrainer) SupervisedStep(batch []SeqExample) (float64, error) {
	k := t.cfg.AccumSteps
	l, err := t.forwardBackward(batch, MeanNLL(1/float64(k)))
	if err != nil && !errors.Is(err, ErrNonFinite) {
		return 0, err
	}
	t.accum++
	if t.accum >= k {
		if _, _, serr := t.Step(); serr != nil {
			return 0, serr
		}
	}
	return l * float64(k), err
}
