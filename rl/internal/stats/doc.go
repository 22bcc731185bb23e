// Package stats holds the small statistics helpers that package rl and its
// subpackages share (so that the GRPO group advantages and the reward
// normalisation of rl/reward use one definition).
package stats
