package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/record"
)

// testEpisodeKey is the episode key of tests whose processes share a NATS.
const testEpisodeKey = "cmd-troupe-test-episode-key-6c1f0a"

// TestMain lets a test run the troupe command as a process of its own (the
// test binary re-executed with TROUPE_TEST_MAIN=1), so that it can be
// killed with SIGKILL.
func TestMain(m *testing.M) {
	if os.Getenv("TROUPE_TEST_MAIN") == "1" {
		os.Exit(runCLI(os.Args[1:], cmdIO{os.Stdin, os.Stdout, os.Stderr}))
	}
	os.Exit(m.Run())
}

// proc is the troupe command running in a child process.
type proc struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	done   chan error
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TROUPE_TEST_MAIN=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &testLog{t: t, prefix: args[0] + ": "}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdout: bufio.NewReader(out), done: make(chan error, 1)}
	go func() { io.Copy(io.Discard, p.stdout); p.done <- cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	return p
}

// kill sends SIGKILL and waits for the process.
func (p *proc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// testLog forwards a child's log to the test's, line by line, when -v.
type testLog struct {
	t      *testing.T
	prefix string
}

func (l *testLog) Write(b []byte) (int, error) {
	if testing.Verbose() {
		for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			fmt.Fprintln(os.Stderr, l.prefix+line)
		}
	}
	return len(b), nil
}

// startNATS runs "troupe nats" on a free loopback port and returns its URL.
func startNATS(t *testing.T) (string, *proc) {
	port := freePort(t)
	p := startProc(t, "nats", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", t.TempDir())
	u := fmt.Sprintf("nats://127.0.0.1:%d", port)
	waitFor(t, 30*time.Second, "nats-server listening", func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return u, p
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitRolling(t *testing.T, c *client.Client) api.EngineStatus {
	var st api.EngineStatus
	waitFor(t, 60*time.Second, "the server to roll", func() bool {
		var err error
		st, err = c.EngineStatus(context.Background())
		return err == nil && st.Status == swarm.StatusRolling
	})
	return st
}

// finishEpisode claims, chats once and ends one train episode of task; it
// returns the episode's id.
func finishEpisode(t *testing.T, c *client.Client, task string, reward float64) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, err := c.BeginEpisode(ctx, client.BeginOptions{TaskID: task})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "hi " + task}}, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
	if err := c.EndEpisode(ctx, ep, task, client.WorkflowResult{Reward: reward}); err != nil {
		t.Fatal(err)
	}
	return ep.ID
}

// TestCrashResumesSyncedConfig: with an external NATS and no checkpoint
// directory, the training config a client synced (batch 2 × 2) survives
// a SIGKILL in NATS, and the journaled episodes train with the 4th.
func TestCrashResumesSyncedConfig(t *testing.T) {
	t.Setenv(record.KeyEnv, testEpisodeKey) // no directory to keep a key of its own in
	u, _ := startNATS(t)
	port := freePort(t)
	args := []string{"swarm", "serve", "--port", fmt.Sprint(port), "--nats", u}
	c := client.New(fmt.Sprintf("http://127.0.0.1:%d", port))
	ctx := context.Background()
	start := func() {
		waitFor(t, 60*time.Second, "the server to answer", func() bool {
			st, err := c.EngineStatus(ctx)
			return err == nil && st.Status == swarm.StatusOffline
		})
		if err := c.StartEngine(ctx); err != nil {
			t.Fatal(err)
		}
		waitRolling(t, c)
	}
	srv := startProc(t, args...)
	waitFor(t, 60*time.Second, "the server to answer", func() bool { _, err := c.EngineStatus(ctx); return err == nil })
	if err := c.SyncTrainConfig(ctx, "ajet:\n  data:\n    train_batch_size: 2\n  rollout:\n    num_repeat: 2\n"); err != nil {
		t.Fatal(err)
	}
	start()
	for i, task := range []string{"a", "a", "b"} {
		finishEpisode(t, c, task, float64(i))
	}
	srv.kill()
	startProc(t, args...)
	start()
	finishEpisode(t, c, "b", 3)
	waitFor(t, 60*time.Second, "a training step with the synced batch size", func() bool {
		st, err := c.EngineStatus(ctx)
		return err == nil && st.GlobalStep == 1
	})
}

// TestCrashResumesJournaledEpisodes: a server with batch 2 tasks × 2
// repeats receives 3 finished episodes, is SIGKILLed and restarted, and
// receives the 4th: a training step happens, on all four. Once with the
// embedded NATS (the journal under --checkpoint-dir) and once with an
// external nats-server (--nats).
func TestCrashResumesJournaledEpisodes(t *testing.T) {
	for _, external := range []bool{false, true} {
		name := "embedded"
		if external {
			name = "external"
		}
		t.Run(name, func(t *testing.T) {
			port := freePort(t)
			args := []string{"swarm", "serve", "--port", fmt.Sprint(port), "--checkpoint-dir", t.TempDir(),
				"--autostart", "--batch-size", "2", "--num-repeat", "2"}
			if external {
				u, _ := startNATS(t)
				args = append(args, "--nats", u)
			}
			c := client.New(fmt.Sprintf("http://127.0.0.1:%d", port))
			srv := startProc(t, args...)
			waitRolling(t, c)
			for i, task := range []string{"a", "a", "b"} {
				finishEpisode(t, c, task, float64(i))
			}
			srv.kill()

			startProc(t, args...)
			if st := waitRolling(t, c); st.GlobalStep != 0 {
				t.Fatalf("restarted at global step %d, want 0 (no step was trained)", st.GlobalStep)
			}
			finishEpisode(t, c, "b", 3)
			waitFor(t, 60*time.Second, "a training step on the journaled episodes", func() bool {
				st, err := c.EngineStatus(context.Background())
				return err == nil && st.GlobalStep == 1
			})
			m := metricsText(t, c)
			for _, want := range []string{"swarm_recovered_episodes_total 3", "swarm_train_steps_total 1"} {
				if !strings.Contains(m, want+"\n") {
					t.Errorf("/metrics lacks %q", want)
				}
			}
		})
	}
}

func metricsText(t *testing.T, c *client.Client) string {
	t.Helper()
	resp, err := http.Get(c.BaseURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
