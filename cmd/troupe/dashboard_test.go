package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDashboardCommand: troupe dashboard serves a run directory's page,
// names both agents and the step count, refuses a listener beyond
// loopback, and stops on SIGTERM.
func TestDashboardCommand(t *testing.T) {
	dir := t.TempDir()
	for _, agent := range []string{"planner-8001", "executor-8002"} {
		if err := os.MkdirAll(filepath.Join(dir, agent), 0o755); err != nil {
			t.Fatal(err)
		}
		var rows strings.Builder
		for step := 1; step <= 3; step++ {
			rows.WriteString(`{"step": ` + string(rune('0'+step)) + `, "model": "` + strings.Split(agent, "-")[0] + `", "reward_mean": 0.5, "reward_std": 0.1, "time": "2026-12-06T10:00:0` + string(rune('0'+step)) + `Z"}` + "\n")
		}
		if err := os.WriteFile(filepath.Join(dir, agent, "train_metrics.jsonl"), []byte(rows.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code := runCLI([]string{"dashboard", "--checkpoint-dir", dir, "--listen", "0.0.0.0:0"}, cmdIO{nil, io.Discard, io.Discard}); code != 1 {
		t.Errorf("a listener beyond loopback: exit %d, want 1", code)
	}
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- runCLI([]string{"dashboard", "--checkpoint-dir", dir, "--listen", "127.0.0.1:0"}, cmdIO{nil, pw, io.Discard})
		pw.Close()
	}()
	url, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	resp, err := http.Get(strings.TrimSpace(url))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"planner", "executor", "step 3", "<svg"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("dashboard did not stop on SIGTERM")
	}
}
