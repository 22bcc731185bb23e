package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
)

// chaosPlan sizes a chaos run.
type chaosPlan struct {
	clients  int
	duration time.Duration
	kills    int
	seed     uint64
}

// TestChaosNoRewardLost runs many concurrent clients against a real server
// process (claims, chats, random rewards, aborts, episodes left idle past
// their discard timeout) while the process is SIGKILLed and restarted with
// the same arguments. After a final SIGTERM every episode whose end_episode
// got 200 must be in a training step that holds (the last row of its step
// number in train_metrics.jsonl, up to the final checkpoint's step) or
// still in the episode journal, and no episode may be in two steps.
//
// go test runs 16 clients for 10 s; TROUPE_CHAOS_FULL=1 (make test-chaos)
// runs 64 clients for 60 s. The server is the test binary re-executed, so under go test -race the
// server is race-checked too; its log is scanned for race reports.
func TestChaosNoRewardLost(t *testing.T) {
	plan := chaosPlan{clients: 64, duration: 60 * time.Second, kills: 2, seed: 1}
	if testing.Short() || os.Getenv("TROUPE_CHAOS_FULL") != "1" {
		plan = chaosPlan{clients: 16, duration: 10 * time.Second, kills: 2, seed: 2}
	}
	runChaos(t, plan)
}

// chaosTasks are the task ids the clients share, so that groups form.
var chaosTasks = []string{"t0", "t1", "t2", "t3"}

// chaosConfig keeps every finished episode trainable: no staleness drops
// (episodes wait across restarts), and at most 32 open episodes, so that
// the buffer (8 batches of 4 tasks × 4 episodes, 128 episodes) never
// overflows. An idle episode holds the drain at most 2 s.
const chaosConfig = `ajet:
  swarm_mode_sample_collection_method: rollout_until_finish_enough_tasks
  rollout:
    max_env_worker: 32
troupe:
  max_staleness: 1000000000
  drain_timeout_s: 2
`

func runChaos(t *testing.T, plan chaosPlan) {
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "train.yaml")
	if err := os.WriteFile(cfgPath, []byte(chaosConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := []string{"swarm", "serve", "--model", "tiny", "--port", fmt.Sprint(port), "--checkpoint-dir", dir,
		"--config", cfgPath, "--autostart", "--batch-size", fmt.Sprint(len(chaosTasks)), "--num-repeat", "4"}
	logs := &serverLog{t: t}
	srv := startLoggedProc(t, logs, nil, args...)
	// Every connection of this process goes through a transport of its own,
	// closed before the goroutines are counted.
	adminTr := &http.Transport{}
	admin := client.New(base)
	admin.HTTP = &http.Client{Transport: adminTr, Timeout: 10 * time.Second}
	waitRolling(t, admin)
	adminTr.CloseIdleConnections()

	tr := &http.Transport{MaxIdleConnsPerHost: 2 * plan.clients}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	rec := &chaosRecord{acked: map[string]float64{}}
	// gen is even while one server process serves, odd from just before a
	// kill until its successor started: a client that sees the same even
	// value before and after an episode talked to one process.
	var gen atomic.Int64
	goroutines := runtime.NumGoroutine()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var wg sync.WaitGroup
	for i := range plan.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client.New(base)
			c.HTTP = hc
			c.Backoff = client.Backoff{Initial: 5 * time.Millisecond, Max: 200 * time.Millisecond}
			chaosClient(ctx, c, rand.New(rand.NewPCG(plan.seed, uint64(i))), rec, &gen)
		}()
	}

	// The killer: SIGKILL at a random moment of each of plan.kills equal
	// slices of the run, then restart at once with the same arguments.
	// The run lasts plan.duration, and at least a tenth of it past the
	// last restart.
	killer := rand.New(rand.NewPCG(plan.seed, 1<<32))
	slice := plan.duration / time.Duration(plan.kills+1)
	for k := range plan.kills {
		at := slice*time.Duration(k+1) + time.Duration(killer.Float64()*0.5*float64(slice)) - slice/4
		time.Sleep(time.Until(start.Add(at)))
		gen.Add(1)
		srv.kill()
		t.Logf("SIGKILL %d at %v", k+1, time.Since(start).Round(time.Millisecond))
		srv = startLoggedProc(t, logs, nil, args...)
		gen.Add(1)
		waitRolling(t, admin)
		t.Logf("restarted and rolling at %v", time.Since(start).Round(time.Millisecond))
	}
	time.Sleep(max(time.Until(start.Add(plan.duration)), plan.duration/10))
	cancel()
	wg.Wait()
	elapsed := time.Since(start)
	tr.CloseIdleConnections()
	adminTr.CloseIdleConnections()

	// No goroutine leak: once the clients returned and their connections
	// closed, the test process is back to the goroutines it had before.
	leakDeadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(leakDeadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("goroutine leak: %d goroutines after the clients returned, %d before\n%s", n, goroutines, buf)
	}

	// Graceful stop: the final checkpoint; the buffered episodes stay in
	// the journal.
	stopProc(t, srv)
	t.Logf("%d clients, %v, %d SIGKILLs: %d claims, %d chats, %d aborts, %d episodes left idle (%d then reclaimed, %d ended before the reaper came), %d ends without a 200 seen",
		plan.clients, elapsed.Round(100*time.Millisecond), plan.kills, rec.n("claim"), rec.n("chat"), rec.n("abort"), rec.n("idle"), rec.n("reclaimed"), rec.n("idle-ended"), rec.n("end-no-200"))
	if n := rec.n("idle-forgotten"); n > 0 {
		t.Errorf("%d idle episodes, closed without a restart, got 404 instead of 410", n)
	}
	got := checkChaos(t, dir, rec)
	t.Logf("after SIGTERM: %v", got)
	if got.acked == 0 || got.steps == 0 {
		t.Fatalf("the run acknowledged %d rewards and trained %d steps: nothing was tested", got.acked, got.steps)
	}

	// Restarted, the server takes the journaled episodes back (those the
	// final checkpoint trained are acknowledged, not replayed) and the
	// invariant still holds after its own stop.
	srv = startLoggedProc(t, logs, nil, args...)
	waitRolling(t, admin)
	// The consumer delivers the journal after the engine rolls.
	want := fmt.Sprintf("swarm_recovered_episodes_total %d\n", got.journaled-got.pendingAck)
	waitFor(t, 30*time.Second, "/metrics to show "+strings.TrimSpace(want), func() bool {
		return strings.Contains(metricsText(t, admin), want)
	})
	stopProc(t, srv)
	again := checkChaos(t, dir, rec)
	t.Logf("after a restart and SIGTERM: %v", again)
	for _, sub := range []string{"DATA RACE", "handler panic", "finished episode dropped"} {
		if n := logs.count(sub); n > 0 {
			t.Errorf("the server logged %q %d times (run with -v to see its log)", sub, n)
		}
	}
}

// stopProc sends SIGTERM and waits for a clean exit.
func stopProc(t *testing.T, p *proc) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("server after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("server did not stop within 60 s of SIGTERM")
	}
}

// chaosCounts accounts for the acknowledged episodes of a stopped server.
type chaosCounts struct {
	final int64 // the final checkpoint's global step
	steps int   // steps with a row that holds
	// acked = trained + buffered + lost
	acked, trained, buffered, lost int
	doubled                        int // episodes in two steps' rows
	journaled                      int // episodes left in the journal
	pendingAck                     int // trained and still journaled (the acknowledgement not applied before the stop)
	unseen                         int // trained or journaled, the 200 of their end lost with a killed server
}

func (c chaosCounts) String() string {
	return fmt.Sprintf("final global step %d (%d step rows); acked %d: trained %d, buffered %d, lost %d; doubled %d; journaled %d (trained, acknowledgement pending: %d); trained or journaled without a 200 seen %d",
		c.final, c.steps, c.acked, c.trained, c.buffered, c.lost, c.doubled, c.journaled, c.pendingAck, c.unseen)
}

// checkChaos checks, on the stopped server's files, that every episode
// acknowledged with 200 was trained (the last row of its step, up to the
// final checkpoint's step) or is still journaled with its reward, that no
// episode is in two steps, and that an episode both trained and journaled
// is listed in the journal record (so that a restart acknowledges it
// instead of training it again).
func checkChaos(t *testing.T, dir string, rec *chaosRecord) chaosCounts {
	t.Helper()
	var c chaosCounts
	final, recordSeqs := chaosJournalRecord(t, dir)
	rows := finalStepRows(t, dir, final)
	stream := readEpisodeStream(t, bus.Config{DataDir: filepath.Join(dir, "nats")}, "tiny")
	c.final, c.steps, c.journaled = final, len(rows), len(stream)

	trainedAt := map[string]int64{}
	for step, ids := range rows {
		for _, id := range ids {
			if prev, ok := trainedAt[id]; ok {
				c.doubled++
				t.Errorf("episode %s trained at steps %d and %d", id, prev, step)
			}
			trainedAt[id] = step
		}
	}
	journaled := map[string]journaledMsg{}
	for _, m := range stream {
		if _, ok := journaled[m.ID]; ok {
			t.Errorf("episode %s is in the journal twice", m.ID)
		}
		journaled[m.ID] = m
		if step, ok := trainedAt[m.ID]; ok {
			c.pendingAck++
			if !recordSeqs[m.seq] {
				t.Errorf("episode %s (sequence %d) was trained at step %d and is still journaled, but %s does not list it: a restart would train it again",
					m.ID, m.seq, step, swarm.JournalFile)
			}
		}
	}
	c.acked = len(rec.acked)
	for id, reward := range rec.acked {
		_, tr := trainedAt[id]
		m, jr := journaled[id]
		switch {
		case tr:
			c.trained++
		case jr:
			c.buffered++
			if m.Reward != reward {
				t.Errorf("episode %s: reward %v acknowledged, %v journaled", id, reward, m.Reward)
			}
		default:
			c.lost++
			if c.lost <= 10 {
				t.Errorf("episode %s: reward %v acknowledged with 200, neither trained (steps ≤ %d) nor journaled", id, reward, final)
			}
		}
	}
	for id := range trainedAt {
		if _, ok := rec.acked[id]; !ok {
			c.unseen++
		}
	}
	for id := range journaled {
		_, acked := rec.acked[id]
		_, tr := trainedAt[id]
		if !acked && !tr {
			c.unseen++
		}
	}
	if c.lost > 0 {
		t.Errorf("%d acknowledged rewards lost", c.lost)
	}
	return c
}

func sleepUntil(ctx context.Context, when time.Time) {
	t := time.NewTimer(time.Until(when))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// chaosRecord is what the clients saw: every episode whose end got 200,
// with its reward, and event counts.
type chaosRecord struct {
	mu     sync.Mutex
	acked  map[string]float64
	counts map[string]int
}

func (r *chaosRecord) add(event string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[event]++
}

func (r *chaosRecord) n(event string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[event]
}

func (r *chaosRecord) ack(id string, reward float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acked[id] = reward
}

// chaosClient runs episodes until ctx ends: claim (a short discard timeout
// for the ones it will leave idle), one to three chats, then a reward (70%),
// an abort (15%) or silence past the discard timeout followed by a late end
// (15%). Connection errors and 5xx answers are retried; an episode the
// server forgot (a restart) is given up.
func chaosClient(ctx context.Context, c *client.Client, rng *rand.Rand, rec *chaosRecord, gen *atomic.Int64) {
	for ctx.Err() == nil {
		task := chaosTasks[rng.IntN(len(chaosTasks))]
		mode := rng.IntN(100)
		idle := mode >= 85
		opts := client.BeginOptions{TaskID: task, DiscardTimeout: 30 * time.Second}
		if idle {
			opts.DiscardTimeout = 500 * time.Millisecond
		}
		g := gen.Load() // before the claim: see gen
		ep, err := c.BeginEpisode(ctx, opts)
		if err != nil {
			sleepUntil(ctx, time.Now().Add(50*time.Millisecond))
			continue // ctx ended, or refused
		}
		rec.add("claim")
		chatted := false
		for range 1 + rng.IntN(3) {
			if !chaosChat(ctx, ep, task, rng) {
				break
			}
			chatted = true
			rec.add("chat")
		}
		if !chatted {
			continue // the server forgot the episode, or ctx ended
		}
		switch {
		case mode < 70:
			chaosEnd(ctx, c, ep, task, rng.Float64()*2-1, rec)
		case mode < 85:
			if c.AbortEpisode(ctx, ep) == nil {
				rec.add("abort")
			}
		default:
			rec.add("idle")
			// Past the discard timeout and the reaper's period (1 s).
			sleepUntil(ctx, time.Now().Add(opts.DiscardTimeout+1500*time.Millisecond))
			switch code := chaosEnd(ctx, c, ep, task, rng.Float64()*2-1, rec); {
			case code == http.StatusOK:
				rec.add("idle-ended") // before the reaper came by
			case code == http.StatusNotFound && g%2 == 0 && g == gen.Load():
				rec.add("idle-forgotten") // a closed episode the server does not know
			}
		}
	}
}

// chaosChat makes one completion, retrying connection errors and 5xx; it
// reports whether the completion was recorded.
func chaosChat(ctx context.Context, ep *client.Episode, task string, rng *rand.Rand) bool {
	req := api.ChatRequest{Messages: []api.Message{{Role: "user", Content: fmt.Sprintf("%s %d", task, rng.IntN(1000))}}, MaxTokens: 4}
	for attempt := range 20 {
		_, err := ep.Chat().Create(ctx, req)
		var he *client.HTTPError
		switch {
		case err == nil:
			return true
		case ctx.Err() != nil, errors.As(err, &he) && he.Status/100 == 4:
			return false
		}
		sleepUntil(ctx, time.Now().Add(time.Duration(attempt+1)*20*time.Millisecond))
	}
	return false
}

// chaosEnd posts end_episode until it gets an answer that is not a
// connection error or 5xx, records a 200 and returns the last status (0
// when none came).
func chaosEnd(ctx context.Context, c *client.Client, ep *client.Episode, task string, reward float64, rec *chaosRecord) int {
	body, _ := json.Marshal(map[string]any{"client_uuid": c.ClientUUID, "episode_uuid": ep.ID, "task_id": task,
		"workflow_output": map[string]any{"reward": reward, "is_success": reward > 0, "metadata": map[string]any{"task_id": task}}})
	for attempt := range 20 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/end_episode", bytes.NewReader(body))
		if err != nil {
			panic(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.HTTP.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusOK:
				rec.ack(ep.ID, reward)
				return resp.StatusCode
			case resp.StatusCode == http.StatusGone:
				rec.add("reclaimed")
				return resp.StatusCode
			case resp.StatusCode/100 == 4:
				if attempt > 0 {
					rec.add("end-no-200") // an earlier attempt may have reached the server
				}
				return resp.StatusCode
			}
		}
		if ctx.Err() != nil {
			rec.add("end-no-200")
			return 0
		}
		sleepUntil(ctx, time.Now().Add(time.Duration(attempt+1)*20*time.Millisecond))
	}
	rec.add("end-no-200")
	return 0
}

// serverLog forwards a server's log to the test's (with -v) and counts
// lines by substring.
type serverLog struct {
	t       *testing.T
	mu      sync.Mutex
	partial []byte
	lines   []string
}

func (l *serverLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		if strings.Contains(line, "DATA RACE") || strings.Contains(line, "dropped") || strings.Contains(line, "panic") ||
			strings.Contains(line, "level=ERROR") {
			l.lines = append(l.lines, line)
		}
		if testing.Verbose() {
			fmt.Fprintln(os.Stderr, "server: "+line)
		}
	}
	return len(b), nil
}

func (l *serverLog) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, sub) {
			n++
		}
	}
	return n
}

// startLoggedProc is startProc with the child's log going to l and env
// added to its environment.
func startLoggedProc(t *testing.T, l *serverLog, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "TROUPE_TEST_MAIN=1"), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = l
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdout: bufio.NewReader(out), done: make(chan error, 1)}
	go func() { io.Copy(io.Discard, p.stdout); p.done <- cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	return p
}

// chaosJournalRecord returns the step of the final checkpoint and the
// journal sequences it records as trained.
func chaosJournalRecord(t *testing.T, dir string) (int64, map[uint64]bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, swarm.JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Step int64    `json:"step"`
		Seqs []uint64 `json:"trained_seqs"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("%s: %v", swarm.JournalFile, err)
	}
	seqs := map[uint64]bool{}
	for _, q := range rec.Seqs {
		seqs[q] = true
	}
	return rec.Step, seqs
}

// metricRow is one training step's row of train_metrics.jsonl.
type metricRow struct {
	Step *int64   `json:"step"`
	IDs  []string `json:"episode_ids"`
}

// metricRows reads a run directory's train_metrics.jsonl (none yet: no
// rows); every row must name its step.
func metricRows(t *testing.T, dir string) []metricRow {
	t.Helper()
	path := filepath.Join(dir, swarm.TrainMetricsFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []metricRow
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		var r metricRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Step == nil {
			t.Fatalf("%s line %d: %v: %.200s", path, n, err, sc.Text())
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// finalStepRows returns, for every step up to final, the episode ids of
// its last row in train_metrics.jsonl (a step retrained after a crash is
// appended again). Every step from 1 to final must have a row.
func finalStepRows(t *testing.T, dir string, final int64) map[int64][]string {
	t.Helper()
	rows := map[int64][]string{}
	for _, r := range metricRows(t, dir) {
		if *r.Step <= final {
			rows[*r.Step] = r.IDs
		}
	}
	for s := int64(1); s <= final; s++ {
		if _, ok := rows[s]; !ok {
			t.Errorf("%s has no row for step %d (final step %d)", swarm.TrainMetricsFile, s, final)
		}
	}
	return rows
}

// journaledMsg is an episode still in the journal, with its sequence.
type journaledMsg struct {
	api.EpisodeRecord
	seq uint64
}

// readEpisodeStream returns the episodes left in the model's stream,
// without consuming them: cfg names a stopped server's store (DataDir) or
// a NATS server (URL).
func readEpisodeStream(t *testing.T, cfg bus.Config, model string) []journaledMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bus.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := b.JetStream().Stream(ctx, swarm.EpisodeStream(model))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []journaledMsg
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("journal message %d: %v", seq, err)
		}
		var je api.EpisodeRecord
		if err := json.Unmarshal(m.Data, &je); err != nil {
			t.Fatalf("journal message %d: %v", seq, err)
		}
		out = append(out, journaledMsg{je, seq})
	}
	if uint64(len(out)) != info.State.Msgs {
		t.Fatalf("read %d journal messages, the stream holds %d", len(out), info.State.Msgs)
	}
	slices.SortFunc(out, func(a, b journaledMsg) int { return int(a.seq) - int(b.seq) })
	return out
}
