// Command troupe is troupe's command line:
//
//	troupe swarm serve --model small --port 10086
//	troupe swarm serve --multi small:10086,medium:10087,lm-tiny:10088
//	troupe swarm serve --model-dir D [--lora A[,B]] [--agents name:port,...]
//	troupe swarm models
//	troupe swarm frontends --nats URL
//	troupe lm logprobs|tokenize|render|generate|init|export ...
//	troupe nats --data-dir D [--auth-file F]
//	troupe version
//
// The commands are one tree (commands in main.go) parsed by one path
// (runLeaf in cli.go): flags may come before or after a command's
// positional arguments, "-h" on any command prints its flags by group and
// its examples and exits 0, a usage mistake exits 2, a failure 1.
//
// A served model starts in ENGINE.OFFLINE, as AgentJet's swarm server does;
// a client starts it with sync_train_config + start_engine, or --autostart
// starts it at once. The ports are bound before the models load (requests
// get 503 with Retry-After meanwhile). Beyond loopback (--host) an admin
// token is required, from TROUPE_ADMIN_TOKEN or --admin-token-file; clients
// send it as "Authorization: Bearer <token>" or use the base URL
// http://host:port/t/<token>. --config reads AgentJet's training YAML, whose
// troupe.<flag_name> keys set the flags the command line leaves unset.
// --log-level and --log-format (text or json) shape the log on stderr;
// --pprof serves net/http/pprof on a separate loopback address. SIGTERM or
// SIGINT drain the HTTP servers and write a final checkpoint when
// --checkpoint-dir is set; a restarted server resumes from it with the same
// global step.
package main
