// Package swarmtest runs swarm servers for the tests of the packages that
// build models for them (swarm/lmmodel, swarm/hfmodel, swarm/adapter and
// programs of their users), as net/http/httptest does for handlers.
package swarmtest

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
)

// Quiet is a logger that discards everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Server is a rolling swarm server on a loopback port with a client of it.
type Server struct {
	S      *swarm.Server
	URL    string
	Client *client.Client
}

// Start starts a rolling server over model with training config tc (mod,
// when not nil, changes the rest of its configuration) and closes it when
// the test ends. The client retries fast.
func Start(t testing.TB, model swarm.Model, tc swarm.TrainConfig, mod func(*swarm.ServerConfig)) *Server {
	t.Helper()
	cfg := swarm.ServerConfig{Model: model, Train: tc, Logger: Quiet, ReapInterval: 20 * time.Millisecond, MinAgreeSync: -1}
	if mod != nil {
		mod(&cfg)
	}
	s, err := swarm.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		s.Close()
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	cli := client.New(ts.URL)
	cli.Backoff = client.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}
	return &Server{S: s, URL: ts.URL, Client: cli}
}

// TrainConfig is the default training config with batch tasks of repeat
// episodes, a 2 s drain and 64-token responses.
func TrainConfig(batch, repeat int) swarm.TrainConfig {
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = batch, repeat
	tc.DrainTimeout = 2 * time.Second
	tc.MaxResponseTokens = 64
	return tc
}

// Context is a context that ends after a minute or with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor polls cond until it is true, or fails the test after 30 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
