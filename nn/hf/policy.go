package hf

import (
	"errors"
	"fmt"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/rl"
)

// Policy adapts a model's LoRA adapter to rl.Policy: a Sample's Prompt
// conditions the model, its Actions are the generated tokens, and only the
// adapter trains, with its own optimizer. Several Policies can share one
// Model. Not safe for concurrent use.
type Policy struct {
	LoRA *LoRA
	Opt  nn.Optimizer
	// ClipNorm clips the adapter's global gradient norm (0: none).
	ClipNorm float64
	version  int64
	bad      bool // a non-finite loss was seen since the last step
}

// NewPolicy returns a policy training ad with opt.
func NewPolicy(ad *LoRA, opt nn.Optimizer, clipNorm float64) *Policy {
	return &Policy{LoRA: ad, Opt: opt, ClipNorm: clipNorm}
}

func seqsOf(batch []rl.Sample) ([]Seq, error) {
	out := make([]Seq, len(batch))
	for i, s := range batch {
		if len(s.Prompt) == 0 {
			return nil, fmt.Errorf("hf: sample %d has an empty prompt", i)
		}
		out[i] = Seq{Prompt: s.Prompt, Target: s.Actions}
	}
	return out, nil
}

// LogProbs implements rl.Policy.
func (p *Policy) LogProbs(batch []rl.Sample) ([][]float32, error) {
	seqs, err := seqsOf(batch)
	if err != nil {
		return nil, err
	}
	return p.LoRA.Base.TokenLogProbs(p.LoRA, seqs)
}

// ForwardBackward implements rl.Policy (no value head). A non-finite loss
// is not an error: the following Step is skipped instead.
func (p *Policy) ForwardBackward(batch []rl.Sample, loss rl.LossFunc) error {
	seqs, err := seqsOf(batch)
	if err != nil {
		return err
	}
	_, err = p.LoRA.Base.ForwardBackward(p.LoRA, seqs, func(logp [][]float32) (float64, [][]float32) {
		l, d, _ := loss(logp, nil)
		return l, d
	})
	if errors.Is(err, nn.ErrNonFinite) {
		p.bad = true
		return nil
	}
	return err
}

// Step implements rl.Policy: the accumulated gradients are clipped and
// applied, then cleared. A NaN or Inf seen since the last step skips it.
func (p *Policy) Step() (rl.StepInfo, error) {
	params := p.LoRA.Params()
	norm := nn.GradNorm(params)
	if p.bad || !finite(norm) {
		p.bad = false
		p.LoRA.Store.ZeroGrad()
		return rl.StepInfo{GradNorm: norm, Skipped: true}, nil
	}
	if p.ClipNorm > 0 && norm > p.ClipNorm {
		nn.ClipGradNorm(params, p.ClipNorm)
	}
	p.Opt.Update(params)
	p.LoRA.Store.ZeroGrad()
	p.version++
	return rl.StepInfo{GradNorm: norm}, nil
}

// Version implements rl.Policy: the number of steps applied.
func (p *Policy) Version() int64 { return p.version }

// SetVersion sets the version, for a policy restored from a checkpoint.
func (p *Policy) SetVersion(v int64) { p.version = v }

func finite(x float64) bool { return x-x == 0 }
