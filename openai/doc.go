// Package openai is troupe's OpenAI-compatible API over an openai.Model:
// the Handler of POST /v1/chat/completions and /v1/completions that a
// swarm server puts behind each episode's key, and Server, the plain
// inference server of troupe serve (/v1/models, both completion endpoints,
// a model selected by the request's model field, nothing recorded).
//
// # Requests
//
// n, max_tokens / max_completion_tokens, temperature, top_p, stop, seed,
// logprobs, top_logprobs, stream with stream_options.include_usage, tools
// and tool_choice, response_format text, and troupe's assistant_prefix
// below. Work bounds: n ≤ Config.MaxN, max_tokens within the host's limit
// (Call.MaxResponseTokens) and n × max_tokens ≤ Config.MaxRequestTokens,
// each a 400 naming the field; without max_tokens the n choices share
// MaxRequestTokens. Choice i of a request with seed S samples from
// PCG(S, i).
//
// Log-probabilities are those of the model at temperature 1 without top-p
// (the behaviour log-probs training needs), also when sampling used another
// temperature; the end-of-sequence token is not listed. Each generation
// carries the temperature it was drawn at, so that a trainer may score it
// under the tempered distribution instead (rl/policies.LM.Tempered).
//
// # Streaming
//
// Chunk framing and fields follow OpenAI's. Tokens are streamed as they
// are sampled. A chunk holds whole UTF-8 characters and never text that may
// begin a stop sequence, so the deltas concatenate to the non-streamed
// content. A completion is recorded (Call.Done) only if sampling finished
// while the client was still connected, and before [DONE] is sent; a client
// that disconnects mid-stream stops the sampling and leaves no record, and
// a client that stops reading has its generation stopped once
// Config.MaxStreamBacklog tokens wait for it.
//
// # Tool calls
//
// A request with "tools" is rendered by the model's chat template (refused
// with 400 when the template cannot render tools); tool_choice "auto" and
// "none" are honoured, "required" and a named function are refused with 400
// (sampling is not constrained), as are response_format json_object and
// json_schema. Assistant messages may carry tool_calls and "tool" messages
// need tool_call_id. Answers in the Hermes/Qwen form <tool_call>{"name":
// ..., "arguments": {...}}</tool_call> come back as tool_calls with
// finish_reason "tool_calls" when every call is complete and names a
// declared tool (otherwise the answer stays text); the message content is
// the text before the first call. Streams hold the markup back and send the
// calls in one delta before the finish chunk.
//
// # Forced prefixes
//
// A chat request may carry "assistant_prefix": a string the answer starts
// with, forced rather than sampled (troupe's extension, not OpenAI's; vLLM's
// continue_final_message and Anthropic's prefill play the same part). The
// model continues after it, and the choice's content is that continuation
// alone. A swarm episode records one sample whose actions are the prefix's
// tokens and nothing else, with no behaviour log-probabilities (the
// trainer computes them: the importance ratio is 1); the continuation only
// scores the prefix. A client can so roll out every branch of a decision
// from the same prompt and report each branch's outcome as its episode's
// reward, and GRPO credits the decision alone: the "vine" rollouts of
// Schulman et al. 2015 ("Trust Region Policy Optimization", §5.2). It
// needs n = 1, no streaming, a model that implements TextEncoder, and
// fewer prefix tokens than max_tokens (which counts them).
//
// "assistant_context" (with assistant_prefix) is answer text given before
// the prefix: it is appended to the prompt, in the recorded sample too, so
// the sample's action is the prefix taken after that context. A client can
// so branch at any position of an answer (the intermediate-state rollouts
// of VinePPO, Kazemnejad et al. 2024). The prompt limit counts the context.
package openai
