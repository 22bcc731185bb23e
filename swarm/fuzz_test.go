package swarm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/swarm/record"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// fuzzServer is a rolling server with one open episode. Fuzz targets call
// s.mux directly, without the recover middleware, so any panic in a
// handler fails the fuzz run.
func fuzzServer(f *testing.F) (*Server, string, string, string) {
	m, _ := tabular.NewPreset("tiny")
	tc := testTrainConfig(1, 1)
	tc.MaxOpenEpisodes = 512
	tc.MaxResponseTokens = 16
	s, err := NewServer(ServerConfig{Model: m, Train: tc, Logger: quietLog, MaxBodyBytes: 64 << 10, ReapInterval: 50 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	s.Start()
	f.Cleanup(func() { s.Close() })
	id, key := fuzzClaim(s)
	if key == "" {
		f.Fatal("claim failed")
	}
	return s, "fz", id, key
}

// fuzzClaim claims a train episode for client "fz", starting the engine
// first if a fuzzed stop_engine stopped it; it returns empty strings when
// the engine cannot roll.
func fuzzClaim(s *Server) (id, key string) {
	if st, _, _ := s.Status(); st == StatusOffline {
		s.Start()
	}
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, httptest.NewRequest("POST", "/claim_episode", strings.NewReader(`{"client_uuid":"fz","episode_type":"train","discard_episode_timeout":3000}`)))
	for _, part := range strings.Split(rec.Body.String(), `"`) {
		if strings.HasPrefix(part, keyPrefix) {
			key = part
			id, _, _ = strings.Cut(strings.TrimPrefix(part, keyPrefix), ".")
		}
	}
	return id, key
}

func serveNoRecover(t *testing.T, s *Server, method, path string, body []byte, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("%s %s %q: status %d: %s", method, path, body, rec.Code, rec.Body.String())
	}
	return rec
}

var swarmPaths = []string{"/claim_episode", "/end_episode", "/abort_episode", "/can_continue_episode", "/is_episode_claimed",
	"/sync_train_config", "/get_episode_buffer", "/agree_sync_weight", "/sync_train_code", "/get_verbose_logs", "/stop_engine", "/start_engine"}

// swarmGetPaths are the GET endpoints, called after every fuzzed POST.
var swarmGetPaths = []string{"/get_engine_status", "/get_current_batch_rollout_pool_information", "/get_server_experiment_dir",
	"/get_verbose_logs", "/v1/models", "/v1/models/tiny", "/health", "/metrics"}

// FuzzSwarmEndpoints throws arbitrary bodies at the episode endpoints. The
// placeholder EPID in a body is replaced by the open episode's id so that
// the fuzzer reaches the paths behind the lookup.
func FuzzSwarmEndpoints(f *testing.F) {
	s, client, id, _ := fuzzServer(f)
	seeds := []string{
		`{"client_uuid": "fz", "episode_type": "train", "discard_episode_timeout": 240.0, "throttle_policy": {"current_task_id": "t"}}`,
		`{"client_uuid": "fz", "episode_uuid": "EPID", "task_id": "t", "workflow_output": {"reward": 1.0, "is_success": true, "metadata": {"task_id": "t"}, "log_metrics": {"a": 1}}}`,
		`{"client_uuid": "fz", "episode_uuid": "EPID", "task_id": "t", "workflow_output": {"reward": [1, 2e308, -1], "metadata": {"task_id": 5}}}`,
		`{"client_uuid": "fz", "episode_uuid": "EPID", "task_id": "t", "workflow_output": {"reward": NaN}}`,
		`{"client_uuid": "x", "episode_uuid": "EPID", "unregister_if_not_claimed": true}`,
		`{"yaml_as_string": "ajet:\n  data:\n    train_batch_size: 2\n"}`,
		`{"yaml_as_string": "ajet:\n  swarm_mode_sample_collection_method: rollout_until_any_client_agree_sync_weight\n"}`,
		`{"client_uuid": "fz"}`, `{"client_uuid": 7}`, "PK\x03\x04ajet/",
		`{"client_uuid": "fz", "episode_uuid": "EPID", "task_id": "t", "workflow_output": {"reward": 1e300}, "declare_client_active": false}`,
		`[]`, `null`, `{"client_uuid": null}`, `{"episode_uuid": {"a": []}}`, "\x00\xff",
	}
	for i, sd := range seeds {
		f.Add(uint8(i), []byte(sd))
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		if s.OpenEpisodes() == 0 {
			if nid, _ := fuzzClaim(s); nid != "" {
				id = nid
			}
		}
		body = bytes.ReplaceAll(body, []byte("EPID"), []byte(id))
		body = bytes.ReplaceAll(body, []byte(`"fz"`), []byte(`"`+client+`"`))
		serveNoRecover(t, s, "POST", swarmPaths[int(which)%len(swarmPaths)], body, nil)
		serveNoRecover(t, s, "GET", swarmGetPaths[int(which)%len(swarmGetPaths)], nil, nil)
	})
}

// FuzzRoutes sends arbitrary methods and paths, with and without an admin
// token prefix, through the token-prefix layer and the router (without the
// recover middleware): JSON answers, no 5xx, and the token never echoed.
func FuzzRoutes(f *testing.F) {
	m, _ := tabular.NewPreset("tiny")
	const tok = "fuzz-admin-token"
	s, err := NewServer(ServerConfig{Model: m, Train: testTrainConfig(1, 1), Logger: quietLog, AdminToken: tok})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	h := s.tokenPrefix(s.mux)
	for _, sd := range []struct{ method, path string }{
		{"GET", "/nope"}, {"POST", "/get_engine_status"}, {"GET", "/t/" + tok + "/get_engine_status"}, {"POST", "/t/" + tok + "/t/" + tok + "/stop_engine"},
		{"GET", "/t/wrong/health"}, {"PUT", "/v1/models/x"}, {"GET", "/t/"}, {"GET", "/t//"}, {"DELETE", "/v1/chat/completions"}, {"GET", "/v1/models/%2F"},
		{"GET", "/t/" + tok + "/x" + tok}, {"0", "/0" + tok}, {tok, "/x"}, {"GET", "/t/" + tok},
	} {
		f.Add(sd.method, sd.path, []byte(`{}`))
	}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		req, err := http.NewRequest(method, "http://x/", bytes.NewReader(body))
		if err != nil {
			return // not a valid method token
		}
		req.URL.Path = "/" + strings.TrimPrefix(path, "/")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %q: %d %s", method, path, rec.Code, rec.Body.String())
		}
		// An error may echo the caller's own method and path (what is
		// left once the server stripped the /t/<token>/ prefixes): the
		// token must appear in the answer only if the caller wrote it there.
		rest := req.URL.Path
		for {
			after, ok := strings.CutPrefix(rest, tokenPrefixPath)
			if !ok {
				break
			}
			if pt, tail, _ := strings.Cut(after, "/"); pt == tok {
				rest = "/" + tail
				continue
			}
			break
		}
		if !strings.Contains(method+" "+rest, tok) && strings.Contains(rec.Body.String(), tok) {
			t.Fatalf("%s %q: the answer echoes the admin token: %s", method, path, rec.Body.String())
		}
		if st, _, _ := s.Status(); st == StatusOffline {
			s.Start()
		}
	})
}

// FuzzChatCompletions throws arbitrary bodies at /v1/chat/completions with
// a valid episode key.
func FuzzChatCompletions(f *testing.F) {
	s, _, id, key := fuzzServer(f)
	s.model = toolTemplate{s.model}
	seeds := []string{
		`{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "n": 2, "seed": 3, "logprobs": true, "top_logprobs": 3, "stop": ["a", "b"], "temperature": 0.7, "top_p": 0.5}`,
		`{"messages": [{"role": "system", "content": [{"type": "text", "text": "s"}]}, {"role": "assistant", "content": null}], "stream": true, "stream_options": {"include_usage": true}}`,
		`{"messages": [{"role": "user", "content": "x"}], "temperature": 0, "max_completion_tokens": 16, "stop": "\n"}`,
		`{"messages": [{"role": "user", "content": "é"}], "stream": true, "n": 3, "max_tokens": 5, "stop": ["\u00e9", "ab"], "logprobs": true, "top_logprobs": 1, "temperature": 2}`,
		`{"messages": [{"role": "user", "content": "x"}], "n": 16, "max_completion_tokens": 16, "stream": true, "stop": "\ufffd"}`,
		`{"messages": [{"role": "user", "content": "x"}], "assistant_prefix": "ab\u00e9", "max_tokens": 4, "temperature": 0, "logprobs": true, "stop": ["b"]}`,
		`{"messages": [{"role": "user", "content": "x"}], "assistant_prefix": "", "n": 2}`, `{"messages": [{"role": "user", "content": "x"}], "assistant_prefix": 7}`,
		`{"messages": [{"role": "user", "content": "x"}], "assistant_prefix": "a", "assistant_context": "c\u00e9d", "max_tokens": 3}`,
		`{"messages": [{"role": "user", "content": "x"}], "assistant_context": "cd"}`, `{"messages": [{"role": "user", "content": "x"}], "assistant_prefix": "a", "assistant_context": 3}`,
		`{"messages": [{"role": "user", "content": "w"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "stream": true, "max_tokens": 12}`,
		`{"messages": [{"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "1", "content": "r"}], "tool_choice": "none"}`,
		`{"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"}, "response_format": {"type": "json_object"}}`,
		`{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "text"}, "parallel_tool_calls": false, "tools": []}`,
		`{"messages": [{"role": "user", "content": 5}]}`, `{"messages": "hi"}`, `{"messages": [{}]}`, `{"n": -1}`, `{"seed": -9223372036854775808, "messages": [{"role":"user","content":""}]}`,
	}
	for _, sd := range seeds {
		f.Add([]byte(sd))
	}
	hdr := map[string]string{"Authorization": "Bearer " + key}
	f.Fuzz(func(t *testing.T, body []byte) {
		// keep the episode under its completion and token limits so that
		// every input reaches parsing and generation
		s.mu.Lock()
		if ep := s.eps.open[id]; ep != nil {
			ep.calls, ep.tokens, ep.samples = 0, 0, nil
		}
		s.mu.Unlock()
		serveNoRecover(t, s, "POST", "/v1/chat/completions", body, hdr)
	})
}

// toolTemplate gives a model a tool template that lists the tools before
// the prompt, so that the fuzzer reaches the tool paths.
type toolTemplate struct{ Model }

func (m toolTemplate) ChatPrompt(ctx context.Context, msgs []api.Message, tools []api.Tool) ([]int, error) {
	msgs = openai.FoldToolCalls(msgs)
	for _, t := range tools {
		msgs = append([]api.Message{{Role: "system", Content: "tool " + t.Function.Name + " " + string(t.Function.Parameters)}}, msgs...)
	}
	return m.Model.ChatPrompt(ctx, msgs, nil)
}

// FuzzToolStream generates arbitrary answers (tool markup included) and
// checks that the stream's deltas and calls equal the non-streamed message.
func FuzzToolStream(f *testing.F) {
	m := &toolScriptModel{}
	tc := testTrainConfig(4, 4)
	tc.MaxResponseTokens = 1024
	s, err := NewServer(ServerConfig{Model: m, Train: tc, Logger: quietLog})
	if err != nil {
		f.Fatal(err)
	}
	s.Start()
	f.Cleanup(func() { s.Close() })
	id, key := fuzzClaim(s)
	if key == "" {
		f.Fatal("claim failed")
	}
	for _, sd := range []string{
		"Sure. \n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
		"<tool_call>{\"name\": \"f\"}</tool_call>\n<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>",
		"text <tool_ca", "a\n\n<tool_call>{\"name\": \"f\"", "<tool_call><tool_call>{}</tool_call>", "plain \u00e9 text  ",
	} {
		f.Add(sd, "STOP")
	}
	hdr := map[string]string{"Authorization": "Bearer " + key}
	tools := `"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}]`
	f.Fuzz(func(t *testing.T, script, stop string) {
		if len(script) > 1000 || len(stop) > 8 {
			return
		}
		m.mu.Lock()
		m.script = script
		m.mu.Unlock()
		s.mu.Lock()
		if ep := s.eps.open[id]; ep != nil {
			ep.calls, ep.tokens, ep.samples = 0, 0, nil
		}
		s.mu.Unlock()
		stopJSON, _ := json.Marshal(stop)
		body := `{"messages": [{"role": "user", "content": "x"}], ` + tools + `, "max_tokens": 1024, "stop": [` + string(stopJSON) + `]`
		rec := serveNoRecover(t, s, "POST", "/v1/chat/completions", []byte(body+`}`), hdr)
		if rec.Code != 200 {
			return // a stop the API refuses
		}
		var resp api.ChatResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		rec = serveNoRecover(t, s, "POST", "/v1/chat/completions", []byte(body+`, "stream": true}`), hdr)
		var content strings.Builder
		var calls []api.ToolCall
		finish := ""
		for _, line := range strings.Split(rec.Body.String(), "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var ch api.ChatChunk
			if err := json.Unmarshal([]byte(data), &ch); err != nil {
				t.Fatalf("chunk %q: %v", data, err)
			}
			for _, c := range ch.Choices {
				if c.Delta.Content != nil {
					content.WriteString(*c.Delta.Content)
				}
				calls = append(calls, c.Delta.ToolCalls...)
				if c.FinishReason != nil {
					finish = *c.FinishReason
				}
			}
		}
		want := resp.Choices[0]
		if content.String() != want.Message.Content || finish != want.FinishReason || len(calls) != len(want.Message.ToolCalls) {
			t.Fatalf("script %q stop %q: streamed %q %q %d calls, non-streamed %q %q %d calls", script, stop,
				content.String(), finish, len(calls), want.Message.Content, want.FinishReason, len(want.Message.ToolCalls))
		}
		for k := range calls {
			if calls[k].Function != want.Message.ToolCalls[k].Function {
				t.Fatalf("script %q: call %d streamed %+v, non-streamed %+v", script, k, calls[k].Function, want.Message.ToolCalls[k].Function)
			}
		}
	})
}

// FuzzAuthHeader checks that no Authorization header can panic the server
// or authenticate without the key.
func FuzzAuthHeader(f *testing.F) {
	s, _, id, key := fuzzServer(f)
	f.Add("Bearer " + key)
	f.Add("Bearer " + keyPrefix + id + ".")
	f.Add("bearer " + keyPrefix + id)
	f.Add("Basic abc")
	body := []byte(`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}`)
	f.Fuzz(func(t *testing.T, auth string) {
		rec := serveNoRecover(t, s, "POST", "/v1/chat/completions", body, map[string]string{"Authorization": auth})
		if rec.Code == http.StatusOK && strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(auth, "Bearer "), "bearer ")) != key {
			t.Fatalf("header %q authenticated", auth)
		}
	})
}

// FuzzTrainConfigYAML feeds arbitrary YAML to the config parser.
func FuzzTrainConfigYAML(f *testing.F) {
	f.Add("ajet:\n  data:\n    train_batch_size: 8\n  rollout:\n    num_repeat: 4\n")
	f.Add("troupe:\n  drain_timeout_s: 1e308\n  max_staleness: -1\n")
	f.Add("a:\n\t b: 1\n- x\n'q': \"v\"")
	f.Fuzz(func(t *testing.T, y string) {
		tc := DefaultTrainConfig()
		if err := tc.ApplyYAML(y); err == nil {
			if err := tc.Validate(); err != nil {
				t.Fatalf("ApplyYAML accepted an invalid config: %v", err)
			}
		}
	})
}

// FuzzCheckpointLoad feeds arbitrary bytes to the checkpoint loader.
func FuzzCheckpointLoad(f *testing.F) {
	m, _ := tabular.NewPreset("tiny")
	var buf bytes.Buffer
	m.Save(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":{}}        "))
	f.Fuzz(func(t *testing.T, data []byte) {
		m2, _ := tabular.NewPreset("tiny")
		m2.Load(bytes.NewReader(data))
	})
}

// journalServer is a rolling server (batch 1 task × 1 episode, so that
// every finished episode trains at once) whose finished episodes are
// journaled on an embedded NATS server with a throwaway store.
func journalServer(f *testing.F) *Server {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{Logger: quietLog})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Close() }) // after the server's Close (cleanups run last first)
	m, _ := tabular.NewPreset("tiny")
	tc := testTrainConfig(1, 1)
	tc.MaxOpenEpisodes = 512
	tc.MaxResponseTokens = 16
	s, err := NewServer(ServerConfig{Model: m, Train: tc, Logger: quietLog, MaxBodyBytes: 64 << 10, JetStream: b.JetStream(), EpisodeKey: testEpisodeKey,
		ReapInterval: 50 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	return s
}

// journalLastSeq is the journal stream's last sequence.
func journalLastSeq(t *testing.T, s *Server) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := s.jr.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// journalPaths are the endpoints FuzzEndEpisodeJournal sends its bodies to:
// mostly end_episode, and the ones that change the episode or the engine
// under it.
var journalPaths = []string{"/end_episode", "/end_episode", "/end_episode", "/end_episode", "/abort_episode", "/claim_episode",
	"/agree_sync_weight", "/stop_engine", "/start_engine", "/can_continue_episode"}

// FuzzEndEpisodeJournal throws arbitrary bodies at end_episode (and the
// endpoints around it) on a server that journals finished episodes on
// NATS JetStream: no panic, and every 200 of an end is one more message in
// the journal. EPID in a body is the open episode's id; with bit 3 of
// which set, the episode chats once first, so that the journaled episode
// carries samples and trains.
func FuzzEndEpisodeJournal(f *testing.F) {
	s := journalServer(f)
	id, key := fuzzClaim(s)
	if key == "" {
		f.Fatal("claim failed")
	}
	seeds := []string{
		`{"client_uuid": "fz", "episode_uuid": "EPID", "task_id": "t", "workflow_output": {"reward": 1.0, "is_success": true, "metadata": {"task_id": "t"}, "log_metrics": {"a": 1}}}`,
		`{"client_uuid": "fz", "episode_uuid": "EPID", "task_id": "t", "workflow_output": {"reward": [0.5, -1e6]}, "declare_client_active": false}`,
		`{"client_uuid": "fz", "episode_uuid": "EPID", "task_id": "t\u0000.>*", "workflow_output": {"reward": -0}}`,
		`{"client_uuid": "fz", "episode_uuid": "EPID", "task_id": "t", "workflow_output": {"reward": 1e7}}`,
		`{"client_uuid": "other", "episode_uuid": "EPID", "task_id": "t", "workflow_output": {"reward": 1}}`,
		`{"client_uuid": "fz", "episode_uuid": "EPID", "task_id": "", "workflow_output": {"reward": 1}}`,
		`{"client_uuid": "fz", "episode_type": "train", "discard_episode_timeout": 0.01}`,
		`{"client_uuid": "fz", "episode_uuid": "EPID"}`, `{}`, `null`, "\xff",
	}
	for i, sd := range seeds {
		f.Add(uint8(i), []byte(sd))
		f.Add(uint8(i)|8, []byte(sd))
	}
	chat := []byte(`{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}`)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		s.mu.Lock()
		_, open := s.eps.open[id]
		s.mu.Unlock()
		if !open {
			if s.OpenEpisodes() > 256 {
				s.Stop() // fuzzed claims hold slots: start afresh
			}
			if nid, nkey := fuzzClaim(s); nid != "" {
				id, key = nid, nkey
			}
		}
		if which&8 != 0 {
			serveNoRecover(t, s, "POST", "/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer " + key})
		}
		body = bytes.ReplaceAll(body, []byte("EPID"), []byte(id))
		path := journalPaths[int(which)%len(journalPaths)]
		before, ended := journalLastSeq(t, s), s.Accounting().Ended
		rec := serveNoRecover(t, s, "POST", path, body, nil)
		if path == "/end_episode" && rec.Code == http.StatusOK {
			if after := journalLastSeq(t, s); after != before+1 {
				t.Fatalf("end_episode answered 200 but the journal went from sequence %d to %d: %s", before, after, body)
			}
			if got := s.Accounting().Ended; got != ended+1 {
				t.Fatalf("end_episode answered 200 but Accounting.Ended went from %d to %d", ended, got)
			}
		}
	})
}

// FuzzJournalMessages publishes arbitrary messages on the episode
// journal's subject, as anyone who can publish on the NATS server could,
// signed with the episode key, with another key or not at all: the
// trainer's consumer and the training step they reach must not panic,
// every message must leave the stream (trained and acknowledged, or
// dropped and counted by reason), and only correctly signed episodes are
// taken.
func FuzzJournalMessages(f *testing.F) {
	s := journalServer(f)
	for _, sd := range []string{
		`{"id": "a", "task_id": "t", "client": "c", "reward": 0.5, "min_version": 0, "samples": [{"Prompt": [1, 2], "Actions": [3], "LogProbs": [-0.5], "Version": 0}]}`,
		`{"id": "b", "task_id": "t", "reward": 1, "min_version": -1, "samples": [{"Prompt": [-1, 1000000], "Actions": [256, -3, 70000], "LogProbs": [0], "Version": -9}]}`,
		`{"id": "c", "task_id": "t", "reward": 1e308, "min_version": 9223372036854775807, "samples": [{"Actions": [], "LogProbs": [1, 2, 3], "StepRewards": [1e308, -1e308], "Obs": [1]}]}`,
		`{"id": "d", "reward": 1, "samples": [{"Prompt": [65], "Actions": [66], "Temperature": -1}, {"Prompt": [], "Actions": [67], "Temperature": 1e300}]}`,
		`{"id": "", "reward": 1}`, `{"id": "e", "reward": "x"}`, `[]`, ``, "\x00",
	} {
		for mode := range uint8(3) {
			f.Add([]byte(sd), mode)
		}
	}
	ctx := context.Background()
	n := 0
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		n++
		// Signed with the server's key (mode 0), with another key (1), or
		// not at all (2). The consumer takes what record.Open accepts and
		// it has not taken before; the rest is refused, by reason.
		msg := &nats.Msg{Subject: s.jr.subject, Data: data, Header: nats.Header{}}
		switch mode % 3 {
		case 0:
			msg.Header.Set(record.Header, record.Sign(testEpisodeKey, s.jr.subject, data))
		case 1:
			msg.Header.Set(record.Header, record.Sign([]byte("another key of 16+ bytes"), s.jr.subject, data))
		}
		je, _, openErr := record.Open(testEpisodeKey, s.jr.subject, data, msg.Header.Get(record.Header), s.cfg.MaxAbsReward)
		s.mu.Lock()
		valid := openErr == nil && !s.jr.seen[je.ID]
		s.mu.Unlock()
		wantReason := map[uint8]string{1: record.Forged, 2: record.Unsigned}[mode%3]
		refused := s.drops.Counts()[wantReason]
		recovered := s.Accounting().Recovered
		if _, err := s.jr.js.PublishMsg(ctx, msg, jetstream.WithMsgID(fmt.Sprintf("fuzz-%d-%d", os.Getpid(), n))); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			info, err := s.jr.stream.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("message %q still in the journal after 10 s (%d messages)", data, info.State.Msgs)
			}
			time.Sleep(time.Millisecond)
		}
		a := s.Accounting()
		if got := a.Recovered - recovered; valid && got != 1 || !valid && got != 0 {
			t.Fatalf("message %q (mode %d, an episode: %v) taken into the buffer %d times", data, mode%3, valid, got)
		}
		if wantReason != "" && s.drops.Counts()[wantReason] != refused+1 {
			t.Fatalf("message %q (mode %d) not counted as %s", data, mode%3, wantReason)
		}
	})
}

// FuzzAdminHeaders sends arbitrary Authorization and X-Admin-Token headers
// to the views that show episode ids to admins and to the admin
// endpoints: no panic, and neither an id nor engine control without the
// token.
func FuzzAdminHeaders(f *testing.F) {
	m, _ := tabular.NewPreset("tiny")
	const tok = "fuzz-admin-token"
	s, err := NewServer(ServerConfig{Model: m, Train: testTrainConfig(4, 4), Logger: quietLog, AdminToken: tok})
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	id, _ := fuzzClaim(s)
	if id == "" {
		f.Fatal("claim failed")
	}
	views := []struct{ method, path string }{
		{"GET", "/get_current_batch_rollout_pool_information"}, {"POST", "/get_episode_buffer"}, {"GET", "/get_verbose_logs"},
		{"GET", "/metrics"}, {"POST", "/stop_engine"}, {"POST", "/sync_train_config"}, {"POST", "/sync_train_code"}, {"POST", "/start_engine"},
	}
	for i, sd := range []struct{ auth, x string }{
		{"Bearer " + tok, ""}, {"bearer  " + tok + " ", ""}, {"", tok}, {"Bearer " + tok, "wrong"}, {"Basic " + tok, ""},
		{"Bearer", ""}, {"Bearer " + tok + "x", ""}, {"", tok + "\x00"},
	} {
		f.Add(uint8(i), sd.auth, sd.x)
	}
	f.Fuzz(func(t *testing.T, which uint8, auth, xtok string) {
		v := views[int(which)%len(views)]
		hdr := map[string]string{}
		if auth != "" {
			hdr["Authorization"] = auth
		}
		if xtok != "" {
			hdr["X-Admin-Token"] = xtok
		}
		req := httptest.NewRequest(v.method, v.path, strings.NewReader(`{"yaml_as_string": "ajet: {}"}`))
		for k, val := range hdr {
			req.Header[k] = []string{val} // as sent, unvalidated
		}
		rec := httptest.NewRecorder()
		s.mux.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s: %d %s", v.method, v.path, rec.Code, rec.Body.String())
		}
		admin := xtok == tok || xtok == "" && strings.Contains(auth, tok)
		if !admin && strings.Contains(rec.Body.String(), id) {
			t.Fatalf("%s %s with Authorization %q, X-Admin-Token %q shows the episode id", v.method, v.path, auth, xtok)
		}
		if !admin && rec.Code != http.StatusUnauthorized && strings.Contains(v.path, "engine") {
			t.Fatalf("%s with Authorization %q, X-Admin-Token %q: %d, want 401", v.path, auth, xtok, rec.Code)
		}
		if st, _, _ := s.Status(); st == StatusOffline {
			s.Start()
		}
		s.mu.Lock()
		_, open := s.eps.open[id]
		s.mu.Unlock()
		if !open {
			if nid, _ := fuzzClaim(s); nid != "" {
				id = nid
			}
		}
	})
}
