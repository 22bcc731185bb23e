package grpo

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/troupe-ml/troupe/nn/hf"
)

// Example is one row of a dataset: the conversation a model answers and,
// optionally, a reference that reward functions may compare with.
type Example struct {
	// ID names the example in logs (its index in the dataset when empty).
	ID string
	// Prompt is the conversation; the tokenizer's chat template renders it
	// with a generation prompt.
	Prompt []hf.Message
	// Answer is an optional reference answer.
	Answer string
	// Meta holds further fields for reward functions.
	Meta map[string]string
}

// Completion is one sampled (or, in evaluation, greedy) answer, as reward
// functions see it.
type Completion struct {
	// Example is the dataset row that prompted it.
	Example Example
	// Text is the answer decoded without special tokens.
	Text string
	// Tokens are the generated ids, with the stop token when the model
	// stopped.
	Tokens []int
	// Stopped is true when the model ended its turn with a stop token,
	// false when MaxTokens cut it.
	Stopped bool
}

// Reward is a named reward function. An agent's reward of a completion is
// the Weight-weighted sum of its Rewards; each one's mean is logged.
type Reward struct {
	// Name keys the reward's mean in Metrics.Rewards.
	Name string
	// Weight multiplies the reward in the sum (1 when zero).
	Weight float64
	// Func scores one completion. A NaN or infinite score is an error.
	Func func(c Completion) float64
}

// Agent is one member of the team: its own LoRA adapter over the shared
// base, its reward functions and, optionally, its own datasets.
type Agent struct {
	// Name names the agent in metrics and its checkpoint folders; it must
	// be a plain file name, unique in the team.
	Name string
	// LoRA is the adapter to train; nil makes one from Config.LoRA (seeded
	// with Config.LoRA.Seed plus the agent's index).
	LoRA *hf.LoRA
	// Rewards score the agent's completions (at least one).
	Rewards []Reward
	// Train and Eval replace Config.Train and Config.Eval for this agent
	// when not nil.
	Train, Eval []Example
}

// The defaults of Config's zero fields.
const (
	DefaultSteps          = 100
	DefaultPromptsPerStep = 4
	DefaultGroupSize      = 8
	DefaultMaxTokens      = 64
	DefaultTemperature    = 1.0
	DefaultLR             = 1e-5
	DefaultClipNorm       = 1.0
	DefaultClipEps        = 0.2
	DefaultEvalEvery      = 10
	DefaultSaveEvery      = 50
)

// Config configures a Trainer. Zero fields take the Default constants;
// KLCoef's zero is no penalty, as in TRL.
type Config struct {
	// Model is the frozen base every agent's adapter adapts.
	Model *hf.Model
	// Tokenizer renders prompts with the model's chat template and gives
	// the stop tokens.
	Tokenizer *hf.Tokenizer
	// Agents are the team (at least one).
	Agents []Agent
	// Train are the training prompts, Eval the held-out ones (may be
	// empty: no evaluation), for agents without their own.
	Train, Eval []Example

	// Steps is the number of training steps (DefaultSteps); each step
	// trains every agent once.
	Steps int
	// PromptsPerStep is the number of examples per agent per step
	// (DefaultPromptsPerStep), GroupSize the completions sampled of each
	// (DefaultGroupSize): GRPO's group.
	PromptsPerStep, GroupSize int
	// MaxTokens bounds each completion, in training and evaluation
	// (DefaultMaxTokens).
	MaxTokens int
	// Temperature of sampling (DefaultTemperature). The recorded
	// behaviour log-probabilities are those of temperature 1, which the
	// policy scores.
	Temperature float64
	// LR is AdamW's learning rate (DefaultLR), without weight decay;
	// ClipNorm clips each adapter's gradient norm (DefaultClipNorm).
	LR, ClipNorm float64
	// ClipEps is the clip range of the importance ratio (DefaultClipEps).
	ClipEps float64
	// KLCoef is β of the k3 penalty to the base model (the adapter
	// switched off); 0: none, and no KL is measured.
	KLCoef float64
	// LoRA configures the adapters of agents without one (hf's defaults
	// for its zero fields).
	LoRA hf.LoRAConfig
	// EvalEvery evaluates every agent on its Eval examples every so many
	// steps, before the first and after the last (DefaultEvalEvery).
	EvalEvery int
	// SaveEvery writes a checkpoint every so many steps and after the last
	// (DefaultSaveEvery); it needs OutDir.
	SaveEvery int
	// OutDir receives metrics.jsonl, the checkpoints, the final adapters
	// and reward.png; empty: nothing is written.
	OutDir string
	// Resume continues from the latest checkpoint in OutDir, if there is
	// one.
	Resume bool
	// BaseName is base_model_name_or_path in the adapters'
	// adapter_config.json.
	BaseName string
	// Seed seeds the prompt order and sampling.
	Seed uint64
	// Log receives one progress line per step and evaluation (os.Stderr
	// when nil; io.Discard silences it).
	Log io.Writer
	// OnStep, when set, receives the metrics of every agent after each
	// training step and evaluation.
	OnStep func([]Metrics)
}

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	deff := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Steps, DefaultSteps)
	def(&c.PromptsPerStep, DefaultPromptsPerStep)
	def(&c.GroupSize, DefaultGroupSize)
	def(&c.MaxTokens, DefaultMaxTokens)
	def(&c.EvalEvery, DefaultEvalEvery)
	def(&c.SaveEvery, DefaultSaveEvery)
	deff(&c.Temperature, DefaultTemperature)
	deff(&c.LR, DefaultLR)
	deff(&c.ClipNorm, DefaultClipNorm)
	deff(&c.ClipEps, DefaultClipEps)
	if c.Log == nil {
		c.Log = os.Stderr
	}
	return c
}

// validate checks a config with its defaults set.
func (c Config) validate() error {
	switch {
	case c.Model == nil || c.Tokenizer == nil:
		return fmt.Errorf("grpo: Config needs a Model and a Tokenizer")
	case !c.Tokenizer.HasChatTemplate():
		return fmt.Errorf("grpo: the tokenizer has no chat template to render the prompts")
	case len(c.Tokenizer.StopTokens()) == 0:
		return fmt.Errorf("grpo: the tokenizer has no stop tokens (eos_token): completions would never end a turn")
	case len(c.Agents) == 0:
		return fmt.Errorf("grpo: Config has no Agents")
	case c.Steps < 0 || c.PromptsPerStep < 0 || c.GroupSize < 0 || c.MaxTokens < 0 || c.EvalEvery < 0 || c.SaveEvery < 0:
		return fmt.Errorf("grpo: Steps, PromptsPerStep, GroupSize, MaxTokens, EvalEvery and SaveEvery must not be negative")
	case c.GroupSize < 2:
		return fmt.Errorf("grpo: GroupSize is %d: GRPO compares at least two completions of a prompt", c.GroupSize)
	case !(c.Temperature > 0) || math.IsInf(c.Temperature, 0):
		return fmt.Errorf("grpo: Temperature %g: sampling needs a positive temperature", c.Temperature)
	case c.KLCoef < 0 || math.IsNaN(c.KLCoef):
		return fmt.Errorf("grpo: KLCoef %g must not be negative", c.KLCoef)
	case c.Resume && c.OutDir == "":
		return fmt.Errorf("grpo: Resume needs OutDir")
	}
	if v := c.Tokenizer.VocabSize(); v > c.Model.Config.Vocab {
		return fmt.Errorf("grpo: the tokenizer has %d tokens, the model's vocabulary only %d", v, c.Model.Config.Vocab)
	}
	names := map[string]bool{}
	for i, a := range c.Agents {
		if a.Name == "" || a.Name == "." || a.Name == ".." || strings.ContainsAny(a.Name, `/\`) {
			return fmt.Errorf("grpo: agent %d: name %q is not a plain file name", i, a.Name)
		}
		if names[a.Name] {
			return fmt.Errorf("grpo: two agents are named %q", a.Name)
		}
		names[a.Name] = true
		if len(a.Rewards) == 0 {
			return fmt.Errorf("grpo: agent %q has no reward functions", a.Name)
		}
		rn := map[string]bool{}
		for j, r := range a.Rewards {
			if r.Name == "" || r.Func == nil {
				return fmt.Errorf("grpo: agent %q: reward %d needs a Name and a Func", a.Name, j)
			}
			if rn[r.Name] {
				return fmt.Errorf("grpo: agent %q has two rewards named %q", a.Name, r.Name)
			}
			rn[r.Name] = true
		}
		if a.LoRA != nil && a.LoRA.Base != c.Model {
			return fmt.Errorf("grpo: agent %q: its adapter was made for another base model", a.Name)
		}
		train := a.Train
		if train == nil {
			train = c.Train
		}
		if len(train) == 0 {
			return fmt.Errorf("grpo: agent %q has no training examples", a.Name)
		}
	}
	return nil
}
