package balance_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/balance"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// TestBalancer: a balancer gives the model whose reward rises the larger
// share of in-flight episodes, as its claim limit and its trainer's max ack
// pending (never below two batches).
func TestBalancer(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = 2, 2
	names := []string{"planner", "executor"}
	var servers []*swarm.Server
	for _, name := range names {
		m, _ := tabular.NewPreset("tiny")
		s, err := swarm.NewServer(swarm.ServerConfig{Model: m, Train: tc, JetStream: b.JetStream(), JournalName: name, EpisodeKey: []byte("balance-test-episode-key"),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		servers = append(servers, s)
	}
	bal, err := balance.New(servers, 100, 0.1, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	var alloc []int
	for step := range 5 {
		bal.Observe(0, swarm.TrainStep{RewardMean: 0.1 * float64(step)}) // the planner learns
		alloc = bal.Observe(1, swarm.TrainStep{RewardMean: 0.2})         // the executor does not
	}
	if alloc[0]+alloc[1] != 100 || alloc[0] <= alloc[1] || alloc[1] < 5 {
		t.Fatalf("allocation %v: want the planner ahead, the executor at its floor or above, 100 in all", alloc)
	}
	for i, s := range servers {
		if got := s.TrainConfig().MaxOpenEpisodes; got != alloc[i] {
			t.Errorf("server %d: MaxOpenEpisodes %d, want %d", i, got, alloc[i])
		}
		st, err := b.JetStream().Stream(ctx, swarm.EpisodeStream(names[i]))
		if err != nil {
			t.Fatal(err)
		}
		ci, err := st.Consumer(ctx, swarm.TrainerConsumer)
		if err != nil {
			t.Fatal(err)
		}
		want := max(alloc[i], 2*2*2)
		if n := ci.CachedInfo().Config.MaxAckPending; n != want {
			t.Errorf("server %d: max ack pending %d, want %d", i, n, want)
		}
	}
	if _, err := balance.New(servers, 1, 1, 0); err == nil {
		t.Error("a total below one episode per server was accepted")
	}
}
