package swarm

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// TestServe: a served model answers episodes at the returned URL and
// trains; stop ends serving, writes the final checkpoint, and can be called
// twice.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	m, _ := tabular.NewPreset("tiny")
	srv, url, stop, err := Serve("127.0.0.1:0", ServerConfig{Model: m, Train: testTrainConfig(1, 2), CheckpointDir: dir, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("URL %q", url)
	}
	ctx := ctxT(t)
	cli := client.New(url)
	for i := range 2 {
		if _, err := client.RunWorkflow(ctx, []*client.Client{cli}, nil, "t", func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
			_, err := eps[0].Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "hi"}}, MaxTokens: 3})
			return []client.WorkflowResult{{Reward: float64(i)}}, err
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a training step", func() bool { st, _, g := srv.Status(); return g == 1 && st == StatusRolling })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := cli.EngineStatus(ctx); err == nil {
		t.Error("the server still answers after stop")
	}
	if _, err := os.Stat(filepath.Join(dir, CheckpointFile)); err != nil {
		t.Errorf("no final checkpoint: %v", err)
	}
}

func TestServeErrors(t *testing.T) {
	if _, _, _, err := Serve("127.0.0.1:0", ServerConfig{}); err == nil {
		t.Error("no model: no error")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	m, _ := tabular.NewPreset("tiny")
	if _, _, _, err := Serve(ln.Addr().String(), ServerConfig{Model: m, CheckpointDir: dir, Logger: quietLog}); err == nil || !strings.Contains(err.Error(), "tiny") {
		t.Errorf("address in use: %v, want an error naming the model", err)
	}
	if _, err := os.Stat(filepath.Join(dir, CheckpointFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a server that failed to listen wrote a checkpoint: %v", err)
	}
}

func TestDialable(t *testing.T) {
	for _, tt := range []struct {
		addr net.TCPAddr
		want string
	}{
		{net.TCPAddr{IP: net.IPv4zero, Port: 80}, "127.0.0.1:80"},
		{net.TCPAddr{IP: net.IPv6unspecified, Port: 81}, "[::1]:81"},
		{net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 82}, "10.0.0.7:82"},
		{net.TCPAddr{IP: net.IPv6loopback, Port: 83}, "[::1]:83"},
	} {
		if got := dialable(&tt.addr); got != tt.want {
			t.Errorf("dialable(%v) = %q, want %q", &tt.addr, got, tt.want)
		}
	}
}
