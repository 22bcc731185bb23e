package nn

import (
	"fmt"
	"sync/atomic"

	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

// Linear is a fully connected layer y = x·w + b with parameters s.w (in×out,
// Glorot-uniform) and s.b (out, zeros). x may have any leading dimensions.
func Linear(s *Scope, x *G.Node, out int) *G.Node {
	in := lastDim(x)
	w := s.Param("w", ts.Shape{in, out}, GlorotUniform)
	b := s.Param("b", ts.Shape{out}, Zeros)
	return LinearOp(x, w, b)
}

// LinearNoBias is Linear without the bias.
func LinearNoBias(s *Scope, x *G.Node, out int) *G.Node {
	w := s.Param("w", ts.Shape{lastDim(x), out}, GlorotUniform)
	return LinearOp(x, w, nil)
}

// Embedding maps the float32 token ids in ids (any shape) to vectors of width
// dim from the table s.table (vocab×dim, N(0, 0.02²) as in GPT-2).
func Embedding(s *Scope, ids *G.Node, vocab, dim int) *G.Node {
	t := s.Param("table", ts.Shape{vocab, dim}, Normal(0.02))
	return EmbeddingOp(t, ids)
}

// LayerNorm normalises the last axis of x (Ba et al. 2016) with the gain
// s.gamma (ones) and shift s.beta (zeros).
func LayerNorm(s *Scope, x *G.Node) *G.Node {
	d := lastDim(x)
	g := s.Param("gamma", ts.Shape{d}, Ones)
	b := s.Param("beta", ts.Shape{d}, Zeros)
	return LayerNormOp(x, g, b, 1e-5)
}

// GELU applies the Gaussian error linear unit.
func GELU(x *G.Node) *G.Node { return GELUOp(x) }

// MLP is the transformer feed-forward network Linear(hidden) → GELU →
// Linear(out), under the scopes fc1 and fc2.
func MLP(s *Scope, x *G.Node, hidden, out int) *G.Node {
	return Linear(s.Sub("fc2"), GELUOp(Linear(s.Sub("fc1"), x, hidden)), out)
}

// AttentionConfig configures MultiHeadAttention and CrossAttention.
type AttentionConfig struct {
	Heads  int
	Causal bool
	// Rotary applies rotary position embeddings to queries and keys.
	Rotary bool
	// Lengths (float32, one per batch row) masks keys at positions ≥ the
	// row's length; nil means no padding.
	Lengths *G.Node
}

// MultiHeadAttention is multi-head self-attention (Vaswani et al. 2017) over
// x (B×T×D): one fused projection s.qkv to queries, keys and values, the
// fused attention op, and the output projection s.out.
func MultiHeadAttention(s *Scope, x *G.Node, cfg AttentionConfig) *G.Node {
	xs := x.Shape()
	if xs.Dims() != 3 {
		panic(fmt.Sprintf("nn: MultiHeadAttention: x must be B×T×D, got %v", xs))
	}
	d := xs[2]
	qkv := Linear(s.Sub("qkv"), x, 3*d)
	a := SelfAttentionOp(qkv, cfg.Lengths, AttentionOpConfig{Heads: cfg.Heads, Causal: cfg.Causal, Rotary: cfg.Rotary})
	return Linear(s.Sub("out"), a, d)
}

// CrossAttention is multi-head attention of x (B×Tq×D) over mem (B×Tk×Dm):
// queries from s.q, keys and values from s.kv, output projection s.out.
// cfg.Lengths masks padded memory positions.
func CrossAttention(s *Scope, x, mem *G.Node, cfg AttentionConfig) *G.Node {
	d := lastDim(x)
	q := Linear(s.Sub("q"), x, d)
	kv := Linear(s.Sub("kv"), mem, 2*d)
	a := CrossAttentionOp(q, kv, cfg.Lengths, AttentionOpConfig{Heads: cfg.Heads, Causal: cfg.Causal})
	return Linear(s.Sub("out"), a, d)
}

// BlockConfig configures a TransformerBlock.
type BlockConfig struct {
	Heads  int
	Causal bool
	Rotary bool
	// MLPRatio is the hidden width of the feed-forward network in multiples
	// of the model width (default 4).
	MLPRatio int
	// Lengths masks padded key positions (see AttentionConfig).
	Lengths *G.Node
	// Memory, when set, adds a cross-attention sub-layer over it (an
	// encoder–decoder block); MemoryLengths masks its padding.
	Memory, MemoryLengths *G.Node
}

// TransformerBlock is a pre-LN transformer block (Xiong et al. 2020, "On
// Layer Normalization in the Transformer Architecture"):
//
//	x = x + Attn(LN₁(x));  [x = x + CrossAttn(LN₃(x), memory)];  x = x + MLP(LN₂(x))
//
// with scopes ln1, attn, ln3, cross, ln2, mlp.
func TransformerBlock(s *Scope, x *G.Node, cfg BlockConfig) *G.Node {
	d := lastDim(x)
	r := cfg.MLPRatio
	if r == 0 {
		r = 4
	}
	h := MultiHeadAttention(s.Sub("attn"), LayerNorm(s.Sub("ln1"), x),
		AttentionConfig{Heads: cfg.Heads, Causal: cfg.Causal, Rotary: cfg.Rotary, Lengths: cfg.Lengths})
	x = AddOp(x, h)
	if cfg.Memory != nil {
		h = CrossAttention(s.Sub("cross"), LayerNorm(s.Sub("ln3"), x), cfg.Memory,
			AttentionConfig{Heads: cfg.Heads, Lengths: cfg.MemoryLengths})
		x = AddOp(x, h)
	}
	h = MLP(s.Sub("mlp"), LayerNorm(s.Sub("ln2"), x), r*d, d)
	return AddOp(x, h)
}

// ClassificationHead maps features x (…×D) to logits over classes with a
// linear layer (scope s); train it with CrossEntropyOp.
func ClassificationHead(s *Scope, x *G.Node, classes int) *G.Node { return Linear(s, x, classes) }

// RegressionHead maps features x (…×D) to outs real outputs with a linear layer.
func RegressionHead(s *Scope, x *G.Node, outs int) *G.Node { return Linear(s, x, outs) }

// EncoderConfig configures a TokenSetEncoder.
type EncoderConfig struct {
	Dim, Layers, Heads int
	MLPRatio           int // default 4
	// Categories, when set, has one entry per column of x: 0 for a numeric
	// column, C > 0 for a categorical column whose values are integer codes
	// 0…C−1 (stored as float32). Each categorical attribute then becomes
	// one token looked up in its own embedding rows (scope tok, parameter
	// table: ΣC×Dim) plus a per-column bias, and each numeric column a
	// scalar token x·w + b, as in the FT-Transformer (Gorishniy et al.
	// 2021; MixedFeatureTokensOp). A code outside 0…C−1 makes the run fail
	// with an error. nil: every column is numeric.
	Categories []int
}

// TokenSetEncoder encodes a batch of tabular rows x (B×F float features) as
// a set of F feature tokens (FeatureTokensOp, Gorishniy et al. 2021) run
// through non-causal pre-LN transformer blocks, then mean-pooled and layer
// normalised to a B×Dim representation. Feed it to ClassificationHead or
// RegressionHead. Scopes: tok, blocks.i, ln_f. With cfg.Categories,
// categorical columns are embedded per attribute instead (see
// EncoderConfig.Categories).
func TokenSetEncoder(s *Scope, x *G.Node, cfg EncoderConfig) *G.Node {
	xs := x.Shape()
	if xs.Dims() != 2 {
		panic(fmt.Sprintf("nn: TokenSetEncoder: x must be B×F, got %v", xs))
	}
	f := xs[1]
	var h *G.Node
	if cfg.Categories == nil {
		w := s.Sub("tok").Param("w", ts.Shape{f, cfg.Dim}, Normal(0.5))
		b := s.Sub("tok").Param("b", ts.Shape{f, cfg.Dim}, Normal(0.02))
		h = FeatureTokensOp(x, w, b)
	} else {
		if len(cfg.Categories) != f {
			panic(fmt.Sprintf("nn: TokenSetEncoder: x %v but %d entries in Categories", xs, len(cfg.Categories)))
		}
		nNum, nRows := 0, 0
		for _, c := range cfg.Categories {
			if c == 0 {
				nNum++
			}
			nRows += max(c, 0)
		}
		// Unused parameters (no numeric or no categorical columns) keep
		// one row so shapes stay valid; they get zero gradient.
		w := s.Sub("tok").Param("w", ts.Shape{max(nNum, 1), cfg.Dim}, Normal(0.5))
		tab := s.Sub("tok").Param("table", ts.Shape{max(nRows, 1), cfg.Dim}, Normal(0.5))
		b := s.Sub("tok").Param("b", ts.Shape{f, cfg.Dim}, Normal(0.02))
		h = MixedFeatureTokensOp(x, w, tab, b, cfg.Categories)
	}
	for i := 0; i < cfg.Layers; i++ {
		h = TransformerBlock(s.Sub("blocks").In(i), h, BlockConfig{Heads: cfg.Heads, MLPRatio: cfg.MLPRatio})
	}
	return LayerNorm(s.Sub("ln_f"), MeanPoolOp(h))
}

// LSTMConfig configures LSTM.
type LSTMConfig struct {
	Hidden, Layers int
}

// LSTM runs a stacked LSTM over x (B×T×In) for the fixed T steps of the
// graph: per layer, one Linear for all input projections and one
// LSTMLayerOp for the recurrence. mask (B×T, 1 real / 0 padding, may be nil)
// freezes a row's state on padded steps, so right-padded sequences end with
// the state of their last real step. It returns the top layer's outputs
// (B×T×Hidden) and its final hidden state (B×Hidden). Scopes: layers.i.x
// (input projection with bias), layers.i.h (recurrent projection).
func LSTM(s *Scope, x, mask *G.Node, cfg LSTMConfig) (outputs, last *G.Node) {
	xs := x.Shape()
	if xs.Dims() != 3 {
		panic(fmt.Sprintf("nn: LSTM: x must be B×T×In, got %v", xs))
	}
	B, T, H := xs[0], xs[1], cfg.Hidden
	if mask != nil && !mask.Shape().Eq(ts.Shape{B, T}) {
		panic(fmt.Sprintf("nn: LSTM: mask %v for input %v", mask.Shape(), xs))
	}
	in := x
	for l := 0; l < cfg.Layers; l++ {
		ls := s.Sub("layers").In(l)
		proj := Linear(ls.Sub("x"), in, 4*H) // B×T×4H
		wh := ls.Sub("h").Param("w", ts.Shape{H, 4 * H}, GlorotUniform)
		in = LSTMLayerOp(proj, wh, mask)
	}
	last = TimeSliceOp(in, T-1)
	return in, last
}

var seqCounter atomic.Int64 // unique names for constant nodes

func nodeSeq() int64 { return seqCounter.Add(1) }
