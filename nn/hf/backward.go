package hf

import (
	"math"

	"github.com/troupe-ml/troupe/tensor"
)

// backward propagates dhf, the gradient of the loss with respect to the
// final normed hidden states of a saved forward pass over toks, down
// through the frozen base and adds the gradients of the adapter's matrices
// (and of its embedding copy, when it has one) to their Grad. The base
// itself receives no gradient.
func (m *Model) backward(ad *LoRA, toks []int, spans []span, save *acts, dhf []float32) {
	c := m.Config
	H, QD, KVD, I := c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	N := len(dhf) / H
	dx := make([]float32, N*H)
	rmsNormBackward(dx, dhf, save.xf, m.norm, save.rstdF, N, H, true)
	dh := make([]float32, N*H)
	for l := c.Layers - 1; l >= 0; l-- {
		L := &m.layers[l]
		sa := &save.layers[l]
		// MLP: x += down(silu(gate(h2))·up(h2)).
		da := make([]float32, N*I)
		m.linearBackward(ad, l, DownProj, da, dx, sa.a, N, sa, true)
		sg := sa.a // a is not needed any more: σ(gate) takes its place
		tensor.VecSigmoid(sg, sa.gate)
		dgate, dup := sa.gate, sa.up // reused in place: forward values are read first
		for i, g := range sa.gate {
			s, u := sg[i], sa.up[i]
			dup[i] = da[i] * g * s
			dgate[i] = da[i] * u * s * (1 + g*(1-s))
		}
		m.linearBackward(ad, l, GateProj, dh, dgate, sa.h2, N, sa, true)
		m.linearBackward(ad, l, UpProj, dh, dup, sa.h2, N, sa, false)
		rmsNormBackward(dx, dh, sa.xm, L.postNorm, sa.rstd2, N, H, false)
		// Attention: x += o_proj(attention(q, k, v)).
		do := make([]float32, N*QD)
		m.linearBackward(ad, l, OProj, do, dx, sa.o, N, sa, true)
		dq := make([]float32, N*QD)
		dk := make([]float32, N*KVD)
		dv := make([]float32, N*KVD)
		for _, sp := range spans {
			m.attendBackward(dq, dk, dv, do, sa.q, sa.k, sa.v, sp)
		}
		for _, sp := range spans {
			for i := 0; i < sp.n; i++ {
				r, pos := sp.off+i, sp.pos0+i
				m.rope.rotate(dq[r*QD:(r+1)*QD], c.Heads, pos, true)
				m.rope.rotate(dk[r*KVD:(r+1)*KVD], c.KVHeads, pos, true)
			}
		}
		if c.QKNorm {
			rmsNormBackward(sa.qpre, dq, sa.qpre, L.qNorm, sa.rstdQ, N*c.Heads, c.HeadDim, true)
			rmsNormBackward(sa.kpre, dk, sa.kpre, L.kNorm, sa.rstdK, N*c.KVHeads, c.HeadDim, true)
			dq, dk = sa.qpre, sa.kpre
		}
		// Layer 0's input gradient is the embedding's, used only when the
		// adapter trains a copy of it.
		needDX := l > 0 || ad.embed != nil
		m.linearBackwardMaybe(ad, l, QProj, dh, dq, sa.h1, N, sa, true, needDX)
		m.linearBackwardMaybe(ad, l, KProj, dh, dk, sa.h1, N, sa, false, needDX)
		m.linearBackwardMaybe(ad, l, VProj, dh, dv, sa.h1, N, sa, false, needDX)
		if needDX {
			rmsNormBackward(dx, dh, sa.x, L.inNorm, sa.rstd1, N, H, false)
		}
		*sa = layerActs{} // free the layer's activations early
	}
	if ad.embed != nil {
		g := ad.embed.Grad
		for i, t := range toks {
			tensor.VecAdd(g[t*H:(t+1)*H], g[t*H:(t+1)*H], dx[i*H:(i+1)*H])
		}
	}
}

func (m *Model) linearBackward(ad *LoRA, l int, p Proj, dx, dy, x []float32, n int, sa *layerActs, overwrite bool) {
	m.linearBackwardMaybe(ad, l, p, dx, dy, x, n, sa, overwrite, true)
}

// linearBackwardMaybe writes (overwrite) or adds the input gradient
// dy·W (+ the adapter's path) into dx when needDX, and adds the adapter's
// matrix gradients: for y += s·(x·Aᵀ)·Bᵀ with u = x·Aᵀ,
// dB += s·dyᵀ·u, du = s·dy·B, dA += duᵀ·x, dx += du·A.
func (m *Model) linearBackwardMaybe(ad *LoRA, l int, p Proj, dx, dy, x []float32, n int, sa *layerActs, overwrite, needDX bool) {
	w := &m.layers[l].proj[p]
	beta := float32(1)
	if overwrite {
		beta = 0
	}
	if needDX {
		w.Mul(dx, dy, n, beta)
	}
	mod := ad.module(l, p)
	if mod == nil {
		return
	}
	r := ad.Config.Rank
	u := sa.u[p]
	tensor.Gemm(true, false, w.Rows, r, n, ad.scale, dy, w.Rows, u, r, 1, mod.B.Grad, r)
	du := make([]float32, n*r)
	tensor.Gemm(false, false, n, r, w.Rows, ad.scale, dy, w.Rows, mod.B.Data(), r, 0, du, r)
	tensor.Gemm(true, false, r, w.Cols, n, 1, du, r, x, w.Cols, 1, mod.A.Grad, w.Cols)
	if needDX {
		tensor.Gemm(false, false, n, w.Cols, r, 1, du, r, mod.A.Data(), w.Cols, 1, dx, w.Cols)
	}
}

// attendBackward adds one training span's attention gradients to dq, dk
// and dv, recomputing the attention weights from q and k.
func (m *Model) attendBackward(dq, dk, dv, do, q, k, v []float32, sp span) {
	c := m.Config
	D, QD, KVD := c.HeadDim, c.QDim(), c.KVDim()
	n := sp.n
	scale := float32(1 / math.Sqrt(float64(D)))
	p := make([]float32, n*n)
	dp := make([]float32, n*n)
	group := c.Heads / c.KVHeads
	qo, ko := sp.off*QD, sp.off*KVD
	for hd := 0; hd < c.Heads; hd++ {
		g := hd / group
		tensor.Gemm(false, true, n, n, D, scale, q[qo+hd*D:], QD, k[ko+g*D:], KVD, 0, p, n)
		m.maskSoftmax(p, n, n, 0)
		// dV += Pᵀ·dO; dP = dO·Vᵀ.
		tensor.Gemm(true, false, n, D, n, 1, p, n, do[qo+hd*D:], QD, 1, dv[ko+g*D:], KVD)
		tensor.Gemm(false, true, n, n, D, 1, do[qo+hd*D:], QD, v[ko+g*D:], KVD, 0, dp, n)
		// dS = P ⊙ (dP − rowsum(dP ⊙ P)); masked entries have P = 0.
		for i := 0; i < n; i++ {
			pr, dr := p[i*n:(i+1)*n], dp[i*n:(i+1)*n]
			var dot float32
			for j, pj := range pr {
				dot += pj * dr[j]
			}
			for j, pj := range pr {
				dr[j] = pj * (dr[j] - dot)
			}
		}
		// dQ = scale·dS·K; dK += scale·dSᵀ·Q.
		tensor.Gemm(false, false, n, D, n, scale, dp, n, k[ko+g*D:], KVD, 0, dq[qo+hd*D:], QD)
		tensor.Gemm(true, false, n, D, n, scale, dp, n, q[qo+hd*D:], QD, 1, dk[ko+g*D:], KVD)
	}
}
