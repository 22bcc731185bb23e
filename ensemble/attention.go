package ensemble

import (
	"fmt"
	"math"
	"math/rand/v2"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// AttentionConfig configures an attention fusion layer.
type AttentionConfig struct {
	// EmbDims is the embedding width of each member, in member order.
	EmbDims []int
	// Dim is the width of the shared member space (a multiple of Heads).
	Dim int
	// Heads is the number of attention heads.
	Heads int
	// Dtype is tensor.Float32 (default) or tensor.Float64.
	Dtype tensor.Dtype
	// Seed initialises the weights.
	Seed uint64
	// Name prefixes the parameter names (default "fusion").
	Name string
	// VoteOnly drops the context correction: the fused logit is the
	// attention-weighted vote of the member logits alone (a convex
	// combination), which overfits less on small data.
	VoteOnly bool
}

// Attention is a learned multi-head attention layer over member embeddings,
// after the heterogeneous-ensemble attention of "Attention-based ensemble
// for deep metric learning" (Kim et al., 2018) and the pooling-by-attention of
// Set Transformer (Lee et al., 2019): each member's embedding is projected
// into a shared space, a per-example query (a learned projection of the mean
// of the present members) attends over the members in every head, and the
// fused logit is the attention-weighted sum of the member logits plus a
// learned correction from the attended context:
//
//	h_m   = tanh(e_m P_m + c_m)                       per member m
//	q     = mean_{m present}(h_m) Wq
//	a_mk  = softmax_m(<h_m Wk, q>_k / sqrt(d_k) + log mask_m)   per head k
//	ctx   = concat_k sum_m a_mk (h_m Wv)_k
//	logit = sum_m mean_k(a_mk) z_m + ctx Wo + bo
//
// A member that is missing for an example (mask 0) gets weight exactly 0
// (its score is pushed to -1e9 before the softmax) and its logit is ignored.
// The layer is a Gorgonia subgraph: when the member embeddings are nodes of
// member models in the same graph, gradients flow into the members (joint
// training); when they are input nodes filled with precomputed values, the
// members are frozen.
type Attention struct {
	cfg    AttentionConfig
	g      *G.ExprGraph
	P, C   []*G.Node // per-member projection (e_m, D) and bias (1, D)
	Wq     *G.Node   // (D, D)
	Wk, Wv *G.Node   // (D, D)
	Wo     *G.Node   // (D, 1)
	Bo     *G.Node   // (1, 1)
}

// NewAttention creates the layer's parameters in g.
func NewAttention(g *G.ExprGraph, cfg AttentionConfig) *Attention {
	if cfg.Heads <= 0 || cfg.Dim <= 0 || cfg.Dim%cfg.Heads != 0 {
		panic(fmt.Sprintf("ensemble: attention Dim %d must be a positive multiple of Heads %d", cfg.Dim, cfg.Heads))
	}
	if len(cfg.EmbDims) == 0 {
		panic("ensemble: attention needs at least one member")
	}
	if cfg.Dtype == (tensor.Dtype{}) {
		cfg.Dtype = tensor.Float32
	}
	if cfg.Name == "" {
		cfg.Name = "fusion"
	}
	a := &Attention{cfg: cfg, g: g}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xa77e))
	D := cfg.Dim
	for m, e := range cfg.EmbDims {
		a.P = append(a.P, param(g, cfg.Dtype, rng, fmt.Sprintf("%s.P%d", cfg.Name, m), e, D, math.Sqrt(1/float64(e))))
		a.C = append(a.C, param(g, cfg.Dtype, rng, fmt.Sprintf("%s.c%d", cfg.Name, m), 1, D, 0))
	}
	s := math.Sqrt(1 / float64(D))
	a.Wq = param(g, cfg.Dtype, rng, cfg.Name+".Wq", D, D, s)
	a.Wk = param(g, cfg.Dtype, rng, cfg.Name+".Wk", D, D, s)
	a.Wv = param(g, cfg.Dtype, rng, cfg.Name+".Wv", D, D, s)
	a.Wo = param(g, cfg.Dtype, rng, cfg.Name+".Wo", D, 1, 0.1*s)
	a.Bo = param(g, cfg.Dtype, rng, cfg.Name+".bo", 1, 1, 0)
	return a
}

// param makes a (r, c) learnable matrix with N(0, scale²) entries.
func param(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand, name string, r, c int, scale float64) *G.Node {
	var t *tensor.Dense
	if dt == tensor.Float64 {
		v := make([]float64, r*c)
		for i := range v {
			v[i] = rng.NormFloat64() * scale
		}
		t = tensor.New(tensor.WithShape(r, c), tensor.WithBacking(v))
	} else {
		v := make([]float32, r*c)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		t = tensor.New(tensor.WithShape(r, c), tensor.WithBacking(v))
	}
	return G.NewMatrix(g, dt, G.WithShape(r, c), G.WithName(name), G.WithValue(t))
}

// Learnables returns the layer's parameters.
func (a *Attention) Learnables() G.Nodes {
	out := G.Nodes{}
	out = append(out, a.P...)
	out = append(out, a.C...)
	if a.cfg.VoteOnly {
		return append(out, a.Wq, a.Wk)
	}
	return append(out, a.Wq, a.Wk, a.Wv, a.Wo, a.Bo)
}

// Fused is the output of the layer.
type Fused struct {
	// Logit is the fused logit, shape (B).
	Logit *G.Node
	// Weights are the attention weights, shape (B, M, Heads); each
	// (example, head) column sums to 1 over the present members.
	Weights *G.Node
	// Context is the attended context, shape (B, Dim): the ensemble's
	// embedding of each example (used by the decision policy and by stacking).
	Context *G.Node
}

// Fuse builds the fusion of the members' embeddings embs[m] (B, EmbDims[m]),
// logits (B, M) and mask (B, M) with 1 where the member is present and 0
// where it is missing. Every example needs at least one present member.
func (a *Attention) Fuse(embs []*G.Node, logits, mask *G.Node) (*Fused, error) {
	M, D, H := len(a.cfg.EmbDims), a.cfg.Dim, a.cfg.Heads
	if len(embs) != M {
		panic(fmt.Sprintf("ensemble: Fuse got %d member embeddings, want %d", len(embs), M))
	}
	B := embs[0].Shape()[0]
	for m, e := range embs {
		if s := e.Shape(); len(s) != 2 || s[0] != B || s[1] != a.cfg.EmbDims[m] {
			panic(fmt.Sprintf("ensemble: member %d embedding shape %v, want (%d, %d)", m, s, B, a.cfg.EmbDims[m]))
		}
	}
	for _, n := range []*G.Node{logits, mask} {
		if s := n.Shape(); len(s) != 2 || s[0] != B || s[1] != M {
			panic(fmt.Sprintf("ensemble: logits/mask shape %v, want (%d, %d)", s, B, M))
		}
	}
	dk := D / H
	var err error
	must := func(n *G.Node, e error) *G.Node {
		if err == nil && e != nil {
			err = e
		}
		return n
	}
	// Project each member into the shared space: (B, 1, D) each, then (B, M, D).
	hs := make([]*G.Node, M)
	for m, e := range embs {
		h := must(G.BroadcastAdd(must(G.Mul(e, a.P[m])), a.C[m], nil, []byte{0}))
		hs[m] = must(G.Reshape(must(G.Tanh(h)), tensor.Shape{B, 1, D}))
	}
	if err != nil {
		return nil, err
	}
	hAll := hs[0]
	if M > 1 {
		hAll = must(G.Concat(1, hs...))
	}
	// Masked mean of the present members -> query (B, D).
	mask3 := must(G.Reshape(mask, tensor.Shape{B, M, 1}))
	hMasked := must(G.BroadcastHadamardProd(hAll, mask3, nil, []byte{2}))
	count := must(G.Sum(mask, 1)) // (B)
	count2 := must(G.Reshape(count, tensor.Shape{B, 1}))
	mean := must(G.BroadcastHadamardDiv(must(G.Sum(hMasked, 1)), count2, nil, []byte{1}))
	q := must(G.Mul(mean, a.Wq)) // (B, D)
	flat := must(G.Reshape(hAll, tensor.Shape{B * M, D}))
	k := must(G.Reshape(must(G.Mul(flat, a.Wk)), tensor.Shape{B, M, D}))
	v := must(G.Reshape(must(G.Mul(flat, a.Wv)), tensor.Shape{B, M, H, dk}))
	q3 := must(G.Reshape(q, tensor.Shape{B, 1, D}))
	kq := must(G.BroadcastHadamardProd(k, q3, nil, []byte{1})) // (B, M, D)
	scores := must(G.Sum(must(G.Reshape(kq, tensor.Shape{B, M, H, dk})), 3))
	if err != nil {
		return nil, err
	}
	scale := G.NewConstant(castScalar(a.cfg.Dtype, 1/math.Sqrt(float64(dk))))
	scores = must(G.Mul(scores, scale)) // (B, M, H)
	// Missing members: add (mask-1)*1e9.
	one := G.NewConstant(castScalar(a.cfg.Dtype, 1))
	big := G.NewConstant(castScalar(a.cfg.Dtype, 1e9))
	// Computed from the 2-D input node and reshaped afterwards: an in-place
	// op on a reshaped view of an input would overwrite the input's backing.
	bias := must(G.Reshape(must(G.Mul(must(G.Sub(mask, one)), big)), tensor.Shape{B, M, 1})) // (B, M, 1)
	scores = must(G.BroadcastAdd(scores, bias, nil, []byte{2}))
	w := must(G.SoftMax(scores, 1)) // (B, M, H)
	w4 := must(G.Reshape(w, tensor.Shape{B, M, H, 1}))
	ctx := must(G.Sum(must(G.BroadcastHadamardProd(v, w4, nil, []byte{3})), 1)) // (B, H, dk)
	ctx = must(G.Reshape(ctx, tensor.Shape{B, D}))
	wbar := must(G.Mean(w, 2))                                                             // (B, M)
	vote := must(G.Sum(must(G.HadamardProd(wbar, must(G.HadamardProd(logits, mask)))), 1)) // (B)
	corr := must(G.BroadcastAdd(must(G.Mul(ctx, a.Wo)), a.Bo, nil, []byte{0}))             // (B, 1)
	logit := vote
	if !a.cfg.VoteOnly {
		logit = must(G.Add(vote, must(G.Reshape(corr, tensor.Shape{B}))))
	}
	if err != nil {
		return nil, fmt.Errorf("ensemble: attention fusion: %w", err)
	}
	return &Fused{Logit: logit, Weights: w, Context: ctx}, nil
}

func castScalar(dt tensor.Dtype, v float64) any {
	if dt == tensor.Float64 {
		return v
	}
	return float32(v)
}

// In returns the layer bound to another graph g, sharing the parameter
// values (not copies): training through one graph is seen by the other.
// Use it to build an inference graph of a different batch size.
func (a *Attention) In(g *G.ExprGraph) *Attention {
	b := &Attention{cfg: a.cfg, g: g}
	bind := func(n *G.Node) *G.Node {
		return G.NewMatrix(g, a.cfg.Dtype, G.WithShape(n.Shape()...), G.WithName(n.Name()), G.WithValue(n.Value()))
	}
	for m := range a.P {
		b.P = append(b.P, bind(a.P[m]))
		b.C = append(b.C, bind(a.C[m]))
	}
	b.Wq, b.Wk, b.Wv, b.Wo, b.Bo = bind(a.Wq), bind(a.Wk), bind(a.Wv), bind(a.Wo), bind(a.Bo)
	return b
}

// Config returns the layer's configuration.
func (a *Attention) Config() AttentionConfig { return a.cfg }
