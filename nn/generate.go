package nn

import (
	"context"
	"fmt"
	"math"
	"slices"

	kern "github.com/troupe-ml/troupe/tensor"
	"github.com/troupe-ml/troupe/textgen"
)

// Generate samples continuations of every prompt with textgen's loop:
// all prompts are prefilled in one pass, then each decoding step runs the
// still-active requests together through the model with a per-request
// key/value cache. It runs on the tensor kernels directly, outside any
// Gorgonia graph, using the store's current parameter values. Parameters
// that live on a device (a tensor backend other than the CPU's) are copied
// to the host once per call and decoding runs on the CPU: the decode
// step's rotary embedding and per-request cache writes are strided updates
// that tensor.Backend does not offer. Prompt i samples from
// PCG(opts.Seed, i).
func (m *LM) Generate(prompts [][]int, opts textgen.GenerateOptions) ([]textgen.Generation, error) {
	dec, err := m.Decoder()
	if err != nil {
		return nil, err
	}
	return textgen.Generate(context.Background(), dec, prompts, opts, nil)
}

// Decoder returns the model as a textgen.Decoder over the store's current
// parameters. Training the store in place (on the CPU) changes what the
// decoder computes: a caller that trains while generating serialises the
// two itself.
func (m *LM) Decoder() (textgen.Decoder, error) {
	w, err := m.weights()
	if err != nil {
		return nil, err
	}
	return w, nil
}

// lmCache is one sequence's keys and values per layer (capacity×Dim, keys
// after the rotary rotation), its copy-head keys and its tokens.
type lmCache struct {
	k, v   [][]float32
	ck     []float32
	tokens []int
}

func (c *lmCache) Len() int { return len(c.tokens) }

func (c *lmCache) Fork() textgen.Cache {
	f := &lmCache{tokens: append(make([]int, 0, cap(c.tokens)), c.tokens...), ck: slices.Clone(c.ck)}
	for l := range c.k {
		f.k = append(f.k, slices.Clone(c.k[l]))
		f.v = append(f.v, slices.Clone(c.v[l]))
	}
	return f
}

// Vocab implements textgen.Decoder.
func (w *lmWeights) Vocab() int { return w.c.Vocab }

// MaxLen implements textgen.Decoder.
func (w *lmWeights) MaxLen() int { return w.c.MaxLen }

// KVBytes implements textgen.Decoder.
func (w *lmWeights) KVBytes() int64 { return int64(4 * (2*w.c.Layers*w.c.Dim + w.c.CopyDim)) }

// NewCache implements textgen.Decoder.
func (w *lmWeights) NewCache(capacity int) textgen.Cache {
	c := &lmCache{tokens: make([]int, 0, capacity)}
	for l := 0; l < w.c.Layers; l++ {
		c.k = append(c.k, make([]float32, capacity*w.c.Dim))
		c.v = append(c.v, make([]float32, capacity*w.c.Dim))
	}
	if w.c.CopyDim > 0 {
		c.ck = make([]float32, capacity*w.c.CopyDim)
	}
	return c
}

// Step implements textgen.Decoder. The model has no adapters.
func (w *lmWeights) Step(batch []textgen.Input, logp []float32) error {
	groups := make([]group, len(batch))
	var last []int
	for i, in := range batch {
		c := in.Cache.(*lmCache)
		groups[i] = group{st: c, pos0: len(c.tokens), toks: in.Tokens}
		c.tokens = append(c.tokens, in.Tokens...)
		if in.Logits {
			last = append(last, i)
		}
	}
	out := w.forward(groups)
	V := w.c.Vocab
	for k, i := range last {
		copy(logp[k*V:(k+1)*V], out[i*V:(i+1)*V])
	}
	return nil
}

// group is a run of consecutive tokens of one request starting at pos0.
type group struct {
	st   *lmCache
	pos0 int
	toks []int
}

// lmWeights are the flat parameter slices of an LM.
type lmWeights struct {
	c      LMConfig
	tok    []float32
	pos    []float32
	blocks []blockWeights
	lnfG   []float32
	lnfB   []float32
	head   []float32
	rope   *ropeTable
	// copy head (CopyDim > 0)
	copyQ, copyK, gateW, gateB []float32
}

type blockWeights struct {
	ln1g, ln1b, qkvW, qkvB, outW, outB, ln2g, ln2b, fc1W, fc1B, fc2W, fc2B []float32
}

func (m *LM) weights() (w *lmWeights, err error) {
	p := func(n string) []float32 {
		q := m.Store.Param(n)
		if q == nil {
			panic(fmt.Sprintf("nn: LM parameter %q missing from store", n))
		}
		if !onDevice(q) {
			return q.Data()
		}
		h, herr := hostFloats(q.Value)
		if herr != nil && err == nil {
			err = fmt.Errorf("nn: Generate: parameter %q: %w", n, herr)
		}
		return h
	}
	c := m.Config
	w = &lmWeights{c: c, tok: p("tok.table"), lnfG: p("ln_f.gamma"), lnfB: p("ln_f.beta"), head: p("head.w")}
	if c.CopyDim > 0 {
		w.copyQ, w.copyK, w.gateW, w.gateB = p("copy.q.w"), p("copy.k.w"), p("copy.gate.w"), p("copy.gate.b")
	}
	if c.Positions == Learned {
		w.pos = p("pos.table")
	} else {
		w.rope = newRope(c.MaxLen, c.Dim/c.Heads, 0)
	}
	for i := 0; i < c.Layers; i++ {
		b := fmt.Sprintf("blocks.%d.", i)
		w.blocks = append(w.blocks, blockWeights{
			ln1g: p(b + "ln1.gamma"), ln1b: p(b + "ln1.beta"),
			qkvW: p(b + "attn.qkv.w"), qkvB: p(b + "attn.qkv.b"),
			outW: p(b + "attn.out.w"), outB: p(b + "attn.out.b"),
			ln2g: p(b + "ln2.gamma"), ln2b: p(b + "ln2.beta"),
			fc1W: p(b + "mlp.fc1.w"), fc1B: p(b + "mlp.fc1.b"),
			fc2W: p(b + "mlp.fc2.w"), fc2B: p(b + "mlp.fc2.b"),
		})
	}
	return w, err
}

func linearRows(y, x, w, b []float32, rows, in, out int) {
	for r := 0; r < rows; r++ {
		copy(y[r*out:(r+1)*out], b)
	}
	matmulRows(y, x, w, rows, in, out, true)
}

// forward runs the groups' tokens through the model, appending their keys
// and values to the caches, and returns the log-softmax of the logits at
// the last token of each group (len(groups)×Vocab).
func (w *lmWeights) forward(groups []group) []float32 {
	c := w.c
	D, H := c.Dim, c.Heads
	dh := D / H
	n := 0
	for _, g := range groups {
		n += len(g.toks)
	}
	x := make([]float32, n*D)
	r := 0
	for _, g := range groups {
		for j, t := range g.toks {
			copy(x[r*D:(r+1)*D], w.tok[t*D:(t+1)*D])
			if w.pos != nil {
				kern.Axpy(1, w.pos[(g.pos0+j)*D:(g.pos0+j+1)*D], x[r*D:(r+1)*D])
			}
			r++
		}
	}
	hbuf := make([]float32, n*D)
	mean, rstd := make([]float32, n), make([]float32, n)
	qkv := make([]float32, n*3*D)
	att := make([]float32, n*D)
	proj := make([]float32, n*D)
	F := c.mlpRatio() * D
	h1 := make([]float32, n*F)
	h1a := make([]float32, n*F)
	scale := float32(1 / math.Sqrt(float64(dh)))
	var scores, probs []float32
	for l, b := range w.blocks {
		kern.LayerNormRows(hbuf, mean, rstd, x, b.ln1g, b.ln1b, n, D, 1e-5)
		linearRows(qkv, hbuf, b.qkvW, b.qkvB, n, D, 3*D)
		r = 0
		for _, g := range groups {
			K, V := g.st.k[l], g.st.v[l]
			m := len(g.toks)
			for j := 0; j < m; j++ {
				row := qkv[(r+j)*3*D : (r+j+1)*3*D]
				pos := g.pos0 + j
				if w.rope != nil {
					for hh := 0; hh < H; hh++ {
						w.rope.rotate(row[hh*dh:(hh+1)*dh], pos, false)
						w.rope.rotate(row[D+hh*dh:D+(hh+1)*dh], pos, false)
					}
				}
				copy(K[pos*D:(pos+1)*D], row[D:2*D])
				copy(V[pos*D:(pos+1)*D], row[2*D:3*D])
			}
			tk := g.pos0 + m
			if cap(scores) < H*m*tk {
				scores, probs = make([]float32, H*m*tk), make([]float32, H*m*tk)
			}
			sc, pr := scores[:H*m*tk], probs[:H*m*tk]
			vecAttn := m == 1 && int(decodeGEMVRows.Load()) >= 1
			if vecAttn {
				// One query: dot products with the cached keys.
				q := qkv[r*3*D : r*3*D+D]
				for hh := 0; hh < H; hh++ {
					qh := q[hh*dh : (hh+1)*dh]
					for j := 0; j < tk; j++ {
						sc[hh*tk+j] = scale * dot32(qh, K[j*D+hh*dh:])
					}
				}
			} else {
				kern.GemmBatched(false, true, H, m, tk, dh, scale, qkv[r*3*D:], 3*D, dh, K, D, dh, 0, sc, tk, m*tk)
			}
			for hh := 0; hh < H; hh++ {
				for i := 0; i < m; i++ {
					rowS := sc[(hh*m+i)*tk : (hh*m+i+1)*tk]
					for j := g.pos0 + i + 1; j < tk; j++ {
						rowS[j] = maskedScore
					}
				}
			}
			kern.SoftmaxRows(pr, sc, H*m, tk)
			if vecAttn {
				// Probability-weighted sum of the cached values (Axpy form).
				a := att[r*D : (r+1)*D]
				clear(a)
				for hh := 0; hh < H; hh++ {
					ah := a[hh*dh : (hh+1)*dh]
					for j := 0; j < tk; j++ {
						kern.Axpy(pr[hh*tk+j], V[j*D+hh*dh:j*D+(hh+1)*dh], ah)
					}
				}
			} else {
				kern.GemmBatched(false, false, H, m, dh, tk, 1, pr, tk, m*tk, V, D, dh, 0, att[r*D:], D, dh)
			}
			r += m
		}
		linearRows(proj, att, b.outW, b.outB, n, D, D)
		kern.Axpy(1, proj, x)
		kern.LayerNormRows(hbuf, mean, rstd, x, b.ln2g, b.ln2b, n, D, 1e-5)
		linearRows(h1, hbuf, b.fc1W, b.fc1B, n, D, F)
		kern.GELU(h1a, h1)
		linearRows(proj, h1a, b.fc2W, b.fc2B, n, F, D)
		kern.Axpy(1, proj, x)
	}
	// Final norm and head on the last row of each group.
	G := len(groups)
	last := make([]float32, G*D)
	r = 0
	for i, g := range groups {
		r += len(g.toks)
		copy(last[i*D:(i+1)*D], x[(r-1)*D:r*D])
	}
	lastN := make([]float32, G*D)
	kern.LayerNormRows(lastN, mean[:G], rstd[:G], last, w.lnfG, w.lnfB, G, D, 1e-5)
	logits := make([]float32, G*c.Vocab)
	matmulRows(logits, lastN, w.head, G, D, c.Vocab, false)
	logp := make([]float32, G*c.Vocab)
	if c.CopyDim > 0 {
		w.copyMix(groups, x, lastN, logits)
	}
	kern.LogSoftmaxRows(logp, logits, G, c.Vocab)
	return logp
}

// copyMix appends the groups' copy-head keys (of the final-norm hidden
// states of all their rows x) to the caches and replaces each group's
// logits row by the pointer-generator log-probabilities of CopyMixOp, so
// that generation and training compute the same distribution.
func (w *lmWeights) copyMix(groups []group, x, lastN, logits []float32) {
	c := w.c
	D, C, V := c.Dim, c.CopyDim, c.Vocab
	scale := 1 / math.Sqrt(float64(C))
	maxM := 0
	for _, g := range groups {
		maxM = max(maxM, len(g.toks))
	}
	// Buffers shared by the groups (decoding calls this once per token).
	mass := make([]float64, V)
	q := make([]float32, C)
	hn := make([]float32, maxM*D)
	mean, rstd := make([]float32, maxM), make([]float32, maxM)
	a := make([]float64, c.MaxLen)
	type mixedTok struct {
		t  int
		lp float32
	}
	var mixed []mixedTok
	r := 0
	for i, g := range groups {
		m := len(g.toks)
		kern.LayerNormRows(hn[:m*D], mean[:m], rstd[:m], x[r*D:(r+m)*D], w.lnfG, w.lnfB, m, D, 1e-5)
		matmulRows(g.st.ck[g.pos0*C:(g.pos0+m)*C], hn[:m*D], w.copyK, m, D, C, false)
		r += m
		h := lastN[i*D : (i+1)*D]
		matmulRows(q, h, w.copyQ, 1, D, C, false)
		u := float64(w.gateB[0]) + float64(dot32(h, w.gateW))
		gt, lg := sigmoidLog(u)
		tk := g.pos0 + m
		pointer(a[:tk], q, g.st.ck, C, scale)
		zr := logits[i*V : (i+1)*V]
		lse := logSumExp32(zr)
		ids := g.st.tokens[:tk]
		for j, t := range ids {
			mass[t] += a[j]
		}
		mixed = mixed[:0]
		for _, t := range ids {
			if mass[t] != 0 {
				p := gt*math.Exp(float64(zr[t])-lse) + (1-gt)*mass[t]
				mixed = append(mixed, mixedTok{t, float32(math.Log(max(p, math.SmallestNonzeroFloat64)))})
				mass[t] = 0
			}
		}
		base := lg - lse
		for v, zv := range zr {
			zr[v] = float32(base + float64(zv))
		}
		for _, mt := range mixed {
			zr[mt.t] = mt.lp
		}
	}
}
