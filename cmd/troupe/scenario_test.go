package main

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/record"
)

// TestRolesKeepEveryAckedEpisode runs, with the default staleness policy,
// an external NATS (troupe nats), a trainer and two rollout front-ends as
// processes. A front-end is SIGKILLed with an episode open; the trainer is
// SIGKILLed and kept down while 24 episodes are acknowledged; a third
// front-end starts late, while it is down; one task never gets its
// partner. Then every acknowledged episode is trained exactly once (in the
// last row of its step), none is dropped, every front-end serves the
// trainer's newest weights, and every process exits within 20 s of
// SIGTERM.
func TestRolesKeepEveryAckedEpisode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs five processes through two kills")
	}
	t.Setenv(record.KeyEnv, testEpisodeKey)
	natsURL, natsProc := startNATS(t)
	tdir := t.TempDir()
	tport, r1port, r2port, r3port := freePort(t), freePort(t), freePort(t), freePort(t)
	common := []string{"--nats", natsURL, "--autostart", "--batch-size", "2", "--num-repeat", "2", "--group-timeout-s", "2"}
	trainArgs := append([]string{"swarm", "serve", "--role", "train", "--port", fmt.Sprint(tport), "--checkpoint-dir", tdir}, common...)
	rollArgs := func(port int) []string {
		return append([]string{"swarm", "serve", "--role", "rollout", "--port", fmt.Sprint(port)}, common...)
	}
	trainer := startProc(t, trainArgs...)
	r1 := startProc(t, rollArgs(r1port)...)
	r2 := startProc(t, rollArgs(r2port)...)
	cs := clientsAt(tport, r1port, r2port, r3port)
	tc, c1, c2, c3 := cs[0], cs[1], cs[2], cs[3]
	for _, c := range cs[:3] {
		waitRolling(t, c)
	}

	var mu sync.Mutex
	acked := map[string]bool{}
	finish := func(c *client.Client, task string, reward float64) {
		t.Helper()
		id := finishEpisode(t, c, task, reward)
		mu.Lock()
		acked[id] = true
		mu.Unlock()
	}
	// Each task's two episodes on two front-ends, rewards apart.
	round := func(from, n int, cs ...*client.Client) {
		for i := range n {
			finish(cs[i%len(cs)], fmt.Sprintf("task-%d", (from+i)/2), float64((from+i)%2))
		}
	}
	round(0, 8, c1, c2)

	// A front-end dies with an episode open, and comes back.
	ctx := context.Background()
	if _, err := c1.BeginEpisode(ctx, client.BeginOptions{TaskID: "orphan"}); err != nil {
		t.Fatal(err)
	}
	r1.kill()
	r1 = startProc(t, rollArgs(r1port)...)
	waitRolling(t, c1)

	// The trainer dies and stays down while 24 episodes are acknowledged;
	// a late front-end joins meanwhile.
	trainer.kill()
	round(8, 12, c1, c2)
	r3 := startProc(t, rollArgs(r3port)...)
	waitRolling(t, c3)
	round(20, 12, c3, c1)
	finish(c2, "lonely", 1) // its partner never comes: it trains after the group timeout

	trainer = startProc(t, trainArgs...)
	waitRolling(t, tc)
	round(32, 8, c3, c2)

	mu.Lock()
	want := len(acked)
	mu.Unlock()
	var trained map[string]int
	waitFor(t, 90*time.Second, fmt.Sprintf("all %d acknowledged episodes trained", want), func() bool {
		rows := map[int64][]string{}
		for _, r := range metricRows(t, tdir) {
			rows[*r.Step] = r.IDs
		}
		trained = map[string]int{}
		for _, ids := range rows {
			for _, id := range ids {
				trained[id]++
			}
		}
		for id := range acked {
			if trained[id] == 0 {
				return false
			}
		}
		return true
	})
	for id, n := range trained {
		if n != 1 || !acked[id] {
			t.Errorf("episode %s trained %d times (acknowledged: %v)", id, n, acked[id])
		}
	}
	st, err := tc.TrainingStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Episodes.Dropped) != 0 {
		t.Errorf("the trainer dropped episodes: %+v", st.Episodes.Dropped)
	}
	waitFor(t, 30*time.Second, "every front-end to serve the trainer's weights", func() bool {
		ts, err := tc.EngineStatus(ctx)
		if err != nil {
			return false
		}
		for _, c := range []*client.Client{c1, c2, c3} {
			if s, err := c.EngineStatus(ctx); err != nil || s.GlobalStep != ts.GlobalStep {
				return false
			}
		}
		return true
	})

	// SIGTERM: every process gone within 20 s, with exit status 0 (NATS
	// last, so that the trainer's final checkpoint acknowledges its
	// episodes).
	start := time.Now()
	for _, group := range [][]*proc{{trainer, r1, r2, r3}, {natsProc}} {
		for _, p := range group {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range group {
			select {
			case err := <-p.done:
				if err != nil {
					t.Errorf("%v exited with %v", p.cmd.Args[1:3], err)
				}
			case <-time.After(20*time.Second - time.Since(start)):
				t.Fatalf("%v still running 20 s after SIGTERM", p.cmd.Args[1:3])
			}
		}
	}
	t.Logf("acknowledged %d episodes, all trained once; every process exited %v after SIGTERM", want, time.Since(start).Round(time.Millisecond))
}

// clientsAt returns a client of the swarm server on each loopback port.
func clientsAt(ports ...int) []*client.Client {
	cs := make([]*client.Client, len(ports))
	for i, p := range ports {
		cs[i] = client.New(fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	return cs
}
