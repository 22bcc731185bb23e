package nn

import (
	"errors"
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

// FeatureModel builds a model over x (B×F float features) into the scope's
// graph and returns its B×K outputs (logits for classification, values for
// regression). Examples:
//
//	func(s *nn.Scope, x *G.Node) *G.Node {          // MLP classifier
//		return nn.ClassificationHead(s.Sub("head"), nn.GELU(nn.Linear(s.Sub("l1"), x, 64)), 3)
//	}
//	func(s *nn.Scope, x *G.Node) *G.Node {          // transformer over feature tokens
//		h := nn.TokenSetEncoder(s.Sub("enc"), x, nn.EncoderConfig{Dim: 32, Layers: 2, Heads: 4})
//		return nn.RegressionHead(s.Sub("head"), h, 1)
//	}
type FeatureModel func(s *Scope, x *G.Node) *G.Node

// Trainer trains and evaluates a FeatureModel, with one compiled graph per
// batch size (forward-only and training graphs cached separately).
// Gradients accumulate across ForwardBackward calls until Step.
type Trainer struct {
	store *Store
	model FeatureModel
	st    stepper
	cache map[[3]int]*graphRun
}

// NewTrainer returns a trainer for model with its parameters in store.
func NewTrainer(store *Store, model FeatureModel, opt Optimizer, cfg TrainConfig) *Trainer {
	return &Trainer{store: store, model: model, st: stepper{store: store, opt: opt, cfg: cfg}, cache: map[[3]int]*graphRun{}}
}

// Skipped is the number of steps skipped because of NaN or Inf.
func (t *Trainer) Skipped() int { return t.st.Skipped }

func (t *Trainer) graph(b, f int, withGrad bool) *graphRun {
	k := [3]int{b, f, 0}
	if withGrad {
		k[2] = 1
	}
	if r, ok := t.cache[k]; ok {
		return r
	}
	r := newGraphRun(t.store, withGrad, func(s *Scope) ([]*G.Node, *G.Node) {
		x := s.Input("x", b, f)
		out := t.model(s, x)
		if out.Shape().Dims() != 2 || out.Shape()[0] != b {
			panic(fmt.Sprintf("nn: FeatureModel must return B×K outputs, got %v for batch %d", out.Shape(), b))
		}
		return []*G.Node{x}, out
	})
	t.cache[k] = r
	return r
}

func packRows(x [][]float32) (*ts.Dense, error) {
	if len(x) == 0 {
		return nil, fmt.Errorf("nn: empty batch")
	}
	f := len(x[0])
	d := newDense(ts.Shape{len(x), f})
	v := d.Float32s()
	for i, r := range x {
		if len(r) != f {
			return nil, fmt.Errorf("nn: row %d has %d features, row 0 has %d", i, len(r), f)
		}
		copy(v[i*f:], r)
	}
	return d, nil
}

func splitRows(flat []float32, b int) [][]float32 {
	k := len(flat) / b
	out := make([][]float32, b)
	for i := range out {
		out[i] = append([]float32(nil), flat[i*k:(i+1)*k]...)
	}
	return out
}

// Predict returns the model's outputs for each row of x, without gradients.
func (t *Trainer) Predict(x [][]float32) ([][]float32, error) {
	d, err := packRows(x)
	if err != nil {
		return nil, err
	}
	flat, _, err := t.graph(len(x), len(x[0]), false).run([]*ts.Dense{d}, nil)
	if err != nil {
		return nil, err
	}
	return splitRows(flat, len(x)), nil
}

// ForwardBackward evaluates the outputs for x, calls loss once with them and
// accumulates the gradient of its loss into the parameters' gradients. It
// returns the loss; a NaN or Inf loss returns an error wrapping ErrNonFinite
// and makes the next Step skip.
func (t *Trainer) ForwardBackward(x [][]float32, loss func(out [][]float32) (float64, [][]float32)) (float64, error) {
	d, err := packRows(x)
	if err != nil {
		return 0, err
	}
	var cbErr error
	lf := func(v []float32) (float64, []float32) {
		l, g := loss(splitRows(v, len(x)))
		flat := make([]float32, len(v))
		k := len(v) / len(x)
		if len(g) != len(x) {
			cbErr = fmt.Errorf("nn: loss returned %d gradient rows for %d examples", len(g), len(x))
			return l, flat
		}
		for i, r := range g {
			if len(r) != k {
				cbErr = fmt.Errorf("nn: loss returned %d gradients for row %d of %d outputs", len(r), i, k)
				return l, flat
			}
			copy(flat[i*k:], r)
		}
		return l, flat
	}
	_, l, err := t.graph(len(x), len(x[0]), true).run([]*ts.Dense{d}, lf)
	if cbErr != nil {
		return l, cbErr
	}
	if errors.Is(err, ErrNonFinite) {
		t.st.bad = true
	}
	return l, err
}

// Step applies the accumulated gradients (see LMTrainer.Step).
func (t *Trainer) Step() (gradNorm float64, skipped bool, err error) { return t.st.step() }

// ClassifyStep is one optimizer step of mean softmax cross-entropy between
// the model's logits and the labels; it returns the loss before the step.
func (t *Trainer) ClassifyStep(x [][]float32, labels []int) (float64, error) {
	l, err := t.ForwardBackward(x, SoftmaxCrossEntropy(labels))
	if err != nil && !errors.Is(err, ErrNonFinite) {
		return 0, err
	}
	_, _, serr := t.Step()
	if serr != nil {
		return 0, serr
	}
	return l, err
}

// RegressStep is one optimizer step of mean squared error against targets.
func (t *Trainer) RegressStep(x, targets [][]float32) (float64, error) {
	l, err := t.ForwardBackward(x, MeanSquaredError(targets))
	if err != nil && !errors.Is(err, ErrNonFinite) {
		return 0, err
	}
	_, _, serr := t.Step()
	if serr != nil {
		return 0, serr
	}
	return l, err
}

// SoftmaxCrossEntropy is a loss callback for Trainer.ForwardBackward: the
// mean over rows of −log softmax(logits)[label]. A label outside the
// logits' range gives a NaN loss (and so a skipped step).
func SoftmaxCrossEntropy(labels []int) func(out [][]float32) (float64, [][]float32) {
	return func(out [][]float32) (float64, [][]float32) {
		n := float64(len(out))
		var loss float64
		grad := make([][]float32, len(out))
		for i, row := range out {
			g := make([]float32, len(row))
			grad[i] = g
			if i >= len(labels) || labels[i] < 0 || labels[i] >= len(row) {
				loss = math.NaN()
				continue
			}
			lz := logSumExp32(row)
			loss -= (float64(row[labels[i]]) - lz) / n
			for j, v := range row {
				g[j] = float32(math.Exp(float64(v)-lz) / n)
			}
			g[labels[i]] -= float32(1 / n)
		}
		return loss, grad
	}
}

// MeanSquaredError is a loss callback: the mean over all outputs of
// (out − target)².
func MeanSquaredError(targets [][]float32) func(out [][]float32) (float64, [][]float32) {
	return func(out [][]float32) (float64, [][]float32) {
		n := 0
		for _, r := range out {
			n += len(r)
		}
		var loss float64
		grad := make([][]float32, len(out))
		for i, row := range out {
			grad[i] = make([]float32, len(row))
			for j, v := range row {
				tv := float32(math.NaN())
				if i < len(targets) && j < len(targets[i]) {
					tv = targets[i][j]
				}
				d := float64(v - tv)
				loss += d * d / float64(n)
				grad[i][j] = float32(2 * d / float64(n))
			}
		}
		return loss, grad
	}
}
