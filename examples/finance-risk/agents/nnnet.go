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

// NNNet is a member built from package nn layers and trained with
// nn.Trainer: its FeatureModel returns, per example, the output (column 0)
// followed by the embedding (columns 1..E).
type NNNet struct {
	Name    string
	In, Emb int
	Store   *nn.Store
	Trainer *nn.Trainer
}

func newNNNet(name string, in, emb int, seed uint64, lr, wd float64, body func(s *nn.Scope, x *G.Node) *G.Node) *NNNet {
	store := nn.NewStore(seed)
	model := func(s *nn.Scope, x *G.Node) *G.Node {
		h := body(s.Sub(name), x) // B×E
		out := nn.RegressionHead(s.Sub(name).Sub("head"), h, 1)
		return G.Must(G.Concat(1, out, h))
	}
	tr := nn.NewTrainer(store, model, nn.NewAdamW(nn.Constant(lr), wd), nn.TrainConfig{ClipNorm: 5})
	return &NNNet{Name: name, In: in, Emb: emb, Store: store, Trainer: tr}
}

// NewNNTransformer is the credit-risk agent on nn: nn.TokenSetEncoder (one
// token per input feature, Gorishniy et al. 2021; pre-LN transformer
// blocks, mean pooling, layer norm) over the encoded applicant features.
func NewNNTransformer(in, dim, layers, heads int, seed uint64, lr, wd float64) *NNNet {
	return newNNNet("tf", in, dim, seed, lr, wd, func(s *nn.Scope, x *G.Node) *G.Node {
		return nn.TokenSetEncoder(s.Sub("enc"), x, nn.EncoderConfig{Dim: dim, Layers: layers, Heads: heads, MLPRatio: 2})
	})
}

// NewNNMLP is the MLP member on nn (Linear → GELU → Linear to the hidden
// embedding, then the head).
func NewNNMLP(in, hidden int, seed uint64, lr, wd float64) *NNNet {
	return newNNNet("mlp", in, hidden, seed, lr, wd, func(s *nn.Scope, x *G.Node) *G.Node {
		return nn.GELU(nn.Linear(s.Sub("l1"), x, hidden))
	})
}

// NewNNLSTM is the market agent on nn: nn.LSTM over steps scalars per
// example; the embedding is the last hidden state.
func NewNNLSTM(steps, hidden int, seed uint64, lr float64) *NNNet {
	return newNNNet("lstm", steps, hidden, seed, lr, 0, func(s *nn.Scope, x *G.Node) *G.Node {
		B := x.Shape()[0]
		x3 := G.Must(G.Reshape(x, tensor.Shape{B, steps, 1}))
		_, last := nn.LSTM(s.Sub("lstm"), x3, nil, nn.LSTMConfig{Hidden: hidden, Layers: 1})
		return last
	})
}

// Width is the number of inputs per example.
func (m *NNNet) Width() int { return m.In }

// EmbDim is the embedding width.
func (m *NNNet) EmbDim() int { return m.Emb }

// ParamCount is the number of parameters.
func (m *NNNet) ParamCount() int { return m.Store.NumParams() }

func (m *NNNet) rows(x []float32, idx []int) [][]float32 {
	out := make([][]float32, len(idx))
	for k, i := range idx {
		out[k] = x[i*m.In : (i+1)*m.In]
	}
	return out
}

// Epoch trains one pass over the n examples of x with targets y in
// shuffled mini-batches of batch (loss BCE on a logit or MSE) and returns
// the mean loss.
func (m *NNNet) Epoch(x, y []float32, batch, loss int, rng *rand.Rand) (float64, error) {
	n := len(y)
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
func (m *NNNet) Run(x []float32, n int) (out, emb []float32, err error) {
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
