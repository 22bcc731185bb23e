// Package swarm serves one trainable model per swarm server: it exposes the
// model through an OpenAI-compatible chat-completions endpoint, hands each
// episode its own API key, takes the episode's reward when it ends, and trains
// the model with package rl once enough episodes are finished. Its wire
// protocol is that of AgentJet's swarm mode (modelscope/AgentJet,
// ajet/tuner_lib/experimental/swarm_server.py), so existing clients work
// unchanged. The client side drives workflows across several servers and
// reports to each model its own reward, so models of different sizes,
// optimizers and rewards train together while sharing no parameters.
//
// # Endpoints
//
// Swarm protocol (JSON bodies and fields as AgentJet's pydantic models):
//
//	POST /claim_episode        {client_uuid, episode_type: train|eval, discard_episode_timeout, throttle_policy?,
//	                            team_id?, team_size?}  (team episodes: see teams.go and package swarm/team)
//	                           → {success, client_uuid, episode_uuid, openai_base_url, openai_api_key, fail_cause}
//	POST /end_episode          {client_uuid, episode_uuid, task_id, workflow_output: {reward, is_success, metadata, log_metrics}} → {success}
//	POST /abort_episode        same body → {success}
//	POST /can_continue_episode {client_uuid, episode_uuid} → {can_continue}
//	POST /is_episode_claimed   {client_uuid, episode_uuid} → {success, failure_reason}
//	POST /agree_sync_weight    {client_uuid} → {success, failure_reason}
//	GET  /get_engine_status    → {engine_status, engine_status_detail, global_step}
//	POST /sync_train_config    {yaml_as_string}   (admin)
//	POST /sync_train_code      (admin; refused: {success: false, message})
//	POST /start_engine, POST /stop_engine          (admin)
//	POST /get_episode_buffer, GET /get_current_batch_rollout_pool_information
//	                           (episode and client ids for admins only)
//	GET  /get_server_experiment_dir → {server_experiment_dir}
//	GET  /get_verbose_logs     → {entries: [{timestamp, tag, message}]}
//
// OpenAI: POST /v1/chat/completions (n, max_tokens / max_completion_tokens,
// temperature, top_p, stop, seed, logprobs, top_logprobs, stream with
// stream_options.include_usage, tools and tool_choice, response_format
// text, and troupe's assistant_prefix below), GET /v1/models, GET
// /v1/models/{id}. Operations: GET /health, GET /metrics (Prometheus).
// Every path also answers under /t/<admin token>/ (see Security). Unknown
// routes get 404 and wrong methods 405 with Allow, both as JSON errors in
// OpenAI's shape (with FastAPI's "detail" as well).
//
// # Engine
//
// A server starts in ENGINE.OFFLINE; start_engine (or Server.Start) boots
// it (ENGINE.BOOTING loads the last checkpoint) into ENGINE.ROLLING, where
// episodes can be claimed. Every chat completion made with an episode's key
// is recorded under the episode (prompt tokens, sampled tokens, their
// log-probabilities, the parameter version). When the finished train
// episodes satisfy the collection rule (AgentJet's
// swarm_mode_sample_collection_method: enough episodes, enough tasks with
// num_repeat episodes each, or enough such tasks with unequal rewards), the
// engine enters ENGINE.ROLLING_POST (no new claims; open train episodes may
// finish, bounded by DrainTimeout), then ENGINE.WEIGHT_SYNCING, where one
// rl.GRPO step runs on the batch (samples grouped by task_id) and the global
// step grows by one, and returns to ENGINE.ROLLING. The batch is sorted by
// content (task, reward, tokens) first, not left in the order its episodes
// finished, so that a seeded run trains bitwise the same however concurrent
// clients interleave. Eval episodes never
// train. Episodes up to MaxStaleness versions old train off-policy from
// their recorded log-probabilities; staler ones are dropped. A task short
// of its group trains after GroupTimeout, in a partial batch.
//
// The agree-sync-weight collection methods follow AgentJet: a client joins
// the active list when it ends a rewarded train episode (unless it sends
// declare_client_active false) and leaves it after ClientActiveTimeout
// without activity; POST /agree_sync_weight records its vote; the engine
// trains on every finished episode once any (CollectAnyAgree) or all
// (CollectAllAgree) active clients voted, and the weight sync clears the
// list and the votes.
//
// stop_engine closes the open episodes but keeps the finished ones for the
// next start. Every finished episode that is never trained on (stale,
// dummy; without a journal, buffer overflow or still buffered at close;
// journal messages refused as unsigned, forged, malformed or duplicate) is
// counted in swarm_dropped_episodes_total{reason}, logged by id, written to
// DroppedFile and listed by GET /get_training_status.
//
// # Observability
//
// ServerConfig.OnTrainStep receives a TrainStep (rl.Stats, the batch's
// size and reward statistics, the step's duration) after every step. With
// a CheckpointDir (the run directory) each step is appended to
// TrainMetricsFile as one JSON object, and TrainCurvesFile draws the reward
// and loss curves (package rl/metrics).
//
// # Deviations from AgentJet
//
//   - Episodes are created on claim rather than pre-registered by a rollout
//     engine; "No available episodes to claim" means MaxOpenEpisodes is
//     reached. A client past MaxOpenPerClient gets 429 with Retry-After,
//     and discard_episode_timeout is bounded by MaxDiscardTimeout (400).
//   - Open episodes survive a weight sync (AgentJet discards them); staleness
//     is bounded by MaxStaleness instead.
//   - Errors: malformed requests get 400 naming the field (FastAPI would send
//     422); end_episode of an unknown episode gets 404, of another client's
//     403, a duplicate 409, a reclaimed (too late) one 410 (AgentJet: 400 and
//     404). abort_episode of another client's open episode gets 403.
//   - A workflow_output.reward that is missing, null, NaN, infinite or
//     beyond ±MaxAbsReward is refused with 400; a list of rewards is
//     averaged.
//   - Pool views hide episode and client ids from non-admins, so AgentJet's
//     client throttle policy, which compares client ids, only throttles
//     when the client uses the admin base URL (or the server has no token).
//   - sync_train_code cannot run AgentJet's Python trainer and says so.
//   - sync_train_config reads a YAML subset: the ajet keys and troupe's
//     own listed at trainconfig.Config.ApplyYAML.
//   - The OpenAI endpoint (tools, streaming, work bounds, log-probs,
//     forced prefixes) is package openai's handler: see its documentation.
//     An episode records at most MaxEpisodeTokens tokens (then 429).
//
// # Security
//
// An episode belongs to whoever holds its id (a random UUID, told only to
// the claimant and, in the pool views, to admins): end_episode and
// abort_episode need it and the client_uuid. Episode keys carry 256 random
// bits from crypto/rand, are compared with crypto/subtle in constant time
// and stop working when their episode ends, is aborted or reclaimed.
//
// Admin endpoints need ServerConfig.AdminToken when one is set, sent as
// "Authorization: Bearer <token>", as X-Admin-Token, or as the path prefix
// /t/<token>/: AgentJet's client, which sends no headers, is given the base
// URL http://host:port/t/<token> and works unchanged (it puts that base in
// front of the /v1 of openai_base_url too). Tokens are compared on their
// SHA-256 digests in constant time and never appear in answers or logs.
// Without a token the admin endpoints are open, so CheckListen (and
// troupe swarm serve) refuse to listen beyond loopback without one, and
// httpx.Guard and httpx.RequireJSON keep other web pages out (Host, Origin,
// JSON only). Journaled episodes are signed (package swarm/record).
//
// HTTPServer sets read-header, read, write and idle timeouts: a body
// trickled byte by byte is cut by ReadTimeout, and since the write deadline
// is renewed per streamed chunk, a client that stops reading is cut after
// WriteTimeout, its completion unrecorded and its episode left to be
// reclaimed when idle. Request bodies are limited (413), and handlers
// validate all input; a recover middleware exists as a last resort only (the
// fuzz tests drive the handlers without it).
package swarm
