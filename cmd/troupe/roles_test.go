package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/record"
)

// buildNATSServer builds nats-server from the module troupe pins.
func buildNATSServer(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "nats-server")
	cmd := exec.Command("go", "build", "-o", exe, "github.com/nats-io/nats-server/v2")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building nats-server from the pinned module: %v\n%s", err, out)
	}
	return exe
}

// TestRolesSurviveKills runs an external nats-server, a trainer and two
// rollout front-ends as separate processes. Clients finish episodes on
// both front-ends; one front-end is SIGKILLed with an episode open and the
// trainer is SIGKILLed while it trains; both come back. Every reward
// acknowledged with 200 is trained exactly once (in the last row of its
// step in the trainer's train_metrics.jsonl) or still in the journal, the
// trainer resumes at its checkpoint's step, and the front-ends load the
// weights it publishes.
func TestRolesSurviveKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nats-server and runs four processes")
	}
	t.Setenv(record.KeyEnv, testEpisodeKey)
	natsExe := buildNATSServer(t)
	nport := freePort(t)
	nats := exec.Command(natsExe, "-js", "-a", "127.0.0.1", "-p", fmt.Sprint(nport), "-sd", t.TempDir())
	if err := nats.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nats.Process.Kill(); nats.Wait() })
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", nport)

	tdir := t.TempDir()
	tport, r1port, r2port := freePort(t), freePort(t), freePort(t)
	// Front-ends sample with the weights they last loaded; a generous
	// staleness bound keeps every episode trainable, so that each one
	// acknowledged must be found trained or journaled.
	cfgFile := filepath.Join(t.TempDir(), "train.yaml")
	if err := os.WriteFile(cfgFile, []byte("troupe:\n  max_staleness: 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--nats", natsURL, "--autostart", "--batch-size", "2", "--num-repeat", "2", "--config", cfgFile}
	trainArgs := append([]string{"swarm", "serve", "--role", "train", "--port", fmt.Sprint(tport), "--checkpoint-dir", tdir}, common...)
	rollArgs := func(port int) []string {
		return append([]string{"swarm", "serve", "--role", "rollout", "--port", fmt.Sprint(port)}, common...)
	}
	trainer := startProc(t, trainArgs...)
	r1 := startProc(t, rollArgs(r1port)...)
	startProc(t, rollArgs(r2port)...)
	tc := client.New(fmt.Sprintf("http://127.0.0.1:%d", tport))
	c1 := client.New(fmt.Sprintf("http://127.0.0.1:%d", r1port))
	c2 := client.New(fmt.Sprintf("http://127.0.0.1:%d", r2port))
	for _, c := range []*client.Client{tc, c1, c2} {
		waitRolling(t, c)
	}

	var mu sync.Mutex
	acked := map[string]float64{}
	finish := func(c *client.Client, task string, reward float64) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ep, err := c.BeginEpisode(ctx, client.BeginOptions{TaskID: task})
		if err != nil {
			return err
		}
		if _, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: task}}, MaxTokens: 4}); err != nil {
			return err
		}
		if err := c.EndEpisode(ctx, ep, task, client.WorkflowResult{Reward: reward}); err != nil {
			return err
		}
		mu.Lock()
		acked[ep.ID] = reward
		mu.Unlock()
		return nil
	}
	round := func(n int, from int) {
		for i := range n {
			c := c1
			if i%2 == 1 {
				c = c2
			}
			task := fmt.Sprintf("task-%d", (from+i)/2)
			if err := finish(c, task, float64(from+i)); err != nil {
				t.Fatalf("episode %d: %v", from+i, err)
			}
		}
	}
	round(8, 0) // two training steps' worth

	// A front-end dies with an episode open: that episode was never
	// acknowledged, and nothing else is lost.
	ctx := context.Background()
	ep, err := c1.BeginEpisode(ctx, client.BeginOptions{TaskID: "orphan"})
	if err != nil {
		t.Fatal(err)
	}
	r1.kill()
	startProc(t, rollArgs(r1port)...)
	waitRolling(t, c1)
	if err := c1.EndEpisode(ctx, ep, "orphan", client.WorkflowResult{Reward: 1}); err == nil {
		t.Fatal("a restarted front-end accepted the end of an episode it never handed out")
	}

	// The trainer dies while episodes keep arriving and steps run.
	done := make(chan struct{})
	go func() { defer close(done); round(8, 8) }()
	time.Sleep(30 * time.Millisecond)
	trainer.kill()
	<-done
	ckptStep := checkpointVersion(t, filepath.Join(tdir, swarm.CheckpointFile))
	rowsBefore := len(metricRows(t, tdir))
	trainer = startProc(t, trainArgs...)
	waitRolling(t, tc)
	round(8, 16)
	mu.Lock()
	want := int64(len(acked) / 4) // every 4 acknowledged episodes make a step
	mu.Unlock()
	waitFor(t, 60*time.Second, fmt.Sprintf("the trainer to reach step %d", want), func() bool {
		st, err := tc.EngineStatus(ctx)
		return err == nil && st.GlobalStep >= want
	})
	waitFor(t, 30*time.Second, "the front-ends to load the trainer's weights", func() bool {
		a, err1 := c1.EngineStatus(ctx)
		b, err2 := c2.EngineStatus(ctx)
		return err1 == nil && err2 == nil && a.GlobalStep >= want && b.GlobalStep >= want
	})

	// The restarted trainer's first step follows its checkpoint's (a row
	// of the checkpoint's own step, lost to the kill, may come back first
	// from journal.json).
	rows := metricRows(t, tdir)[rowsBefore:]
	if len(rows) > 0 && *rows[0].Step == ckptStep {
		rows = rows[1:]
	}
	if *rows[0].Step != ckptStep+1 {
		t.Fatalf("after the restart the trainer trained step %d first; its checkpoint held step %d", *rows[0].Step, ckptStep)
	}
	if m := metricsText(t, tc); strings.Contains(m, "swarm_dropped_episodes_total{") {
		t.Fatalf("the trainer dropped episodes:\n%s", m)
	}
	// Stop the trainer cleanly and account for every acknowledged reward.
	trainer.cmd.Process.Signal(syscall.SIGTERM)
	<-trainer.done
	final, _ := chaosJournalRecord(t, tdir)
	trained := map[string]int{}
	for _, ids := range finalStepRows(t, tdir, final) {
		for _, id := range ids {
			trained[id]++
		}
	}
	buffered := map[string]bool{}
	for _, m := range readEpisodeStream(t, bus.Config{URL: natsURL}, "small") {
		buffered[m.ID] = true
	}
	lost, doubled := 0, 0
	for id := range acked {
		n := trained[id]
		if buffered[id] {
			n++
		}
		switch {
		case n == 0:
			lost++
		case n > 1:
			doubled++
		}
	}
	t.Logf("acknowledged %d, trained %d, still journaled %d, lost %d, doubled %d", len(acked), len(trained), len(buffered), lost, doubled)
	if lost != 0 || doubled != 0 {
		t.Fatalf("%d acknowledged rewards lost, %d trained twice", lost, doubled)
	}
}

// checkpointVersion is the model version a tabular checkpoint holds (0
// when there is none yet).
func checkpointVersion(t *testing.T, path string) int64 {
	f, err := safetensors.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := strconv.ParseInt(f.Metadata["version"], 10, 64)
	if err != nil {
		t.Fatalf("%s: version %q: %v", path, f.Metadata["version"], err)
	}
	return v
}
