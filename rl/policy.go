package rl

// Sample is one trajectory of a policy: the observation or prompt it was
// conditioned on, the actions (or tokens) it took, and what they earned.
type Sample struct {
	// TaskID groups samples of the same task (GRPO and RLOO baselines).
	TaskID string
	// Obs is the observation of a classic policy; nil for language models.
	Obs []float32
	// Prompt is the conditioning token sequence of a language model.
	Prompt []int
	// Actions are the actions or sampled tokens, in order.
	Actions []int
	// LogProbs are the log-probabilities of Actions under the parameters
	// that sampled them (behaviour policy), one per action. A Trainer
	// refuses a sample without them unless OnPolicy is set.
	LogProbs []float32
	// OnPolicy says that LogProbs is deliberately left nil: the trainer
	// takes the current policy's log-probabilities of Actions as the
	// behaviour's, so the importance ratio of the sample's first step is 1.
	// It is for actions no sampler scored, such as a forced prefix that a
	// client chose (swarm's assistant_prefix). Without it, a sample whose
	// LogProbs is nil is an error naming the sample.
	OnPolicy bool
	// Version is the parameter version that sampled the trajectory.
	Version int64
	// Temperature is the sampling temperature the Actions were drawn at
	// (0: not recorded, or 1). Policies that score at it (rl/policies.LM
	// with Tempered) then evaluate the tempered distribution the samples
	// came from, and LogProbs, when set, must be of that distribution.
	Temperature float64
	// Reward is the scalar return of the whole trajectory.
	Reward float64
	// StepRewards optionally gives a reward per action (PPO with GAE); when
	// nil, Reward is credited to the last action.
	StepRewards []float64
}

// LossFunc is a loss over per-action log-probabilities. It receives, for each
// sample of a batch, the log-probabilities of its actions under the current
// parameters, and the value estimates per action when the policy has a value
// head (values is nil otherwise). It returns the scalar loss and its gradient
// with respect to every log-probability and value (dvalues may be nil).
type LossFunc func(logp, values [][]float32) (loss float64, dlogp, dvalues [][]float32)

// StepInfo reports one optimizer step.
type StepInfo struct {
	GradNorm float64 // global gradient norm before clipping
	Skipped  bool    // true when a NaN or Inf was found and the step was not applied
}

// Policy is a differentiable stochastic policy with its own parameters and
// optimizer. Policies of different agents share nothing.
type Policy interface {
	// LogProbs evaluates the log-probabilities of each sample's actions under
	// the current parameters, without gradients.
	LogProbs(batch []Sample) ([][]float32, error)
	// ForwardBackward evaluates the log-probabilities (and values) of each
	// sample's actions under the current parameters, calls loss once with
	// them, and accumulates the gradient of the returned loss into the
	// parameters' gradients.
	ForwardBackward(batch []Sample, loss LossFunc) error
	// Step applies the accumulated gradients with the policy's optimizer,
	// clears them and increments the parameter version.
	Step() (StepInfo, error)
	// Version is the current parameter version.
	Version() int64
}
