package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/swarm/rundir"
)

// serve serves dir's dashboard for the test.
func serve(t *testing.T, dir string) *httptest.Server {
	t.Helper()
	s, err := New(Config{Dir: dir, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { s.Close() })
	return srv
}

// get fetches path and returns the status and body.
func get(t *testing.T, srv *httptest.Server, method, path string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = path // send the path as written, escapes and dots included
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func getJSON(t *testing.T, srv *httptest.Server, path string, v any) {
	t.Helper()
	code, body, _ := get(t, srv, "GET", path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

func TestNewRejects(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	writeFile(t, file, "")
	for _, dir := range []string{"", filepath.Join(t.TempDir(), "missing"), file} {
		if _, err := New(Config{Dir: dir}); err == nil {
			t.Errorf("New(%q) succeeded", dir)
		}
	}
}

func TestAPI(t *testing.T) {
	srv := serve(t, fixtureDir)

	var runs struct{ Runs []RunInfo }
	getJSON(t, srv, "/api/runs", &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].ID != RootID || runs.Runs[0].Step != fixtureSteps || len(runs.Runs[0].Agents) != 2 {
		t.Fatalf("runs: %s", asJSON(runs))
	}

	var steps RunInfo
	getJSON(t, srv, "/api/run/_/steps", &steps)
	for _, a := range steps.Agents {
		if len(a.Steps) != fixtureSteps || a.Steps[0].Stats["KL"] == 0 || a.Steps[0].EpisodesByState == nil {
			t.Errorf("%s: %d steps, first %s", a.Key, len(a.Steps), asJSON(a.Steps[0]))
		}
	}
	if got := steps.Agents[0].Dropped; got["stale"] != 2 {
		t.Errorf("planner's dropped episodes %v", got)
	}

	var d StepDetail
	getJSON(t, srv, "/api/run/_/agent/planner/step/5", &d)
	if !d.Recorded || len(d.Groups) != 2 || d.Row == nil || d.Row.Step != 5 {
		t.Fatalf("step 5: %s", asJSON(d))
	}
	for _, g := range d.Groups {
		if len(g.Samples) != 4 {
			t.Errorf("group %s has %d samples, want 4", g.TaskID, len(g.Samples))
		}
		for _, s := range g.Samples {
			if s.Version == nil || s.Reward == nil || len(s.Completions) != 1 || len(s.Completions[0].Messages) != 2 || len(s.RewardComponents) != 3 {
				t.Errorf("sample %s: %s", s.EpisodeID, asJSON(s))
			}
		}
	}
	d = StepDetail{}
	getJSON(t, srv, "/api/run/_/agent/planner/step/6", &d)
	if !d.Groups[1].ZeroSpread {
		t.Errorf("step 6's second group should have zero spread: %s", asJSON(d.Groups[1]))
	}
	d = StepDetail{}
	getJSON(t, srv, "/api/run/_/agent/executor/step/99", &d)
	if d.Recorded || len(d.Groups) != 0 || d.Row != nil {
		t.Errorf("a step without files: %s", asJSON(d))
	}
}

// TestNoPathTraversal sends URL parameters that try to leave the served
// directory; none may read a file, and none may name anything but the
// runs, agents and steps found.
func TestNoPathTraversal(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "served")
	writeFile(t, filepath.Join(root, "secret", rundir.MetricsFile), `{"step": 1, "model": "SECRET"}`+"\n")
	writeFile(t, filepath.Join(root, "secret", rundir.SampleFile(1)), `{"episode_id": "SECRET", "task_id": "SECRET"}`+"\n")
	writeFile(t, filepath.Join(dir, "planner-8001", rundir.MetricsFile), `{"step": 1}`+"\n")
	if err := os.Symlink(filepath.Join(root, "secret", rundir.SamplesDir), filepath.Join(dir, "planner-8001", rundir.SamplesDir)); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	srv := serve(t, dir)
	for _, path := range []string{
		"/run/../secret/",
		"/run/..%2Fsecret/",
		"/run/%2E%2E/",
		"/api/run/..%2F..%2Fsecret/steps",
		"/api/run/%2E%2E%2Fsecret/steps",
		"/api/run/_/agent/..%2F..%2Fsecret/step/1",
		"/api/run/_/agent/planner/step/..%2F..%2Fsecret",
		"/api/run/_/agent/planner/step/-1",
		"/api/run/_/agent/planner/step/1e3",
		"/api/run/_/agent/planner/step/1", // samples/ links outside: refused
		"/run/_/agent/planner/step/1",
		"/api/run/secret/steps",
		"/static/../server.go",
		"/static/..%2Fserver.go",
		"/static/%2e%2e/templates/run.html",
		"/api/run/_/events/../../../secret",
	} {
		code, body, _ := get(t, srv, "GET", path)
		if strings.Contains(body, "SECRET") || strings.Contains(body, "package dashboard") || strings.Contains(body, "{{") {
			t.Errorf("GET %s (%d) read outside the directory: %.200s", path, code, body)
		}
		if code == http.StatusOK {
			t.Errorf("GET %s = 200, want an error", path)
		}
	}
}

func TestMethodsAndHeaders(t *testing.T) {
	srv := serve(t, fixtureDir)
	for _, method := range []string{"POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
		code, _, h := get(t, srv, method, "/api/runs")
		if code != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d, Allow %q", method, code, h.Get("Allow"))
		}
	}
	for _, path := range []string{"/", "/run/_/", "/run/_/charts", "/api/runs", "/static/app.js", "/static/style.css", "/favicon.ico", "/nothing"} {
		code, body, h := get(t, srv, "GET", path)
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
		if path != "/nothing" && code != http.StatusOK {
			t.Errorf("GET %s: %d", path, code)
		}
		// No inline script or style, and nothing from another origin.
		if strings.HasSuffix(path, "/") || strings.HasSuffix(path, "charts") {
			for _, bad := range []string{"<script>", " style=", "<style", "http://", "https://", " on"} {
				if bad == "http://" && strings.Count(body, "http://") == strings.Count(body, `xmlns="http://www.w3.org/2000/svg"`) {
					continue
				}
				if strings.Contains(body, bad) {
					t.Errorf("GET %s: the page holds %q", path, bad)
				}
			}
		}
	}
}

// TestRunPage checks the run page of the fixture: each agent's charts,
// the step count, and a note for what has no data.
func TestRunPage(t *testing.T) {
	srv := serve(t, fixtureDir)
	_, page, _ := get(t, srv, "GET", "/")
	for _, want := range []string{
		`<strong id="stepcount">step 12</strong>`, "planner", "executor",
		`data-agent="planner" data-metric="reward"`, `data-agent="executor" data-metric="credit"`,
		`data-metric="phase"`, `data-metric="episodes_lost"`, "tokens_over_limit", "1 bad line",
		`src="/static/app.js"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the run page lacks %s", want)
		}
	}

	// A run that writes only today's fields: the new panels say "no data yet".
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, rundir.MetricsFile), `{"step": 1, "reward_mean": 0.5, "reward_std": 0.1, "stats.KL": 0.01}`+"\n")
	srv = serve(t, dir)
	_, page, _ = get(t, srv, "GET", "/")
	for _, metric := range []string{"completion_tokens", "zero_spread", "phase", "tokens_per_s", "episodes", "team_episodes", "credit", "reward_components"} {
		if !strings.Contains(page, `<p class="nodata" data-metric="`+metric+`">`) {
			t.Errorf("no \"no data yet\" note for %s", metric)
		}
	}
	if strings.Count(page, `<circle class="pt"`) != 2 { // the reward's and the KL's one point
		t.Errorf("%d markers, want 2", strings.Count(page, `<circle class="pt"`))
	}
}

// TestRunList serves a directory of several runs: / lists them and each
// has its page, whatever its ID's characters.
func TestRunList(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "sweep", "lr 1e-5", "planner-8001", rundir.MetricsFile), `{"step": 3}`+"\n")
	writeFile(t, filepath.Join(dir, "baseline", rundir.MetricsFile), `{"step": 7}`+"\n")
	srv := serve(t, dir)
	_, page, _ := get(t, srv, "GET", "/")
	for _, want := range []string{`href="/run/baseline/"`, `href="/run/sweep%2Flr%201e-5/"`, "step 7", "step 3"} {
		if !strings.Contains(page, want) {
			t.Errorf("the run list lacks %s:\n%s", want, page)
		}
	}
	for _, path := range []string{"/run/baseline/", "/run/sweep%2Flr%201e-5/", "/api/run/sweep%2Flr%201e-5/steps"} {
		if code, body, _ := get(t, srv, "GET", path); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
	var runs struct{ Runs []RunInfo }
	getJSON(t, srv, "/api/runs", &runs)
	if len(runs.Runs) != 2 || runs.Runs[1].ID != "sweep/lr 1e-5" {
		t.Errorf("runs %s", asJSON(runs))
	}

	// An empty directory waits for its first run.
	srv = serve(t, t.TempDir())
	if _, page, _ := get(t, srv, "GET", "/"); !strings.Contains(page, "No runs yet") {
		t.Errorf("an empty directory's page: %s", page)
	}
}

// TestMount: a dashboard mounted below the root (Config.Mount) puts the
// request's prefix before every link of its pages, and its pages work
// there.
func TestMount(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a", rundir.MetricsFile), `{"step": 1}`+"\n")
	writeFile(t, filepath.Join(dir, "b", rundir.MetricsFile), `{"step": 2}`+"\n")
	s, err := New(Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Mount: func(r *http.Request) string { return r.Header.Get("X-Test-Mount") }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mux := http.NewServeMux()
	mux.Handle("/t/tok/dash/", http.StripPrefix("/t/tok/dash", s))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-Mount", "/t/tok/dash/")
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()
	_, list, _ := get(t, srv, "GET", "/t/tok/dash/")
	_, page, _ := get(t, srv, "GET", "/t/tok/dash/run/a/")
	for _, want := range []string{`href="/t/tok/dash/run/a/"`, `href="/t/tok/dash/static/style.css"`} {
		if !strings.Contains(list, want) {
			t.Errorf("the run list lacks %s", want)
		}
	}
	for _, want := range []string{`src="/t/tok/dash/static/app.js"`, `data-base="/t/tok/dash/run/a/"`, `data-events="/t/tok/dash/api/run/a/events"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the run page lacks %s", want)
		}
	}
	for _, path := range []string{"/t/tok/dash/static/app.js", "/t/tok/dash/run/a/charts"} {
		if code, _, _ := get(t, srv, "GET", path); code != http.StatusOK {
			t.Errorf("GET %s: %d", path, code)
		}
	}
}

// event is one server-sent event.
type event struct {
	id, name string
	data     RunInfo
}

// readEvents parses the server-sent events of r into ch.
func readEvents(r io.Reader, ch chan<- event) {
	defer close(ch)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<24)
	var ev event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name != "" {
				ch <- ev
			}
			ev = event{}
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data)
		}
	}
}

func subscribe(t *testing.T, srv *httptest.Server, path, lastID string) <-chan event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	ch := make(chan event, 16)
	go readEvents(resp.Body, ch)
	return ch
}

func next(t *testing.T, ch <-chan event) event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return event{}
}

// TestEvents follows a run over the event stream: only new rows are sent,
// a truncated file is sent again, and a client of another process gets
// everything.
func TestEvents(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "planner-8001", rundir.MetricsFile)
	writeFile(t, path, `{"step": 1, "reward_mean": 0.1}`+"\n"+`{"step": 2, "reward_mean": 0.2}`+"\n")
	srv := serve(t, dir)
	var info RunInfo
	getJSON(t, srv, "/api/run/_/steps", &info)

	ch := subscribe(t, srv, "/api/run/_/events?since="+strconv.FormatUint(info.Rev, 10), "")
	appendFile(t, path, `{"step": 3, "reward_mean": 0.3}`+"\n")
	ev := next(t, ch)
	if ev.name != "steps" || len(ev.data.Agents) != 1 || len(ev.data.Agents[0].Steps) != 1 || ev.data.Agents[0].Steps[0].Step != 3 {
		t.Fatalf("event %s %s", ev.name, asJSON(ev.data))
	}
	if ev.data.Step != 3 || ev.data.Agents[0].Key != "planner" {
		t.Errorf("event %s", asJSON(ev.data))
	}

	// A second agent starts writing.
	writeFile(t, filepath.Join(dir, "executor-8002", rundir.MetricsFile), `{"step": 3}`+"\n")
	ev = next(t, ch)
	if len(ev.data.Agents) != 2 || len(ev.data.Agents[1].Steps)+len(ev.data.Agents[0].Steps) != 1 {
		t.Errorf("new agent's event %s", asJSON(ev.data))
	}

	// Truncated: what the file holds now comes again.
	writeFile(t, path, `{"step": 1, "reward_mean": 0.9}`+"\n")
	ev = next(t, ch)
	if a := ev.data.Agents[0]; a.Rows != 1 || len(a.Steps) != 1 || *a.Steps[0].RewardMean != 0.9 {
		t.Errorf("after truncation %s", asJSON(ev.data))
	}

	// A browser that reconnects with an ID from another process.
	ch2 := subscribe(t, srv, "/api/run/_/events", "otherprocess-5")
	ev = next(t, ch2)
	if n := len(ev.data.Agents[0].Steps) + len(ev.data.Agents[1].Steps); n != 2 {
		t.Errorf("a client of another process got %d rows, want all 2", n)
	}
	if !strings.Contains(ev.id, "-") {
		t.Errorf("event ID %q", ev.id)
	}

	code, _, _ := get(t, srv, "GET", "/api/run/nope/events")
	if code != http.StatusNotFound {
		t.Errorf("events of an unknown run: %d", code)
	}
}

// TestCloseEndsStreams checks that Close ends open event streams, so that
// http.Server.Shutdown does not wait on them.
func TestCloseEndsStreams(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, rundir.MetricsFile), `{"step": 1}`+"\n")
	s, err := New(Config{Dir: dir, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/api/run/_/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream stayed open after Close")
	}
}
