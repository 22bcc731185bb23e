package grpo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/textgen"
)

// Metrics are one agent's figures at one step: a training step's
// (Kind "train") or an evaluation's (Kind "eval", whose loss, KL,
// clip_frac and grad_norm are 0).
type Metrics struct {
	// Step is the number of training steps taken: 1 for the first
	// training step, 0 for the evaluation before it.
	Step int `json:"step"`
	// Agent is the agent's Name; Kind is "train" or "eval".
	Agent string `json:"agent"`
	Kind  string `json:"kind"`
	// Reward is the mean weighted reward of the completions, RewardStd
	// its population standard deviation, Rewards each reward function's
	// mean (unweighted).
	Reward    float64            `json:"reward"`
	RewardStd float64            `json:"reward_std"`
	Rewards   map[string]float64 `json:"rewards"`
	// Loss is GRPO's loss as the step computed it (rl.Stats.Loss: the
	// surrogate at ratio 1, zero up to rounding, plus β·KL), and
	// PolicyLossAfter the surrogate with the updated adapter
	// (rl.Stats.PolicyLossAfter), below zero when the step helped.
	Loss            float64 `json:"loss"`
	PolicyLossAfter float64 `json:"policy_loss_after"`
	// KL is the k3 estimate of KL(π‖π_base) per token (0 when KLCoef
	// is 0).
	KL       float64 `json:"kl"`
	ClipFrac float64 `json:"clip_frac"`
	GradNorm float64 `json:"grad_norm"`
	// CompletionLen is the mean number of tokens of a completion, Stopped
	// the share of completions that ended with a stop token.
	CompletionLen float64 `json:"completion_len"`
	Stopped       float64 `json:"stopped"`
	// Samples is the number of completions.
	Samples int `json:"samples"`
	// Seconds is the wall time of the agent's step or evaluation.
	Seconds float64 `json:"seconds"`
}

// member is one agent with its policy.
type member struct {
	Agent
	index       int
	train, eval []Example
	opt         *nn.Adam
	pol         *policies.LoRA
	alg         *rl.GRPO
}

// Trainer trains a team of LoRA adapters by GRPO. It is not safe for
// concurrent use.
type Trainer struct {
	cfg     Config
	members []*member
	stop    []int
	step    int
	history []Metrics
}

// New checks cfg and makes the agents' adapters (where they have none),
// optimizers and policies.
func New(cfg Config) (*Trainer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &Trainer{cfg: cfg, stop: cfg.Tokenizer.StopTokens()}
	for i, a := range cfg.Agents {
		m := &member{Agent: a, index: i, train: a.Train, eval: a.Eval}
		if m.train == nil {
			m.train = cfg.Train
		}
		if m.eval == nil {
			m.eval = cfg.Eval
		}
		if m.LoRA == nil {
			lc := cfg.LoRA
			lc.Seed += uint64(i)
			var err error
			if m.LoRA, err = hf.NewLoRA(cfg.Model, lc); err != nil {
				return nil, fmt.Errorf("grpo: agent %q: %w", a.Name, err)
			}
		}
		m.opt = nn.NewAdamW(nn.Constant(cfg.LR), 0)
		m.pol = policies.NewLoRA(m.LoRA, m.opt, cfg.ClipNorm)
		gc := rl.GRPOConfig{Schedule: rl.Schedule{Seed: cfg.Seed, ScoreAfter: true}, ClipEps: cfg.ClipEps, KLPenalty: rl.KLPenalty{KLCoef: cfg.KLCoef}}
		if cfg.KLCoef > 0 {
			gc.Ref = policies.LoRABase{Model: cfg.Model}
		}
		m.alg = rl.NewGRPO(gc)
		t.members = append(t.members, m)
	}
	return t, nil
}

// Step is the number of training steps taken.
func (t *Trainer) Step() int { return t.step }

// Adapter returns the named agent's adapter, nil when there is no such
// agent.
func (t *Trainer) Adapter(agent string) *hf.LoRA {
	for _, m := range t.members {
		if m.Name == agent {
			return m.LoRA
		}
	}
	return nil
}

// History returns the metrics of every step and evaluation so far
// (those of a resumed run's earlier steps included, read back from
// metrics.jsonl).
func (t *Trainer) History() []Metrics { return append([]Metrics(nil), t.history...) }

// Run trains until Steps: with Resume it first loads the latest checkpoint
// of OutDir; it evaluates before the first step (when starting from step
// 0), every EvalEvery steps and after the last, checkpoints every
// SaveEvery steps and after the last, and writes the final adapters and
// reward.png to OutDir. It stops with ctx's error when ctx is done,
// between steps.
func (t *Trainer) Run(ctx context.Context) error {
	cfg := t.cfg
	var mf *metricsFile
	if cfg.OutDir != "" {
		if cfg.Resume {
			dir, err := LatestCheckpoint(cfg.OutDir)
			if err != nil {
				return err
			}
			if dir != "" {
				if err := t.Load(dir); err != nil {
					return err
				}
				fmt.Fprintf(cfg.Log, "grpo: resumed from %s (step %d)\n", dir, t.step)
			}
		}
		var err error
		if mf, t.history, err = openMetrics(cfg.OutDir, t.step); err != nil {
			return err
		}
		defer mf.Close()
	}
	record := func(ms []Metrics) error {
		t.history = append(t.history, ms...)
		if cfg.OnStep != nil {
			cfg.OnStep(ms)
		}
		if mf != nil {
			return mf.write(ms)
		}
		return nil
	}
	evaluate := func() error {
		ms, err := t.Evaluate(ctx)
		if err != nil || len(ms) == 0 {
			return err
		}
		fmt.Fprintln(cfg.Log, progressLine(fmt.Sprintf("grpo eval at step %d", t.step), ms))
		return record(ms)
	}
	if t.step == 0 {
		if err := evaluate(); err != nil {
			return err
		}
	}
	for t.step < cfg.Steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		start := time.Now()
		ms, err := t.TrainStep(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(cfg.Log, progressLine(fmt.Sprintf("grpo step %d/%d", t.step, cfg.Steps), ms)+fmt.Sprintf(" | %.1fs", time.Since(start).Seconds()))
		if err := record(ms); err != nil {
			return err
		}
		last := t.step == cfg.Steps
		if t.step%cfg.EvalEvery == 0 || last {
			if err := evaluate(); err != nil {
				return err
			}
		}
		if cfg.OutDir != "" && (t.step%cfg.SaveEvery == 0 || last) {
			if err := t.Save(checkpointDir(cfg.OutDir, t.step)); err != nil {
				return err
			}
		}
	}
	if cfg.OutDir == "" {
		return nil
	}
	for _, m := range t.members {
		if err := m.LoRA.Save(joinPath(cfg.OutDir, m.Name), cfg.BaseName); err != nil {
			return fmt.Errorf("grpo: agent %q: %w", m.Name, err)
		}
	}
	return plotRewards(joinPath(cfg.OutDir, "reward.png"), t.history)
}

// TrainStep takes one training step of every agent, in order, and returns
// their metrics. Run calls it; it writes nothing.
func (t *Trainer) TrainStep(ctx context.Context) ([]Metrics, error) {
	var out []Metrics
	for _, m := range t.members {
		ms, err := t.trainAgent(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("grpo: step %d, agent %q: %w", t.step+1, m.Name, err)
		}
		out = append(out, ms)
	}
	t.step++
	return out, nil
}

// batch returns the examples of agent m at step: consecutive slices of one
// permutation of its training set per epoch.
func (t *Trainer) batch(m *member, step int) []Example {
	n, p := len(m.train), t.cfg.PromptsPerStep
	out := make([]Example, p)
	var perm []int
	epoch := -1
	for j := range out {
		k := step*p + j
		if e := k / n; e != epoch {
			epoch = e
			perm = rand.New(rand.NewPCG(t.cfg.Seed^0x9e3779b97f4a7c15, uint64(e)<<20|uint64(m.index))).Perm(n)
		}
		out[j] = m.train[perm[k%n]]
		if out[j].ID == "" {
			out[j].ID = strconv.Itoa(perm[k%n])
		}
	}
	return out
}

// sampleSeed is the generation seed of agent m at step.
func (t *Trainer) sampleSeed(m *member, step int) uint64 {
	return rand.New(rand.NewPCG(t.cfg.Seed, uint64(step)<<20|uint64(m.index))).Uint64()
}

func (t *Trainer) trainAgent(ctx context.Context, m *member) (Metrics, error) {
	cfg := t.cfg
	start := time.Now()
	exs := t.batch(m, t.step)
	var prompts [][]int
	var owner []int
	for j, ex := range exs {
		ids, err := cfg.Tokenizer.ApplyChatTemplateContext(ctx, ex.Prompt, true)
		if err != nil {
			return Metrics{}, fmt.Errorf("example %q: %w", ex.ID, err)
		}
		for g := 0; g < cfg.GroupSize; g++ {
			prompts = append(prompts, ids)
			owner = append(owner, j)
		}
	}
	gens, err := cfg.Model.Generate(ctx, m.LoRA, prompts, textgen.GenerateOptions{
		Temperature: cfg.Temperature, MaxTokens: cfg.MaxTokens, Seed: t.sampleSeed(m, t.step), StopTokens: t.stop}, nil)
	if err != nil {
		return Metrics{}, err
	}
	cs := t.completions(exs, owner, gens)
	total, ms, err := m.score(cs)
	if err != nil {
		return Metrics{}, err
	}
	samples := make([]rl.Sample, len(gens))
	for i, g := range gens {
		samples[i] = rl.Sample{TaskID: strconv.Itoa(owner[i]), Prompt: prompts[i], Actions: g.Tokens,
			LogProbs: g.LogProbs, Version: m.pol.Version(), Temperature: cfg.Temperature, Reward: total[i]}
	}
	st, err := m.alg.Update(m.pol, samples)
	if err != nil && !errors.Is(err, rl.ErrEmptyBatch) {
		return Metrics{}, err
	}
	ms.Step, ms.Kind = t.step+1, "train"
	ms.Loss, ms.PolicyLossAfter, ms.KL, ms.ClipFrac, ms.GradNorm = st.Loss, st.PolicyLossAfter, st.KL, st.ClipFrac, st.GradNorm
	ms.Seconds = time.Since(start).Seconds()
	return ms, nil
}

// completions pairs generations with the examples that prompted them.
func (t *Trainer) completions(exs []Example, owner []int, gens []textgen.Generation) []Completion {
	cs := make([]Completion, len(gens))
	for i, g := range gens {
		cs[i] = Completion{Example: exs[owner[i]], Text: strings.ToValidUTF8(t.cfg.Tokenizer.Decode(g.Tokens, true), "\uFFFD"),
			Tokens: g.Tokens, Stopped: g.FinishReason == "stop"}
	}
	return cs
}

// score returns the weighted reward of every completion and the metrics of
// the rewards: mean, standard deviation, each function's mean, lengths.
func (m *member) score(cs []Completion) ([]float64, Metrics, error) {
	ms := Metrics{Agent: m.Name, Rewards: map[string]float64{}, Samples: len(cs)}
	total := make([]float64, len(cs))
	for _, r := range m.Rewards {
		w := r.Weight
		if w == 0 {
			w = 1
		}
		var sum float64
		for i, c := range cs {
			v := r.Func(c)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, ms, fmt.Errorf("reward %q scored %v for the completion %q of example %q", r.Name, v, c.Text, c.Example.ID)
			}
			sum += v
			total[i] += w * v
		}
		ms.Rewards[r.Name] = sum / float64(max(len(cs), 1))
	}
	var s, ss, toks, stopped float64
	for i, c := range cs {
		s += total[i]
		ss += total[i] * total[i]
		toks += float64(len(c.Tokens))
		if c.Stopped {
			stopped++
		}
	}
	n := float64(max(len(cs), 1))
	ms.Reward = s / n
	ms.RewardStd = math.Sqrt(math.Max(ss/n-ms.Reward*ms.Reward, 0))
	ms.CompletionLen, ms.Stopped = toks/n, stopped/n
	return total, ms, nil
}

// evalBatch is the number of held-out prompts generated at once.
const evalBatch = 64

// Evaluate answers every agent's Eval examples greedily with its adapter
// and returns each agent's rewards (agents without Eval examples are left
// out).
func (t *Trainer) Evaluate(ctx context.Context) ([]Metrics, error) {
	var out []Metrics
	for _, m := range t.members {
		if len(m.eval) == 0 {
			continue
		}
		start := time.Now()
		var cs []Completion
		for lo := 0; lo < len(m.eval); lo += evalBatch {
			exs := slices.Clone(m.eval[lo:min(lo+evalBatch, len(m.eval))])
			prompts := make([][]int, len(exs))
			owner := make([]int, len(exs))
			for j := range exs {
				if exs[j].ID == "" {
					exs[j].ID = strconv.Itoa(lo + j)
				}
				var err error
				if prompts[j], err = t.cfg.Tokenizer.ApplyChatTemplateContext(ctx, exs[j].Prompt, true); err != nil {
					return nil, fmt.Errorf("grpo: evaluating agent %q: example %q: %w", m.Name, exs[j].ID, err)
				}
				owner[j] = j
			}
			gens, err := t.cfg.Model.Generate(ctx, m.LoRA, prompts, textgen.GenerateOptions{MaxTokens: t.cfg.MaxTokens, StopTokens: t.stop}, nil)
			if err != nil {
				return nil, fmt.Errorf("grpo: evaluating agent %q: %w", m.Name, err)
			}
			cs = append(cs, t.completions(exs, owner, gens)...)
		}
		_, ms, err := m.score(cs)
		if err != nil {
			return nil, fmt.Errorf("grpo: evaluating agent %q: %w", m.Name, err)
		}
		ms.Step, ms.Kind, ms.Seconds = t.step, "eval", time.Since(start).Seconds()
		out = append(out, ms)
	}
	return out, nil
}

// progressLine is one line of progress: each agent's reward, its parts,
// length and KL.
func progressLine(head string, ms []Metrics) string {
	var b strings.Builder
	b.WriteString(head)
	for _, m := range ms {
		fmt.Fprintf(&b, " | %s reward %.3f±%.3f", m.Agent, m.Reward, m.RewardStd)
		if len(m.Rewards) > 1 {
			b.WriteString(" (")
			for i, k := range sortedKeys(m.Rewards) {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%s %.3f", k, m.Rewards[k])
			}
			b.WriteString(")")
		}
		fmt.Fprintf(&b, " len %.1f", m.CompletionLen)
		if m.Kind == "train" && m.KL != 0 {
			fmt.Fprintf(&b, " kl %.4f", m.KL)
		}
	}
	return b.String()
}
