// Command translation runs the three-agent English→Chinese translation
// workflow on two swarm servers: agent 1 (small model) translates, agent 2
// (larger model) lists terminology errors as JSON, the client validates that
// list, and agent 3 (small model) writes the final translation; each server trains its model with GRPO on
// its own grader's reward. See README.md and notes/translation.md.
//
//	go run ./examples/translation -quick
//	go run ./examples/translation -steps 20 -out out/translation
package main
