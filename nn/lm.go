package nn

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

// Positions selects how a language model encodes token positions.
type Positions int

const (
	// Learned adds a learned position embedding (GPT-2 style, scope pos).
	Learned Positions = iota
	// Rotary rotates queries and keys by position (RoFormer, Su et al. 2021).
	Rotary
)

// LMConfig configures a decoder-only causal language model.
type LMConfig struct {
	Vocab, Dim, Layers, Heads int
	// MaxLen is the longest sequence (prompt plus generated tokens) the model
	// handles; learned position tables have this many rows.
	MaxLen    int
	Positions Positions
	// MLPRatio is the feed-forward width in multiples of Dim (default 4).
	MLPRatio int
	// CopyDim, when positive, adds a pointer (copy) head of this query/key
	// width: the next-token distribution mixes the vocabulary softmax with
	// attention over the tokens seen so far (CopyMixOp; See et al. 2017),
	// so the model can reproduce tokens of its context exactly. Its
	// parameters are copy.q, copy.k and copy.gate. 0: no copy head.
	CopyDim int
}

func (c LMConfig) validate() error {
	if c.Vocab <= 0 || c.Dim <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.MaxLen <= 0 {
		return fmt.Errorf("nn: LMConfig needs positive Vocab, Dim, Layers, Heads, MaxLen: %+v", c)
	}
	if c.CopyDim < 0 {
		return fmt.Errorf("nn: LMConfig: negative CopyDim %d", c.CopyDim)
	}
	if c.Dim%c.Heads != 0 {
		return fmt.Errorf("nn: LMConfig: Dim %d does not divide into %d heads", c.Dim, c.Heads)
	}
	if c.Positions == Rotary && (c.Dim/c.Heads)%2 != 0 {
		return fmt.Errorf("nn: LMConfig: rotary positions need an even head width, got %d", c.Dim/c.Heads)
	}
	return nil
}

func (c LMConfig) mlpRatio() int {
	if c.MLPRatio == 0 {
		return 4
	}
	return c.MLPRatio
}

// LM is a GPT-style decoder-only transformer language model (Radford et al.
// 2019): token embedding (plus learned positions, or rotary positions inside
// attention), Layers pre-LN causal TransformerBlocks, a final layer norm and
// an untied output projection to Vocab logits. Its parameters live in Store
// under tok, pos, blocks.i.{ln1,attn.qkv,attn.out,ln2,mlp.fc1,mlp.fc2}, ln_f
// and head.
type LM struct {
	Store  *Store
	Config LMConfig
}

// NewLM creates (or reuses, when the store already has them) the parameters
// of a language model in store. It panics on an invalid configuration.
func NewLM(store *Store, cfg LMConfig) *LM {
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	m := &LM{Store: store, Config: cfg}
	// Materialise every parameter by building a 1×1 graph once.
	g := G.NewGraph()
	s := NewScope(store, g)
	ids := s.Input("ids", 1, 1)
	m.Logits(s, ids)
	return m
}

// Logits builds the model over ids (B×T float32 token ids, T ≤ MaxLen) and
// returns the B×T×Vocab next-token logits; position t sees tokens 0…t. With
// a copy head (CopyDim > 0) they are the log-probabilities of the
// pointer-generator mixture, which are their own log-softmax, so losses and
// samplers treat both alike.
func (m *LM) Logits(s *Scope, ids *G.Node) *G.Node {
	c := m.Config
	sh := ids.Shape()
	if sh.Dims() != 2 || sh[1] > c.MaxLen {
		panic(fmt.Sprintf("nn: LM.Logits: ids must be B×T with T ≤ %d, got %v", c.MaxLen, sh))
	}
	B, T := sh[0], sh[1]
	x := Embedding(s.Sub("tok"), ids, c.Vocab, c.Dim)
	if c.Positions == Learned {
		pos := newDense(ts.Shape{B, T})
		pd := pos.Float32s()
		for i := range pd {
			pd[i] = float32(i % T)
		}
		pn := G.NewMatrix(s.g, ts.Float32, G.WithShape(B, T), G.WithValue(pos), G.WithName(fmt.Sprintf("positions.%d", nodeSeq())))
		x = AddOp(x, Embedding(s.Sub("pos"), pn, c.MaxLen, c.Dim))
	}
	for i := 0; i < c.Layers; i++ {
		x = TransformerBlock(s.Sub("blocks").In(i), x, BlockConfig{Heads: c.Heads, Causal: true, Rotary: c.Positions == Rotary, MLPRatio: c.mlpRatio()})
	}
	x = LayerNorm(s.Sub("ln_f"), x)
	logits := LinearNoBias(s.Sub("head"), x, c.Vocab)
	if c.CopyDim == 0 {
		return logits
	}
	cs := s.Sub("copy")
	q := LinearNoBias(cs.Sub("q"), x, c.CopyDim)
	k := LinearNoBias(cs.Sub("k"), x, c.CopyDim)
	gate := Linear(cs.Sub("gate"), x, 1)
	return CopyMixOp(logits, q, k, gate, ids)
}
