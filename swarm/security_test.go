package swarm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/internal/ids"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
	"github.com/troupe-ml/troupe/textgen"
)

const adminTok = "adm-7c2e91"

func claimRaw(t *testing.T, u, client string) (int, map[string]any) {
	t.Helper()
	return rawPost(t, u+"/claim_episode", `{"client_uuid": "`+client+`", "episode_type": "train", "discard_episode_timeout": 240.0, "throttle_policy": null}`, nil)
}

func endBody(client, ep, task string, reward string) string {
	return `{"client_uuid": "` + client + `", "episode_uuid": "` + ep + `", "workflow_output": {"reward": ` + reward +
		`, "is_success": null, "metadata": {"task_id": "` + task + `"}, "log_metrics": {}}, "task_id": "` + task + `"}`
}

// TestAttackProbes runs the attacks of a client without credentials against
// a server with an admin token: ids must stay hidden, a spoofed end must
// fail while the victim's own end succeeds, engine control must be refused.
func TestAttackProbes(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	ts := startServer(t, m, testTrainConfig(4, 4), func(c *ServerConfig) { c.AdminToken = adminTok })
	u := ts.ts.URL

	code, cl := claimRaw(t, u, "victim-client")
	if code != 200 || cl["success"] != true {
		t.Fatalf("victim claim: %d %v", code, cl)
	}
	victimEp := cl["episode_uuid"].(string)
	// a finished episode too, so that the completed views have entries
	_, cl2 := claimRaw(t, u, "victim-client")
	if code, r := rawPost(t, u+"/end_episode", endBody("victim-client", cl2["episode_uuid"].(string), "t1", "0.5"), nil); code != 200 {
		t.Fatalf("victim end: %d %v", code, r)
	}

	// 1. no episode or client id visible without admin credentials
	for _, probe := range []struct{ method, path string }{
		{"GET", "/get_current_batch_rollout_pool_information"}, {"POST", "/get_episode_buffer"},
		{"GET", "/get_verbose_logs"}, {"GET", "/get_engine_status"}, {"GET", "/health"}, {"GET", "/metrics"},
	} {
		req, _ := http.NewRequest(probe.method, u+probe.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, secret := range []string{victimEp, cl2["episode_uuid"].(string), "victim-client"} {
			if strings.Contains(string(b), secret) {
				t.Errorf("%s %s without credentials shows %q: %s", probe.method, probe.path, secret, b)
			}
		}
	}
	// ... but an admin sees them, by header and by path prefix
	for name, get := range map[string]func() []byte{
		"bearer": func() []byte {
			req, _ := http.NewRequest("GET", u+"/get_current_batch_rollout_pool_information", nil)
			req.Header.Set("Authorization", "Bearer "+adminTok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return b
		},
		"prefix": func() []byte {
			_, b := rawGet(t, u+"/t/"+adminTok+"/get_current_batch_rollout_pool_information")
			return b
		},
	} {
		if b := get(); !strings.Contains(string(b), victimEp) || !strings.Contains(string(b), "victim-client") {
			t.Errorf("admin (%s) does not see the ids: %s", name, b)
		}
	}

	// 2. a spoofed end is refused: without the episode id nothing can be
	// named, and the client id alone (even if known) does not help
	for _, body := range []string{
		endBody("victim-client", "hidden-1", "t1", "1e5"),
		endBody("victim-client", ids.UUID(), "t1", "1e5"),
		endBody("attacker", victimEp, "t1", "1e5"),
	} {
		if code, r := rawPost(t, u+"/end_episode", body, nil); code == 200 {
			t.Fatalf("spoofed end accepted: %s -> %v", body, r)
		}
		if code, _ := rawPost(t, u+"/abort_episode", body, nil); code == 200 && ts.s.OpenEpisodes() != 1 {
			t.Fatalf("spoofed abort closed the victim's episode: %s", body)
		}
	}
	if ts.s.OpenEpisodes() != 1 {
		t.Fatalf("open episodes %d, want the victim's 1", ts.s.OpenEpisodes())
	}
	// 3. the victim ends its own
	if code, r := rawPost(t, u+"/end_episode", endBody("victim-client", victimEp, "t1", "0.25"), nil); code != 200 || r["success"] != true {
		t.Fatalf("victim's own end: %d %v", code, r)
	}

	// 4. engine control refused without credentials, in every form
	for _, p := range []string{"/stop_engine", "/start_engine", "/sync_train_config", "/sync_train_code"} {
		for name, hdr := range map[string]map[string]string{
			"none": nil, "wrong bearer": {"Authorization": "Bearer nope"}, "episode key as bearer": {"Authorization": "Bearer " + cl["openai_api_key"].(string)},
			"wrong x-admin-token": {"X-Admin-Token": adminTok + "x"},
		} {
			if code, _ := rawPost(t, u+p, `{}`, hdr); code != http.StatusUnauthorized {
				t.Errorf("%s with %s: %d, want 401", p, name, code)
			}
		}
		if code, r := rawPost(t, u+"/t/wrong"+p, `{}`, nil); code != http.StatusUnauthorized || r["error"] == nil {
			t.Errorf("%s under a wrong token prefix: %d %v, want a 401 JSON error", p, code, r)
		}
	}
	if st, _, _ := ts.s.Status(); st != StatusRolling {
		t.Fatalf("status %s after refused admin calls", st)
	}
	// with the token (path prefix, as AgentJet's client carries it) it works
	if code, r := rawPost(t, u+"/t/"+adminTok+"/stop_engine", `{}`, nil); code != 200 || r["success"] != true {
		t.Fatalf("stop_engine with the token prefix: %d %v", code, r)
	}
	if code, r := rawPost(t, u+"/start_engine", `{}`, map[string]string{"X-Admin-Token": adminTok}); code != 200 || r["success"] != true {
		t.Fatalf("start_engine with X-Admin-Token: %d %v", code, r)
	}
	waitFor(t, "rolling", func() bool { st, _, _ := ts.s.Status(); return st == StatusRolling })
}

// TestClientQuota: a client at its open-episode quota gets 429 with
// Retry-After, and another client is still served.
func TestClientQuota(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	ts := startServer(t, m, testTrainConfig(4, 4), func(c *ServerConfig) { c.MaxOpenPerClient = 3 })
	u := ts.ts.URL
	var held []string
	for i := range 3 {
		code, r := claimRaw(t, u, "greedy")
		if code != 200 || r["success"] != true {
			t.Fatalf("claim %d: %d %v", i, code, r)
		}
		held = append(held, r["episode_uuid"].(string))
	}
	req, _ := http.NewRequest("POST", u+"/claim_episode", strings.NewReader(`{"client_uuid": "greedy", "episode_type": "eval", "discard_episode_timeout": 10}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), `"success":false`) {
		t.Fatalf("claim past the quota: %d Retry-After=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if code, r := claimRaw(t, u, "modest"); code != 200 || r["success"] != true {
		t.Fatalf("another client starved: %d %v", code, r)
	}
	// the Go client waits at its quota until one of its episodes ends
	cli := client.New(u)
	cli.ClientUUID, cli.Backoff = "greedy", client.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}
	got := make(chan error, 1)
	go func() { _, err := cli.BeginEpisode(ctxT(t), client.BeginOptions{}); got <- err }()
	select {
	case err := <-got:
		t.Fatalf("BeginEpisode past the quota returned at once: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	rawPost(t, u+"/abort_episode", endBody("greedy", held[0], "", "0"), nil)
	if err := <-got; err != nil {
		t.Fatalf("BeginEpisode after a slot freed: %v", err)
	}
	// a discard timeout past the server's maximum is refused, naming the bound
	code, r := rawPost(t, u+"/claim_episode", `{"client_uuid": "modest", "episode_type": "train", "discard_episode_timeout": 604800}`, nil)
	if code != 400 || !strings.Contains(fmt.Sprint(r["detail"]), "3600") {
		t.Fatalf("a week-long discard timeout: %d %v", code, r)
	}
}

// TestSlowBodyCut: a request body trickled one byte at a time is cut by the
// read timeout, and the server stays healthy.
func TestSlowBodyCut(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	s, err := NewServer(ServerConfig{Model: m, Train: testTrainConfig(1, 1), Logger: quietLog, Timeouts: httpx.Timeouts{Read: 600 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config = s.HTTPServer()
	ts.Start()
	t.Cleanup(func() { ts.Close(); s.Close() })
	addr := strings.TrimPrefix(ts.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /claim_episode HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", addr)
	cut := false
	for i := 0; i < 100 && !cut; i++ {
		if _, err := conn.Write([]byte(" ")); err != nil {
			cut = true
			break
		}
		conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		var one [1]byte
		if _, err := conn.Read(one[:]); err != nil && !isTimeout(err) {
			cut = true // closed (EOF or reset), or answered and then closed
		} else if err == nil {
			cut = true // an error answer arrived
		}
	}
	if !cut {
		t.Fatal("a trickled body was never cut")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cut after %v with a 600 ms read timeout", d)
	}
	if code, b := rawGet(t, ts.URL+"/health"); code != 200 {
		t.Fatalf("health after the slow body: %d %s", code, b)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// endlessModel generates MaxTokens copies of a 256-byte token, never
// stopping early: enough output to fill the socket buffers of a client that
// does not read.
type endlessModel struct{ version int64 }

func (*endlessModel) Name() string { return "endless" }
func (*endlessModel) ChatPrompt(context.Context, []api.Message, []api.Tool) ([]int, error) {
	return []int{1}, nil
}
func (*endlessModel) TokenBytes(int) []byte { return []byte(strings.Repeat("x", 256)) }
func (e *endlessModel) Generate(ctx context.Context, prompts [][]int, o textgen.GenerateOptions, _ func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	out := make([]textgen.Generation, len(prompts))
	for i := range out {
		out[i].Tokens = make([]int, o.MaxTokens)
		out[i].LogProbs = make([]float32, o.MaxTokens)
		out[i].FinishReason = "length"
	}
	return out, ctx.Err()
}
func (e *endlessModel) Train([]rl.Sample) (rl.Stats, error) { e.version++; return rl.Stats{}, nil }
func (e *endlessModel) Version() int64                      { return e.version }
func (*endlessModel) Save(io.Writer) error                  { return nil }
func (*endlessModel) Load(io.Reader) error                  { return nil }

// TestStalledStreamCut: a streaming client that stops reading is cut by the
// write timeout; nothing is recorded and its episode, idle, is reclaimed.
func TestStalledStreamCut(t *testing.T) {
	tc := testTrainConfig(1, 1)
	tc.MaxResponseTokens = 1 << 14
	s, err := NewServer(ServerConfig{Model: &endlessModel{}, Train: tc, Logger: quietLog, Timeouts: httpx.Timeouts{Write: 300 * time.Millisecond},
		MaxRequestTokens: 1 << 16, MaxEpisodeTokens: 1 << 20, ReapInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config = s.HTTPServer()
	ts.Start()
	t.Cleanup(func() { ts.Close(); s.Close() })
	_, cl := rawPost(t, ts.URL+"/claim_episode", `{"client_uuid": "c", "episode_type": "train", "discard_episode_timeout": 0.5}`, nil)
	key, id := cl["openai_api_key"].(string), cl["episode_uuid"].(string)

	addr := strings.TrimPrefix(ts.URL, "http://")
	d := net.Dialer{}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	body := `{"messages": [{"role": "user", "content": "go"}], "stream": true, "n": 4, "max_tokens": 16384}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, key, len(body), body)
	// read the status line, then stop reading
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("stream status: %q %v", line, err)
	}
	waitFor(t, "the stalled stream's episode to be reclaimed", func() bool { return s.OpenEpisodes() == 0 })
	if a := s.Accounting(); a.Reclaimed != 1 {
		t.Fatalf("accounting %+v, want the episode reclaimed", a)
	}
	code, r := rawPost(t, ts.URL+"/end_episode", endBody("c", id, "t", "1"), nil)
	if code != http.StatusGone {
		t.Fatalf("end of the reclaimed episode: %d %v, want 410", code, r)
	}
}

// TestRewardBound: rewards must be finite and at most MaxAbsReward in
// magnitude (400 otherwise), for single rewards and each element of a list.
func TestRewardBound(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	ts := startServer(t, m, testTrainConfig(4, 4), func(c *ServerConfig) { c.MaxAbsReward = 100 })
	u := ts.ts.URL
	for _, tt := range []struct {
		reward string
		ok     bool
	}{
		{"1e308", false}, {"-1e308", false}, {"100.5", false}, {"[1, 101]", false}, {"[1e308, 1e308]", false},
		{"100", true}, {"-100", true}, {"[100, -100, 50]", true}, {"0", true},
	} {
		_, cl := claimRaw(t, u, "c")
		ep := cl["episode_uuid"].(string)
		code, r := rawPost(t, u+"/end_episode", endBody("c", ep, "t", tt.reward), nil)
		if tt.ok != (code == 200) {
			t.Errorf("reward %s: %d %v, want ok=%v", tt.reward, code, r, tt.ok)
		}
		if !tt.ok && !strings.Contains(fmt.Sprint(r["detail"]), "workflow_output.reward") {
			t.Errorf("reward %s: detail %v does not name the field", tt.reward, r["detail"])
		}
		rawPost(t, u+"/abort_episode", endBody("c", ep, "", "0"), nil)
	}
	// 100 - 100 + mean(100, -100, 50) + 0
	if a := ts.s.Accounting(); math.Abs(a.EndedRewardSum-50.0/3) > 1e-12 || a.Ended != 4 {
		t.Fatalf("accounting %+v, want 4 ended with reward sum 50/3", a)
	}
}

// TestWelford checks the streaming mean and std against the two-pass
// float64 formulas, and that rewards near the bound do not overflow.
func TestWelford(t *testing.T) {
	for _, xs := range [][]float64{{1}, {1, 2, 3, 4}, {1e6, -1e6, 1e6, 0.5}, {3, 3, 3}} {
		var w welford
		var sum float64
		for _, x := range xs {
			w.add(x)
			sum += x
		}
		mean := sum / float64(len(xs))
		var ss float64
		for _, x := range xs {
			ss += (x - mean) * (x - mean)
		}
		std := math.Sqrt(ss / float64(len(xs)))
		if d := w.mean - mean; d > 1e-9*max(1, math.Abs(mean)) || -d > 1e-9*max(1, math.Abs(mean)) {
			t.Errorf("%v: mean %v, want %v", xs, w.mean, mean)
		}
		if d := w.std() - std; d > 1e-9*max(1, std) || -d > 1e-9*max(1, std) {
			t.Errorf("%v: std %v, want %v", xs, w.std(), std)
		}
	}
	// rewards at the default bound, many of them: mean 0, std 1e6
	var w welford
	for range 100000 {
		w.add(1e6)
		w.add(-1e6)
	}
	if math.Abs(w.mean) > 1e-6 || math.Abs(w.std()-1e6) > 1e-3 {
		t.Fatalf("welford at the reward bound: mean %v std %v, want 0 and 1e6", w.mean, w.std())
	}
}

// TestJSONErrorsOnUnknownRoutes: 404 and 405 answer JSON in OpenAI's error
// shape, with Allow on 405, also under a token prefix.
func TestJSONErrorsOnUnknownRoutes(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	ts := startServer(t, m, testTrainConfig(4, 4), func(c *ServerConfig) { c.AdminToken = adminTok })
	u := ts.ts.URL
	for _, tt := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"GET", "/nope", 404, ""}, {"POST", "/v1/completions", 404, ""}, {"DELETE", "/", 404, ""},
		{"GET", "/claim_episode", 405, "POST"}, {"POST", "/get_engine_status", 405, "GET, HEAD"},
		{"POST", "/v1/models", 405, "GET, HEAD"}, {"PUT", "/v1/models/tiny", 405, "GET, HEAD"},
		{"GET", "/v1/chat/completions", 405, "POST"}, {"GET", "/t/" + adminTok + "/nope", 404, ""},
		{"GET", "/t/" + adminTok + "/stop_engine", 405, "POST"},
	} {
		req, _ := http.NewRequest(tt.method, u+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
			!strings.Contains(string(b), `"error":{`) || !strings.Contains(string(b), `"message":`) {
			t.Errorf("%s %s: %d %s %s, want %d JSON error", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), b, tt.code)
		}
		if got := resp.Header.Get("Allow"); got != tt.allow {
			t.Errorf("%s %s: Allow %q, want %q", tt.method, tt.path, got, tt.allow)
		}
		if strings.Contains(string(b), adminTok) {
			t.Errorf("%s: the answer echoes the admin token: %s", tt.path, b)
		}
	}
}

// TestCheckListen: beyond loopback only with an admin token.
func TestCheckListen(t *testing.T) {
	for _, tt := range []struct {
		host, token string
		ok          bool
	}{
		{"127.0.0.1", "", true}, {"::1", "", true}, {"[::1]", "", true}, {"localhost", "", true}, {"127.0.0.5", "", true},
		{"0.0.0.0", "", false}, {"", "", false}, {"::", "", false}, {"10.0.0.7", "", false}, {"example.org", "", false},
		{"0.0.0.0", "t", true}, {"", "t", true},
	} {
		if err := CheckListen(tt.host, tt.token); (err == nil) != tt.ok {
			t.Errorf("CheckListen(%q, %q) = %v, want ok=%v", tt.host, tt.token, err, tt.ok)
		}
	}
}

// delayedModel is scriptModel with a generation that takes delay.
type delayedModel struct {
	scriptModel
	delay time.Duration
}

func (m *delayedModel) Generate(ctx context.Context, prompts [][]int, o textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	select {
	case <-time.After(m.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return m.scriptModel.Generate(ctx, prompts, o, emit)
}

// TestLongGenerationOutlivesReadTimeout: a generation longer than both
// the read and the write timeout is answered, streamed or not: the read
// timeout bounds reading the request, and the write deadline is renewed
// once sampling is done (the http.Server's own runs from the request's
// start).
func TestLongGenerationOutlivesReadTimeout(t *testing.T) {
	m := &delayedModel{scriptModel: scriptModel{script: "done"}, delay: 1500 * time.Millisecond}
	s, err := NewServer(ServerConfig{Model: m, Train: testTrainConfig(1, 1), Logger: quietLog,
		Timeouts: httpx.Timeouts{Read: 300 * time.Millisecond, Write: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config = s.HTTPServer()
	ts.Start()
	t.Cleanup(func() { ts.Close(); s.Close() })
	_, cl := claimRaw(t, ts.URL, "c")
	hdr := map[string]string{"Authorization": "Bearer " + cl["openai_api_key"].(string)}
	for _, stream := range []string{"false", "true"} {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions",
			strings.NewReader(`{"messages": [{"role": "user", "content": "x"}], "max_tokens": 8, "stream": `+stream+`}`))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := `"content":"done"`
		if stream == "true" {
			want = "data: [DONE]" // the content comes one byte-token per chunk
		}
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Fatalf("stream=%s: %d %s", stream, resp.StatusCode, b)
		}
	}
}
