package hf

import (
	"math"
	"slices"

	"github.com/troupe-ml/troupe/tensor"
	"github.com/troupe-ml/troupe/textgen"
)

// span is one sequence's run of consecutive rows in a forward pass.
type span struct {
	off, n int // rows [off, off+n) of the pass
	pos0   int // position of the first row
	// cache, in generation, holds the keys and values of positions before
	// pos0 and receives this span's; nil in training, where a span starts
	// at position 0 and attends to its own rows.
	cache *kvCache
	// ad is the span's LoRA adapter (nil: the base). Spans with the same
	// adapter are contiguous, so each adapter's low-rank product runs
	// once over its rows.
	ad *LoRA
}

// kvCache is one sequence's keys (after RoPE) and values, per layer,
// positions × KVDim.
type kvCache struct {
	k, v [][]float32
	kvd  int
}

func newKVCache(c Config, capacity int) *kvCache {
	kc := &kvCache{k: make([][]float32, c.Layers), v: make([][]float32, c.Layers), kvd: c.KVDim()}
	for l := range kc.k {
		kc.k[l] = make([]float32, 0, capacity*c.KVDim())
		kc.v[l] = make([]float32, 0, capacity*c.KVDim())
	}
	return kc
}

// Len implements textgen.Cache.
func (kc *kvCache) Len() int { return len(kc.k[0]) / kc.kvd }

// Fork implements textgen.Cache.
func (kc *kvCache) Fork() textgen.Cache {
	f := &kvCache{k: make([][]float32, len(kc.k)), v: make([][]float32, len(kc.v)), kvd: kc.kvd}
	for l := range kc.k {
		f.k[l] = append(make([]float32, 0, cap(kc.k[l])), kc.k[l]...)
		f.v[l] = append(make([]float32, 0, cap(kc.v[l])), kc.v[l]...)
	}
	return f
}

// layerActs is what backward needs of one layer's forward pass.
type layerActs struct {
	x, h1        []float32 // block input, its normed form (input of q/k/v)
	rstd1        []float32
	qpre, kpre   []float32 // q and k before the per-head norms (QKNorm)
	rstdQ, rstdK []float32
	q, k, v      []float32 // after norms and RoPE
	o            []float32 // attention output, input of o_proj
	xm, h2       []float32 // residual after attention, its normed form
	rstd2        []float32
	gate, up, a  []float32 // a = silu(gate)·up, input of down_proj
	u            [numProj][]float32
}

// acts is what backward needs of a whole forward pass.
type acts struct {
	layers []layerActs
	xf     []float32 // input of the final norm
	rstdF  []float32
	hf     []float32 // final normed hidden states
}

// forward runs the decoder over toks laid out as spans and returns the
// final normed hidden states (len(toks)×Hidden). With save non-nil (one
// adapter for all spans) it keeps what backward needs; each span's adapter
// (may be nil) adds its LoRA deltas to its rows. With keep non-nil (rows in
// increasing order, without save) it returns only those rows' states
// (len(keep)×Hidden): the last layer's work after attention, most of a
// layer, then runs on them alone, as generation needs only the rows it
// samples from (one of a prompt's).
func (m *Model) forward(toks []int, spans []span, save *acts, keep []int) []float32 {
	c := m.Config
	N, H := len(toks), c.Hidden
	QD, KVD, I := c.QDim(), c.KVDim(), c.Intermediate
	eps := float32(c.RMSEps)
	x := make([]float32, N*H)
	for _, sp := range spans {
		e := m.embedMatrix(sp.ad)
		for i := sp.off; i < sp.off+sp.n; i++ {
			e.Row(x[i*H:(i+1)*H], toks[i])
		}
	}
	if save != nil {
		save.layers = make([]layerActs, c.Layers)
	}
	h := make([]float32, N*H)
	rstd := make([]float32, N)
	tmp := make([]float32, N*H)
	pos := make([]int, N) // each row's position
	for _, sp := range spans {
		for i := range sp.n {
			pos[sp.off+i] = sp.pos0 + i
		}
	}
	// The layers' buffers: fresh per layer when training keeps them for
	// backward, otherwise reused (clearing them costs as much as the
	// element-wise work).
	var q, k, v, o, gate, up, a []float32
	alloc := func() {
		q, k, v, o = make([]float32, N*QD), make([]float32, N*KVD), make([]float32, N*KVD), make([]float32, N*QD)
		gate, up, a = make([]float32, N*I), make([]float32, N*I), make([]float32, N*I)
	}
	alloc()
	// The work between the products runs on the product's threads, split
	// by rows: on one thread it would be a fifth of a prefill.
	rows := func(width int, fn func(lo, hi int)) { tensor.ParallelFor(N, max(1, rowGrain/width), fn) }
	for l := range m.layers {
		L := &m.layers[l]
		var sa *layerActs
		if save != nil {
			sa = &save.layers[l]
			sa.x = append([]float32(nil), x...)
			if l > 0 {
				alloc()
			}
		}
		rows(H, func(lo, hi int) { rmsNorm(h[lo*H:hi*H], rstd[lo:hi], x[lo*H:hi*H], L.inNorm, hi-lo, H, eps) })
		m.linear(spans, l, QProj, q, h, N, sa)
		m.linear(spans, l, KProj, k, h, N, sa)
		m.linear(spans, l, VProj, v, h, N, sa)
		if sa != nil {
			sa.h1, sa.rstd1 = append([]float32(nil), h...), append([]float32(nil), rstd...)
		}
		if c.QKNorm {
			rq := make([]float32, N*c.Heads)
			rk := make([]float32, N*c.KVHeads)
			if sa != nil {
				sa.qpre, sa.kpre = append([]float32(nil), q...), append([]float32(nil), k...)
				sa.rstdQ, sa.rstdK = rq, rk
			}
			rows(QD, func(lo, hi int) {
				rmsNorm(q[lo*QD:hi*QD], rq[lo*c.Heads:hi*c.Heads], q[lo*QD:hi*QD], L.qNorm, (hi-lo)*c.Heads, c.HeadDim, eps)
				rmsNorm(k[lo*KVD:hi*KVD], rk[lo*c.KVHeads:hi*c.KVHeads], k[lo*KVD:hi*KVD], L.kNorm, (hi-lo)*c.KVHeads, c.HeadDim, eps)
			})
		}
		rows(QD, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				m.rope.rotate(q[r*QD:(r+1)*QD], c.Heads, pos[r], false)
				m.rope.rotate(k[r*KVD:(r+1)*KVD], c.KVHeads, pos[r], false)
			}
		})
		m.attendAll(l, o, q, k, v, spans)
		if sa != nil {
			sa.q, sa.k, sa.v, sa.o = q, k, v, o
		}
		if keep != nil && l == len(m.layers)-1 {
			x, o, spans = pickRows(x, H, keep), pickRows(o, QD, keep), keptSpans(spans, keep)
			N = len(keep)
			h, rstd, tmp = h[:N*H], rstd[:N], tmp[:N*H]
			gate, up, a = gate[:N*I], up[:N*I], a[:N*I]
		}
		m.linear(spans, l, OProj, tmp, o, N, sa)
		rows(H, func(lo, hi int) { tensor.VecAdd(x[lo*H:hi*H], x[lo*H:hi*H], tmp[lo*H:hi*H]) })
		if sa != nil {
			sa.xm = append([]float32(nil), x...)
		}
		rows(H, func(lo, hi int) { rmsNorm(h[lo*H:hi*H], rstd[lo:hi], x[lo*H:hi*H], L.postNorm, hi-lo, H, eps) })
		m.linear(spans, l, GateProj, gate, h, N, sa)
		m.linear(spans, l, UpProj, up, h, N, sa)
		rows(I, func(lo, hi int) {
			ar, gr, ur := a[lo*I:hi*I], gate[lo*I:hi*I], up[lo*I:hi*I]
			tensor.VecSigmoid(ar, gr) // a = silu(gate)·up = gate·σ(gate)·up
			tensor.VecMul(ar, ar, gr)
			tensor.VecMul(ar, ar, ur)
		})
		m.linear(spans, l, DownProj, tmp, a, N, sa)
		rows(H, func(lo, hi int) { tensor.VecAdd(x[lo*H:hi*H], x[lo*H:hi*H], tmp[lo*H:hi*H]) })
		if sa != nil {
			sa.h2, sa.rstd2 = append([]float32(nil), h...), append([]float32(nil), rstd...)
			sa.gate, sa.up, sa.a = gate, up, a
		}
	}
	hf := make([]float32, N*H)
	rows(H, func(lo, hi int) { rmsNorm(hf[lo*H:hi*H], rstd[lo:hi], x[lo*H:hi*H], m.norm, hi-lo, H, eps) })
	if save != nil {
		save.xf, save.rstdF, save.hf = x, rstd, hf
	}
	return hf
}

// pickRows returns rows keep of src (rows of width w), in order.
func pickRows(src []float32, w int, keep []int) []float32 {
	dst := make([]float32, len(keep)*w)
	for i, r := range keep {
		copy(dst[i*w:(i+1)*w], src[r*w:(r+1)*w])
	}
	return dst
}

// keptSpans lays out rows keep (increasing) of spans as spans of their
// own, each run of kept rows of one span a span with its adapter.
func keptSpans(spans []span, keep []int) []span {
	var out []span
	s, last := 0, -1 // the span of keep's row, and of out's last span
	for i, r := range keep {
		for r >= spans[s].off+spans[s].n {
			s++
		}
		if s == last {
			out[len(out)-1].n++
			continue
		}
		out = append(out, span{off: i, n: 1, ad: spans[s].ad})
		last = s
	}
	return out
}

// rowGrain is the fewest elements of row-wise work worth a goroutine.
const rowGrain = 16 << 10

// linear computes y = x·Wᵀ + b (+ each span's adapter's scaled x·Aᵀ·Bᵀ on
// its rows) for projection p of layer l over n rows: the base product runs
// once over all rows, each adapter's low-rank product over its run of
// spans (segmented, as Punica's BGMV does for a batch of adapters). With
// sa, the one adapter's x·Aᵀ is kept for backward.
func (m *Model) linear(spans []span, l int, p Proj, y, x []float32, n int, sa *layerActs) {
	L := &m.layers[l]
	w := &L.proj[p]
	w.MulT(y, x, n, 0)
	if b := L.bias[p]; b != nil {
		tensor.AddRowVec(y, y, b, n, w.Rows)
	}
	for i := 0; i < len(spans); {
		ad := spans[i].ad
		j := i + 1
		for j < len(spans) && spans[j].ad == ad {
			j++
		}
		lo, hi := spans[i].off, spans[j-1].off+spans[j-1].n
		i = j
		mod := ad.module(l, p)
		if mod == nil {
			continue
		}
		r, rows := ad.Config.Rank, hi-lo
		u := make([]float32, rows*r)
		// u = x·Aᵀ (A r×Cols), y += scale·u·Bᵀ (B Rows×r); a snapshot has
		// Aᵀ and Bᵀ packed already, for the same bits.
		if mod.pa != nil {
			tensor.GemmPacked(false, rows, 1, x[lo*w.Cols:], w.Cols, mod.pa, 0, u, r)
			tensor.GemmPacked(false, rows, ad.scale, u, r, mod.pb, 1, y[lo*w.Rows:], w.Rows)
		} else {
			tensor.Gemm(false, true, rows, r, w.Cols, 1, x[lo*w.Cols:], w.Cols, mod.A.Data(), w.Cols, 0, u, r)
			tensor.Gemm(false, true, rows, w.Rows, r, ad.scale, u, r, mod.B.Data(), r, 1, y[lo*w.Rows:], w.Rows)
		}
		if sa != nil {
			sa.u[p] = u
		}
	}
}

// attendAll computes the causal attention of every span's queries into
// o. In generation each span's keys and values are appended to its cache
// first and it attends to all of the cache. The spans (decoding rows) and
// the heads of each longer span (prefill, training) are independent and
// run on the product's threads.
func (m *Model) attendAll(l int, o, q, k, v []float32, spans []span) {
	c := m.Config
	KVD := c.KVDim()
	type job struct {
		sp           span
		keys, vals   []float32
		head0, head1 int
	}
	var jobs []job
	for _, sp := range spans {
		keys, vals := k[sp.off*KVD:(sp.off+sp.n)*KVD], v[sp.off*KVD:(sp.off+sp.n)*KVD]
		if sp.cache != nil {
			kc := sp.cache
			kc.k[l] = append(kc.k[l][:sp.pos0*KVD], keys...)
			kc.v[l] = append(kc.v[l][:sp.pos0*KVD], vals...)
			keys, vals = kc.k[l], kc.v[l]
		}
		if sp.n == 1 {
			jobs = append(jobs, job{sp, keys, vals, 0, c.Heads})
			continue
		}
		for hd := range c.Heads {
			jobs = append(jobs, job{sp, keys, vals, hd, hd + 1})
		}
	}
	// A job's work is about its queries × keys × head width.
	work := 0
	for _, j := range jobs {
		work += j.sp.n * (j.sp.pos0 + j.sp.n) * (j.head1 - j.head0) * c.HeadDim
	}
	grain := max(1, len(jobs)*(attendGrain)/max(work, 1))
	tensor.ParallelFor(len(jobs), grain, func(lo, hi int) {
		var s []float32
		for _, j := range jobs[lo:hi] {
			s = m.attend(o, q, j.keys, j.vals, j.sp, j.head0, j.head1, s)
		}
	})
}

// attendGrain is the fewest multiply-adds of attention worth a goroutine:
// the product's threads wait for work, so handing a share over costs a few
// microseconds, and 8 decoding rows split from 8 positions on (at 2^18
// they stayed on one thread up to 58, most of a short generation).
const attendGrain = 1 << 15

// attend computes heads [h0, h1) of one span's causal attention over keys
// and vals (the span's own, or its whole cache), writing its rows of o; s
// is scratch, returned grown.
func (m *Model) attend(o, q, keys, vals []float32, sp span, h0, h1 int, s []float32) []float32 {
	c := m.Config
	D, QD, KVD := c.HeadDim, c.QDim(), c.KVDim()
	nk := sp.pos0 + sp.n
	scale := float32(1 / math.Sqrt(float64(D)))
	group := c.Heads / c.KVHeads
	if sp.n == 1 {
		// Decoding: the query heads that share a key/value head are
		// contiguous in the row, so each group is one product of its
		// heads (as rows) with the cached keys, at one position.
		s = slices.Grow(s[:0], group*nk)[:group*nk]
		lo := m.window(sp.pos0)
		for g := h0 / group; g < h1/group; g++ {
			qo := sp.off*QD + g*group*D
			tensor.Gemm(false, true, group, nk, D, scale, q[qo:], D, keys[g*D:], KVD, 0, s, nk)
			for r := 0; r < group; r++ {
				row := s[r*nk : (r+1)*nk]
				tensor.SoftmaxRows(row[lo:], row[lo:], 1, nk-lo)
				clear(row[:lo])
			}
			tensor.Gemm(false, false, group, D, nk, 1, s, nk, vals[g*D:], KVD, 0, o[qo:], D)
		}
		return s
	}
	s = slices.Grow(s[:0], sp.n*nk)[:sp.n*nk]
	for hd := h0; hd < h1; hd++ {
		g := hd / group
		tensor.Gemm(false, true, sp.n, nk, D, scale, q[sp.off*QD+hd*D:], QD, keys[g*D:], KVD, 0, s, nk)
		m.maskSoftmax(s, sp.n, nk, sp.pos0)
		tensor.Gemm(false, false, sp.n, D, nk, 1, s, nk, vals[g*D:], KVD, 0, o[sp.off*QD+hd*D:], QD)
	}
	return s
}

// window returns the first key position that query position pos sees.
func (m *Model) window(pos int) int {
	if w := m.Config.SlidingWindow; w > 0 && pos-w+1 > 0 {
		return pos - w + 1
	}
	return 0
}

// maskSoftmax turns the n×nk scores of queries at positions pos0… into
// causal attention weights in place: zero outside the keys a query sees.
func (m *Model) maskSoftmax(s []float32, n, nk, pos0 int) {
	for i := 0; i < n; i++ {
		row := s[i*nk : (i+1)*nk]
		p := pos0 + i
		lo := m.window(p)
		tensor.SoftmaxRows(row[lo:p+1], row[lo:p+1], 1, p+1-lo)
		clear(row[:lo])
		clear(row[p+1:])
	}
}

// rmsNorm computes y = x / rms(x) · w over rows of width d (y may alias
// x) and records 1/rms per row.
func rmsNorm(y, rstd, x, w []float32, rows, d int, eps float32) {
	for r := 0; r < rows; r++ {
		xr := x[r*d : (r+1)*d]
		var ss float64
		for _, e := range xr {
			ss += float64(e) * float64(e)
		}
		rs := float32(1 / math.Sqrt(ss/float64(d)+float64(eps)))
		rstd[r] = rs
		yr := y[r*d : (r+1)*d]
		for j, e := range xr {
			yr[j] = e * rs * w[j]
		}
	}
}

// rmsNormBackward adds to dx (or, with overwrite, writes) the gradient of
// rmsNorm with respect to x, given dy, x, w and the recorded 1/rms.
func rmsNormBackward(dx, dy, x, w, rstd []float32, rows, d int, overwrite bool) {
	for r := 0; r < rows; r++ {
		xr, dyr, dxr := x[r*d:(r+1)*d], dy[r*d:(r+1)*d], dx[r*d:(r+1)*d]
		rs := float64(rstd[r])
		var dot float64
		for j, e := range xr {
			dot += float64(dyr[j]) * float64(w[j]) * float64(e)
		}
		c := float32(rs * rs * rs * dot / float64(d))
		frs := float32(rs)
		for j, e := range xr {
			g := frs*dyr[j]*w[j] - e*c
			if overwrite {
				dxr[j] = g
			} else {
				dxr[j] += g
			}
		}
	}
}
