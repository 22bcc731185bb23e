package swarm

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/swarm/client"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// testEpisodeKey signs the journals of tests whose servers have no
// directory to keep a key in.
var testEpisodeKey = []byte("swarm-test-episode-key-0123456789")

type testServer struct {
	s   *Server
	ts  *httptest.Server
	cli *client.Client
}

// startServer starts a rolling server over model with train config tc.
func startServer(t testing.TB, model Model, tc TrainConfig, mod func(*ServerConfig)) *testServer {
	t.Helper()
	cfg := ServerConfig{Model: model, Train: tc, Logger: quietLog, ReapInterval: 20 * time.Millisecond, MinAgreeSync: -1}
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	cli := client.New(ts.URL)
	cli.Backoff = client.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}
	return &testServer{s: s, ts: ts, cli: cli}
}

func testTrainConfig(batch, repeat int) TrainConfig {
	tc := DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = batch, repeat
	tc.DrainTimeout = 2 * time.Second
	tc.MaxResponseTokens = 64
	return tc
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it is true or fails the test after 30 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type httpTestServer = httptest.Server

func newHTTPTestServer(h http.Handler) *httptest.Server { return httptest.NewServer(h) }

// tokenText is the bytes of tokens without special tokens.
func tokenText(m Model, toks []int) []byte {
	var b []byte
	for _, t := range toks {
		b = append(b, m.TokenBytes(t)...)
	}
	return b
}
