package agents

import (
	"fmt"
	"math/rand/v2"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Loss kinds.
const (
	BCE = iota // binary cross-entropy on a logit, targets in [0,1]
	MSE        // squared error, for regression
)

// TrainConfig configures Fit.
type TrainConfig struct {
	Epochs, Batch int
	LR, L2        float64
	Loss          int
	Seed          uint64
	// Weights optionally weighs each example's loss (nil: all 1).
	Weights []float32
}

// Trainer trains a Net with Adam on mini-batches; its graph is built once
// for the batch size.
type Trainer struct {
	net    Net
	cfg    TrainConfig
	g      *G.ExprGraph
	scope  *Scope
	x, y   *G.Node
	w      *G.Node
	loss   *G.Node
	vm     G.VM
	solver G.Solver
	rng    *rand.Rand
}

// NewTrainer builds the training graph.
func NewTrainer(net Net, cfg TrainConfig) (*Trainer, error) {
	B := cfg.Batch
	t := &Trainer{net: net, cfg: cfg, g: G.NewGraph(), rng: rand.New(rand.NewPCG(cfg.Seed, 0x7a11))}
	t.scope = &Scope{G: t.g, P: net.Params()}
	t.x = G.NewTensor(t.g, tensor.Float32, len(net.InputShape(B)), G.WithShape(net.InputShape(B)...), G.WithName("x"), G.WithInit(G.Zeroes()))
	t.y = G.NewVector(t.g, tensor.Float32, G.WithShape(B), G.WithName("y"), G.WithInit(G.Zeroes()))
	t.w = G.NewVector(t.g, tensor.Float32, G.WithShape(B), G.WithName("w"), G.WithInit(G.Zeroes()))
	out, _ := net.Build(t.scope, t.x, B)
	var per *G.Node
	switch cfg.Loss {
	case BCE: // softplus(z) - y z
		per = G.Must(G.Sub(G.Must(G.Softplus(out)), G.Must(G.HadamardProd(t.y, out))))
	case MSE:
		per = G.Must(G.Square(G.Must(G.Sub(out, t.y))))
	default:
		return nil, fmt.Errorf("agents: unknown loss %d", cfg.Loss)
	}
	t.loss = G.Must(G.Mean(G.Must(G.HadamardProd(per, t.w))))
	cost := t.loss
	if cfg.L2 > 0 {
		for _, p := range t.scope.Decay {
			cost = G.Must(G.Add(cost, G.Must(G.Mul(G.Must(G.Sum(G.Must(G.Square(p)))), G.NewConstant(float32(cfg.L2))))))
		}
	}
	if _, err := G.Grad(cost, t.scope.Nodes...); err != nil {
		return nil, fmt.Errorf("agents: grad: %w", err)
	}
	t.vm = G.NewTapeMachine(t.g, G.BindDualValues(t.scope.Nodes...))
	t.solver = G.NewAdamSolver(G.WithLearnRate(cfg.LR), G.WithClip(5))
	return t, nil
}

// SetLR changes the learning rate (for roles that scale it).
func (t *Trainer) SetLR(lr float64) {
	t.solver = G.NewAdamSolver(G.WithLearnRate(lr), G.WithClip(5))
}

// Close releases the machine.
func (t *Trainer) Close() { t.vm.Close() }

// Epoch runs one pass over the n examples of x (row-major, Width per
// example) with targets y, in shuffled mini-batches (the last partial
// batch is filled with zero-weight padding), and returns the mean loss.
// steps > 0 limits the number of mini-batches.
func (t *Trainer) Epoch(x, y []float32, n, steps int) (float64, error) {
	W, B := t.net.Width(), t.cfg.Batch
	perm := t.rng.Perm(n)
	xv := t.x.Value().Data().([]float32)
	yv := t.y.Value().Data().([]float32)
	wv := t.w.Value().Data().([]float32)
	var total float64
	nb := 0
	for start := 0; start < n; start += B {
		if steps > 0 && nb >= steps {
			break
		}
		for k := 0; k < B; k++ {
			if start+k < n {
				i := perm[start+k]
				copy(xv[k*W:(k+1)*W], x[i*W:(i+1)*W])
				yv[k] = y[i]
				wv[k] = 1
				if t.cfg.Weights != nil {
					wv[k] = t.cfg.Weights[i]
				}
			} else {
				clear(xv[k*W : (k+1)*W])
				yv[k], wv[k] = 0, 0
			}
		}
		if err := t.vm.RunAll(); err != nil {
			return 0, fmt.Errorf("agents: train step: %w", err)
		}
		total += float64(t.loss.Value().Data().(float32))
		if err := t.solver.Step(G.NodesToValueGrads(t.scope.Nodes)); err != nil {
			return 0, fmt.Errorf("agents: solver: %w", err)
		}
		t.vm.Reset()
		nb++
	}
	return total / float64(nb), nil
}

// Infer runs a Net forward on fixed-size batches.
type Infer struct {
	net      Net
	B        int
	x        *G.Node
	out, emb *G.Node
	vm       G.VM
}

// NewInfer builds a forward-only graph of batch B sharing the net's parameters.
func NewInfer(net Net, B int) *Infer {
	g := G.NewGraph()
	s := &Scope{G: g, P: net.Params()}
	x := G.NewTensor(g, tensor.Float32, len(net.InputShape(B)), G.WithShape(net.InputShape(B)...), G.WithName("x"), G.WithInit(G.Zeroes()))
	out, emb := net.Build(s, x, B)
	return &Infer{net: net, B: B, x: x, out: out, emb: emb, vm: G.NewTapeMachine(g)}
}

// Close releases the machine.
func (f *Infer) Close() { f.vm.Close() }

// Run returns the outputs (n) and embeddings (n, EmbDim) of n examples.
func (f *Infer) Run(x []float32, n int) (out, emb []float32, err error) {
	W, E := f.net.Width(), f.net.EmbDim()
	out, emb = make([]float32, n), make([]float32, n*E)
	xv := f.x.Value().Data().([]float32)
	for start := 0; start < n; start += f.B {
		m := min(f.B, n-start)
		copy(xv, x[start*W:(start+m)*W])
		clear(xv[m*W:])
		if err := f.vm.RunAll(); err != nil {
			return nil, nil, fmt.Errorf("agents: inference: %w", err)
		}
		copy(out[start:start+m], f.out.Value().Data().([]float32)[:m])
		copy(emb[start*E:(start+m)*E], f.emb.Value().Data().([]float32)[:m*E])
		f.vm.Reset()
	}
	return out, emb, nil
}
