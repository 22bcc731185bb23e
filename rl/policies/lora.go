package policies

import (
	"errors"
	"fmt"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/rl"
)

// LoRA adapts a pretrained model's LoRA adapter (package nn/hf) to
// rl.Policy: a Sample's Prompt conditions the model, its Actions are the
// generated tokens, and only the adapter trains, with its own optimizer;
// the base is never written, so several LoRA policies can share one base.
// LoRA has no value head (GRPO, REINFORCE and RLOO need none). Not safe
// for concurrent use.
type LoRA struct {
	Adapter *hf.LoRA
	Opt     nn.Optimizer
	// ClipNorm clips the adapter's global gradient norm (0: none).
	ClipNorm float64
	version  int64
	bad      bool // a non-finite loss was seen since the last step
}

// NewLoRA returns a policy training ad with opt.
func NewLoRA(ad *hf.LoRA, opt nn.Optimizer, clipNorm float64) *LoRA {
	return &LoRA{Adapter: ad, Opt: opt, ClipNorm: clipNorm}
}

func seqsOf(batch []rl.Sample) ([]hf.Seq, error) {
	out := make([]hf.Seq, len(batch))
	for i, s := range batch {
		if len(s.Prompt) == 0 {
			return nil, fmt.Errorf("policies: LoRA: sample %d has an empty prompt", i)
		}
		out[i] = hf.Seq{Prompt: s.Prompt, Target: s.Actions}
	}
	return out, nil
}

// LogProbs implements rl.Policy.
func (p *LoRA) LogProbs(batch []rl.Sample) ([][]float32, error) {
	seqs, err := seqsOf(batch)
	if err != nil {
		return nil, err
	}
	return p.Adapter.Base.TokenLogProbs(p.Adapter, seqs)
}

// ForwardBackward implements rl.Policy (no value head). A non-finite loss
// is not an error: the following Step is skipped instead.
func (p *LoRA) ForwardBackward(batch []rl.Sample, loss rl.LossFunc) error {
	seqs, err := seqsOf(batch)
	if err != nil {
		return err
	}
	_, err = p.Adapter.Base.ForwardBackward(p.Adapter, seqs, func(logp [][]float32) (float64, [][]float32) {
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
func (p *LoRA) Step() (rl.StepInfo, error) {
	params := p.Adapter.Params()
	norm := nn.GradNorm(params)
	if p.bad || norm-norm != 0 {
		p.bad = false
		p.Adapter.Store.ZeroGrad()
		return rl.StepInfo{GradNorm: norm, Skipped: true}, nil
	}
	if p.ClipNorm > 0 && norm > p.ClipNorm {
		nn.ClipGradNorm(params, p.ClipNorm)
	}
	p.Opt.Update(params)
	p.Adapter.Store.ZeroGrad()
	p.version++
	return rl.StepInfo{GradNorm: norm}, nil
}

// Version implements rl.Policy: the number of steps applied.
func (p *LoRA) Version() int64 { return p.version }

// SetVersion sets the version, for a policy restored from a checkpoint.
func (p *LoRA) SetVersion(v int64) { p.version = v }

// LoRABase is the frozen base model of LoRA adapters as an rl.Policy: it
// scores actions with no adapter, the reference of a KL penalty to the
// base (rl.KLPenalty.Ref). ForwardBackward and Step are errors.
type LoRABase struct{ Model *hf.Model }

// LogProbs implements rl.Policy.
func (b LoRABase) LogProbs(batch []rl.Sample) ([][]float32, error) {
	seqs, err := seqsOf(batch)
	if err != nil {
		return nil, err
	}
	return b.Model.TokenLogProbs(nil, seqs)
}

// ForwardBackward implements rl.Policy: the base is frozen.
func (LoRABase) ForwardBackward([]rl.Sample, rl.LossFunc) error {
	return errors.New("policies: LoRABase: the base model is frozen")
}

// Step implements rl.Policy: the base is frozen.
func (LoRABase) Step() (rl.StepInfo, error) {
	return rl.StepInfo{}, errors.New("policies: LoRABase: the base model is frozen")
}

// Version implements rl.Policy: always 0.
func (LoRABase) Version() int64 { return 0 }

var (
	_ rl.Policy = (*LoRA)(nil)
	_ rl.Policy = LoRABase{}
)
