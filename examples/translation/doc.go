// Command translation runs the three-agent English→Chinese translation
// workflow on two swarm servers. Agent 1 (small model) translates, agent 2
// (larger model) lists terminology errors as JSON, and the client validates
// that list (clientCorrections). Agent 3 (small model) writes the final
// translation, and the client guards it (guardFinal): agent 1's translation is
// delivered where agent 3 was asked for no edit, did not apply it, or rewrote
// beyond it. Each server trains its model with GRPO on its own grader's reward.
// Agent 2's prompt carries the sentence's glossary entries, their English
// quoted so that the pointer head can copy the term whole (-hint-quotes), each
// with a string checker's verdict on the rough translation (-hint-marks);
// its sampled answers do not train their first token (-vine-mask).
// run takes the phases in order: the data (options.tasks), both warm starts
// (options.warmStarts, warm.go), the evaluation before RL (evaluate), the
// two servers (options.startServers), the GRPO rounds (options.rlPhase, in
// rlphase.go; each task's workflow in rollout.go), the evaluation after RL
// and the report (report.go).
// -pool pools the reports of several RL seeds. -calibration measures agent
// 2's first decision ("[]" or a list) against a bias on "[]", greedy and
// sampled, before and after RL (calibrate); -vine-large adds branch
// rollouts of that decision to agent 2's GRPO groups (vineRollout, weighted
// by pairWeight), and -vine-mask (on) leaves the decision to them alone
// (firstAsContext); -branch-large branches agent 2's greedy answer at the
// token that names its first term (branchRollout, branch.go, through the
// swarm server's assistant_context). -rl-holdout draws RL's tasks from train sentences held
// out of agent 2's warm start (heldOut), -rl-split from ones held out of
// every warm start, and -rl-crossfit from ones that every warm start keeps but
// that agents 2 and 3 see in RL translated by a second small model trained
// without them (crossFit). -eval-split train evaluates on train sentences, to
// compare RL's inputs with held-out ones. See README.md and
// notes/translation.md.
//
//	go run ./examples/translation -quick
//	go run ./examples/translation -steps 20 -out out/translation
//	go run ./examples/translation -pool out/a,out/b,out/c -out out/pooled
//	go run ./examples/translation -eval-split val -calibration -out out/cal
package main
