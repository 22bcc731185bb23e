//go:build troupecuda

package cuda

import (
	"fmt"
	"math"
)

// Block is a causal pre-LN transformer block (Vaswani et al. 2017; pre-LN as
// in GPT-2) that runs its whole forward, backward and AdamW step on the GPU
// with troupe's kernels and no host round-trips:
//
//	h1 = LN1(x); q,k,v = split(h1·Wqkv + bqkv); a = merge(attention(q,k,v))
//	x2 = x + a·Wo + bo; h2 = LN2(x2); y = x2 + GELU(h2·W1 + b1)·W2 + b2
//
// Parameters, gradients and AdamW moments are each one flat buffer (views per
// tensor), so the optimiser step is a single launch. It is the device
// counterpart of the block nn builds from fused ops, used to measure and
// check a whole training step on the GPU.
type Block struct {
	e   *Engine
	cfg BlockConfig

	Params, Grads, m, v Buffer
	P, G                map[string]Buffer // per-tensor views, by name
	step                int

	// activations saved for backward
	x, h1, mean1, rstd1, qkv, q, k, vv, o, lse, a, x2, h2, mean2, rstd2, f1, g, y Buffer
	// backward scratch
	dgb, df1, dh2, dx2, da, do, dq, dk, dv, dm, dh1, dx Buffer
}

// NewBlock allocates a block on e with parameters BlockInit(cfg.D, seed).
func NewBlock(e *Engine, cfg BlockConfig, seed uint64) (*Block, error) {
	if cfg.H <= 0 || cfg.D%cfg.H != 0 || cfg.D/cfg.H > 128 || cfg.B <= 0 || cfg.T <= 0 {
		panic(fmt.Sprintf("cuda: NewBlock: B=%d T=%d D=%d H=%d (need D divisible by H, D/H ≤ 128)", cfg.B, cfg.T, cfg.D, cfg.H))
	}
	if cfg.Eps == 0 {
		cfg.Eps = 1e-5
	}
	b := &Block{e: e, cfg: cfg, P: map[string]Buffer{}, G: map[string]Buffer{}}
	init := BlockInit(cfg.D, seed)
	var err error
	if b.Params, err = e.ToDevice(init); err != nil {
		return nil, err
	}
	n := len(init)
	for _, p := range []*Buffer{&b.Grads, &b.m, &b.v} {
		if *p, err = e.Zeros(n); err != nil {
			return nil, err
		}
	}
	off := 0
	for _, s := range BlockParamShapes(cfg.D) {
		b.P[s.Name] = b.Params.Slice(off, off+s.Len)
		b.G[s.Name] = b.Grads.Slice(off, off+s.Len)
		off += s.Len
	}
	N, D, F, BH := cfg.B*cfg.T, cfg.D, 4*cfg.D, cfg.B*cfg.H
	sizes := []struct {
		p *Buffer
		n int
	}{
		{&b.h1, N * D}, {&b.mean1, N}, {&b.rstd1, N}, {&b.qkv, N * 3 * D}, {&b.q, N * D}, {&b.k, N * D}, {&b.vv, N * D},
		{&b.o, N * D}, {&b.lse, BH * cfg.T}, {&b.a, N * D}, {&b.x2, N * D}, {&b.h2, N * D}, {&b.mean2, N}, {&b.rstd2, N},
		{&b.f1, N * F}, {&b.g, N * F}, {&b.y, N * D},
		{&b.dgb, N * F}, {&b.df1, N * F}, {&b.dh2, N * D}, {&b.dx2, N * D}, {&b.da, N * D}, {&b.do, N * D},
		{&b.dq, N * D}, {&b.dk, N * D}, {&b.dv, N * D}, {&b.dm, N * D}, {&b.dh1, N * D}, {&b.dx, N * D},
	}
	for _, s := range sizes {
		if *s.p, err = e.NewBuffer(s.n); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Forward computes the block's output for x ([B·T][D]); the result buffer is
// owned by the block and overwritten by the next Forward.
func (b *Block) Forward(x Buffer) (Buffer, error) {
	e, c := b.e, b.cfg
	N, D, F, H, T, B := c.B*c.T, c.D, 4*c.D, c.H, c.T, c.B
	hd := D / H
	P := b.P
	b.x = x
	err := firstErr(
		e.LayerNormRows(b.h1, b.mean1, b.rstd1, x, P["ln1.g"], P["ln1.b"], N, D, c.Eps),
		e.Gemm(false, false, N, 3*D, D, 1, b.h1, D, P["wqkv"], 3*D, 0, b.qkv, 3*D),
		e.AddRowVector(b.qkv, b.qkv, P["bqkv"], N, 3*D),
	)
	if err != nil {
		return Buffer{}, err
	}
	for i, dst := range []Buffer{b.q, b.k, b.vv} {
		if err := e.StridedCopy(dst, b.qkv.Slice(i*D, N*3*D), []int{B, H, T, hd}, []int{T * 3 * D, hd, 3 * D, 1}, 0); err != nil {
			return Buffer{}, err
		}
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	err = firstErr(
		e.Attention(b.o, b.lse, b.q, b.k, b.vv, B*H, T, hd, scale, true),
		e.StridedCopy(b.a, b.o, []int{B, T, H, hd}, []int{H * T * hd, hd, T * hd, 1}, 0),
		e.Gemm(false, false, N, D, D, 1, b.a, D, P["wo"], D, 0, b.x2, D),
		e.AddRowVector(b.x2, b.x2, P["bo"], N, D),
		e.Binary(OpAdd, b.x2, b.x2, x),
		e.LayerNormRows(b.h2, b.mean2, b.rstd2, b.x2, P["ln2.g"], P["ln2.b"], N, D, c.Eps),
		e.Gemm(false, false, N, F, D, 1, b.h2, D, P["w1"], F, 0, b.f1, F),
		e.AddRowVector(b.f1, b.f1, P["b1"], N, F),
		e.GELU(b.g, b.f1),
		e.Gemm(false, false, N, D, F, 1, b.g, F, P["w2"], D, 0, b.y, D),
		e.AddRowVector(b.y, b.y, P["b2"], N, D),
		e.Binary(OpAdd, b.y, b.y, b.x2),
	)
	return b.y, err
}

// Backward computes the parameter gradients (into Grads, overwritten) and
// returns dx for output gradient dy, after a Forward.
func (b *Block) Backward(dy Buffer) (Buffer, error) {
	e, c := b.e, b.cfg
	N, D, F, H, T, B := c.B*c.T, c.D, 4*c.D, c.H, c.T, c.B
	hd := D / H
	P, G := b.P, b.G
	e.Memclr(b.Grads)
	scale := float32(1 / math.Sqrt(float64(hd)))
	err := firstErr(
		e.Gemm(true, false, F, D, N, 1, b.g, F, dy, D, 0, G["w2"], D),
		e.SumCols(G["b2"], dy, N, D, 0),
		e.Gemm(false, true, N, F, D, 1, dy, D, P["w2"], D, 0, b.dgb, F),
		e.GELUBackward(b.df1, b.dgb, b.f1),
		e.Gemm(true, false, D, F, N, 1, b.h2, D, b.df1, F, 0, G["w1"], F),
		e.SumCols(G["b1"], b.df1, N, F, 0),
		e.Gemm(false, true, N, D, F, 1, b.df1, F, P["w1"], F, 0, b.dh2, D),
		e.LayerNormBackwardRows(b.dx2, G["ln2.g"], G["ln2.b"], b.dh2, b.x2, b.mean2, b.rstd2, P["ln2.g"], N, D),
		e.Axpy(1, dy, b.dx2),
		e.Gemm(true, false, D, D, N, 1, b.a, D, b.dx2, D, 0, G["wo"], D),
		e.SumCols(G["bo"], b.dx2, N, D, 0),
		e.Gemm(false, true, N, D, D, 1, b.dx2, D, P["wo"], D, 0, b.da, D),
		e.StridedCopy(b.do, b.da, []int{B, H, T, hd}, []int{T * D, hd, D, 1}, 0),
		e.AttentionBackward(b.dq, b.dk, b.dv, b.q, b.k, b.vv, b.o, b.do, b.lse, B*H, T, hd, scale, true),
	)
	if err != nil {
		return Buffer{}, err
	}
	for i, dh := range []Buffer{b.dq, b.dk, b.dv} {
		beta := float32(1)
		if i == 0 {
			beta = 0
		}
		err := firstErr(
			e.StridedCopy(b.dm, dh, []int{B, T, H, hd}, []int{H * T * hd, hd, T * hd, 1}, 0),
			e.Gemm(true, false, D, D, N, 1, b.h1, D, b.dm, D, 0, G["wqkv"].Slice(i*D, 3*D*D), 3*D),
			e.SumCols(G["bqkv"].Slice(i*D, (i+1)*D), b.dm, N, D, 0),
			e.Gemm(false, true, N, D, D, 1, b.dm, D, P["wqkv"].Slice(i*D, 3*D*D), 3*D, beta, b.dh1, D),
		)
		if err != nil {
			return Buffer{}, err
		}
	}
	err = firstErr(
		e.LayerNormBackwardRows(b.dx, G["ln1.g"], G["ln1.b"], b.dh1, b.x, b.mean1, b.rstd1, P["ln1.g"], N, D),
		e.Axpy(1, b.dx2, b.dx),
	)
	return b.dx, err
}

// Step applies one AdamW update to all parameters with the current gradients.
func (b *Block) Step(c AdamWConfig) error {
	b.step++
	return b.e.AdamW(b.Params, b.Grads, b.m, b.v, b.step, c)
}
