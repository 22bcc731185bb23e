package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
)

// serve runs "troupe swarm serve" with the process's stdout and stderr.
func serve(args []string) error {
	return runLeaf(swarmServeCommand, "troupe swarm serve", args, cmdIO{os.Stdin, os.Stdout, os.Stderr})
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runServe runs serve in the background and returns a function that sends
// SIGTERM to the process (serve catches it) and waits for serve to return.
func runServe(t *testing.T, args []string, urls []string) func() {
	done := make(chan error, 1)
	go func() { done <- serve(args) }()
	for _, u := range urls {
		c := client.New(u)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := c.WaitForStatus(ctx, swarm.StatusRolling); err != nil {
			cancel()
			t.Fatalf("%s never rolled: %v", u, err)
		}
		cancel()
	}
	return func() {
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not stop on SIGTERM")
		}
	}
}

// TestServeMultiSIGTERMResume runs two servers of different sizes in one
// process, trains one of them, stops the process with SIGTERM and restarts
// it: each server resumes from its own checkpoint with its global step.
func TestServeMultiSIGTERMResume(t *testing.T) {
	dir := t.TempDir()
	p1, p2 := freePort(t), freePort(t)
	args := []string{"--multi", fmt.Sprintf("small:%d,medium:%d", p1, p2), "--checkpoint-dir", dir,
		"--autostart", "--batch-size", "1", "--num-repeat", "2"}
	u1, u2 := fmt.Sprintf("http://127.0.0.1:%d", p1), fmt.Sprintf("http://127.0.0.1:%d", p2)
	stop := runServe(t, args, []string{u1, u2})
	c := client.New(u1)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		ep, err := c.BeginEpisode(ctx, client.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "hi"}}, MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
		if err := c.EndEpisode(ctx, ep, "t", client.WorkflowResult{Reward: float64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := c.EngineStatus(ctx)
		if st.GlobalStep == 1 && st.Status == swarm.StatusRolling {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no training step: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	for _, sub := range []string{fmt.Sprintf("small-%d", p1), fmt.Sprintf("medium-%d", p2)} {
		if _, err := os.Stat(filepath.Join(dir, sub, swarm.CheckpointFile)); err != nil {
			t.Fatalf("no checkpoint after SIGTERM: %v", err)
		}
	}
	stop = runServe(t, args, []string{u1, u2})
	defer stop()
	for u, want := range map[string]int64{u1: 1, u2: 0} {
		st, err := client.New(u).EngineStatus(ctx)
		if err != nil || st.GlobalStep != want {
			t.Fatalf("%s after restart: %+v %v, want global step %d", u, st, err, want)
		}
	}
}
