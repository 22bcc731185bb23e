package nn

import (
	"fmt"
	"math"

	kern "github.com/troupe-ml/troupe/tensor"
	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

// AttentionOpConfig configures the fused attention ops.
type AttentionOpConfig struct {
	// Heads is the number of attention heads; the model width must divide by it.
	Heads int
	// Causal masks key positions after the query position (decoder
	// self-attention).
	Causal bool
	// Rotary applies rotary position embeddings (Su et al. 2021, RoFormer) to
	// queries and keys, with position = index along the sequence axis. Only
	// for self-attention.
	Rotary bool
	// RotaryBase is the frequency base of the rotary embedding (default 10000).
	RotaryBase float64
}

const maskedScore = float32(-1e30)

// ropeTable holds cos and sin of position·θ_i for i < dh/2, θ_i = base^(−2i/dh).
type ropeTable struct {
	dh       int
	cos, sin []float32 // [pos][dh/2]
}

func newRope(maxPos, dh int, base float64) *ropeTable {
	if base == 0 {
		base = 10000
	}
	if dh%2 != 0 {
		panic(fmt.Sprintf("nn: rotary embeddings need an even head width, got %d", dh))
	}
	r := &ropeTable{dh: dh, cos: make([]float32, maxPos*dh/2), sin: make([]float32, maxPos*dh/2)}
	for p := 0; p < maxPos; p++ {
		for i := 0; i < dh/2; i++ {
			th := float64(p) * math.Pow(base, -2*float64(i)/float64(dh))
			r.cos[p*dh/2+i] = float32(math.Cos(th))
			r.sin[p*dh/2+i] = float32(math.Sin(th))
		}
	}
	return r
}

// rotate rotates the head vector x (length dh) for position pos; inverse
// applies the transposed rotation (used for gradients).
func (r *ropeTable) rotate(x []float32, pos int, inverse bool) {
	h := r.dh / 2
	c, s := r.cos[pos*h:(pos+1)*h], r.sin[pos*h:(pos+1)*h]
	for i := 0; i < h; i++ {
		a, b := x[2*i], x[2*i+1]
		if inverse {
			x[2*i], x[2*i+1] = a*c[i]+b*s[i], -a*s[i]+b*c[i]
		} else {
			x[2*i], x[2*i+1] = a*c[i]-b*s[i], a*s[i]+b*c[i]
		}
	}
}

// attnCore runs scaled dot-product attention (Vaswani et al. 2017) for all
// batch rows and heads with strided Gemms straight on the projected inputs.
type attnCore struct {
	b, tq, tk, h, dh int
	ldq, ldk, ldv    int // row strides of the q, k, v sources
	qo, ko, vo       int // column offsets of q, k, v within their rows
	causal           bool
	scale            float32
	p, dp            []float32 // saved probabilities [B,H,Tq,Tk], scratch
	lens             []int
	hasLens          bool
}

func (a *attnCore) setLens(l []float32) {
	for i := range a.lens {
		a.lens[i] = a.tk
		if a.hasLens {
			a.lens[i] = min(max(int(l[i]), 0), a.tk)
		}
	}
}

// forward writes the attention output (rows of width D = H·dh, stride ldy)
// into y, saving the probabilities.
func (a *attnCore) forward(qs, ks, vs, y []float32, ldy int) {
	H, tq, tk, dh := a.h, a.tq, a.tk, a.dh
	for b := 0; b < a.b; b++ {
		pb, sb := a.p[b*H*tq*tk:(b+1)*H*tq*tk], a.dp
		kern.GemmBatched(false, true, H, tq, tk, dh, a.scale,
			qs[b*tq*a.ldq+a.qo:], a.ldq, dh, ks[b*tk*a.ldk+a.ko:], a.ldk, dh, 0, sb, tk, tq*tk)
		// Softmax over the unmasked prefix of each row only (half of the
		// scores under a causal mask); masked probabilities are 0.
		for hh := 0; hh < H; hh++ {
			for i := 0; i < tq; i++ {
				o := (hh*tq + i) * tk
				lim := a.lens[b]
				if a.causal {
					lim = min(lim, i+1)
				}
				if lim == 0 { // fully masked row: uniform, as softmax of equal scores
					for j := 0; j < tk; j++ {
						pb[o+j] = 1 / float32(tk)
					}
					continue
				}
				kern.SoftmaxRows(pb[o:o+lim], sb[o:o+lim], 1, lim)
				zero(pb[o+lim : o+tk])
			}
		}
		kern.GemmBatched(false, false, H, tq, dh, tk, 1, pb, tk, tq*tk,
			vs[b*tk*a.ldv+a.vo:], a.ldv, dh, 0, y[b*tq*ldy:], ldy, dh)
	}
}

// backward writes dq, dk, dv (into buffers with the given strides and
// column offsets, which may alias one packed buffer) from dy.
func (a *attnCore) backward(qs, ks, vs, dy []float32, ldy int, dq []float32, ldgq, gqo int, dk []float32, ldgk, gko int, dv []float32, ldgv, gvo int) {
	H, tq, tk, dh := a.h, a.tq, a.tk, a.dh
	for b := 0; b < a.b; b++ {
		pb := a.p[b*H*tq*tk : (b+1)*H*tq*tk]
		dp := a.dp
		dyb := dy[b*tq*ldy:]
		kern.GemmBatched(false, true, H, tq, tk, dh, 1, dyb, ldy, dh, vs[b*tk*a.ldv+a.vo:], a.ldv, dh, 0, dp, tk, tq*tk)
		kern.GemmBatched(true, false, H, tk, dh, tq, 1, pb, tk, tq*tk, dyb, ldy, dh, 0, dv[b*tk*ldgv+gvo:], ldgv, dh)
		for r := 0; r < H*tq; r++ {
			pr, dr := pb[r*tk:(r+1)*tk], dp[r*tk:(r+1)*tk]
			var s float32
			for j, v := range pr {
				s += v * dr[j]
			}
			for j, v := range pr {
				dr[j] = a.scale * v * (dr[j] - s)
			}
		}
		kern.GemmBatched(false, false, H, tq, dh, tk, 1, dp, tk, tq*tk, ks[b*tk*a.ldk+a.ko:], a.ldk, dh, 0, dq[b*tq*ldgq+gqo:], ldgq, dh)
		kern.GemmBatched(true, false, H, tk, dh, tq, 1, dp, tk, tq*tk, qs[b*tq*a.ldq+a.qo:], a.ldq, dh, 0, dk[b*tk*ldgk+gko:], ldgk, dh)
	}
}

func newCore(b, tq, tk, heads, d int, causal bool) *attnCore {
	if heads <= 0 || d%heads != 0 {
		panic(fmt.Sprintf("nn: attention: width %d does not divide into %d heads", d, heads))
	}
	dh := d / heads
	return &attnCore{b: b, tq: tq, tk: tk, h: heads, dh: dh, causal: causal,
		scale: float32(1 / math.Sqrt(float64(dh))),
		p:     make([]float32, b*heads*tq*tk), dp: make([]float32, heads*tq*tk), lens: make([]int, b)}
}

// SelfAttentionOp is fused multi-head self-attention: qkv (B×T×3D) holds the
// projected queries, keys and values side by side (columns [0,D), [D,2D),
// [2D,3D); head h uses columns h·D/H…(h+1)·D/H of each), and the result is
// the B×T×D concatenation of the heads' outputs softmax(q·kᵀ/√d_h + mask)·v.
// lengths (length B, float32) may be nil; otherwise keys at positions ≥
// lengths[b] are masked (padding). One op pair does scores, masks, softmax
// and the value product; the backward reuses the saved probabilities.
func SelfAttentionOp(qkv, lengths *G.Node, cfg AttentionOpConfig) *G.Node {
	s := qkv.Shape()
	if s.Dims() != 3 || s[2]%3 != 0 {
		panic(fmt.Sprintf("nn: SelfAttentionOp: qkv must be B×T×3D, got %v", s))
	}
	B, T, D := s[0], s[1], s[2]/3
	a := newCore(B, T, T, cfg.Heads, D, cfg.Causal)
	a.ldq, a.ldk, a.ldv, a.qo, a.ko, a.vo = 3*D, 3*D, 3*D, 0, D, 2*D
	inputs := []*G.Node{qkv}
	diff := []bool{true}
	if lengths != nil {
		if lengths.Shape().TotalSize() != B {
			panic(fmt.Sprintf("nn: SelfAttentionOp: lengths %v for batch %d", lengths.Shape(), B))
		}
		a.hasLens = true
		inputs, diff = append(inputs, lengths), append(diff, false)
	}
	var rope *ropeTable
	var rot []float32
	if cfg.Rotary {
		rope = newRope(T, a.dh, cfg.RotaryBase)
		rot = make([]float32, B*T*3*D)
	}
	// src returns qkv with rotary embeddings applied to q and k.
	src := func(x []float32) []float32 {
		if rope == nil {
			return x
		}
		copy(rot, x)
		for r := 0; r < B*T; r++ {
			pos := r % T
			for c := 0; c < 2*D; c += a.dh {
				rope.rotate(rot[r*3*D+c:r*3*D+c+a.dh], pos, false)
			}
		}
		return rot
	}
	k := &kernel{name: "SelfAttention", diff: diff}
	k.fwd = func(v [][]float32, y []float32) error {
		if a.hasLens {
			a.setLens(v[1])
		} else {
			a.setLens(nil)
		}
		x := src(v[0])
		a.forward(x, x, x, y, D)
		return nil
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		x := v[0]
		if rope != nil {
			x = rot // still holds the rotated input of the forward pass
		}
		a.backward(x, x, x, dy, D, g[0], 3*D, 0, g[0], 3*D, D, g[0], 3*D, 2*D)
		if rope != nil {
			for r := 0; r < B*T; r++ {
				pos := r % T
				for c := 0; c < 2*D; c += a.dh {
					rope.rotate(g[0][r*3*D+c:r*3*D+c+a.dh], pos, true)
				}
			}
		}
	}
	k.full = true
	return applyFused(k, ts.Shape{B, T, D}, inputs...)
}

// CrossAttentionOp is fused multi-head attention of queries q (B×Tq×D) over
// keys and values kv (B×Tk×2D, keys in columns [0,D), values in [D,2D)),
// giving B×Tq×D. lengths (length B) may be nil; otherwise keys at positions
// ≥ lengths[b] are masked. cfg.Rotary is ignored.
func CrossAttentionOp(q, kv, lengths *G.Node, cfg AttentionOpConfig) *G.Node {
	qsh, ksh := q.Shape(), kv.Shape()
	if qsh.Dims() != 3 || ksh.Dims() != 3 || ksh[0] != qsh[0] || ksh[2] != 2*qsh[2] {
		panic(fmt.Sprintf("nn: CrossAttentionOp: q %v (want B×Tq×D) and kv %v (want B×Tk×2D)", qsh, ksh))
	}
	B, Tq, Tk, D := qsh[0], qsh[1], ksh[1], qsh[2]
	a := newCore(B, Tq, Tk, cfg.Heads, D, cfg.Causal)
	a.ldq, a.ldk, a.ldv, a.qo, a.ko, a.vo = D, 2*D, 2*D, 0, 0, D
	inputs := []*G.Node{q, kv}
	diff := []bool{true, true}
	if lengths != nil {
		if lengths.Shape().TotalSize() != B {
			panic(fmt.Sprintf("nn: CrossAttentionOp: lengths %v for batch %d", lengths.Shape(), B))
		}
		a.hasLens = true
		inputs, diff = append(inputs, lengths), append(diff, false)
	}
	k := &kernel{name: "CrossAttention", diff: diff}
	k.fwd = func(v [][]float32, y []float32) error {
		if a.hasLens {
			a.setLens(v[2])
		} else {
			a.setLens(nil)
		}
		a.forward(v[0], v[1], v[1], y, D)
		return nil
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		a.backward(v[0], v[1], v[1], dy, D, g[0], D, 0, g[1], 2*D, 0, g[1], 2*D, D)
	}
	k.full = true
	return applyFused(k, ts.Shape{B, Tq, D}, inputs...)
}
