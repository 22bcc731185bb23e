package ensemble

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/nn"
	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

// AttentionConfig configures Attention.
type AttentionConfig struct {
	// Dim is the width of the shared member space (a multiple of Heads).
	Dim int
	// Heads is the number of attention heads.
	Heads int
	// VoteOnly drops the context correction: the fused logit is the
	// attention-weighted vote of the member logits alone (a convex
	// combination), which overfits less on small data. The value
	// projection and the output layer are then not built, so they have no
	// parameters.
	VoteOnly bool
}

// Fused is the output of Attention.
type Fused struct {
	// Logit is the fused logit, shape (B).
	Logit *G.Node
	// Weights are the attention weights, shape (B, M, Heads); each
	// (example, head) column sums to 1 over the present members.
	Weights *G.Node
	// Context is the attended context, shape (B, Dim): the ensemble's
	// embedding of each example. It is nil when VoteOnly is set.
	Context *G.Node
}

// Attention is a learned multi-head attention layer over member embeddings,
// after the heterogeneous-ensemble attention of "Attention-based ensemble
// for deep metric learning" (Kim et al., 2018) and the pooling-by-attention
// of Set Transformer (Lee et al., 2019). It fuses the embeddings embs[m]
// (B, E_m) of M members, their logits (B, M) and a presence mask (B, M)
// with 1 where the member is present and 0 where it is missing; every
// example needs at least one present member. Each member's embedding is
// projected into a shared space, a per-example query (a projection of the
// mean of the present members) attends over the members in every head, and
// the fused logit is the attention-weighted sum of the member logits plus a
// learned correction from the attended context:
//
//	h_m   = tanh(e_m P_m + c_m)                       per member m
//	q     = mean_{m present}(h_m) Wq
//	a_mk  = softmax_m(<h_m Wk, q>_k / sqrt(d_k) + log mask_m)   per head k
//	ctx   = concat_k sum_m a_mk (h_m Wv)_k
//	logit = sum_m mean_k(a_mk) z_m + ctx Wo + bo
//
// A member that is missing for an example (mask 0) gets weight exactly 0
// (its score is pushed to −1e9 before the softmax) and its logit is
// ignored.
//
// The parameters live in s's store under s, as those of nn's layers do:
// in.<m>.w (E_m×Dim, Glorot) and in.<m>.b (Dim) for P_m and c_m, q.w and
// k.w (Dim×Dim), and unless VoteOnly v.w (Dim×Dim), out.w (Dim×1) and
// out.b (1). out.w and out.b start at zero, so that an untrained layer is
// the attention vote alone and the correction grows only as far as the
// data asks. They train with nn's optimizers and trainers and are saved by
// nn.SaveCheckpoint; building the layer again under the same scope name,
// in any graph and for any batch size, reuses the same values. When the
// member embeddings are nodes of member models in the same graph,
// gradients flow into the members (joint training); when they are inputs
// holding precomputed values, the members are frozen.
//
// Mismatched shapes or a Dim that is not a positive multiple of Heads
// panic, naming the shapes.
func Attention(s *nn.Scope, embs []*G.Node, logits, mask *G.Node, cfg AttentionConfig) *Fused {
	if cfg.Heads <= 0 || cfg.Dim <= 0 || cfg.Dim%cfg.Heads != 0 {
		panic(fmt.Sprintf("ensemble: attention Dim %d must be a positive multiple of Heads %d", cfg.Dim, cfg.Heads))
	}
	M, D, H := len(embs), cfg.Dim, cfg.Heads
	if M == 0 {
		panic("ensemble: attention needs at least one member")
	}
	B := embs[0].Shape()[0]
	for m, e := range embs {
		if sh := e.Shape(); sh.Dims() != 2 || sh[0] != B {
			panic(fmt.Sprintf("ensemble: member %d embedding shape %v, want (%d, E)", m, sh, B))
		}
	}
	for _, n := range []*G.Node{logits, mask} {
		if sh := n.Shape(); sh.Dims() != 2 || sh[0] != B || sh[1] != M {
			panic(fmt.Sprintf("ensemble: logits/mask shape %v, want (%d, %d)", sh, B, M))
		}
	}
	dk := D / H
	must := G.Must
	// Project each member into the shared space, (B, 1, D) each, then (B, M, D).
	hs := make([]*G.Node, M)
	for m, e := range embs {
		h := must(G.Tanh(nn.Linear(s.Sub("in").In(m), e, D)))
		hs[m] = must(G.Reshape(h, ts.Shape{B, 1, D}))
	}
	hAll := hs[0]
	if M > 1 {
		hAll = must(G.Concat(1, hs...))
	}
	// Masked mean of the present members -> query (B, D).
	mask3 := must(G.Reshape(mask, ts.Shape{B, M, 1}))
	hMasked := must(G.BroadcastHadamardProd(hAll, mask3, nil, []byte{2}))
	count := must(G.Reshape(must(G.Sum(mask, 1)), ts.Shape{B, 1}))
	mean := must(G.BroadcastHadamardDiv(must(G.Sum(hMasked, 1)), count, nil, []byte{1}))
	q := nn.LinearNoBias(s.Sub("q"), mean, D) // (B, D)
	k := nn.LinearNoBias(s.Sub("k"), hAll, D) // (B, M, D)
	q3 := must(G.Reshape(q, ts.Shape{B, 1, D}))
	kq := must(G.BroadcastHadamardProd(k, q3, nil, []byte{1})) // (B, M, D)
	scores := must(G.Sum(must(G.Reshape(kq, ts.Shape{B, M, H, dk})), 3))
	scores = must(G.Mul(scores, G.NewConstant(float32(1/math.Sqrt(float64(dk)))))) // (B, M, H)
	// Missing members: add (mask−1)·1e9. Computed from the 2-D mask and
	// reshaped afterwards: an in-place op on a reshaped view of an input
	// would overwrite the input's backing.
	one, big := G.NewConstant(float32(1)), G.NewConstant(float32(1e9))
	bias := must(G.Reshape(must(G.Mul(must(G.Sub(mask, one)), big)), ts.Shape{B, M, 1}))
	scores = must(G.BroadcastAdd(scores, bias, nil, []byte{2}))
	w := must(G.SoftMax(scores, 1))                                                         // (B, M, H)
	wbar := must(G.Mean(w, 2))                                                              // (B, M)
	logit := must(G.Sum(must(G.HadamardProd(wbar, must(G.HadamardProd(logits, mask)))), 1)) // (B)
	out := &Fused{Logit: logit, Weights: w}
	if cfg.VoteOnly {
		return out
	}
	v := must(G.Reshape(nn.LinearNoBias(s.Sub("v"), hAll, D), ts.Shape{B, M, H, dk}))
	w4 := must(G.Reshape(w, ts.Shape{B, M, H, 1}))
	ctx := must(G.Sum(must(G.BroadcastHadamardProd(v, w4, nil, []byte{3})), 1)) // (B, H, dk)
	out.Context = must(G.Reshape(ctx, ts.Shape{B, D}))
	so := s.Sub("out")
	corr := nn.LinearOp(out.Context, so.Param("w", ts.Shape{D, 1}, nn.Zeros), so.Param("b", ts.Shape{1}, nn.Zeros)) // (B, 1)
	out.Logit = must(G.Add(logit, must(G.Reshape(corr, ts.Shape{B}))))
	return out
}

// AttentionModel returns Attention as an nn.FeatureModel over packed rows,
// for nn.Trainer and frozen members: each row holds the members'
// embeddings, then their logits, then their presence mask,
//
//	[e_0 (embDims[0]) | … | e_{M−1} (embDims[M−1]) | z (M) | mask (M)]
//
// and the model's output row is the fused logit followed by the M
// attention weights averaged over the heads. The parameters are under the
// model's scope, as in Attention.
func AttentionModel(embDims []int, cfg AttentionConfig) nn.FeatureModel {
	dims := append([]int(nil), embDims...)
	width := 2 * len(dims)
	for _, e := range dims {
		width += e
	}
	return func(s *nn.Scope, x *G.Node) *G.Node {
		sh := x.Shape()
		if sh.Dims() != 2 || sh[1] != width {
			panic(fmt.Sprintf("ensemble: attention model input shape %v, want (B, %d) for embedding widths %v", sh, width, dims))
		}
		B, M := sh[0], len(dims)
		// Reshaped after slicing: a one-column slice drops its axis.
		cols := func(from, to int) *G.Node {
			return G.Must(G.Reshape(G.Must(G.Slice(x, nil, G.S(from, to))), ts.Shape{B, to - from}))
		}
		embs := make([]*G.Node, M)
		at := 0
		for m, e := range dims {
			embs[m] = cols(at, at+e)
			at += e
		}
		f := Attention(s, embs, cols(at, at+M), cols(at+M, at+2*M), cfg)
		z := G.Must(G.Reshape(f.Logit, ts.Shape{B, 1}))
		return G.Must(G.Concat(1, z, G.Must(G.Mean(f.Weights, 2))))
	}
}
