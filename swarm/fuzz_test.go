package swarm

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fuzzServer is a rolling server with one open episode. Fuzz targets call
// s.mux directly, without the recover middleware, so any panic in a
// handler fails the fuzz run.
func fuzzServer(f *testing.F) (*Server, string, string, string) {
	m, _ := NewPresetModel("tiny")
	tc := testTrainConfig(1, 1)
	tc.MaxOpenEpisodes = 512
	tc.MaxResponseTokens = 16
	s, err := NewServer(ServerConfig{Model: m, Train: tc, Logger: quietLog, MaxBodyBytes: 64 << 10, ReapInterval: 50 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	s.Start()
	f.Cleanup(func() { s.Close() })
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, httptest.NewRequest("POST", "/claim_episode", strings.NewReader(`{"client_uuid":"fz","episode_type":"train","discard_episode_timeout":3000}`)))
	var id, key string
	for _, part := range strings.Split(rec.Body.String(), `"`) {
		if strings.HasPrefix(part, keyPrefix) {
			key = part
			id, _, _ = strings.Cut(strings.TrimPrefix(part, keyPrefix), ".")
		}
	}
	if key == "" {
		f.Fatalf("claim failed: %s", rec.Body.String())
	}
	return s, "fz", id, key
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

var swarmPaths = []string{"/claim_episode", "/end_episode", "/abort_episode", "/can_continue_episode", "/is_episode_claimed", "/sync_train_config", "/get_episode_buffer"}

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
		`[]`, `null`, `{"client_uuid": null}`, `{"episode_uuid": {"a": []}}`, "\x00\xff",
	}
	for i, sd := range seeds {
		f.Add(uint8(i), []byte(sd))
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		body = bytes.ReplaceAll(body, []byte("EPID"), []byte(id))
		body = bytes.ReplaceAll(body, []byte(`"fz"`), []byte(`"`+client+`"`))
		serveNoRecover(t, s, "POST", swarmPaths[int(which)%len(swarmPaths)], body, nil)
		serveNoRecover(t, s, "GET", "/get_engine_status", nil, nil)
	})
}

// FuzzChatCompletions throws arbitrary bodies at /v1/chat/completions with
// a valid episode key.
func FuzzChatCompletions(f *testing.F) {
	s, _, id, key := fuzzServer(f)
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
		if ep := s.episodes[id]; ep != nil {
			ep.calls, ep.tokens, ep.samples = 0, 0, nil
		}
		s.mu.Unlock()
		serveNoRecover(t, s, "POST", "/v1/chat/completions", body, hdr)
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
	m, _ := NewPresetModel("tiny")
	var buf bytes.Buffer
	m.Save(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":{}}        "))
	f.Fuzz(func(t *testing.T, data []byte) {
		m2, _ := NewPresetModel("tiny")
		m2.Load(bytes.NewReader(data))
	})
}
