// Command translation runs a three-agent English→Chinese translation
// workflow on two swarm servers, each training its own model by GRPO on its
// own grader's reward. Agent 1 (small model) translates; agent 2 (larger
// model) lists the rough translation's terminology errors as JSON, helped by
// a glossary hint (glossaryHint); agent 3 (small model) writes the final
// translation. The client validates agent 2's list (clientCorrections) and
// guards agent 3's answer (guardFinal).
//
// run takes the phases in order: the data (package corpus), the supervised
// warm starts (warm.go, warmdata.go), the evaluation (eval.go), the servers
// and GRPO rounds (rlphase.go, rollout.go), the evaluation after RL and the
// report (report.go); -pool pools runs (pool.go). Hyper-parameters live in
// Config. README.md shows how to run it.
package main
