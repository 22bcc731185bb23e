package swarm

import (
	"context"
	"testing"

	"github.com/troupe-ml/troupe/bus"
)

// TestRegistryAndBalancer: two models' servers announce themselves in the
// registry; a balancer gives the one whose reward rises the larger share
// of in-flight episodes, as its claim limit and its trainer's max ack
// pending (never below two batches).
func TestRegistryAndBalancer(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var servers []*Server
	for i, name := range []string{"planner", "executor"} {
		m, _ := NewPresetModel("tiny")
		ts := startServer(t, m, testTrainConfig(2, 2), func(c *ServerConfig) {
			c.JetStream, c.JournalName = b.JetStream(), name
			c.RegistryURL = "http://10.0.0.1:" + string(rune('1'+i)) + "000"
		})
		ts.s.register()
		servers = append(servers, ts.s)
	}
	fs, err := ListFrontends(ctx, b.JetStream(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Model != "executor" || fs[1].Model != "planner" || fs[1].URL != "http://10.0.0.1:1000" {
		t.Fatalf("registry: %+v", fs)
	}
	if only, _ := ListFrontends(ctx, b.JetStream(), "planner"); len(only) != 1 {
		t.Fatalf("registry of planner: %+v", only)
	}

	bal, err := NewBalancer(servers, 100, 0.1, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	var alloc []int
	for step := range 5 {
		bal.Observe(0, TrainStep{RewardMean: 0.1 * float64(step)}) // the planner learns
		alloc = bal.Observe(1, TrainStep{RewardMean: 0.2})         // the executor does not
	}
	if alloc[0]+alloc[1] != 100 || alloc[0] <= alloc[1] || alloc[1] < 5 {
		t.Fatalf("allocation %v: want the planner ahead, the executor at its floor or above, 100 in all", alloc)
	}
	for i, s := range servers {
		s.mu.Lock()
		got := s.train.MaxOpenEpisodes
		s.mu.Unlock()
		if got != alloc[i] {
			t.Errorf("server %d: MaxOpenEpisodes %d, want %d", i, got, alloc[i])
		}
		ci, err := s.jr.stream.Consumer(ctx, trainerConsumer)
		if err != nil {
			t.Fatal(err)
		}
		want := max(alloc[i], 2*2*2)
		if n := ci.CachedInfo().Config.MaxAckPending; n != want {
			t.Errorf("server %d: max ack pending %d, want %d", i, n, want)
		}
	}
	if _, err := NewBalancer(servers, 1, 1, 0); err == nil {
		t.Error("a total below one episode per server was accepted")
	}
}
