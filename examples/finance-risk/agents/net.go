package agents

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Loss kinds of Net.Epoch.
const (
	BCE = iota // binary cross-entropy on a logit, targets in [0,1]
	MSE        // squared error, for regression
)

// Net is a member built from package nn layers and trained with
// nn.Trainer (AdamW, gradients clipped to norm 5): its FeatureModel
// returns, per example, the output (column 0) followed by the embedding
// (columns 1..E). The parameters are in Store under the member's name
// (tf, mlp or lstm), so nn.SaveCheckpoint saves a member as any nn model.
type Net struct {
	Name    string
	In, Emb int
	Store   *nn.Store
	Trainer *nn.Trainer
}

func newNet(name string, in, emb int, seed uint64, lr, wd float64, body func(s *nn.Scope, x *G.Node) *G.Node) *Net {
	store := nn.NewStore(seed)
	model := func(s *nn.Scope, x *G.Node) *G.Node {
		h := body(s.Sub(name), x) // B×E
		out := nn.RegressionHead(s.Sub(name).Sub("head"), h, 1)
		return G.Must(G.Concat(1, out, h))
	}
	tr := nn.NewTrainer(store, model, nn.NewAdamW(nn.Constant(lr), wd), nn.TrainConfig{ClipNorm: 5})
	return &Net{Name: name, In: in, Emb: emb, Store: store, Trainer: tr}
}

// NewTransformer is the credit-risk agent: nn.TokenSetEncoder (one
// token per input feature, Gorishniy et al. 2021; pre-LN transformer
// blocks, mean pooling, layer norm) over the encoded applicant features.
func NewTransformer(in, dim, layers, heads int, seed uint64, lr, wd float64) *Net {
	return newNet("tf", in, dim, seed, lr, wd, func(s *nn.Scope, x *G.Node) *G.Node {
		return nn.TokenSetEncoder(s.Sub("enc"), x, nn.EncoderConfig{Dim: dim, Layers: layers, Heads: heads, MLPRatio: 2})
	})
}

// NewMLP is the MLP member: Linear → GELU gives the hidden embedding, the
// head reads it out.
func NewMLP(in, hidden int, seed uint64, lr, wd float64) *Net {
	return newNet("mlp", in, hidden, seed, lr, wd, func(s *nn.Scope, x *G.Node) *G.Node {
		return nn.GELU(nn.Linear(s.Sub("l1"), x, hidden))
	})
}

// NewLSTM is the market agent: nn.LSTM over steps scalars per
// example; the embedding is the last hidden state.
func NewLSTM(steps, hidden int, seed uint64, lr float64) *Net {
	return newNet("lstm", steps, hidden, seed, lr, 0, func(s *nn.Scope, x *G.Node) *G.Node {
		B := x.Shape()[0]
		x3 := G.Must(G.Reshape(x, tensor.Shape{B, steps, 1}))
		_, last := nn.LSTM(s.Sub("lstm"), x3, nil, nn.LSTMConfig{Hidden: hidden, Layers: 1})
		return last
	})
}

// Width is the number of inputs per example.
func (m *Net) Width() int { return m.In }

// EmbDim is the embedding width.
func (m *Net) EmbDim() int { return m.Emb }

// ParamCount is the number of parameters.
func (m *Net) ParamCount() int { return m.Store.NumParams() }

func (m *Net) rows(x []float32, idx []int) [][]float32 {
	out := make([][]float32, len(idx))
	for k, i := range idx {
		out[k] = x[i*m.In : (i+1)*m.In]
	}
	return out
}

// Epoch trains one pass over the n examples of x with targets y in
// shuffled mini-batches of batch (loss BCE on a logit or MSE) and returns
// the mean loss.
func (m *Net) Epoch(x, y []float32, batch, loss int, rng *rand.Rand) (float64, error) {
	if loss != BCE && loss != MSE {
		return 0, fmt.Errorf("agents: %s: unknown loss kind %d", m.Name, loss)
	}
	n := len(y)
	if len(x) != n*m.In {
		return 0, fmt.Errorf("agents: %s: %d inputs for %d examples of width %d", m.Name, len(x), n, m.In)
	}
	perm := rng.Perm(n)
	var tot float64
	nb := 0
	for start := 0; start < n; start += batch {
		idx := perm[start:min(start+batch, n)]
		lf := func(out [][]float32) (float64, [][]float32) {
			g := make([][]float32, len(out))
			var l float64
			inv := 1 / float64(len(out))
			for k, o := range out {
				g[k] = make([]float32, len(o))
				z, t := float64(o[0]), float64(y[idx[k]])
				switch loss {
				case BCE:
					l += (softplus(z) - t*z) * inv
					g[k][0] = float32((1/(1+math.Exp(-z)) - t) * inv)
				case MSE:
					l += (z - t) * (z - t) * inv
					g[k][0] = float32(2 * (z - t) * inv)
				}
			}
			return l, g
		}
		l, err := m.Trainer.ForwardBackward(m.rows(x, idx), lf)
		if err != nil && !errors.Is(err, nn.ErrNonFinite) {
			return 0, fmt.Errorf("agents: %s: %w", m.Name, err)
		}
		if _, _, err := m.Trainer.Step(); err != nil {
			return 0, fmt.Errorf("agents: %s: %w", m.Name, err)
		}
		tot += l
		nb++
	}
	return tot / float64(nb), nil
}

// Run returns outputs (n) and embeddings (n, EmbDim) of n examples, in
// chunks of at most 200.
func (m *Net) Run(x []float32, n int) (out, emb []float32, err error) {
	if len(x) != n*m.In {
		return nil, nil, fmt.Errorf("agents: %s: %d inputs for %d examples of width %d", m.Name, len(x), n, m.In)
	}
	out, emb = make([]float32, n), make([]float32, n*m.Emb)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	for start := 0; start < n; start += 200 {
		ii := idx[start:min(start+200, n)]
		res, err := m.Trainer.Predict(m.rows(x, ii))
		if err != nil {
			return nil, nil, fmt.Errorf("agents: %s: %w", m.Name, err)
		}
		for k, r := range res {
			out[start+k] = r[0]
			copy(emb[(start+k)*m.Emb:(start+k+1)*m.Emb], r[1:])
		}
	}
	return out, emb, nil
}

func softplus(z float64) float64 {
	if z > 30 {
		return z
	}
	return math.Log1p(math.Exp(z))
}
