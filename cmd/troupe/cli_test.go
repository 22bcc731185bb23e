package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
)

func TestCLIConventions(t *testing.T) {
	for _, tt := range []struct {
		args     []string
		code     int
		out, err string // substrings of stdout and stderr
	}{
		{[]string{"-h"}, 0, "swarm", ""},
		{[]string{"--help"}, 0, "version", ""},
		{[]string{"swarm", "-h"}, 0, "serve", ""},
		{[]string{"swarm", "serve", "-h"}, 0, "-log-format", ""},
		{[]string{"swarm", "serve", "--help"}, 0, "-pprof", ""},
		{[]string{"swarm", "serve", "-h"}, 0, "Distribution:", ""},
		{[]string{"swarm", "serve", "-h"}, 0, "Examples:", ""},
		{[]string{"swarm", "serve", "--device", "cuda"}, 2, "", "-device"},
		{[]string{"swarm", "models", "-h"}, 0, "usage", ""},
		{[]string{"version"}, 0, "troupe ", ""},
		{[]string{"lm", "-h"}, 0, "logprobs", ""},
		{nil, 2, "", "usage"},
		{[]string{"nope"}, 2, "", `unknown command "nope"`},
		{[]string{"swarm", "nope"}, 2, "", `unknown command "nope"`},
		{[]string{"swarm", "serve", "--bogus"}, 2, "", "-bogus"},
		{[]string{"swarm", "serve", "extra"}, 2, "", "unexpected argument"},
		{[]string{"swarm", "serve", "--log-level", "loud"}, 1, "", "--log-level"},
		{[]string{"swarm", "serve", "--log-format", "xml"}, 1, "", "--log-format"},
		{[]string{"swarm", "serve", "--host", "0.0.0.0"}, 1, "", "without an admin token"},
		{[]string{"swarm", "serve", "--port", "0", "--pprof", "0.0.0.0:0"}, 1, "", "loopback"},
	} {
		var out, errb bytes.Buffer
		if tt.args != nil && tt.args[0] == "swarm" && len(tt.args) > 2 && tt.args[2] == "--host" {
			t.Setenv("TROUPE_ADMIN_TOKEN", "")
		}
		code := runCLI(tt.args, cmdIO{nil, &out, &errb})
		if code != tt.code || !strings.Contains(out.String(), tt.out) || !strings.Contains(errb.String(), tt.err) {
			t.Errorf("troupe %q: exit %d, stdout %q, stderr %q; want exit %d, stdout ∋ %q, stderr ∋ %q",
				tt.args, code, out.String(), errb.String(), tt.code, tt.out, tt.err)
		}
	}
}

// TestServeBindsBeforeBoot: a taken port fails at once, before any model
// is built.
func TestServeBindsBeforeBoot(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	var errb bytes.Buffer
	start := time.Now()
	code := runCLI([]string{"swarm", "serve", "--port", strconv.Itoa(port), "--model", "no-such-model"}, cmdIO{nil, io.Discard, &errb})
	// the unknown model would be reported if the model were built first
	if code != 1 || !strings.Contains(errb.String(), "address already in use") {
		t.Fatalf("exit %d, stderr %q; want the bind error", code, errb.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("bind error after %v", d)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeJSONLogsAndPprof: --log-format json writes one JSON object per
// line; --pprof serves the profiles on its own loopback port; an admin
// token from --admin-token-file guards engine control.
func TestServeJSONLogsAndPprof(t *testing.T) {
	port, pp := freePort(t), freePort(t)
	tokFile := t.TempDir() + "/token"
	if err := os.WriteFile(tokFile, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- runCLI([]string{"swarm", "serve", "--port", strconv.Itoa(port), "--autostart", "--log-format", "json", "--log-level", "debug",
			"--pprof", fmt.Sprintf("127.0.0.1:%d", pp), "--admin-token-file", tokFile}, cmdIO{nil, io.Discard, &logs})
	}()
	u := fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := client.New(u).WaitForStatus(ctx, swarm.StatusRolling); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", pp))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("pprof: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err := http.Get(u + "/debug/pprof/"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("pprof on the swarm port: %v %v", resp, err)
	}
	if resp, err := http.Post(u+"/stop_engine", "application/json", strings.NewReader("{}")); err != nil || resp.StatusCode != 401 {
		t.Fatalf("stop_engine without the file's token: %v %v", resp, err)
	}
	if resp, err := http.Post(u+"/t/file-token/stop_engine", "application/json", strings.NewReader("{}")); err != nil || resp.StatusCode != 200 {
		t.Fatalf("stop_engine with the file's token: %v %v", resp, err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d; logs:\n%s", code, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	n := 0
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec["msg"] == nil || rec["level"] == nil {
			t.Fatalf("log line %q is not a JSON record: %v", sc.Text(), err)
		}
		n++
	}
	if n == 0 || !strings.Contains(logs.String(), `"msg":"swarm server listening"`) {
		t.Fatalf("logs: %s", logs.String())
	}
	if strings.Contains(logs.String(), "file-token") {
		t.Fatal("the admin token appears in the logs")
	}
}

// TestServeConfigFile: a config file's troupe.<flag_name> keys set the flags
// the command line left alone, its ajet keys the training config; a
// misspelt troupe key is an error.
func TestServeConfigFile(t *testing.T) {
	fs := flag.NewFlagSet("troupe swarm serve", flag.ContinueOnError)
	swarmServeSetup(fs)
	if err := fs.Parse([]string{"--max-open-per-client", "7"}); err != nil {
		t.Fatal(err)
	}
	y := "ajet:\n  data:\n    train_batch_size: 3\ntroupe:\n  max_request_tokens: 2048\n  max_open_per_client: 99\n  max_staleness: 4\n"
	if err := applyConfigFile(fs, y); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"max-request-tokens": "2048", "max-open-per-client": "7", "max-staleness": "4"} {
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %s, want %s", name, got, want)
		}
	}
	if err := applyConfigFile(fs, "troupe:\n  max_reqest_tokens: 1\n"); err == nil || !strings.Contains(err.Error(), "max_reqest_tokens") {
		t.Errorf("a misspelt key: %v", err)
	}
}

// TestServeHelpGroups: every flag group of swarm serve names real flags.
func TestServeHelpGroups(t *testing.T) {
	fs := flag.NewFlagSet("troupe swarm serve", flag.ContinueOnError)
	swarmServeSetup(fs)
	for _, g := range swarmServeCommand.groups {
		for _, n := range g.names {
			if fs.Lookup(n) == nil {
				t.Errorf("group %s names no flag %q", g.title, n)
			}
		}
	}
}
