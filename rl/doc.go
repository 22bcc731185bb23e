// Package rl trains policies with policy-gradient methods (GRPO, PPO,
// REINFORCE, RLOO), combines multi-objective rewards whose weights change over
// training, and provides prioritized replay (rl/replay, also as a NATS
// service that processes share), gradient compression (rl/gradcomp) and its
// exchange between agents (rl/gradshare) for agents that learn together but
// share no parameters.
//
// A policy is any model, usually from package nn, that returns log-probabilities
// of the actions or tokens it took (the Policy interface). Algorithms never see
// parameters: each expresses its loss as a LossFunc over the per-action
// log-probabilities (and value estimates, for PPO), the policy evaluates it and
// backpropagates, and Step applies the policy's own optimizer. A Trainer's
// Update takes a batch of Samples and runs Schedule.Epochs passes of
// Schedule.MiniBatches optimizer steps over it.
//
// Off-policy samples: every Sample records the Version of the parameters that
// produced it and the log-probabilities it was sampled with. Samples older than
// Schedule.MaxStaleness versions are dropped (Stats.Dropped); the others are
// corrected by the importance ratio π_θ(a)/π_old(a), clipped (GRPO, PPO) or
// truncated (REINFORCE, RLOO). A sample without recorded log-probabilities
// is an error (ErrNoLogProbs) unless it is marked Sample.OnPolicy, which
// makes the current policy's stand in for them (ratio 1).
//
// Subpackages: policies (a classic softmax policy with exact gradients; the
// language-model adapter), reward (scheduled multi-objective rewards and
// novelty), replay (prioritized experience replay), gradcomp (quantised and
// sparsified gradient exchange with error feedback and differential privacy)
// and metrics (CSV/JSON-lines logs, PNG curves, progress bar, profiles).
// Package swarm runs rl's trainers behind its servers.
package rl
