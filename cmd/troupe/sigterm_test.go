package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/record"
)

// busyServer keeps a swarm server busy the way SIGTERM may find it:
// clients finish episodes without pause (so that steps train, checkpoint
// and publish weights), two episodes are held open (one with a
// completion), a streamed completion of 16 × 1024 tokens is never read,
// and a request body trickles in byte by byte.
type busyServer struct {
	mu    sync.Mutex
	acked map[string]bool
	stop  chan struct{}
	wg    sync.WaitGroup
}

func keepBusy(t *testing.T, c *client.Client, held *client.Client) *busyServer {
	t.Helper()
	b := &busyServer{acked: map[string]bool{}, stop: make(chan struct{})}
	ctx := context.Background()
	for range 2 {
		ep, err := held.BeginEpisode(ctx, client.BeginOptions{TaskID: "held"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "hold"}}, MaxTokens: 2}); err != nil {
			t.Fatal(err)
		}
	}
	ep, err := held.BeginEpisode(ctx, client.BeginOptions{TaskID: "streamed"})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"messages": []api.Message{{Role: "user", Content: "stream"}}, "n": 16, "max_tokens": 1024, "stream": true})
	req, _ := http.NewRequest("POST", ep.BaseURL+"/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+ep.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() }) // never read
	go trickleBody(held.BaseURL[len("http://"):], 30*time.Second)
	b.wg.Add(2)
	for w := range 2 {
		go func() {
			defer b.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-b.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				task := fmt.Sprintf("w%d-%d", w, i/2)
				ep, err := c.BeginEpisode(ctx, client.BeginOptions{TaskID: task})
				if err == nil {
					_, err = ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: task}}, MaxTokens: 4})
				}
				if err == nil && c.EndEpisode(ctx, ep, task, client.WorkflowResult{Reward: float64(i % 2)}) == nil {
					b.mu.Lock()
					b.acked[ep.ID] = true
					b.mu.Unlock()
				}
				cancel()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return b
}

// done stops the clients and returns the acknowledged episodes.
func (b *busyServer) done() map[string]bool {
	close(b.stop)
	b.wg.Wait()
	return b.acked
}

// sigterm sends SIGTERM to p and fails unless it exits with status 0
// within limit.
func sigterm(t *testing.T, p *proc, limit time.Duration) {
	t.Helper()
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
		t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(limit):
		t.Fatalf("still running %v after SIGTERM", limit)
	}
}

// keptOrTrained fails unless every acknowledged episode is in the last row
// of its step in dir's train_metrics.jsonl or still in the journal.
func keptOrTrained(t *testing.T, acked map[string]bool, dir string, journal bus.Config) {
	t.Helper()
	rows := map[int64][]string{}
	for _, r := range metricRows(t, dir) {
		rows[*r.Step] = r.IDs
	}
	seen := map[string]int{}
	for _, ids := range rows {
		for _, id := range ids {
			seen[id]++
		}
	}
	for _, m := range readEpisodeStream(t, journal, "small") {
		seen[m.ID]++
	}
	lost := 0
	for id := range acked {
		if seen[id] != 1 {
			lost++
			t.Errorf("acknowledged episode %s trained or journaled %d times", id, seen[id])
		}
	}
	if len(acked) == 0 || len(rows) == 0 {
		t.Fatalf("%d episodes acknowledged, %d steps trained: the server was not busy", len(acked), len(rows))
	}
	t.Logf("%d acknowledged episodes, %d lost or doubled", len(acked), lost)
}

// TestSIGTERMEveryRole: each role exits with status 0 within 10 s of
// SIGTERM while it is busy (episodes open, a stream unread, a body
// trickling, steps training and publishing weights), and every episode it
// acknowledged is trained once or still journaled.
func TestSIGTERMEveryRole(t *testing.T) {
	if testing.Short() {
		t.Skip("runs five processes for half a minute")
	}
	const limit = 10 * time.Second
	// The clients outrun the trainer by far: a staleness bound beyond the
	// backlog keeps every episode trainable, so each one acknowledged must
	// be found trained or journaled.
	common := []string{"--model", "small", "--autostart", "--batch-size", "2", "--num-repeat", "2", "--drain-timeout-s", "0.2", "--max-staleness", "100000"}
	t.Run("both", func(t *testing.T) {
		dir := t.TempDir()
		port := freePort(t)
		p := startProc(t, append([]string{"swarm", "serve", "--port", fmt.Sprint(port), "--checkpoint-dir", dir}, common...)...)
		c := client.New(fmt.Sprintf("http://127.0.0.1:%d", port))
		waitRolling(t, c)
		b := keepBusy(t, c, c)
		time.Sleep(500 * time.Millisecond)
		sigterm(t, p, limit)
		keptOrTrained(t, b.done(), dir, bus.Config{DataDir: filepath.Join(dir, "nats")})
	})
	for _, role := range []string{"train", "rollout"} {
		t.Run(role, func(t *testing.T) {
			t.Setenv(record.KeyEnv, testEpisodeKey)
			natsURL, _ := startNATS(t)
			dir := t.TempDir()
			tport, rport := freePort(t), freePort(t)
			trainer := startProc(t, append([]string{"swarm", "serve", "--role", "train", "--port", fmt.Sprint(tport), "--checkpoint-dir", dir, "--nats", natsURL}, common...)...)
			front := startProc(t, append([]string{"swarm", "serve", "--role", "rollout", "--port", fmt.Sprint(rport), "--nats", natsURL}, common...)...)
			cs := clientsAt(tport, rport)
			tc, rc := cs[0], cs[1]
			waitRolling(t, tc)
			waitRolling(t, rc)
			target, held := trainer, tc
			if role == "rollout" {
				target, held = front, rc
			}
			b := keepBusy(t, rc, held)
			time.Sleep(500 * time.Millisecond)
			sigterm(t, target, limit)
			if role == "rollout" {
				sigterm(t, trainer, limit)
			} else {
				time.Sleep(200 * time.Millisecond) // episodes keep arriving while the trainer is gone
				sigterm(t, front, limit)
			}
			keptOrTrained(t, b.done(), dir, bus.Config{URL: natsURL})
		})
	}
}
