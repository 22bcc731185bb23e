// Command translation runs a three-agent English→Chinese translation
// workflow on two swarm servers, each training its own model by GRPO on its
// own grader's reward. Agent 1 (small model) translates; agent 2 (larger
// model) lists the terminology errors of that rough translation as JSON,
// helped by the sentence's glossary entries (glossaryHinter); agent 3 (small
// model again) writes the final translation. The client validates agent 2's
// list (clientCorrections) and guards agent 3's answer (guardFinal).
//
// run takes the phases in order: the data (package corpus), both supervised
// warm starts (warm.go, warmdata.go), the evaluation (eval.go), the servers
// and GRPO rounds (rlphase.go, rollout.go), the evaluation after RL and the
// report (report.go); -pool pools several RL seeds' reports (pool.go).
// Hyper-parameters live in Config: -config reads a run file, -set changes
// one key. README.md shows how to run it.
package main
