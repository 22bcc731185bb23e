// Command troupe is troupe's command line. Today it runs swarm servers:
//
//	troupe swarm serve --model small --port 10086
//	troupe swarm serve --multi small:10086,medium:10087,lm-tiny:10088
//	troupe swarm models
//
// A served model starts in ENGINE.OFFLINE, as AgentJet's swarm server does;
// a client starts it with sync_train_config + start_engine, or --autostart
// starts it at once. SIGTERM or SIGINT drain the HTTP servers and write a
// final checkpoint when --checkpoint-dir is set; a restarted server resumes
// from it with the same global step.
package main
