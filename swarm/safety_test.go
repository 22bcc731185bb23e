package swarm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/dashboard"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/record"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// journaledServer starts a rolling server of the tiny tabular preset
// whose finished episodes are journaled on an embedded bus with a run
// directory; it returns the server and the directory.
func journaledServer(t *testing.T, tc TrainConfig, mod func(*ServerConfig)) (*testServer, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := bus.Open(context.Background(), bus.Config{DataDir: filepath.Join(dir, "nats"), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // after the server's Close
	m, _ := tabular.NewPreset("tiny")
	return startServer(t, m, tc, func(c *ServerConfig) {
		c.JetStream, c.CheckpointDir = b.JetStream(), dir
		c.Train.CheckpointEvery = 1
		if mod != nil {
			mod(c)
		}
	}), dir
}

// publish publishes rec on the server's episode subject, signed with
// key when it is not nil.
func publish(t *testing.T, s *Server, key []byte, body []byte, msgID string) {
	t.Helper()
	hdr := map[string]string{}
	if key != nil {
		hdr[record.Header] = record.Sign(key, s.jr.subject, body)
	}
	if err := publishRaw(s, body, hdr, msgID); err != nil {
		t.Fatal(err)
	}
}

// publishRaw publishes body on the server's episode subject with hdr, as
// anyone allowed to publish there could.
func publishRaw(s *Server, body []byte, hdr map[string]string, msgID string) error {
	msg := &nats.Msg{Subject: s.jr.subject, Data: body, Header: nats.Header{}}
	for k, v := range hdr {
		msg.Header.Set(k, v)
	}
	_, err := s.jr.js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(msgID))
	return err
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// readJSONL reads the complete lines of a JSON-lines file (none before
// the file exists; a line being written is left out).
func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	lines := strings.Split(string(b), "\n")
	for _, line := range lines[:len(lines)-1] {
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("%s: %v: %s", path, err, line)
		}
		out = append(out, v)
	}
	return out
}

// droppedLines reads the run directory's dropped.jsonl.
func droppedLines(t *testing.T, dir string) []api.DroppedEpisode {
	return readJSONL[api.DroppedEpisode](t, filepath.Join(dir, DroppedFile))
}

// readRows reads the run directory's train_metrics.jsonl as objects.
func readRows(t *testing.T, dir string) []map[string]any {
	return readJSONL[map[string]any](t, filepath.Join(dir, TrainMetricsFile))
}

// TestJournalTakesOnlyRealEpisodes: a trainer takes a correctly signed
// episode (its one malformed sample dropped alone), and refuses unsigned,
// forged, malformed and duplicated ones, each counted by reason in
// /metrics, the training status and dropped.jsonl.
func TestJournalTakesOnlyRealEpisodes(t *testing.T) {
	ts, dir := journaledServer(t, testTrainConfig(1, 1), nil)
	s := ts.s
	key, err := record.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	good := api.EpisodeRecord{ID: "real", TaskID: "t", Reward: 1, Samples: []rl.Sample{
		{Prompt: []int{'h'}, Actions: []int{'i'}, LogProbs: []float32{-5}},
		{Prompt: []int{'h'}, Actions: []int{'i', 'j'}, LogProbs: []float32{-5}}, // log-probs not one per action
	}}
	publish(t, s, key, mustMarshal(good), "m1")
	publish(t, s, nil, mustMarshal(api.EpisodeRecord{ID: "unsigned", TaskID: "t", Reward: 1}), "m2")
	publish(t, s, []byte("a leaked NATS password is no key"), mustMarshal(api.EpisodeRecord{ID: "forged", TaskID: "t", Reward: 1}), "m3")
	publish(t, s, key, []byte(`{"id": "malformed", "reward": "much"}`), "m4")
	publish(t, s, key, mustMarshal(good), "m5") // the same episode again, under another message id
	waitFor(t, "every message handled", func() bool { return len(s.drops.Counts()) == 4 && s.globalStep() == 1 })
	want := map[string]int64{record.Unsigned: 1, record.Forged: 1, record.Malformed: 1, "duplicate": 1}
	for reason, n := range want {
		if got := s.drops.Counts()[reason]; got != n {
			t.Errorf("dropped as %s: %d, want %d", reason, got, n)
		}
	}
	if a := s.Accounting(); a.Recovered != 1 || a.TrainedEpisodes != 1 {
		t.Errorf("accounting %+v: want the real episode taken and trained", a)
	}
	st, err := ts.cli.TrainingStatus(ctxT(t))
	if err != nil || st.DroppedSamples != 1 || st.Episodes.Dropped[record.Forged] != 1 || len(st.RecentDrops) != 4 {
		t.Fatalf("training status %+v, %v", st, err)
	}
	resp, err := http.Get(ts.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{`swarm_dropped_episodes_total{reason="forged"} 1`, `swarm_dropped_episodes_total{reason="unsigned"} 1`,
		`swarm_dropped_episodes_total{reason="malformed"} 1`, `swarm_dropped_episodes_total{reason="duplicate"} 1`, "swarm_dropped_samples_total 1"} {
		if !strings.Contains(string(m), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	s.flushDrops()
	got := map[string]string{}
	for _, d := range droppedLines(t, dir) {
		got[d.Reason] = d.EpisodeID
	}
	if got[record.Forged] != "forged" || got[record.Unsigned] != "unsigned" || got["duplicate"] != "real" || len(got) != 4 {
		t.Errorf("%s: %v", DroppedFile, got)
	}
}

// TestStalenessPolicy: episodes sampled up to MaxStaleness versions before
// the step that trains them are trained, and the step reports their lag;
// staler ones are dropped with reason stale, by id, in dropped.jsonl.
func TestStalenessPolicy(t *testing.T) {
	tc := testTrainConfig(1, 2)
	tc.MaxStaleness = 3
	ts, dir := journaledServer(t, tc, nil)
	s := ts.s
	for i := range 5 {
		finish(t, ts, "warm", float64(i%2))
		finish(t, ts, "warm", float64((i+1)%2))
	}
	waitFor(t, "five steps", func() bool { return len(readRows(t, dir)) == 5 })
	key, _ := record.LoadOrCreateKey(dir)
	rec := func(id string, version int64, reward float64) []byte {
		return mustMarshal(api.EpisodeRecord{ID: id, TaskID: "old", Reward: reward, Samples: []rl.Sample{
			{Prompt: []int{'o'}, Actions: []int{'k'}, LogProbs: []float32{-5}, Version: version}}})
	}
	publish(t, s, key, rec("lag-3", 2, 0), "a")
	publish(t, s, key, rec("lag-4", 1, 1), "b")
	publish(t, s, key, rec("lag-2", 3, 1), "c")
	waitFor(t, "the stale episode dropped and a step on the others", func() bool { return len(readRows(t, dir)) == 6 })
	rows := readRows(t, dir)
	last := rows[len(rows)-1]
	if ids := last["episode_ids"].([]any); len(ids) != 2 || last["staleness_max"].(float64) != 3 || last["staleness_mean"].(float64) != 2.5 {
		t.Fatalf("the step on the stale episodes: %v", last)
	}
	s.flushDrops()
	if d := droppedLines(t, dir); len(d) != 1 || d[0].EpisodeID != "lag-4" || d[0].Reason != "stale" || d[0].TaskID != "old" {
		t.Fatalf("%s: %+v, want lag-4 as stale", DroppedFile, d)
	}
}

// TestPartialBatchAfterGroupTimeout: a task short of its group trains on
// its own once it has waited GroupTimeout, in a batch short of BatchSize;
// with no timeout it keeps waiting.
func TestPartialBatchAfterGroupTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{0, 150 * time.Millisecond} {
		tc := testTrainConfig(2, 2)
		tc.GroupTimeout = timeout
		m, _ := tabular.NewPreset("tiny")
		ts := startServer(t, m, tc, nil)
		finish(t, ts, "lonely", 1)
		time.Sleep(400 * time.Millisecond)
		if timeout == 0 {
			if ts.s.globalStep() != 0 || ts.s.BufferedEpisodes() != 1 {
				t.Fatalf("without a group timeout: step %d, %d buffered; want the episode waiting", ts.s.globalStep(), ts.s.BufferedEpisodes())
			}
			continue
		}
		waitFor(t, "the lonely episode trained", func() bool { return ts.s.Accounting().TrainedEpisodes == 1 })
		if ts.s.globalStep() != 1 || ts.s.BufferedEpisodes() != 0 {
			t.Fatalf("after the group timeout: step %d, %d buffered", ts.s.globalStep(), ts.s.BufferedEpisodes())
		}
	}
}

// TestJournalDefersBeyondTheBuffer: journaled episodes beyond the buffer's
// bound go back to the journal instead of being dropped.
func TestJournalDefersBeyondTheBuffer(t *testing.T) {
	tc := testTrainConfig(1, 2)
	tc.GroupTimeout = 0 // single episodes never make a batch
	ts, dir := journaledServer(t, tc, nil)
	key, _ := record.LoadOrCreateKey(dir)
	limit := bufferLimit(tc)
	for i := range limit + 5 {
		id := "e" + string(rune('A'+i))
		publish(t, ts.s, key, mustMarshal(api.EpisodeRecord{ID: id, TaskID: id, Reward: 1}), id)
	}
	waitFor(t, "the buffer full and the rest handed back", func() bool {
		return ts.s.BufferedEpisodes() == limit && ts.s.Accounting().Deferred >= 5
	})
	if a := ts.s.Accounting(); a.Dropped != 0 {
		t.Fatalf("dropped %d episodes: %+v", a.Dropped, a)
	}
	info, err := ts.s.jr.stream.Info(ctxT(t))
	if err != nil || info.State.Msgs != uint64(limit+5) {
		t.Fatalf("journal holds %d messages (%v), want all %d", info.State.Msgs, err, limit+5)
	}
}

// TestRunDirectoryFiles: a short run writes every file the dashboard
// reads (the new train_metrics.jsonl fields, a sample file per step with
// the conversations, dropped.jsonl), the dashboard's reader parses them,
// and the server serves that dashboard at /dashboard/.
func TestRunDirectoryFiles(t *testing.T) {
	tc := testTrainConfig(1, 2)
	tc.CollectionMethod = CollectNonDummyTasks
	ts, dir := journaledServer(t, tc, nil)
	ctx := ctxT(t)
	play := func(task string, reward float64, parts bool) {
		ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{TaskID: task})
		if err != nil {
			t.Fatal(err)
		}
		body := `{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi ` + task + `"}], "max_tokens": 3}`
		if parts {
			body = `{"messages": [{"role": "user", "content": [{"type": "text", "text": "in "}, {"type": "text", "text": "parts"}]}], "max_tokens": 3, "n": 2}`
		}
		req, _ := http.NewRequest("POST", ep.BaseURL+"/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+ep.APIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("chat: %v %v", resp, err)
		}
		resp.Body.Close()
		if err := ts.cli.EndEpisode(ctx, ep, task, client.WorkflowResult{Reward: reward}); err != nil {
			t.Fatal(err)
		}
	}
	play("dummy", 1, false)
	play("dummy", 1, false) // equal rewards: dropped as dummy
	play("real", 0, false)
	play("real", 1, true)
	waitFor(t, "a step", func() bool { return len(readRows(t, dir)) == 1 })
	ts.s.flushDrops()

	rows := readRows(t, dir)
	row := rows[len(rows)-1]
	for _, k := range []string{"model", "completion_tokens_mean", "zero_spread_groups", "phase_s", "tokens_per_s", "staleness_mean", "staleness_max", "episodes_by_state"} {
		if _, ok := row[k]; !ok {
			t.Errorf("%s lacks %s: %v", TrainMetricsFile, k, row)
		}
	}
	if ph := row["phase_s"].(map[string]any); len(ph) != 3 || ph["train"] == nil || ph["rollout"] == nil || ph["sync"] == nil {
		t.Errorf("phase_s: %v", ph)
	}
	es := row["episodes_by_state"].(map[string]any)
	if es["claimed"].(float64) != 4 || es["ended"].(float64) != 4 || es["dropped"].(map[string]any)["dummy"].(float64) != 2 {
		t.Errorf("episodes_by_state: %v", es)
	}

	// The dashboard reads what the server wrote, through its API.
	get := func(path string, out any) {
		t.Helper()
		resp, err := http.Get(ts.ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		} else if !strings.Contains(string(b), `href="/dashboard/static/style.css"`) {
			t.Fatalf("GET %s: the page's links are not below /dashboard/:\n%s", path, b)
		}
	}
	get("/dashboard/", nil)
	var run dashboard.RunInfo
	get("/dashboard/api/run/_/steps", &run)
	if len(run.Agents) != 1 || len(run.Agents[0].Steps) != 1 || run.Agents[0].Dropped["dummy"] != 2 {
		t.Fatalf("the dashboard's run: %+v", run)
	}
	st := run.Agents[0].Steps[0]
	if st.Step != 1 || st.Model != "tiny" || st.CompletionTokensMean == nil || st.ZeroSpreadGroups == nil || *st.ZeroSpreadGroups != 0 ||
		st.TokensPerS == nil || st.StalenessMax == nil || len(st.PhaseS) != 3 || st.EpisodesByState == nil || st.EpisodesByState.Dropped["dummy"] != 2 {
		t.Fatalf("the dashboard's step row: %+v", st)
	}
	var detail dashboard.StepDetail
	get("/dashboard/api/run/_/agent/"+run.Agents[0].Key+"/step/1", &detail)
	if len(detail.Groups) != 1 || detail.Groups[0].TaskID != "real" || len(detail.Groups[0].Samples) != 2 {
		t.Fatalf("the step's samples: %+v", detail)
	}
	var texts []string
	for _, smp := range detail.Groups[0].Samples {
		if smp.Version == nil || *smp.Version != 0 {
			t.Errorf("sample %s: version %v, want 0", smp.EpisodeID, smp.Version)
		}
		for _, c := range smp.Completions {
			if c.FinishReason == "" || c.Completion == "" {
				t.Errorf("sample %s: completion %q, finish reason %q", smp.EpisodeID, c.Completion, c.FinishReason)
			}
			for _, m := range c.Messages {
				texts = append(texts, m.Role+":"+m.Content)
			}
		}
	}
	if j := strings.Join(texts, "|"); j != "system:be brief|user:hi real|user:in parts|user:in parts" {
		t.Errorf("the completions' messages: %s", j)
	}
	if d := droppedLines(t, dir); len(d) != 2 || d[0].Reason != "dummy" {
		t.Errorf("%s: %+v", DroppedFile, d)
	}
}

// TestEpisodeKeyRequired: the split roles on NATS refuse to start without
// a key, saying how to give one; a single process with a directory makes
// its own key there, mode 0600, and keeps it across restarts.
func TestEpisodeKeyRequired(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, _ := tabular.NewPreset("tiny")
	for _, role := range []string{RoleRollout, RoleTrain, RoleBoth} {
		_, err := NewServer(ServerConfig{Model: m, Role: role, JetStream: b.JetStream(), Logger: quietLog})
		if err == nil || !strings.Contains(err.Error(), record.KeyEnv) {
			t.Errorf("role %q without a key: %v, want a refusal naming %s", role, err, record.KeyEnv)
		}
	}
	if _, err := NewServer(ServerConfig{Model: m, Role: RoleTrain, JetStream: b.JetStream(), Logger: quietLog, EpisodeKey: []byte("short")}); err == nil {
		t.Error("a short key was accepted")
	}
	dir := t.TempDir()
	var keys []string
	for range 2 {
		s, err := NewServer(ServerConfig{Model: m, JetStream: b.JetStream(), CheckpointDir: dir, Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, string(s.jr.key))
		s.Close()
	}
	fi, err := os.Stat(filepath.Join(dir, record.KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 || keys[0] != keys[1] {
		t.Fatalf("the server's own key: %v %v, same across restarts: %v", fi, err, keys[0] == keys[1])
	}
}

// blockingModel trains only once released, as a large model's long step.
type blockingModel struct {
	*tabular.Model
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (m *blockingModel) Train(batch []rl.Sample) (rl.Stats, error) {
	m.once.Do(func() { close(m.entered) })
	<-m.release
	return m.Model.Train(batch)
}

// TestCloseWhileTraining: Close returns within CloseTimeout while a
// training step runs, without a final checkpoint; the journal keeps the
// step's episodes for the next start.
func TestCloseWhileTraining(t *testing.T) {
	tm, _ := tabular.NewPreset("tiny")
	m := &blockingModel{Model: tm, entered: make(chan struct{}), release: make(chan struct{})}
	dir := t.TempDir()
	b, err := bus.Open(context.Background(), bus.Config{DataDir: filepath.Join(dir, "nats"), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ts := startServer(t, m, testTrainConfig(1, 1), func(c *ServerConfig) {
		c.JetStream, c.CheckpointDir, c.CloseTimeout = b.JetStream(), dir, 300*time.Millisecond
	})
	finish(t, ts, "t", 1)
	<-m.entered
	start := time.Now()
	if err := ts.s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v while a step ran", d)
	}
	if _, err := os.Stat(filepath.Join(dir, CheckpointFile)); !os.IsNotExist(err) {
		t.Fatalf("a checkpoint was written while the step ran: %v", err)
	}
	info, err := ts.s.jr.stream.Info(ctxT(t))
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("journal holds %d episodes (%v), want the step's one", info.State.Msgs, err)
	}
	close(m.release)
	ts.s.wg.Wait() // the step ends before the directory goes
}

// TestMetricsRowRestored: a process that died after a checkpoint landed
// but before the step's row was appended gets the row back from
// JournalFile at the next boot, once.
func TestMetricsRowRestored(t *testing.T) {
	dir := t.TempDir()
	row := map[string]any{"step": 0, "episode_ids": []string{"e-1"}}
	raw, _ := json.Marshal(journalRecord{Step: 0, Row: row})
	if err := os.WriteFile(filepath.Join(dir, JournalFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := bus.Open(context.Background(), bus.Config{DataDir: filepath.Join(dir, "nats"), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for range 2 {
		m, _ := tabular.NewPreset("tiny")
		ts := startServer(t, m, testTrainConfig(1, 1), func(c *ServerConfig) { c.JetStream, c.CheckpointDir = b.JetStream(), dir })
		ts.ts.Close()
		ts.s.Close()
	}
	if rows := readRows(t, dir); len(rows) != 1 || rows[0]["episode_ids"].([]any)[0] != "e-1" {
		t.Fatalf("rows after two boots: %v", rows)
	}
}

// TestServeStopEndsDashboardStreams: stopping a server from Serve ends the
// dashboard's event streams rather than waiting out the shutdown timeout.
func TestServeStopEndsDashboardStreams(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, TrainMetricsFile), []byte(`{"step": 1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, _ := tabular.NewPreset("tiny")
	_, url, stop, err := Serve("127.0.0.1:0", ServerConfig{Model: m, CheckpointDir: dir, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url + "/dashboard/api/run/_/events")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("event stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("stop took %v with an event stream open", d)
	}
}
