package swarm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// rawPost sends body verbatim with the given headers and decodes the JSON answer.
func rawPost(t *testing.T, url, body string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("POST %s: non-JSON answer %q", url, b)
	}
	return resp.StatusCode, out
}

func rawGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func hasKeys(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s: missing key %q in %v", what, k, m)
		}
	}
}

// sdkHeaders are the headers the official OpenAI Python SDK sends.
func sdkHeaders(key string) map[string]string {
	return map[string]string{
		"Authorization": "Bearer " + key, "User-Agent": "OpenAI/Python 1.54.0", "Accept": "application/json",
		"X-Stainless-Lang": "python", "X-Stainless-Package-Version": "1.54.0", "X-Stainless-Retry-Count": "0",
	}
}

// TestAgentJetAndOpenAICompat speaks the exact JSON that AgentJet's
// SwarmClient (pydantic model_dump) and the OpenAI SDKs send: once against
// a server without an admin token, once against one with a token, reached
// the way AgentJet's client is given it, as the base URL
// http://host:port/t/<token> (no headers).
func TestAgentJetAndOpenAICompat(t *testing.T) {
	t.Run("open", func(t *testing.T) { testAgentJetCompat(t, "") })
	t.Run("token-prefix", func(t *testing.T) { testAgentJetCompat(t, "tok-3f9a1c") })
}

// agentJetBaseURL is what AgentJet's SwarmClient does to the claim's
// openai_base_url: re.sub(r'^https?://[^/]+', self.server_url, url).
func agentJetBaseURL(serverURL, openaiBaseURL string) string {
	return regexp.MustCompile(`^https?://[^/]+`).ReplaceAllLiteralString(openaiBaseURL, serverURL)
}

func testAgentJetCompat(t *testing.T, token string) {
	m, _ := tabular.NewPreset("small")
	s, err := NewServer(ServerConfig{Model: m, Train: testTrainConfig(1, 2), Logger: quietLog, AdminToken: token})
	if err != nil {
		t.Fatal(err)
	}
	ts := httpServer(t, s)
	u := ts.URL
	if token != "" {
		u += "/t/" + token
	}

	// OFFLINE: claim fails with a readable cause; config can be synced.
	_, st := rawGetJSON(t, u+"/get_engine_status")
	if st["engine_status"] != StatusOffline {
		t.Fatalf("initial status %v", st)
	}
	hasKeys(t, "get_engine_status", st, "engine_status", "engine_status_detail", "global_step")
	claimBody := `{"client_uuid": "c-1", "episode_type": "train", "discard_episode_timeout": 240.0, "throttle_policy": null}`
	code, cl := rawPost(t, u+"/claim_episode", claimBody, nil)
	if code != 200 || cl["success"] != false || !strings.Contains(cl["fail_cause"].(string), "Engine not ready") {
		t.Fatalf("claim while offline: %d %v", code, cl)
	}
	hasKeys(t, "claim_episode", cl, "success", "client_uuid", "episode_uuid", "openai_base_url", "openai_api_key", "fail_cause")
	yaml := "ajet:\n  data:\n    train_batch_size: 1\n  rollout:\n    num_repeat: 2\n  swarm_mode_sample_collection_method: rollout_until_finish_enough_tasks\n"
	if code, r := rawPost(t, u+"/sync_train_config", `{"yaml_as_string": `+jsonString(yaml)+`}`, nil); code != 200 || r["success"] != true {
		t.Fatalf("sync_train_config: %d %v", code, r)
	}
	if code, r := rawPost(t, u+"/start_engine", `{}`, nil); code != 200 || r["success"] != true {
		t.Fatalf("start_engine: %d %v", code, r)
	}
	waitFor(t, "ROLLING", func() bool { st, _, _ := s.Status(); return st == StatusRolling })
	if code, _ := rawPost(t, u+"/sync_train_config", `{"yaml_as_string": ""}`, nil); code != 400 {
		t.Fatalf("sync_train_config while rolling: %d, want 400", code)
	}

	var contents []string
	for i := 0; i < 2; i++ {
		code, cl = rawPost(t, u+"/claim_episode", claimBody, nil)
		if code != 200 || cl["success"] != true {
			t.Fatalf("claim: %d %v", code, cl)
		}
		ep, key, base := cl["episode_uuid"].(string), cl["openai_api_key"].(string), cl["openai_base_url"].(string)
		if base != ts.URL+"/v1" {
			t.Fatalf("openai_base_url %q, want %q", base, ts.URL+"/v1")
		}
		base = agentJetBaseURL(u, base)
		// OpenAI Python SDK: client.chat.completions.create(...)
		chat := `{"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": [{"type": "text", "text": "hello"}]}],
			"model": "small", "max_tokens": 12, "temperature": 0.8, "top_p": 0.95, "n": 2, "seed": 42, "logprobs": true, "top_logprobs": 2, "stop": ["\n\n"]}`
		code, cr := rawPost(t, base+"/chat/completions", chat, sdkHeaders(key))
		if code != 200 {
			t.Fatalf("chat: %d %v", code, cr)
		}
		hasKeys(t, "chat.completion", cr, "id", "object", "created", "model", "choices", "usage", "system_fingerprint")
		if cr["object"] != "chat.completion" {
			t.Fatalf("object %v", cr["object"])
		}
		choices := cr["choices"].([]any)
		if len(choices) != 2 {
			t.Fatalf("n=2 gave %d choices", len(choices))
		}
		c0 := choices[0].(map[string]any)
		hasKeys(t, "choice", c0, "index", "message", "logprobs", "finish_reason")
		msg := c0["message"].(map[string]any)
		if msg["role"] != "assistant" {
			t.Fatalf("role %v", msg["role"])
		}
		lp := c0["logprobs"].(map[string]any)["content"].([]any)
		if len(lp) == 0 {
			t.Fatal("empty logprobs.content")
		}
		e0 := lp[0].(map[string]any)
		hasKeys(t, "logprob entry", e0, "token", "logprob", "bytes", "top_logprobs")
		if n := len(e0["top_logprobs"].([]any)); n != 2 {
			t.Fatalf("top_logprobs has %d entries, want 2", n)
		}
		if x := e0["logprob"].(float64); !(x <= 0) {
			t.Fatalf("logprob %v > 0", x)
		}
		usage := cr["usage"].(map[string]any)
		hasKeys(t, "usage", usage, "prompt_tokens", "completion_tokens", "total_tokens")
		contents = append(contents, msg["content"].(string))

		// OpenAI SDK streaming with the same seed must produce the same text.
		stream := strings.Replace(chat, `"n": 2,`, `"n": 1, "stream": true, "stream_options": {"include_usage": true},`, 1)
		streamed, gotUsage := readSSE(t, base+"/chat/completions", stream, sdkHeaders(key))
		if streamed != msg["content"].(string) {
			t.Fatalf("streamed %q != non-streamed %q with the same seed", streamed, msg["content"])
		}
		if !gotUsage {
			t.Fatal("stream_options.include_usage: no usage chunk")
		}

		// AgentJet SwarmClient checks
		if code, r := rawPost(t, u+"/can_continue_episode", `{"client_uuid": "c-1", "episode_uuid": "`+ep+`"}`, nil); code != 200 || r["can_continue"] != true {
			t.Fatalf("can_continue_episode: %d %v", code, r)
		}
		if code, r := rawPost(t, u+"/is_episode_claimed", `{"client_uuid": "", "episode_uuid": "`+ep+`", "unregister_if_not_claimed": false}`, nil); code != 200 || r["success"] != true {
			t.Fatalf("is_episode_claimed: %d %v", code, r)
		}
		end := `{"client_uuid": "c-1", "episode_uuid": "` + ep + `", "workflow_output": {"reward": ` + []string{"0.25", "1.0"}[i] +
			`, "is_success": null, "metadata": {"task_id": "task-7"}, "log_metrics": {}}, "task_id": "task-7"}`
		if code, r := rawPost(t, u+"/end_episode", end, nil); code != 200 || r["success"] != true {
			t.Fatalf("end_episode: %d %v", code, r)
		}
		if code, r := rawPost(t, u+"/can_continue_episode", `{"client_uuid": "c-1", "episode_uuid": "`+ep+`"}`, nil); code != 200 || r["can_continue"] != false {
			t.Fatalf("can_continue after end: %d %v", code, r)
		}
		// the key dies with the episode
		if code, _ := rawPost(t, base+"/chat/completions", chat, sdkHeaders(key)); code != 401 {
			t.Fatalf("chat with a closed episode's key: %d, want 401", code)
		}
	}
	// the step counter grows before the engine is back to ROLLING: wait for both
	waitFor(t, "global step 1", func() bool { st, _, g := s.Status(); return g == 1 && st == StatusRolling })

	// AgentJet's abort_episode body
	code, cl = rawPost(t, u+"/claim_episode", claimBody, nil)
	if code != 200 || cl["success"] != true {
		t.Fatalf("claim_episode to abort: %d %v", code, cl)
	}
	ep := cl["episode_uuid"].(string)
	abort := `{"client_uuid": "c-1", "episode_uuid": "` + ep + `", "workflow_output": {"reward": 0.0, "is_success": null, "metadata": {}, "log_metrics": {}}, "task_id": ""}`
	if code, r := rawPost(t, u+"/abort_episode", abort, nil); code != 200 || r["success"] != true {
		t.Fatalf("abort_episode: %d %v", code, r)
	}
	if s.OpenEpisodes() != 0 {
		t.Fatal("aborted episode still open")
	}

	// AgentJet's overwatch / throttle view of the rollout pool
	code, pool := rawGetJSON(t, u+"/get_current_batch_rollout_pool_information")
	hasKeys(t, "pool information", pool, "sample_collection_method", "completed_episodes", "completed_episode_target",
		"completed_tasks", "completed_task_target", "task_expected_num_repeat", "completed_tasks_details", "engine_status", "global_step")
	if code != 200 || pool["engine_status"] != StatusRolling || pool["global_step"].(float64) != 1 {
		t.Fatalf("pool information: %d %v", code, pool)
	}
	// one finished episode of another task, to see its reward in the pool
	code, cl = rawPost(t, u+"/claim_episode", claimBody, nil)
	if code != 200 || cl["success"] != true {
		t.Fatalf("claim: %d %v", code, cl)
	}
	end := `{"client_uuid": "c-1", "episode_uuid": "` + cl["episode_uuid"].(string) + `", "workflow_output": {"reward": 0.5, "is_success": null, "metadata": {"task_id": "task-8"}, "log_metrics": {}}, "task_id": "task-8"}`
	if code, r := rawPost(t, u+"/end_episode", end, nil); code != 200 || r["success"] != true {
		t.Fatalf("end_episode: %d %v", code, r)
	}
	_, pool = rawGetJSON(t, u+"/get_current_batch_rollout_pool_information")
	if rw, _ := pool["completed_tasks_rewards"].(map[string]any); fmt.Sprint(rw["task-8"]) != "[0.5]" {
		t.Fatalf("completed_tasks_rewards %v, want task-8: [0.5]", pool["completed_tasks_rewards"])
	}
	if cu, _ := pool["completed_tasks_client_uuids"].(map[string]any); fmt.Sprint(cu["task-8"]) != "[c-1]" {
		t.Fatalf("completed_tasks_client_uuids %v: the open server and an admin see client ids", pool["completed_tasks_client_uuids"])
	}
	// an eval episode claimed with AgentJet's full throttle policy: the pool
	// shows its task, its end trains nothing
	throttled := `{"client_uuid": "c-1", "episode_type": "eval", "discard_episode_timeout": 240.0, "throttle_policy": {"ratio": 1.5, "expected_batch_size": 1, "expected_num_repeat": 2, "current_task_id": "task-9"}}`
	code, cl = rawPost(t, u+"/claim_episode", throttled, nil)
	if code != 200 || cl["success"] != true {
		t.Fatalf("eval claim with a throttle policy: %d %v", code, cl)
	}
	_, pool = rawGetJSON(t, u+"/get_current_batch_rollout_pool_information")
	if !strings.Contains(fmt.Sprint(pool["running_episode_details"]), "optional_task_id:task-9") {
		t.Fatalf("running_episode_details %v lack the throttled task", pool["running_episode_details"])
	}
	evalChat := `{"messages": [{"role": "user", "content": "eval"}], "max_tokens": 4}`
	if code, r := rawPost(t, agentJetBaseURL(u, cl["openai_base_url"].(string))+"/chat/completions", evalChat, sdkHeaders(cl["openai_api_key"].(string))); code != 200 {
		t.Fatalf("eval chat: %d %v", code, r)
	}
	before := s.BufferedEpisodes()
	end = `{"client_uuid": "c-1", "episode_uuid": "` + cl["episode_uuid"].(string) + `", "workflow_output": {"reward": 1.0, "is_success": true, "metadata": {"task_id": "task-9"}, "log_metrics": {}}, "task_id": "task-9"}`
	if code, r := rawPost(t, u+"/end_episode", end, nil); code != 200 || r["success"] != true || s.BufferedEpisodes() != before {
		t.Fatalf("eval end: %d %v (buffered %d, was %d)", code, r, s.BufferedEpisodes(), before)
	}
	// SwarmClient.server_experiment_dir: a JSON object with the key (null without a run directory)
	if code, d := rawGetJSON(t, u+"/get_server_experiment_dir"); code != 200 || d["server_experiment_dir"] != nil {
		t.Fatalf("get_server_experiment_dir: %d %v", code, d)
	}
	if code, d := rawGetJSON(t, u+"/get_verbose_logs"); code != 200 || d["entries"] == nil {
		t.Fatalf("get_verbose_logs: %d %v", code, d)
	}

	// models, health, metrics
	code, b := rawGet(t, u+"/v1/models")
	if code != 200 || !bytes.Contains(b, []byte(`"object":"list"`)) || !bytes.Contains(b, []byte(`"id":"small"`)) {
		t.Fatalf("/v1/models: %d %s", code, b)
	}
	if code, b := rawGet(t, u+"/health"); code != 200 || !bytes.Contains(b, []byte(`"status":"ok"`)) {
		t.Fatalf("/health: %d %s", code, b)
	}
	code, b = rawGet(t, u+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, b)
	}
	for _, want := range []string{"swarm_episodes_total{event=\"claimed\"} 5", "swarm_global_step 1", `swarm_http_requests_total{code="200",endpoint="chat_completions"}`, "swarm_engine_status{status=\"ENGINE.ROLLING\"} 1"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// stop_engine returns to OFFLINE and claims fail again
	if code, r := rawPost(t, u+"/stop_engine", `{}`, nil); code != 200 || r["success"] != true {
		t.Fatalf("stop_engine: %d %v", code, r)
	}
	if _, cl := rawPost(t, u+"/claim_episode", claimBody, nil); cl["success"] != false || !strings.Contains(cl["fail_cause"].(string), "ENGINE.OFFLINE") {
		t.Fatalf("claim after stop: %v", cl)
	}
	t.Logf("sample completions: %q", contents)
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

func rawGetJSON(t *testing.T, url string) (int, map[string]any) {
	code, b := rawGet(t, url)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("GET %s: %q", url, b)
	}
	return code, m
}

// readSSE posts a streaming request and checks the event framing; it returns
// the concatenated content and whether a usage chunk came.
func readSSE(t *testing.T, url, body string, hdr map[string]string) (string, bool) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var sb strings.Builder
	usage, done, finished, sawRole := false, false, false, false
	sc := bufio.NewScanner(resp.Body)
	blank := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			blank = true
			continue
		}
		if !blank {
			t.Fatalf("SSE events must be separated by a blank line; got %q", line)
		}
		blank = false
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("SSE line without data prefix: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		if done {
			t.Fatal("data after [DONE]")
		}
		var ch api.ChatChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if ch.Object != "chat.completion.chunk" {
			t.Fatalf("chunk object %q", ch.Object)
		}
		if ch.Usage != nil {
			usage = true
		}
		for _, c := range ch.Choices {
			if c.Delta.Role == "assistant" {
				sawRole = true
			}
			if c.Delta.Content != nil {
				sb.WriteString(*c.Delta.Content)
			}
			if c.FinishReason != nil {
				finished = true
			}
		}
	}
	if !done || !finished || !sawRole {
		t.Fatalf("stream incomplete: done=%v finish=%v role=%v", done, finished, sawRole)
	}
	return sb.String(), usage
}

func httpServer(t *testing.T, s *Server) *httpTestServer {
	ts := newHTTPTestServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	return ts
}

var _ = time.Second
