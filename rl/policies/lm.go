package policies

import (
	"errors"
	"fmt"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/textgen"
)

// LM adapts a language model of package nn to rl.Policy: a Sample's Prompt
// conditions the model and its Actions are the generated tokens, whose
// per-token log-probabilities come from nn.LMTrainer. The trainer's
// optimizer applies the steps. LM has no value head (PPO needs one; GRPO,
// REINFORCE and RLOO do not). Not safe for concurrent use.
//
// With Tempered, each sample is scored at its Sample.Temperature: under
// softmax(logits/τ), the distribution it was drawn from. Sampling at τ < 1
// and differentiating the log-probabilities at temperature 1 is not the
// gradient of the sampled policy's expected reward: per token, the score
// onehot(a) − p has mean q − p ≠ 0 under the sampler's q, so every
// near-certain token of a sample (which q draws almost surely and p gives
// less mass) carries the sample's whole advantage as noise. At τ the score
// is (onehot(a) − q)/τ, which vanishes on those tokens and leaves the
// gradient on the tokens the samples actually differ in. RL libraries for
// language models score at the sampling temperature for this reason (verl
// divides the actor's logits by the rollout temperature). Greedy decoding
// is unchanged by τ (the argmax of logits/τ is that of the logits).
type LM struct {
	Model    *nn.LM
	Trainer  *nn.LMTrainer
	Tempered bool
	version  int64
}

// NewLM returns a policy over model m trained by t (which must train m).
func NewLM(m *nn.LM, t *nn.LMTrainer) *LM { return &LM{Model: m, Trainer: t} }

func (p *LM) seqs(batch []rl.Sample) ([]nn.SeqExample, error) {
	out := make([]nn.SeqExample, len(batch))
	for i, s := range batch {
		if len(s.Prompt) == 0 {
			return nil, fmt.Errorf("policies: LM: sample %d has an empty prompt", i)
		}
		out[i] = nn.SeqExample{Prompt: s.Prompt, Target: s.Actions}
		if p.Tempered {
			out[i].Temperature = s.Temperature
		}
	}
	return out, nil
}

// LogProbs implements rl.Policy.
func (p *LM) LogProbs(batch []rl.Sample) ([][]float32, error) {
	ex, err := p.seqs(batch)
	if err != nil {
		return nil, err
	}
	lp, err := p.Trainer.TokenLogProbs(ex)
	if err != nil {
		return nil, fmt.Errorf("policies: LM log-probs: %w", err)
	}
	return lp, nil
}

// ForwardBackward implements rl.Policy (values are nil: no value head). A
// NaN or Inf loss is not an error: the following Step is skipped instead.
func (p *LM) ForwardBackward(batch []rl.Sample, loss rl.LossFunc) error {
	ex, err := p.seqs(batch)
	if err != nil {
		return err
	}
	err = p.Trainer.ForwardBackward(ex, func(logp [][]float32) (float64, [][]float32) {
		l, d, _ := loss(logp, nil)
		return l, d
	})
	if errors.Is(err, nn.ErrNonFinite) {
		// nn drops the gradients and makes the next Step skip; the
		// trainer sees it as StepInfo.Skipped (Stats.SkippedSteps).
		return nil
	}
	if err != nil {
		return fmt.Errorf("policies: LM forward-backward: %w", err)
	}
	return nil
}

// Step implements rl.Policy; the version grows only when the step is
// applied.
func (p *LM) Step() (rl.StepInfo, error) {
	norm, skipped, err := p.Trainer.Step()
	if err != nil {
		return rl.StepInfo{GradNorm: norm, Skipped: skipped}, fmt.Errorf("policies: LM step: %w", err)
	}
	if !skipped {
		p.version++
	}
	return rl.StepInfo{GradNorm: norm, Skipped: skipped}, nil
}

// Version implements rl.Policy.
func (p *LM) Version() int64 { return p.version }

// Sample generates one continuation per prompt and returns them as samples
// with TaskID taskIDs[i], the behaviour log-probabilities (with Tempered,
// those of the tempered distribution at opts.Temperature), the temperature
// and the current Version; rewards are left to the caller. Generations
// without tokens are left out.
func (p *LM) Sample(prompts [][]int, taskIDs []string, opts textgen.GenerateOptions) ([]rl.Sample, error) {
	if len(taskIDs) != len(prompts) {
		return nil, fmt.Errorf("policies: LM.Sample: %d task ids for %d prompts", len(taskIDs), len(prompts))
	}
	gens, err := p.Model.Generate(prompts, opts)
	if err != nil {
		return nil, fmt.Errorf("policies: LM generate: %w", err)
	}
	out := make([]rl.Sample, 0, len(gens))
	for i, g := range gens {
		if len(g.Tokens) == 0 {
			continue
		}
		out = append(out, rl.Sample{
			TaskID: taskIDs[i], Prompt: prompts[i], Actions: g.Tokens,
			LogProbs: g.LogProbs, Version: p.version, Temperature: opts.Temperature,
		})
	}
	if p.Tempered && opts.Temperature > 0 && opts.Temperature != 1 && len(out) > 0 {
		// Generate reports log-probabilities at temperature 1; the
		// behaviour policy is the tempered one.
		lp, err := p.LogProbs(out)
		if err != nil {
			return nil, err
		}
		for i := range out {
			out[i].LogProbs = lp[i]
		}
	}
	return out, nil
}

var _ rl.Policy = (*LM)(nil)
