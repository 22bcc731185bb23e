package openai_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/swarm/tabular"
	"github.com/troupe-ml/troupe/textgen"
)

// plainServer serves two tabular models (a "base" and an "adapter" on it).
func plainServer(t *testing.T, cfg openai.ServerConfig) *httptest.Server {
	t.Helper()
	a, _ := tabular.NewPreset("tiny")
	b, _ := tabular.NewPreset("small")
	s, err := openai.NewServer(cfg, openai.ServedModel{Name: "base", Model: a, MaxLen: 256},
		openai.ServedModel{Name: "tuned", Parent: "base", Model: b, MaxLen: 256})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func post(t *testing.T, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestPlainServerModels: /v1/models lists the base and its adapter (with
// its parent); a request selects a model by name; an unknown model is
// OpenAI's 404 and a wrong or missing key a 401.
func TestPlainServerModels(t *testing.T) {
	ts := plainServer(t, openai.ServerConfig{APIKey: "k1"})
	req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer k1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list api.ModelList
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Data) != 2 || list.Data[0].ID != "base" || list.Data[1].ID != "tuned" || list.Data[1].Parent == nil || *list.Data[1].Parent != "base" {
		t.Fatalf("models: %+v", list)
	}
	chat := `{"model": %q, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "seed": 1}`
	for _, m := range []string{"base", "tuned"} {
		code, r := post(t, ts.URL+"/v1/chat/completions", "k1", strings.Replace(chat, "%q", `"`+m+`"`, 1))
		if code != 200 || r["model"] != m {
			t.Errorf("model %s: %d %v", m, code, r)
		}
	}
	code, r := post(t, ts.URL+"/v1/chat/completions", "k1", strings.Replace(chat, "%q", `"nope"`, 1))
	if e, _ := r["error"].(map[string]any); code != 404 || e["code"] != "model_not_found" {
		t.Errorf("unknown model: %d %v", code, r)
	}
	for _, key := range []string{"", "wrong"} {
		code, r := post(t, ts.URL+"/v1/chat/completions", key, strings.Replace(chat, "%q", `"base"`, 1))
		if e, _ := r["error"].(map[string]any); code != 401 || e["code"] != "invalid_api_key" {
			t.Errorf("key %q: %d %v", key, code, r)
		}
	}
}

// TestPlainServerCompletions: /v1/completions takes a string, a list of
// strings or token ids; n choices per prompt with log-probs; the streamed
// text equals the non-streamed text for the same seed; bad fields are 400s.
func TestPlainServerCompletions(t *testing.T) {
	ts := plainServer(t, openai.ServerConfig{})
	url := ts.URL + "/v1/completions"
	code, r := post(t, url, "", `{"model": "base", "prompt": ["ab", "cd"], "n": 2, "max_tokens": 6, "seed": 3, "logprobs": 2, "temperature": 1}`)
	if code != 200 || r["object"] != "text_completion" {
		t.Fatalf("%d %v", code, r)
	}
	choices := r["choices"].([]any)
	if len(choices) != 4 {
		t.Fatalf("%d choices, want 2 prompts × n 2", len(choices))
	}
	for _, c := range choices {
		lp := c.(map[string]any)["logprobs"].(map[string]any)
		toks, tops := lp["tokens"].([]any), lp["top_logprobs"].([]any)
		if len(toks) == 0 || len(toks) != len(tops) || len(tops[0].(map[string]any)) == 0 {
			t.Errorf("choice logprobs %v", lp)
		}
	}
	code, r = post(t, url, "", `{"model": "base", "prompt": [97, 98], "max_tokens": 4}`)
	if code != 200 {
		t.Errorf("token ids: %d %v", code, r)
	}
	want := ""
	code, r = post(t, url, "", `{"model": "tuned", "prompt": "hello", "max_tokens": 12, "seed": 5, "temperature": 1}`)
	if code != 200 {
		t.Fatal(code, r)
	}
	want = r["choices"].([]any)[0].(map[string]any)["text"].(string)
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"model": "tuned", "prompt": "hello", "max_tokens": 12, "seed": 5, "temperature": 1, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch api.CompletionResponse
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatal(err)
		}
		for _, c := range ch.Choices {
			got.WriteString(c.Text)
		}
	}
	resp.Body.Close()
	if !done || got.String() != want {
		t.Errorf("streamed %q (done %v), non-streamed %q", got.String(), done, want)
	}
	for body, field := range map[string]string{
		`{"model": "base"}`: "prompt",
		`{"model": "base", "prompt": "x", "suffix": "y"}`:               "suffix",
		`{"model": "base", "prompt": "x", "logprobs": 99}`:              "logprobs",
		`{"model": "base", "prompt": "x", "echo": true, "logprobs": 1}`: "echo",
		`{"model": "base", "prompt": [[]]}`:                             "prompt",
		`{"model": "base", "prompt": {"a": 1}}`:                         "prompt",
		`{"model": "base", "prompt": "x", "max_tokens": 100000}`:        "max_tokens",
	} {
		code, r := post(t, url, "", body)
		e, _ := r["error"].(map[string]any)
		if code != 400 || !strings.Contains(e["message"].(string), field) {
			t.Errorf("%s: %d %v, want a 400 naming %s", body, code, r, field)
		}
	}
}

// slowModel wraps a model and holds every generation until release.
type slowModel struct {
	openai.Model
	release chan struct{}
}

func (m slowModel) Generate(ctx context.Context, p [][]int, o textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	select {
	case <-m.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return m.Model.Generate(ctx, p, o, emit)
}

// TestPlainServerInFlightLimits: completions beyond the per-client limit
// get 429 at once; beyond the server's limit they wait, then get 429.
func TestPlainServerInFlightLimits(t *testing.T) {
	tab, _ := tabular.NewPreset("tiny")
	m := slowModel{tab, make(chan struct{})}
	s, err := openai.NewServer(openai.ServerConfig{Handler: openai.Config{MaxInFlight: 3, MaxInFlightPerClient: 2, QueueWait: 100 * time.Millisecond}},
		openai.ServedModel{Name: "m", Model: m, MaxLen: 256})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	body := `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}`
	do := func(key string) int {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for _, key := range []string{"a", "a", "b"} { // fill the server: 3 in flight
		wg.Add(1)
		go func() { defer wg.Done(); codes <- do(key) }()
	}
	time.Sleep(50 * time.Millisecond)
	if c := do("a"); c != 429 {
		t.Errorf("a third completion of client a: %d, want 429", c)
	}
	start := time.Now()
	if c := do("c"); c != 429 || time.Since(start) < 90*time.Millisecond {
		t.Errorf("a completion beyond the server's limit: %d after %v, want 429 after the queue wait", c, time.Since(start))
	}
	close(m.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("an admitted completion: %d", c)
		}
	}
}

// TestPlainServerGuard: on loopback the server answers only to its own
// names (a page whose name was rebound to 127.0.0.1 gets 421) and refuses
// other sites' requests (403); its own origin and names it was given pass.
func TestPlainServerGuard(t *testing.T) {
	ts := plainServer(t, openai.ServerConfig{Hosts: []string{"models.lan"}})
	for _, tt := range []struct {
		host, origin string
		want         int
	}{
		{"", "", 200},
		{"evil.example", "", 421},
		{"", "http://evil.example", 403},
		{"models.lan", "", 200},
		{"", "http://models.lan", 200},
	} {
		req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
		if tt.host != "" {
			req.Host = tt.host
		}
		if tt.origin != "" {
			req.Header.Set("Origin", tt.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("Host %q, Origin %q: %d, want %d", tt.host, tt.origin, resp.StatusCode, tt.want)
		}
	}
}
