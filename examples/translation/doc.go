// Command translation runs a three-agent English→Chinese translation
// workflow on two swarm servers, each training its own model by GRPO on its
// own grader's reward.
//
// Agent 1 (small model) translates. Agent 2 (larger model) lists the
// terminology errors of that rough translation as JSON; its prompt carries
// the sentence's glossary entries, each marked found or missing by a
// string checker (glossaryHinter). The client validates agent 2's list
// (clientCorrections). Agent 3 (small model again) writes the final
// translation, and the client guards it (guardFinal): agent 1's translation
// is delivered where agent 3 was asked for no edit, did not apply it, or
// rewrote beyond it.
//
// run takes the phases in order: the data (package corpus), both
// supervised warm starts (warm.go), the evaluation before RL (eval.go), the
// two servers and the GRPO rounds (rlphase.go; each task's workflow in
// rollout.go), the evaluation after RL and the report (report.go). -pool
// pools the reports of several RL seeds with a two-level bootstrap.
//
// Hyper-parameters live in Config; -config reads a run file and -set
// changes one key:
//
//	go run ./examples/translation -quick
//	go run ./examples/translation -set steps=20 -out out/translation-short
//	go run ./examples/translation -config out/translation/config.yaml -set rl-seed=2 -out out/t-s2
//	go run ./examples/translation -pool out/t-s1,out/t-s2,out/t-s3 -out out/pooled
package main
