// Command reward-schedules is a notebook-style research script: it compares
// constant, scheduled (linear, cosine, step) and adaptive reward weights on a
// task with conflicting objectives and writes a Markdown report with a table
// and PNG plots.
//
//	go run ./examples/notebooks/reward-schedules [-out out/notebooks/reward-schedules] [-steps 200] [-seed 1]
//
// # The task
//
// A softmax policy (package rl/policies) writes sequences of 6 tokens from a
// vocabulary of 8, one decision per position. Three reward components pull
// in different directions:
//
//   - task: mean payoff of the tokens, 1.0 for token 0 falling to 0 for
//     token 7 — alone, it is maximised by repeating token 0;
//   - novelty (innovation): 1 − the largest bigram Jaccard overlap with the
//     last 64 outputs — it pays for variety, which costs task payoff;
//   - safety (stability): minus the fraction of token 0, which is "risky" —
//     the best-paying token is the one safety forbids.
//
// The compromise the schedules aim at is to explore early (novelty weight
// high) and settle on safe, well-paying outputs late (token 1, payoff 0.8, no
// violations). Every run is GRPO with the same seed, the components are
// normalised by running mean/std (package rl/reward) and every weight and
// component is logged per step (package rl/metrics).
package main
