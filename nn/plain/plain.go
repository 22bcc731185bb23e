package plain

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/nn"
	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

func must(n *G.Node, err error) *G.Node {
	if err != nil {
		panic(fmt.Sprintf("nn/plain: %v", err))
	}
	return n
}

func c32(g *G.ExprGraph, v float64) *G.Node {
	return G.NewConstant(float32(v))
}

// Linear is x·w + b on a matrix x (rows×in), parameters s.w and s.b.
func Linear(s *nn.Scope, x *G.Node, out int) *G.Node {
	in := x.Shape()[1]
	w := s.Param("w", ts.Shape{in, out}, nn.GlorotUniform)
	b := s.Param("b", ts.Shape{out}, nn.Zeros)
	return must(G.BroadcastAdd(must(G.Mul(x, w)), b, nil, []byte{0}))
}

// LinearNoBias is x·w.
func LinearNoBias(s *nn.Scope, x *G.Node, out int) *G.Node {
	w := s.Param("w", ts.Shape{x.Shape()[1], out}, nn.GlorotUniform)
	return must(G.Mul(x, w))
}

// LayerNorm normalises the rows of the matrix x with s.gamma and s.beta.
func LayerNorm(s *nn.Scope, x *G.Node) *G.Node {
	d := x.Shape()[1]
	gamma := s.Param("gamma", ts.Shape{d}, nn.Ones)
	beta := s.Param("beta", ts.Shape{d}, nn.Zeros)
	// Reductions and broadcasts are products with constant columns and
	// rows of ones.
	rows := x.Shape()[0]
	g := x.Graph()
	col := func(n int, v float32, name string) *G.Node {
		d := ts.New(ts.WithShape(n, 1), ts.Of(ts.Float32))
		for i := range d.Float32s() {
			d.Float32s()[i] = v
		}
		return G.NewMatrix(g, ts.Float32, G.WithShape(n, 1), G.WithValue(d), G.WithName(s.Name()+name))
	}
	avg := col(d, 1/float32(d), ".avg")             // d×1
	onesD := must(G.Transpose(col(d, 1, ".onesD"))) // 1×d
	onesR := col(rows, 1, ".onesR")                 // rows×1
	mean := must(G.Mul(x, avg))                     // rows×1
	xc := must(G.Sub(x, must(G.Mul(mean, onesD))))
	va := must(G.Mul(must(G.Square(xc)), avg))
	// (Gorgonia's InverseSqrt has a wrong gradient: divide by Sqrt instead.)
	std := must(G.Sqrt(must(G.Add(va, c32(g, 1e-5)))))
	xn := must(G.HadamardDiv(xc, must(G.Mul(std, onesD))))
	g2 := must(G.Reshape(gamma, ts.Shape{1, d}))
	b2 := must(G.Reshape(beta, ts.Shape{1, d}))
	return must(G.Add(must(G.HadamardProd(xn, must(G.Mul(onesR, g2)))), must(G.Mul(onesR, b2))))
}

// GELU is the tanh approximation composed from elementwise ops.
func GELU(x *G.Node) *G.Node {
	g := x.Graph()
	x3 := must(G.HadamardProd(x, must(G.HadamardProd(x, x))))
	in := must(G.Mul(c32(g, 0.7978845608028654), must(G.Add(x, must(G.Mul(c32(g, 0.044715), x3))))))
	return must(G.HadamardProd(must(G.Mul(c32(g, 0.5), x)), must(G.Add(c32(g, 1), must(G.Tanh(in))))))
}

// heads turns rows (B·T)×D into (B·H)×T×dh.
func heads(x *G.Node, b, t, h, dh int) *G.Node {
	x = must(G.Reshape(x, ts.Shape{b, t, h, dh}))
	x = must(G.Transpose(x, 0, 2, 1, 3))
	return must(G.Reshape(x, ts.Shape{b * h, t, dh}))
}

// Attention is causal multi-head self-attention over x (B·T rows × D) with
// parameters s.qkv and s.out, as the fused nn.MultiHeadAttention.
func Attention(s *nn.Scope, x *G.Node, b, t, h int, causal bool) *G.Node {
	d := x.Shape()[1]
	dh := d / h
	qkv := Linear(s.Sub("qkv"), x, 3*d)
	q := heads(must(G.Slice(qkv, nil, G.S(0, d))), b, t, h, dh)
	k := heads(must(G.Slice(qkv, nil, G.S(d, 2*d))), b, t, h, dh)
	v := heads(must(G.Slice(qkv, nil, G.S(2*d, 3*d))), b, t, h, dh)
	sc := must(G.BatchedMatMul(q, k, false, true))
	sc = must(G.Mul(sc, c32(x.Graph(), 1/math.Sqrt(float64(dh)))))
	if causal {
		m := ts.New(ts.WithShape(1, t, t), ts.Of(ts.Float32))
		md := m.Float32s()
		for i := 0; i < t; i++ {
			for j := i + 1; j < t; j++ {
				md[i*t+j] = -1e30
			}
		}
		mn := G.NewTensor(x.Graph(), ts.Float32, 3, G.WithShape(1, t, t), G.WithValue(m), G.WithName(fmt.Sprintf("%s.mask", s.Name())))
		sc = must(G.BroadcastAdd(sc, mn, nil, []byte{0}))
	}
	p := must(G.SoftMax(sc))
	o := must(G.BatchedMatMul(p, v)) // (B·H)×T×dh
	o = must(G.Reshape(o, ts.Shape{b, h, t, dh}))
	o = must(G.Transpose(o, 0, 2, 1, 3))
	o = must(G.Reshape(o, ts.Shape{b * t, d}))
	return Linear(s.Sub("out"), o, d)
}

// TransformerBlock is the pre-LN block of nn.TransformerBlock (causal, no
// rotary, no padding) over x (B·T rows × D).
func TransformerBlock(s *nn.Scope, x *G.Node, b, t, h int) *G.Node {
	d := x.Shape()[1]
	a := Attention(s.Sub("attn"), LayerNorm(s.Sub("ln1"), x), b, t, h, true)
	x = must(G.Add(x, a))
	m := Linear(s.Sub("mlp").Sub("fc2"), GELU(Linear(s.Sub("mlp").Sub("fc1"), LayerNorm(s.Sub("ln2"), x), 4*d)), d)
	return must(G.Add(x, m))
}

// LMLogits is nn.LM.Logits (learned positions) from plain ops: the token
// and position embeddings are one-hot matrices times the tables. oneHot is
// (B·T)×Vocab, posOneHot (B·T)×MaxLen; the result is (B·T)×Vocab.
func LMLogits(s *nn.Scope, cfg nn.LMConfig, oneHot, posOneHot *G.Node, b, t int) *G.Node {
	tok := s.Sub("tok").Param("table", ts.Shape{cfg.Vocab, cfg.Dim}, nn.Normal(0.02))
	pos := s.Sub("pos").Param("table", ts.Shape{cfg.MaxLen, cfg.Dim}, nn.Normal(0.02))
	x := must(G.Add(must(G.Mul(oneHot, tok)), must(G.Mul(posOneHot, pos))))
	for i := 0; i < cfg.Layers; i++ {
		x = TransformerBlock(s.Sub("blocks").In(i), x, b, t, cfg.Heads)
	}
	return LinearNoBias(s.Sub("head"), LayerNorm(s.Sub("ln_f"), x), cfg.Vocab)
}

// LSTM is a single-layer nn.LSTM without mask from plain ops over T inputs
// (each B×In); it returns the T hidden states (each B×H).
func LSTM(s *nn.Scope, xs []*G.Node, hidden int) []*G.Node {
	b, in := xs[0].Shape()[0], xs[0].Shape()[1]
	g := xs[0].Graph()
	ls := s.Sub("layers").In(0)
	wx := ls.Sub("x").Param("w", ts.Shape{in, 4 * hidden}, nn.GlorotUniform)
	bx := ls.Sub("x").Param("b", ts.Shape{4 * hidden}, nn.Zeros)
	wh := ls.Sub("h").Param("w", ts.Shape{hidden, 4 * hidden}, nn.GlorotUniform)
	h := G.NewMatrix(g, ts.Float32, G.WithShape(b, hidden), G.WithInit(G.Zeroes()), G.WithName(s.Name()+".h0"))
	c := G.NewMatrix(g, ts.Float32, G.WithShape(b, hidden), G.WithInit(G.Zeroes()), G.WithName(s.Name()+".c0"))
	var outs []*G.Node
	H := hidden
	for _, x := range xs {
		z := must(G.BroadcastAdd(must(G.Add(must(G.Mul(x, wx)), must(G.Mul(h, wh)))), bx, nil, []byte{0}))
		i := must(G.Sigmoid(must(G.Slice(z, nil, G.S(0, H)))))
		f := must(G.Sigmoid(must(G.Slice(z, nil, G.S(H, 2*H)))))
		gg := must(G.Tanh(must(G.Slice(z, nil, G.S(2*H, 3*H)))))
		o := must(G.Sigmoid(must(G.Slice(z, nil, G.S(3*H, 4*H)))))
		c = must(G.Add(must(G.HadamardProd(f, c)), must(G.HadamardProd(i, gg))))
		h = must(G.HadamardProd(o, must(G.Tanh(c))))
		outs = append(outs, h)
	}
	return outs
}
