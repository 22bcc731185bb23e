package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	kern "github.com/troupe-ml/troupe/tensor"
)

// GenerateOptions controls LM.Generate.
type GenerateOptions struct {
	// Temperature divides the logits before sampling; 0 means greedy
	// (argmax) decoding. The zero value of GenerateOptions is therefore
	// greedy; set 1 for plain sampling.
	Temperature float64
	// TopK keeps only the K most likely tokens (0 = all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP (nucleus sampling, Holtzman et al. 2020; 0 or 1 = all).
	TopP float64
	// StopTokens end a generation when sampled (the token is included).
	StopTokens []int
	// StopSequences end a generation when its tokens end with one of them
	// (the sequence is included).
	StopSequences [][]int
	// MaxTokens bounds the number of generated tokens (default 16). The
	// model's MaxLen also bounds prompt plus generation.
	MaxTokens int
	// Seed seeds request i's generator as PCG(Seed, i), so results do not
	// depend on batch composition or scheduling.
	Seed uint64
	// TopLogProbs, when positive, makes every Generation also return, for
	// each sampled position, the TopLogProbs most likely tokens with their
	// log-probabilities (Generation.TopLogProbs), as OpenAI's
	// `top_logprobs`. The log-probabilities are those of LogProbs: the
	// model's distribution at temperature 1 without top-k/top-p truncation,
	// whatever Temperature, TopK and TopP are. Values above
	// MaxTopLogProbs are capped at MaxTopLogProbs (and at the vocabulary
	// size); 0 turns it off; negative values are an error.
	TopLogProbs int
}

// MaxTopLogProbs is the largest useful GenerateOptions.TopLogProbs (OpenAI's
// limit for `top_logprobs`); larger requests are capped.
const MaxTopLogProbs = 20

// TokenLogProb is one alternative token at a generated position.
type TokenLogProb struct {
	Token   int
	LogProb float32
}

// Generation is the result of one request.
type Generation struct {
	Tokens []int
	// LogProbs[i] is log p(Tokens[i] | prompt, Tokens[:i]) under the model's
	// own distribution — softmax of the logits at temperature 1 without
	// top-k/top-p truncation — which is exactly what LMTrainer.TokenLogProbs
	// computes for the same tokens (the behaviour log-probabilities that
	// policy-gradient methods need). It is not the log-probability under the
	// tempered or truncated sampling distribution.
	LogProbs []float32
	// TopLogProbs[i] (only when GenerateOptions.TopLogProbs > 0) lists the
	// most likely tokens at position i, most likely first (ties by smaller
	// token id), with log-probabilities under the same distribution as
	// LogProbs. Tokens[i] appears in it exactly when it is among those
	// tokens; it may be missing (it was sampled from the tail).
	TopLogProbs [][]TokenLogProb
	// FinishReason is "stop" (stop token or sequence) or "length".
	FinishReason string
}

// genState is one request's decoding state.
type genState struct {
	tokens  []int // prompt + generated
	nPrompt int
	k, v    [][]float32 // per layer, MaxLen×D (keys after rotary rotation)
	ck      []float32   // copy-head keys, MaxLen×CopyDim (with a copy head)
	rng     *rand.Rand
	out     Generation
	done    bool
}

// Generate samples continuations of every prompt, batched: all prompts are
// prefilled in one pass, then each decoding step runs the still-active
// requests together through the model with a per-request key/value cache.
// It runs on the tensor kernels directly, outside any Gorgonia graph, using
// the store's current parameter values. Parameters that live on a device (a
// tensor backend other than the CPU's) are copied to the host once per call
// and decoding runs on the CPU: the decode step's rotary embedding and
// per-request cache writes are strided updates that tensor.Backend does
// not offer.
func (m *LM) Generate(prompts [][]int, opts GenerateOptions) ([]Generation, error) {
	c := m.Config
	if opts.MaxTokens <= 0 {
		opts.MaxTokens = 16
	}
	if opts.Temperature < 0 || opts.TopK < 0 || opts.TopP < 0 || opts.TopP > 1 || opts.TopLogProbs < 0 {
		return nil, fmt.Errorf("nn: Generate: invalid options %+v", opts)
	}
	opts.TopLogProbs = min(opts.TopLogProbs, MaxTopLogProbs, c.Vocab)
	w, err := m.weights()
	if err != nil {
		return nil, err
	}
	states := make([]*genState, len(prompts))
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("nn: Generate: prompt %d is empty", i)
		}
		if len(p) >= c.MaxLen {
			return nil, fmt.Errorf("nn: Generate: prompt %d has %d tokens, MaxLen is %d", i, len(p), c.MaxLen)
		}
		for _, t := range p {
			if t < 0 || t >= c.Vocab {
				return nil, fmt.Errorf("nn: Generate: prompt %d: token %d outside vocabulary [0,%d)", i, t, c.Vocab)
			}
		}
		st := &genState{tokens: append([]int(nil), p...), nPrompt: len(p), rng: rand.New(rand.NewPCG(opts.Seed, uint64(i)))}
		for l := 0; l < c.Layers; l++ {
			st.k = append(st.k, make([]float32, c.MaxLen*c.Dim))
			st.v = append(st.v, make([]float32, c.MaxLen*c.Dim))
		}
		if c.CopyDim > 0 {
			st.ck = make([]float32, c.MaxLen*c.CopyDim)
		}
		states[i] = st
	}
	// Prefill: every prompt's tokens at positions 0…len−1.
	groups := make([]group, len(states))
	for i, st := range states {
		groups[i] = group{st: st, pos0: 0, toks: st.tokens}
	}
	logp := w.forward(groups)
	for {
		var next []group
		for i, g := range groups {
			st := g.st
			row := logp[i*c.Vocab : (i+1)*c.Vocab]
			tok := SampleToken(row, opts, st.rng)
			st.out.Tokens = append(st.out.Tokens, tok)
			st.out.LogProbs = append(st.out.LogProbs, row[tok])
			if opts.TopLogProbs > 0 {
				st.out.TopLogProbs = append(st.out.TopLogProbs, TopLogProbs(row, opts.TopLogProbs))
			}
			st.tokens = append(st.tokens, tok)
			switch {
			case StopsAt(st.out.Tokens, opts):
				st.out.FinishReason, st.done = "stop", true
			case len(st.out.Tokens) >= opts.MaxTokens || len(st.tokens) >= c.MaxLen:
				st.out.FinishReason, st.done = "length", true
			default:
				next = append(next, group{st: st, pos0: len(st.tokens) - 1, toks: []int{tok}})
			}
		}
		if len(next) == 0 {
			break
		}
		groups = next
		logp = w.forward(groups)
	}
	out := make([]Generation, len(states))
	for i, st := range states {
		out[i] = st.out
	}
	return out, nil
}

// TopLogProbs returns the n largest entries of logp, largest first (ties by
// smaller index), by insertion into a sorted list of at most n (n ≤ 20, so
// one pass over the vocabulary with rare insertions).
func TopLogProbs(logp []float32, n int) []TokenLogProb {
	top := make([]TokenLogProb, 0, n)
	for t, v := range logp {
		if len(top) == n && !(v > top[n-1].LogProb) {
			continue
		}
		i := len(top)
		if i < n {
			top = append(top, TokenLogProb{})
		} else {
			i = n - 1
		}
		// Shift smaller entries right; equal ones stay ahead (smaller id).
		for i > 0 && v > top[i-1].LogProb {
			top[i] = top[i-1]
			i--
		}
		top[i] = TokenLogProb{Token: t, LogProb: v}
	}
	return top
}

// StopsAt reports whether a generation whose tokens so far are gen ends
// here: its last token is one of o.StopTokens, or its tokens end with one of
// o.StopSequences.
func StopsAt(gen []int, o GenerateOptions) bool {
	last := gen[len(gen)-1]
	for _, s := range o.StopTokens {
		if s == last {
			return true
		}
	}
	for _, s := range o.StopSequences {
		if len(s) > 0 && len(s) <= len(gen) {
			match := true
			for j := range s {
				if gen[len(gen)-len(s)+j] != s[j] {
					match = false
					break
				}
			}
			if match {
				return true
			}
		}
	}
	return false
}

// SampleToken draws a token from the log-probabilities logp (temperature
// 1) after applying o's temperature, top-k and top-p; temperature 0 takes
// the argmax.
func SampleToken(logp []float32, o GenerateOptions, rng *rand.Rand) int {
	if o.Temperature == 0 {
		best := 0
		for i, v := range logp {
			if v > logp[best] {
				best = i
			}
		}
		return best
	}
	idx := make([]int, len(logp))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return logp[idx[a]] > logp[idx[b]] })
	if o.TopK > 0 && o.TopK < len(idx) {
		idx = idx[:o.TopK]
	}
	p := make([]float64, len(idx))
	mx := float64(logp[idx[0]]) / o.Temperature
	var z float64
	for i, t := range idx {
		p[i] = math.Exp(float64(logp[t])/o.Temperature - mx)
		z += p[i]
	}
	for i := range p {
		p[i] /= z
	}
	if o.TopP > 0 && o.TopP < 1 {
		var c float64
		for i := range p {
			c += p[i]
			if c >= o.TopP {
				p, idx = p[:i+1], idx[:i+1]
				break
			}
		}
		z = 0
		for _, v := range p {
			z += v
		}
		for i := range p {
			p[i] /= z
		}
	}
	u := rng.Float64()
	var c float64
	for i, v := range p {
		c += v
		if u < c {
			return idx[i]
		}
	}
	return idx[len(idx)-1]
}

// SampleTokenOnePass draws from the same distribution as SampleToken in one
// pass over the vocabulary when neither top-k nor top-p truncates it, so a
// 150,000-token vocabulary costs no sort per sampled token; with truncation
// it is SampleToken. The token a given random number selects differs from
// SampleToken's (the cumulative sum runs in token order, not in order of
// probability), so a seed draws other samples than nn.LM.Generate does.
func SampleTokenOnePass(logp []float32, o GenerateOptions, rng *rand.Rand) int {
	if o.Temperature == 0 || (o.TopK > 0 && o.TopK < len(logp)) || (o.TopP > 0 && o.TopP < 1) {
		return SampleToken(logp, o, rng)
	}
	mx := float64(logp[0])
	for _, v := range logp {
		mx = max(mx, float64(v))
	}
	var z float64
	for _, v := range logp {
		z += math.Exp((float64(v) - mx) / o.Temperature)
	}
	u := rng.Float64() * z
	var c float64
	for i, v := range logp {
		c += math.Exp((float64(v) - mx) / o.Temperature)
		if u < c {
			return i
		}
	}
	return len(logp) - 1
}

// group is a run of consecutive tokens of one request starting at pos0.
type group struct {
	st   *genState
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
