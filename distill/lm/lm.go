// Package lm distils one pretrained language model into another at the
// token level, for models of nn/hf that share a tokenizer: a team's larger
// member teaching a smaller one, each a LoRA adapter over its own base.
//
//   - OnPolicy: the student samples completions of the prompts and the
//     teacher scores the student's tokens; each token's
//     log π_s(y_t) − log π_t(y_t) is a dense per-token signal, and the
//     student descends the score-function gradient of the reverse KL,
//     Σ_t (log π_s(y_t) − log π_t(y_t)) ∇log π_s(y_t) (on-policy
//     distillation: Agarwal et al. 2024, "On-Policy Distillation of
//     Language Models: Learning from Self-Generated Mistakes", GKD,
//     arXiv:2306.13649, with the reverse KL and no discounting across
//     tokens). The student learns on the states it reaches itself.
//   - OffPolicy: the teacher samples and the student is fine-tuned on the
//     teacher's tokens (maximum likelihood: sequence-level knowledge
//     distillation, Kim & Rush 2016).
//
// Both need the same token ids on both sides: New refuses two tokenizers
// whose fingerprints (tokenizer.HF.Fingerprint: vocabulary, merges, added
// tokens, normalizer, pre-tokenizer) differ, naming the first difference.
// TokenKL measures the result: the exact per-token KL(π_s‖π_t) over the
// whole vocabulary at every position of the student's own samples of
// held-out prompts.
//
// distill itself works on logits of package nn's models; this subpackage
// imports nn/hf and rl/policies, which distill does not need.
package lm

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/textgen"
)

// Mode is how the student learns from the teacher.
type Mode int

const (
	// OnPolicy: the student samples, the teacher's log-probabilities of
	// the student's tokens give a per-token reverse-KL signal.
	OnPolicy Mode = iota
	// OffPolicy: the teacher samples, the student maximises the
	// likelihood of the teacher's tokens.
	OffPolicy
)

// String is "on-policy" or "off-policy".
func (m Mode) String() string {
	switch m {
	case OnPolicy:
		return "on-policy"
	case OffPolicy:
		return "off-policy"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// The defaults of Config's zero fields.
const (
	DefaultSteps            = 100
	DefaultPromptsPerStep   = 4
	DefaultSamplesPerPrompt = 4
	DefaultMaxTokens        = 64
	DefaultLR               = 1e-4
	DefaultClipNorm         = 1.0
)

// Config configures a Distiller. Zero fields take the Default constants.
type Config struct {
	// Mode is OnPolicy (the zero value) or OffPolicy.
	Mode Mode
	// Teacher is the teacher's base, TeacherLoRA its adapter (nil: the
	// base alone), TeacherTokenizer its tokenizer.
	Teacher          *hf.Model
	TeacherLoRA      *hf.LoRA
	TeacherTokenizer *hf.Tokenizer
	// Student is the adapter that learns (its Base is the student's
	// model), StudentTokenizer its tokenizer, which renders the prompts.
	Student          *hf.LoRA
	StudentTokenizer *hf.Tokenizer
	// Prompts are the training conversations.
	Prompts [][]hf.Message
	// Steps is the number of optimizer steps (DefaultSteps); each takes
	// PromptsPerStep prompts (DefaultPromptsPerStep) and samples
	// SamplesPerPrompt completions of each (DefaultSamplesPerPrompt) of at
	// most MaxTokens tokens (DefaultMaxTokens), at temperature 1.
	Steps, PromptsPerStep, SamplesPerPrompt, MaxTokens int
	// LR is AdamW's learning rate (DefaultLR), ClipNorm the gradient norm
	// clip (DefaultClipNorm).
	LR, ClipNorm float64
	// Seed seeds the prompt order and sampling.
	Seed uint64
	// Log receives one line per step (os.Stderr when nil; io.Discard
	// silences it).
	Log io.Writer
}

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	for _, f := range []struct {
		v *int
		d int
	}{{&c.Steps, DefaultSteps}, {&c.PromptsPerStep, DefaultPromptsPerStep}, {&c.SamplesPerPrompt, DefaultSamplesPerPrompt}, {&c.MaxTokens, DefaultMaxTokens}} {
		if *f.v == 0 {
			*f.v = f.d
		}
	}
	if c.LR == 0 {
		c.LR = DefaultLR
	}
	if c.ClipNorm == 0 {
		c.ClipNorm = DefaultClipNorm
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
	return c
}

// Stats are one step's figures.
type Stats struct {
	// Step counts the steps taken, this one included.
	Step int
	// KL is the batch's per-token estimate of the divergence the mode
	// minimises: on-policy the reverse KL(π_s‖π_t), the mean of
	// log π_s − log π_t over the student's tokens; off-policy the forward
	// KL(π_t‖π_s), the mean of log π_t − log π_s over the teacher's.
	KL float64
	// NLL is the student's mean negative log-likelihood of the tokens.
	NLL float64
	// GradNorm is the gradient norm before clipping.
	GradNorm float64
	// Tokens and Samples count what the step trained on; Dropped the
	// samples left out (empty, or with a token beyond the other model's
	// vocabulary).
	Tokens, Samples, Dropped int
	// Seconds is the step's wall time.
	Seconds float64
}

// Distiller distils a teacher into a student adapter. It is not safe for
// concurrent use.
type Distiller struct {
	cfg     Config
	student *hf.Model
	pol     *policies.LoRA
	stop    []int
	step    int
}

// New checks cfg: both tokenizers must be the same (SameTokenizer), both
// models' vocabularies must hold it, and the tokenizer must have a chat
// template and stop tokens.
func New(cfg Config) (*Distiller, error) {
	cfg = cfg.WithDefaults()
	switch {
	case cfg.Teacher == nil || cfg.Student == nil:
		return nil, fmt.Errorf("lm: Config needs a Teacher and a Student adapter")
	case cfg.TeacherTokenizer == nil || cfg.StudentTokenizer == nil:
		return nil, fmt.Errorf("lm: Config needs both tokenizers")
	case cfg.Mode != OnPolicy && cfg.Mode != OffPolicy:
		return nil, fmt.Errorf("lm: unknown mode %v", cfg.Mode)
	case cfg.Steps < 0 || cfg.PromptsPerStep < 0 || cfg.SamplesPerPrompt < 0 || cfg.MaxTokens < 0:
		return nil, fmt.Errorf("lm: Steps, PromptsPerStep, SamplesPerPrompt and MaxTokens must not be negative")
	case cfg.TeacherLoRA != nil && cfg.TeacherLoRA.Base != cfg.Teacher:
		return nil, fmt.Errorf("lm: TeacherLoRA was made for another base than Teacher")
	}
	if err := SameTokenizer(cfg.TeacherTokenizer, cfg.StudentTokenizer); err != nil {
		return nil, err
	}
	tok := cfg.StudentTokenizer
	if !tok.HasChatTemplate() || len(tok.StopTokens()) == 0 {
		return nil, fmt.Errorf("lm: the tokenizer needs a chat template and stop tokens")
	}
	for _, m := range []struct {
		name string
		m    *hf.Model
	}{{"teacher", cfg.Teacher}, {"student", cfg.Student.Base}} {
		if m.m.Config.Vocab < tok.VocabSize() {
			return nil, fmt.Errorf("lm: the %s's vocabulary has %d ids, the tokenizer %d", m.name, m.m.Config.Vocab, tok.VocabSize())
		}
	}
	return &Distiller{cfg: cfg, student: cfg.Student.Base, stop: tok.StopTokens(),
		pol: policies.NewLoRA(cfg.Student, nn.NewAdamW(nn.Constant(cfg.LR), 0), cfg.ClipNorm)}, nil
}

// SameTokenizer returns nil when teacher and student encode every text to
// the same ids (equal fingerprints), and otherwise an error naming the
// first difference: the vocabulary's size, a token's text, or the merges
// and pre-tokenization.
func SameTokenizer(teacher, student *hf.Tokenizer) error {
	if teacher.Fingerprint() == student.Fingerprint() {
		return nil
	}
	if a, b := teacher.VocabSize(), student.VocabSize(); a != b {
		return fmt.Errorf("lm: the tokenizers differ: the teacher's has %d token ids, the student's %d; token-level distillation needs one tokenizer", a, b)
	}
	for id := 0; id < teacher.VocabSize(); id++ {
		a, b := teacher.Decode([]int{id}, false), student.Decode([]int{id}, false)
		if a != b {
			return fmt.Errorf("lm: the tokenizers differ: token %d is %q for the teacher, %q for the student; token-level distillation needs one tokenizer", id, a, b)
		}
	}
	return fmt.Errorf("lm: the tokenizers differ in their merges, added tokens or pre-tokenization (fingerprints %.12s… and %.12s…); token-level distillation needs one tokenizer", teacher.Fingerprint(), student.Fingerprint())
}

// prompts returns the ids of the prompts of step: consecutive slices of
// one permutation of Prompts per epoch, rendered with the chat template.
func (d *Distiller) prompts(ctx context.Context, step int) ([][]int, error) {
	n, p := len(d.cfg.Prompts), d.cfg.PromptsPerStep
	out := make([][]int, 0, p)
	var perm []int
	epoch := -1
	for j := 0; j < p; j++ {
		k := step*p + j
		if e := k / n; e != epoch {
			epoch = e
			perm = rand.New(rand.NewPCG(d.cfg.Seed, uint64(e))).Perm(n)
		}
		ids, err := d.cfg.StudentTokenizer.ApplyChatTemplateContext(ctx, d.cfg.Prompts[perm[k%n]], true)
		if err != nil {
			return nil, fmt.Errorf("lm: prompt %d: %w", perm[k%n], err)
		}
		out = append(out, ids)
	}
	return out, nil
}

// Step takes one optimizer step of the student.
func (d *Distiller) Step(ctx context.Context) (Stats, error) {
	cfg := d.cfg
	start := time.Now()
	if len(cfg.Prompts) == 0 {
		return Stats{}, fmt.Errorf("lm: Config has no Prompts")
	}
	ps, err := d.prompts(ctx, d.step)
	if err != nil {
		return Stats{}, err
	}
	var prompts [][]int
	for _, p := range ps {
		for s := 0; s < cfg.SamplesPerPrompt; s++ {
			prompts = append(prompts, p)
		}
	}
	// The sampler: the student on-policy, the teacher off-policy.
	sampler, ad, other := d.student, cfg.Student, cfg.Teacher
	if cfg.Mode == OffPolicy {
		sampler, ad, other = cfg.Teacher, cfg.TeacherLoRA, d.student
	}
	seed := rand.New(rand.NewPCG(cfg.Seed, uint64(d.step)+1)).Uint64()
	gens, err := sampler.Generate(ctx, ad, prompts, textgen.GenerateOptions{Temperature: 1, MaxTokens: cfg.MaxTokens, Seed: seed, StopTokens: d.stop}, nil)
	if err != nil {
		return Stats{}, fmt.Errorf("lm: sampling: %w", err)
	}
	st := Stats{Step: d.step + 1}
	var batch []rl.Sample
	for i, g := range gens {
		if len(g.Tokens) == 0 || !fits(g.Tokens, other.Config.Vocab) {
			st.Dropped++
			continue
		}
		batch = append(batch, rl.Sample{Prompt: prompts[i], Actions: g.Tokens, LogProbs: g.LogProbs})
		st.Tokens += len(g.Tokens)
	}
	st.Samples = len(batch)
	if len(batch) == 0 {
		return st, fmt.Errorf("lm: step %d: every sample was empty or beyond a vocabulary", d.step+1)
	}
	var loss rl.LossFunc
	n := float64(st.Tokens)
	if cfg.Mode == OnPolicy {
		teacher, err := cfg.Teacher.TokenLogProbs(cfg.TeacherLoRA, seqs(batch))
		if err != nil {
			return st, fmt.Errorf("lm: teacher log-probs: %w", err)
		}
		loss = reverseKL(batch, teacher, &st)
	} else {
		loss = func(logp, _ [][]float32) (float64, [][]float32, [][]float32) {
			grad := make([][]float32, len(logp))
			for i, lp := range logp {
				grad[i] = make([]float32, len(lp))
				for t, l := range lp {
					st.KL += (float64(batch[i].LogProbs[t]) - float64(l)) / n
					st.NLL -= float64(l) / n
					grad[i][t] = float32(-1 / n)
				}
			}
			return st.NLL, grad, nil
		}
	}
	if err := d.pol.ForwardBackward(batch, loss); err != nil {
		return st, fmt.Errorf("lm: student forward-backward: %w", err)
	}
	info, err := d.pol.Step()
	if err != nil {
		return st, fmt.Errorf("lm: student step: %w", err)
	}
	d.step++
	st.GradNorm, st.Seconds = info.GradNorm, time.Since(start).Seconds()
	return st, nil
}

// Run takes Steps steps, logging each, and returns their statistics.
func (d *Distiller) Run(ctx context.Context) ([]Stats, error) {
	var out []Stats
	for d.step < d.cfg.Steps {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		st, err := d.Step(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, st)
		fmt.Fprintf(d.cfg.Log, "distill %s step %d/%d: KL %.4f per token, NLL %.4f, grad norm %.3g, %d tokens, %.2fs\n",
			d.cfg.Mode, st.Step, d.cfg.Steps, st.KL, st.NLL, st.GradNorm, st.Tokens, st.Seconds)
	}
	return out, nil
}

// TokenKL is the exact per-token KL(π_s‖π_t) over the vocabulary,
// Σ_v π_s(v)(log π_s(v) − log π_t(v)), averaged over every position of
// samples completions of each prompt that the student samples at
// temperature 1 (with seed), the teacher conditioned on the same tokens.
// Ids beyond the smaller vocabulary, which the shared tokenizer never
// produces, are left out of the sum.
func (d *Distiller) TokenKL(ctx context.Context, prompts [][]hf.Message, samples int, seed uint64) (float64, error) {
	var ids [][]int
	for i, c := range prompts {
		p, err := d.cfg.StudentTokenizer.ApplyChatTemplateContext(ctx, c, true)
		if err != nil {
			return 0, fmt.Errorf("lm: prompt %d: %w", i, err)
		}
		for s := 0; s < samples; s++ {
			ids = append(ids, p)
		}
	}
	gens, err := d.student.Generate(ctx, d.cfg.Student, ids, textgen.GenerateOptions{Temperature: 1, MaxTokens: d.cfg.MaxTokens, Seed: seed, StopTokens: d.stop}, nil)
	if err != nil {
		return 0, fmt.Errorf("lm: sampling: %w", err)
	}
	var sum float64
	var n int
	for i, g := range gens {
		if !fits(g.Tokens, d.cfg.Teacher.Config.Vocab) {
			continue
		}
		s, k, err := seqKL(d.student, d.cfg.Student, d.cfg.Teacher, d.cfg.TeacherLoRA, ids[i], g.Tokens)
		if err != nil {
			return 0, err
		}
		sum += s
		n += k
	}
	if n == 0 {
		return 0, fmt.Errorf("lm: TokenKL: no token sampled")
	}
	return sum / float64(n), nil
}

// seqKL sums KL(π_s‖π_t) over the positions of toks after prompt, the
// two models stepped token by token through their decoders.
func seqKL(student *hf.Model, sAd *hf.LoRA, teacher *hf.Model, tAd *hf.LoRA, prompt, toks []int) (float64, int, error) {
	sd, td := student.Decoder(), teacher.Decoder()
	sc, tc := sd.NewCache(len(prompt)+len(toks)), td.NewCache(len(prompt)+len(toks))
	ls, lt := make([]float32, sd.Vocab()), make([]float32, td.Vocab())
	V := min(len(ls), len(lt))
	in := prompt
	var sum float64
	for j := range toks {
		if err := sd.Step([]textgen.Input{{Cache: sc, Tokens: in, Adapter: sAd, Logits: true}}, ls); err != nil {
			return 0, 0, fmt.Errorf("lm: student: %w", err)
		}
		if err := td.Step([]textgen.Input{{Cache: tc, Tokens: in, Adapter: tAd, Logits: true}}, lt); err != nil {
			return 0, 0, fmt.Errorf("lm: teacher: %w", err)
		}
		for v := 0; v < V; v++ {
			sum += math.Exp(float64(ls[v])) * (float64(ls[v]) - float64(lt[v]))
		}
		in = toks[j : j+1]
	}
	return sum, len(toks), nil
}

// reverseKL is the on-policy loss of batch, the student's samples (their
// LogProbs the student's own), given the teacher's log-probabilities of
// the same tokens: with a_t = log π_s(y_t) − log π_t(y_t), the sampled
// per-token reverse KL, and b its mean over the batch's n tokens, the
// surrogate Σ_t sg(a_t − b)·log π_s(y_t) / n, whose gradient
// Σ_t (a_t − b) ∇log π_s(y_t) / n is the score-function gradient of the
// per-token KL(π_s‖π_t) at each position the student reached (b, a
// constant, leaves its expectation alone since E ∇log π_s = 0). It
// records the batch's mean a_t as st.KL and the student's NLL.
func reverseKL(batch []rl.Sample, teacher [][]float32, st *Stats) rl.LossFunc {
	var b, n float64
	for i, s := range batch {
		for t := range s.Actions {
			b += float64(s.LogProbs[t]) - float64(teacher[i][t])
			n++
		}
	}
	b /= n
	st.KL = b
	return func(logp, _ [][]float32) (float64, [][]float32, [][]float32) {
		grad := make([][]float32, len(logp))
		var sur float64
		for i, lp := range logp {
			grad[i] = make([]float32, len(lp))
			for t, l := range lp {
				a := float64(batch[i].LogProbs[t]) - float64(teacher[i][t]) - b
				st.NLL -= float64(l) / n
				sur += a * float64(l) / n
				grad[i][t] = float32(a / n)
			}
		}
		return sur, grad, nil
	}
}

func fits(toks []int, vocab int) bool {
	for _, t := range toks {
		if t >= vocab {
			return false
		}
	}
	return true
}

func seqs(batch []rl.Sample) []hf.Seq {
	out := make([]hf.Seq, len(batch))
	for i, s := range batch {
		out[i] = hf.Seq{Prompt: s.Prompt, Target: s.Actions}
	}
	return out
}
