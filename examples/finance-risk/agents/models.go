package agents

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// MLP is a one-hidden-layer perceptron with ReLU: logit = relu(x W1 + b1) W2 + b2.
// Its embedding is the hidden layer.
type MLP struct {
	In, Hidden int
	P          *Params
	Name       string
}

// NewMLP makes an MLP for in features.
func NewMLP(name string, in, hidden int, seed uint64) *MLP {
	return &MLP{In: in, Hidden: hidden, P: NewParams(seed), Name: name}
}

func (m *MLP) Width() int                    { return m.In }
func (m *MLP) EmbDim() int                   { return m.Hidden }
func (m *MLP) Params() *Params               { return m.P }
func (m *MLP) InputShape(B int) tensor.Shape { return tensor.Shape{B, m.In} }

func (m *MLP) Build(s *Scope, x *G.Node, B int) (*G.Node, *G.Node) {
	h := G.Must(G.Rectify(s.Linear(m.Name+".l1", x, m.In, m.Hidden)))
	out := s.Linear(m.Name+".l2", h, m.Hidden, 1)
	return G.Must(G.Reshape(out, tensor.Shape{B})), h
}

// TokenTransformer is a one-block transformer encoder over an applicant's
// feature tokens (Vaswani et al. 2017; the FT-Transformer of Gorishniy et
// al. 2021 for tabular data): every attribute becomes a token (value
// embedding for nominal attributes, scaled attribute embedding for numeric
// ones, plus an attribute embedding), multi-head self-attention and a ReLU
// feed-forward layer with residual connections mix the tokens, mean pooling
// gives the embedding and a linear head the logit.
//
// Its input per example is the (Tokens, Features) matrix of finrisk's
// Encoder.Tokens: row a holds the features of attribute a only.
type TokenTransformer struct {
	Tokens, Features, Dim, Heads, FF int
	P                                *Params
	Name                             string
}

// NewTokenTransformer makes the encoder.
func NewTokenTransformer(name string, tokens, features, dim, heads, ff int, seed uint64) *TokenTransformer {
	if dim%heads != 0 {
		panic(fmt.Sprintf("agents: transformer dim %d not a multiple of heads %d", dim, heads))
	}
	return &TokenTransformer{Tokens: tokens, Features: features, Dim: dim, Heads: heads, FF: ff, P: NewParams(seed), Name: name}
}

func (m *TokenTransformer) Width() int      { return m.Tokens * m.Features }
func (m *TokenTransformer) EmbDim() int     { return m.Dim }
func (m *TokenTransformer) Params() *Params { return m.P }
func (m *TokenTransformer) InputShape(B int) tensor.Shape {
	return tensor.Shape{B * m.Tokens, m.Features}
}

// layerNorm normalises the rows of x (N, D) with learned gain and bias.
func layerNorm(s *Scope, name string, x *G.Node, D int) *G.Node {
	mean := G.Must(G.Mean(x, 1))
	xc := G.Must(G.BroadcastSub(x, G.Must(G.Reshape(mean, tensor.Shape{x.Shape()[0], 1})), nil, []byte{1}))
	v := G.Must(G.Mean(G.Must(G.Square(xc)), 1))
	eps := G.NewConstant(float32(1e-5))
	std := G.Must(G.Sqrt(G.Must(G.Add(v, eps))))
	xn := G.Must(G.BroadcastHadamardDiv(xc, G.Must(G.Reshape(std, tensor.Shape{x.Shape()[0], 1})), nil, []byte{1}))
	gain := s.Param(name+".g", 0, false, 1, D)
	// gain is stored as an offset from 1 so the zero init is the identity.
	one := G.NewConstant(float32(1))
	gn := G.Must(G.Add(gain, one))
	bias := s.Param(name+".b", 0, false, 1, D)
	return G.Must(G.BroadcastAdd(G.Must(G.BroadcastHadamardProd(xn, gn, nil, []byte{0})), bias, nil, []byte{0}))
}

func (m *TokenTransformer) Build(s *Scope, x *G.Node, B int) (*G.Node, *G.Node) {
	A, D, H := m.Tokens, m.Dim, m.Heads
	dh := D / H
	n := m.Name
	emb := s.Param(n+".emb", 0.3, true, m.Features, D)
	pos := s.Param(n+".attr", 0.3, false, A, D)
	t := G.Must(G.Mul(x, emb)) // (B*A, D)
	t = G.Must(G.Reshape(G.Must(G.BroadcastAdd(G.Must(G.Reshape(t, tensor.Shape{B, A, D})), pos, nil, []byte{0})), tensor.Shape{B * A, D}))
	// Pre-LN self-attention.
	hn := layerNorm(s, n+".ln1", t, D)
	heads := func(w *G.Node) *G.Node {
		y := G.Must(G.Reshape(G.Must(G.Mul(hn, w)), tensor.Shape{B, A, H, dh}))
		y = G.Must(G.Transpose(y, 0, 2, 1, 3))
		return G.Must(G.Reshape(y, tensor.Shape{B * H, A, dh}))
	}
	sc := math.Sqrt(1 / float64(D))
	q := heads(s.Param(n+".Wq", sc, true, D, D))
	k := heads(s.Param(n+".Wk", sc, true, D, D))
	v := heads(s.Param(n+".Wv", sc, true, D, D))
	att := G.Must(G.BatchedMatMul(q, k, false, true)) // (B*H, A, A)
	att = G.Must(G.Mul(att, G.NewConstant(float32(1/math.Sqrt(float64(dh))))))
	att = G.Must(G.SoftMax(att, 2))
	o := G.Must(G.BatchedMatMul(att, v)) // (B*H, A, dh)
	o = G.Must(G.Transpose(G.Must(G.Reshape(o, tensor.Shape{B, H, A, dh})), 0, 2, 1, 3))
	o = G.Must(G.Reshape(o, tensor.Shape{B * A, D}))
	t = G.Must(G.Add(t, G.Must(G.Mul(o, s.Param(n+".Wo", sc, true, D, D)))))
	// Pre-LN feed-forward.
	f := G.Must(G.Rectify(s.Linear(n+".ff1", layerNorm(s, n+".ln2", t, D), D, m.FF)))
	t = G.Must(G.Add(t, s.Linear(n+".ff2", f, m.FF, D)))
	pooled := G.Must(G.Mean(G.Must(G.Reshape(t, tensor.Shape{B, A, D})), 1)) // (B, D)
	pooled = layerNorm(s, n+".lnf", pooled, D)
	out := s.Linear(n+".head", pooled, D, 1)
	return G.Must(G.Reshape(out, tensor.Shape{B})), pooled
}

// LSTM is a one-layer LSTM (Hochreiter & Schmidhuber 1997, with forget
// gate) over a sequence of Steps scalars per example, unrolled in the graph;
// a linear head on the last hidden state gives the output (the forecast)
// and the last hidden state is the embedding.
type LSTM struct {
	Steps, Hidden int
	P             *Params
	Name          string
}

// NewLSTM makes the LSTM.
func NewLSTM(name string, steps, hidden int, seed uint64) *LSTM {
	return &LSTM{Steps: steps, Hidden: hidden, P: NewParams(seed), Name: name}
}

func (m *LSTM) Width() int                    { return m.Steps }
func (m *LSTM) EmbDim() int                   { return m.Hidden }
func (m *LSTM) Params() *Params               { return m.P }
func (m *LSTM) InputShape(B int) tensor.Shape { return tensor.Shape{B, m.Steps} }

func (m *LSTM) Build(s *Scope, x *G.Node, B int) (*G.Node, *G.Node) {
	Hd := m.Hidden
	n := m.Name
	wx := s.Param(n+".Wx", 1, true, 1, 4*Hd)
	wh := s.Param(n+".Wh", math.Sqrt(1/float64(Hd)), true, Hd, 4*Hd)
	b := s.Param(n+".b", 0, false, 1, 4*Hd)
	var h, c *G.Node
	for t := 0; t < m.Steps; t++ {
		xt := G.Must(G.Reshape(G.Must(G.Slice(x, nil, G.S(t))), tensor.Shape{B, 1}))
		z := G.Must(G.BroadcastAdd(G.Must(G.Mul(xt, wx)), b, nil, []byte{0}))
		if h != nil {
			z = G.Must(G.Add(z, G.Must(G.Mul(h, wh))))
		}
		i := G.Must(G.Sigmoid(G.Must(G.Slice(z, nil, G.S(0, Hd)))))
		f := G.Must(G.Sigmoid(G.Must(G.Slice(z, nil, G.S(Hd, 2*Hd)))))
		g := G.Must(G.Tanh(G.Must(G.Slice(z, nil, G.S(2*Hd, 3*Hd)))))
		o := G.Must(G.Sigmoid(G.Must(G.Slice(z, nil, G.S(3*Hd, 4*Hd)))))
		ig := G.Must(G.HadamardProd(i, g))
		if c == nil {
			c = ig
		} else {
			c = G.Must(G.Add(G.Must(G.HadamardProd(f, c)), ig))
		}
		h = G.Must(G.HadamardProd(o, G.Must(G.Tanh(c))))
	}
	out := s.Linear(n+".head", h, Hd, 1)
	return G.Must(G.Reshape(out, tensor.Shape{B})), h
}
