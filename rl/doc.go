// Package rl trains policies with policy-gradient methods (GRPO, PPO,
// REINFORCE, RLOO), combines multi-objective rewards whose weights change over
// training, and provides prioritized replay and gradient compression for agents
// that learn together but share no parameters.
//
// A policy is any model, usually from package nn, that returns log-probabilities
// of the actions or tokens it took. Package swarm runs rl's trainers behind its
// servers.
package rl
