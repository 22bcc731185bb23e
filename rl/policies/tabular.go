package policies

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"

	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/textgen"
)

// Byte-level vocabulary of Tabular: tokens 0..255 are bytes, ByteEOS ends a
// generation (and stands for "beginning" when there is no context).
const (
	ByteEOS   = 256
	ByteVocab = 257
)

// TabularConfig describes a Tabular policy.
type TabularConfig struct {
	// Name is the model id ("small", "medium", ...).
	Name string
	// Order is the number of previous tokens the policy conditions on: 1 (a
	// bigram policy, 257 rows) or 2 (hashed into Rows rows).
	Order int
	// Rows is the number of context rows for Order 2 (ignored for Order 1).
	Rows int
	// Optimizer is "adam" (Kingma & Ba 2015) or "sgd".
	Optimizer string
	// LR is the learning rate.
	LR float64
	// MaxGradNorm clips the global gradient norm; 0 disables clipping.
	MaxGradNorm float64
	// InitScale is the standard deviation of the initial logits.
	InitScale float64
	// Seed seeds the initial logits.
	Seed uint64
}

// TabularPresets are the tabular policy sizes the command line knows.
var TabularPresets = map[string]TabularConfig{
	"tiny":   {Name: "tiny", Order: 1, Optimizer: "sgd", LR: 20, MaxGradNorm: 0, InitScale: 0.01, Seed: 1},
	"small":  {Name: "small", Order: 1, Optimizer: "adam", LR: 0.5, MaxGradNorm: 1, InitScale: 0.01, Seed: 2},
	"medium": {Name: "medium", Order: 2, Rows: 1024, Optimizer: "adam", LR: 0.5, MaxGradNorm: 1, InitScale: 0.01, Seed: 3},
}

// Tabular is a byte-level softmax policy whose logits are a table
// indexed by the previous Order tokens: p(a | ctx) = softmax(W[row(ctx)])_a.
// It is tiny but genuinely trainable: the gradient of log p(a) with respect
// to the row is onehot(a) − softmax(row), accumulated analytically. It
// implements rl.Policy, so any rl algorithm can train it.
type Tabular struct {
	cfg     TabularConfig
	rows    int
	W       []float32 // rows × ByteVocab logits
	grad    []float64
	m, v    []float64 // Adam moments
	t       int64     // Adam step count
	touched []int     // rows with a non-zero gradient since the last Step
	isTouch []bool
	version int64
}

var _ rl.Policy = (*Tabular)(nil)

// NewTabular returns a policy with small random logits.
func NewTabular(cfg TabularConfig) *Tabular {
	if cfg.Order != 1 && cfg.Order != 2 {
		panic(fmt.Sprintf("policies: TabularConfig.Order must be 1 or 2, got %d", cfg.Order))
	}
	rows := ByteVocab
	if cfg.Order == 2 {
		rows = cfg.Rows
		if rows <= 0 {
			panic(fmt.Sprintf("policies: TabularConfig.Rows must be > 0 for Order 2, got %d", rows))
		}
	}
	if cfg.Optimizer == "" {
		cfg.Optimizer = "adam"
	}
	p := &Tabular{cfg: cfg, rows: rows}
	p.W = make([]float32, rows*ByteVocab)
	p.grad = make([]float64, len(p.W))
	p.m = make([]float64, len(p.W))
	p.v = make([]float64, len(p.W))
	p.isTouch = make([]bool, rows)
	r := rand.New(rand.NewPCG(cfg.Seed, 0x7ab))
	for i := range p.W {
		p.W[i] = float32(r.NormFloat64() * cfg.InitScale)
	}
	return p
}

// Config returns the policy's configuration.
func (p *Tabular) Config() TabularConfig { return p.cfg }

// NumParams is the number of trainable parameters.
func (p *Tabular) NumParams() int { return len(p.W) }

// row maps the context (the tokens before the next one) to a table row.
func (p *Tabular) row(prev1, prev2 int) int {
	if p.cfg.Order == 1 {
		return prev1
	}
	h := uint64(prev2)*ByteVocab + uint64(prev1)
	h ^= h >> 7
	h *= 0x9e3779b97f4a7c15
	return int((h >> 32) % uint64(p.rows))
}

// context returns the previous two tokens before position i of seq (EOS
// where there is none).
func prevTokens(seq []int, i int) (int, int) {
	p1, p2 := ByteEOS, ByteEOS
	if i >= 1 {
		p1 = seq[i-1]
	}
	if i >= 2 {
		p2 = seq[i-2]
	}
	return p1, p2
}

// logSoftmaxRow writes log softmax of row r into dst (float64).
func (p *Tabular) logSoftmaxRow(dst []float64, r int, temp float64) {
	w := p.W[r*ByteVocab : (r+1)*ByteVocab]
	mx := math.Inf(-1)
	for i, x := range w {
		dst[i] = float64(x) / temp
		if dst[i] > mx {
			mx = dst[i]
		}
	}
	var s float64
	for _, x := range dst {
		s += math.Exp(x - mx)
	}
	ls := mx + math.Log(s)
	for i := range dst {
		dst[i] -= ls
	}
}

func validTokens(s rl.Sample) error {
	for _, t := range s.Prompt {
		if t < 0 || t >= ByteVocab {
			return fmt.Errorf("prompt token %d out of vocabulary [0,%d)", t, ByteVocab)
		}
	}
	for _, t := range s.Actions {
		if t < 0 || t >= ByteVocab {
			return fmt.Errorf("action token %d out of vocabulary [0,%d)", t, ByteVocab)
		}
	}
	return nil
}

// forEachStep calls f for every action of s with its row.
func (p *Tabular) forEachStep(s rl.Sample, f func(j, row, action int)) {
	seq := make([]int, 0, len(s.Prompt)+len(s.Actions))
	seq = append(seq, s.Prompt...)
	seq = append(seq, s.Actions...)
	for j, a := range s.Actions {
		p1, p2 := prevTokens(seq, len(s.Prompt)+j)
		f(j, p.row(p1, p2), a)
	}
}

// LogProbs implements rl.Policy.
func (p *Tabular) LogProbs(batch []rl.Sample) ([][]float32, error) {
	out := make([][]float32, len(batch))
	ls := make([]float64, ByteVocab)
	for i, s := range batch {
		if err := validTokens(s); err != nil {
			return nil, fmt.Errorf("policies: tabular sample %d: %w", i, err)
		}
		out[i] = make([]float32, len(s.Actions))
		p.forEachStep(s, func(j, row, a int) {
			p.logSoftmaxRow(ls, row, 1)
			out[i][j] = float32(ls[a])
		})
	}
	return out, nil
}

// ForwardBackward implements rl.Policy: d log p(a)/d W[row] = onehot(a) − softmax(W[row]).
func (p *Tabular) ForwardBackward(batch []rl.Sample, loss rl.LossFunc) error {
	logp, err := p.LogProbs(batch)
	if err != nil {
		return err
	}
	_, dlogp, _ := loss(logp, nil)
	if len(dlogp) != len(batch) {
		return fmt.Errorf("policies: tabular loss returned %d gradients for %d samples", len(dlogp), len(batch))
	}
	ls := make([]float64, ByteVocab)
	for i, s := range batch {
		if len(dlogp[i]) != len(s.Actions) {
			return fmt.Errorf("policies: tabular loss gradient %d has %d entries for %d actions", i, len(dlogp[i]), len(s.Actions))
		}
		p.forEachStep(s, func(j, row, a int) {
			g := float64(dlogp[i][j])
			if g == 0 {
				return
			}
			if !p.isTouch[row] {
				p.isTouch[row] = true
				p.touched = append(p.touched, row)
			}
			p.logSoftmaxRow(ls, row, 1)
			gr := p.grad[row*ByteVocab : (row+1)*ByteVocab]
			for k, l := range ls {
				gr[k] -= g * math.Exp(l)
			}
			gr[a] += g
		})
	}
	return nil
}

// Step implements rl.Policy: one SGD or Adam step on the accumulated
// gradient (after global-norm clipping), then the gradient is cleared. Only
// rows that received a gradient are updated: for SGD that is exact, for Adam
// it is the "lazy" variant (moments of untouched rows are not decayed), which
// keeps a step proportional to the rows visited rather than the table size.
func (p *Tabular) Step() (rl.StepInfo, error) {
	var n2 float64
	for _, r := range p.touched {
		for _, g := range p.grad[r*ByteVocab : (r+1)*ByteVocab] {
			n2 += g * g
		}
	}
	norm := math.Sqrt(n2)
	info := rl.StepInfo{GradNorm: norm}
	defer p.clearGrad()
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		info.Skipped = true
		return info, nil
	}
	scale := 1.0
	if p.cfg.MaxGradNorm > 0 && norm > p.cfg.MaxGradNorm {
		scale = p.cfg.MaxGradNorm / norm
	}
	lr := p.cfg.LR
	switch p.cfg.Optimizer {
	case "sgd":
		for _, r := range p.touched {
			for i := r * ByteVocab; i < (r+1)*ByteVocab; i++ {
				p.W[i] -= float32(lr * p.grad[i] * scale)
			}
		}
	case "adam":
		const b1, b2, eps = 0.9, 0.999, 1e-8
		p.t++
		c1 := 1 - math.Pow(b1, float64(p.t))
		c2 := 1 - math.Pow(b2, float64(p.t))
		for _, r := range p.touched {
			for i := r * ByteVocab; i < (r+1)*ByteVocab; i++ {
				g := p.grad[i] * scale
				p.m[i] = b1*p.m[i] + (1-b1)*g
				p.v[i] = b2*p.v[i] + (1-b2)*g*g
				p.W[i] -= float32(lr * (p.m[i] / c1) / (math.Sqrt(p.v[i]/c2) + eps))
			}
		}
	default:
		return info, fmt.Errorf("policies: tabular: unknown optimizer %q", p.cfg.Optimizer)
	}
	p.version++
	return info, nil
}

func (p *Tabular) clearGrad() {
	for _, r := range p.touched {
		clear(p.grad[r*ByteVocab : (r+1)*ByteVocab])
		p.isTouch[r] = false
	}
	p.touched = p.touched[:0]
}

// Version implements rl.Policy.
func (p *Tabular) Version() int64 { return p.version }

// Checksum is an FNV-1a hash of the parameters (tests use it to show that a
// model's weights did or did not change).
func (p *Tabular) Checksum() uint64 {
	h := uint64(14695981039346656037)
	for _, x := range p.W {
		b := math.Float32bits(x)
		for k := 0; k < 4; k++ {
			h ^= uint64(byte(b >> (8 * k)))
			h *= 1099511628211
		}
	}
	return h
}

// sample draws the next token from row r.
func (p *Tabular) sample(r int, opts *textgen.GenerateOptions, rng *rand.Rand, ls, probs []float64, idx []int) (tok int, logp float32) {
	p.logSoftmaxRow(ls, r, 1)
	if opts.Temperature <= 0 {
		best := 0
		w := p.W[r*ByteVocab : (r+1)*ByteVocab]
		for i := range w {
			if w[i] > w[best] {
				best = i
			}
		}
		return best, float32(ls[best])
	}
	// probs at the sampling temperature
	w := p.W[r*ByteVocab : (r+1)*ByteVocab]
	mx := math.Inf(-1)
	for i, x := range w {
		probs[i] = float64(x) / opts.Temperature
		if probs[i] > mx {
			mx = probs[i]
		}
	}
	var s float64
	for i := range probs {
		probs[i] = math.Exp(probs[i] - mx)
		s += probs[i]
	}
	if opts.TopP > 0 && opts.TopP < 1 {
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool { return probs[idx[a]] > probs[idx[b]] })
		var cum float64
		cut := len(idx)
		for k, i := range idx {
			cum += probs[i] / s
			if cum >= opts.TopP {
				cut = k + 1
				break
			}
		}
		var s2 float64
		for _, i := range idx[:cut] {
			s2 += probs[i]
		}
		u := rng.Float64() * s2
		for _, i := range idx[:cut] {
			u -= probs[i]
			if u < 0 {
				return i, float32(ls[i])
			}
		}
		i := idx[cut-1]
		return i, float32(ls[i])
	}
	u := rng.Float64() * s
	for i, q := range probs {
		u -= q
		if u < 0 {
			return i, float32(ls[i])
		}
	}
	return ByteVocab - 1, float32(ls[ByteVocab-1])
}

// generate samples one continuation of prompt.
// emit, when not nil, receives every token as it is sampled.
func (p *Tabular) generate(ctx context.Context, pi int, prompt []int, opts *textgen.GenerateOptions, rng *rand.Rand, emit func(textgen.TokenEvent)) (textgen.Generation, error) {
	ls := make([]float64, ByteVocab)
	probs := make([]float64, ByteVocab)
	var idx []int
	if opts.TopP > 0 && opts.TopP < 1 {
		idx = make([]int, ByteVocab)
	}
	seq := make([]int, 0, len(prompt)+opts.MaxTokens)
	seq = append(seq, prompt...)
	g := textgen.Generation{FinishReason: "length", Tokens: make([]int, 0, opts.MaxTokens), LogProbs: make([]float32, 0, opts.MaxTokens)}
	for t := 0; t < opts.MaxTokens; t++ {
		if t&63 == 63 && ctx.Err() != nil {
			return g, ctx.Err()
		}
		p1, p2 := prevTokens(seq, len(seq))
		r := p.row(p1, p2)
		tok, lp := p.sample(r, opts, rng, ls, probs, idx)
		var top []textgen.TokenLogProb
		if opts.TopLogProbs > 0 {
			top = topK(ls, opts.TopLogProbs)
			g.TopLogProbs = append(g.TopLogProbs, top)
		}
		seq = append(seq, tok)
		g.Tokens = append(g.Tokens, tok)
		g.LogProbs = append(g.LogProbs, lp)
		fin := ""
		if tok == ByteEOS || (opts.Stop != nil && opts.Stop(pi, g.Tokens)) {
			fin = "stop"
		} else if t == opts.MaxTokens-1 {
			fin = "length"
		}
		if emit != nil {
			emit(textgen.TokenEvent{Prompt: pi, Token: tok, LogProb: lp, TopLogProbs: top, FinishReason: fin, Version: p.version})
		}
		if fin == "stop" {
			g.FinishReason = "stop"
			break
		}
	}
	return g, nil
}

func topK(ls []float64, k int) []textgen.TokenLogProb {
	if k > len(ls) {
		k = len(ls)
	}
	out := make([]textgen.TokenLogProb, 0, k)
	used := make([]bool, len(ls))
	for len(out) < k {
		best := -1
		for i, l := range ls {
			if !used[i] && (best < 0 || l > ls[best]) {
				best = i
			}
		}
		used[best] = true
		out = append(out, textgen.TokenLogProb{Token: best, LogProb: float32(ls[best])})
	}
	return out
}

// Generate samples a continuation of every prompt, one after the other,
// prompt i from PCG(opts.Seed, i); every token is passed to emit (when not
// nil) as soon as it is drawn. Cancellation is checked every 64 tokens.
// TopK, StopTokens and StopSequences are not applied (ByteEOS ends a
// generation); opts.Stop is.
func (p *Tabular) Generate(ctx context.Context, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	opts, err := opts.Validate(ByteVocab)
	if err != nil {
		return nil, err
	}
	out := make([]textgen.Generation, len(prompts))
	for i, pr := range prompts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, t := range pr {
			if t < 0 || t >= ByteVocab {
				return nil, fmt.Errorf("policies: tabular prompt %d: token %d out of vocabulary", i, t)
			}
		}
		g, err := p.generate(ctx, i, pr, &opts, rand.New(rand.NewPCG(opts.Seed, uint64(i))), emit)
		if err != nil {
			return nil, err
		}
		g.Version = p.version
		out[i] = g
	}
	return out, nil
}

// Save writes a safetensors file with the logits table, the Adam moments
// and, in its metadata, the version and configuration.
func (p *Tabular) Save(w io.Writer) error {
	meta := map[string]string{
		"format":    "troupe.swarm.tabular",
		"name":      p.cfg.Name,
		"order":     strconv.Itoa(p.cfg.Order),
		"rows":      strconv.Itoa(p.rows),
		"optimizer": p.cfg.Optimizer,
		"version":   strconv.FormatInt(p.version, 10),
		"adam_t":    strconv.FormatInt(p.t, 10),
	}
	shape := []int{p.rows, ByteVocab}
	return writeSafetensors(w, meta, []stTensor{
		{Name: "adam.m", Shape: shape, F64: p.m}, {Name: "adam.v", Shape: shape, F64: p.v},
		{Name: "logits", Shape: shape, F32: p.W},
	})
}

// Load restores what Save wrote.
func (p *Tabular) Load(r io.Reader) error {
	meta, ts, err := readSafetensors(r)
	if err != nil {
		return fmt.Errorf("policies: load tabular policy: %w", err)
	}
	if meta["format"] != "troupe.swarm.tabular" {
		return fmt.Errorf("policies: load tabular policy: format %q", meta["format"])
	}
	if meta["order"] != strconv.Itoa(p.cfg.Order) || meta["rows"] != strconv.Itoa(p.rows) {
		return fmt.Errorf("policies: load tabular policy: checkpoint has order %s rows %s, model has order %d rows %d",
			meta["order"], meta["rows"], p.cfg.Order, p.rows)
	}
	ver, err1 := strconv.ParseInt(meta["version"], 10, 64)
	at, err2 := strconv.ParseInt(meta["adam_t"], 10, 64)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("policies: load tabular policy: bad version/adam_t metadata")
	}
	if len(ts["logits"].F32) != len(p.W) || len(ts["adam.m"].F64) != len(p.W) || len(ts["adam.v"].F64) != len(p.W) {
		return fmt.Errorf("policies: load tabular policy: tensors logits/adam.m/adam.v missing or not %d values", len(p.W))
	}
	copy(p.W, ts["logits"].F32)
	copy(p.m, ts["adam.m"].F64)
	copy(p.v, ts["adam.v"].F64)
	p.clearGrad()
	p.t, p.version = at, ver
	return nil
}
