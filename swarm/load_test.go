package swarm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// TestLoadWithKilledClients runs 64 concurrent clients against one server.
// Some clients are "killed" mid-episode (they stop talking, sometimes in
// the middle of a completion request); others abort. It checks that every
// reward a client successfully reported is accounted for (trained on or
// still buffered, none dropped), that every abandoned episode is reclaimed
// (nothing leaks), and that training kept running. Run it under -race.
func TestLoadWithKilledClients(t *testing.T) {
	m, _ := tabular.NewPreset("small")
	tc := testTrainConfig(4, 4)
	tc.MaxStaleness = 1 << 30 // keep every finished episode: none may be lost
	tc.DrainTimeout = 50 * time.Millisecond
	ts := startServer(t, m, tc, nil)
	clients, perClient := 64, 6
	if testing.Short() {
		perClient = 3
	}
	ctx := ctxT(t)
	var ended, endedReward atomic.Int64 // reward in micro-units
	var killed, aborted atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			cli := client.New(ts.ts.URL)
			cli.Backoff = client.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}
			r := rand.New(rand.NewPCG(uint64(c), 99))
			for e := 0; e < perClient; e++ {
				fate := r.IntN(10)
				// killed clients' episodes idle out quickly; the others get a
				// timeout no scheduling delay on a loaded machine can reach
				timeout := 30 * time.Second
				if fate <= 1 {
					timeout = 500 * time.Millisecond
				}
				ep, err := cli.BeginEpisode(ctx, client.BeginOptions{DiscardTimeout: timeout})
				if err != nil {
					t.Error(err)
					return
				}
				calls := 1 + r.IntN(3)
				for k := 0; k < calls; k++ {
					cctx := ctx
					var cancel context.CancelFunc
					if fate == 0 && k == calls-1 {
						// killed during a request: the connection is cut
						cctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(300))*time.Microsecond)
					}
					_, err := ep.Chat().Create(cctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: fmt.Sprint("q", c, e, k)}}, MaxTokens: 8})
					if cancel != nil {
						cancel()
					} else if err != nil && fate > 1 {
						t.Errorf("client %d: %v", c, err)
						return
					}
				}
				switch {
				case fate <= 1: // killed: never ends nor aborts
					killed.Add(1)
				case fate == 2:
					if err := cli.AbortEpisode(ctx, ep); err != nil {
						t.Error(err)
					}
					aborted.Add(1)
				default:
					rw := r.Float64()
					task := fmt.Sprint("task", r.IntN(6))
					if err := cli.EndEpisode(ctx, ep, task, client.WorkflowResult{Reward: rw}); err != nil {
						t.Errorf("client %d end: %v", c, err)
						continue
					}
					ended.Add(1)
					endedReward.Add(int64(rw * 1e6))
				}
			}
		}(c)
	}
	wg.Wait()
	waitFor(t, "abandoned episodes reclaimed", func() bool { return ts.s.OpenEpisodes() == 0 })
	waitFor(t, "training idle", func() bool { st, _, _ := ts.s.Status(); return st == StatusRolling })
	a := ts.s.Accounting()
	t.Logf("clients %d, ended %d, killed %d, aborted %d; server: %+v", clients, ended.Load(), killed.Load(), aborted.Load(), a)
	if a.Ended != ended.Load() {
		t.Errorf("server saw %d ended episodes, clients ended %d", a.Ended, ended.Load())
	}
	if a.Dropped != 0 || a.TrainedEpisodes+a.Buffered != a.Ended {
		t.Errorf("rewards lost: ended %d = trained %d + buffered %d + dropped %d?", a.Ended, a.TrainedEpisodes, a.Buffered, a.Dropped)
	}
	if d := (a.TrainedRewardSum + a.BufferedRewardSum) - float64(endedReward.Load())/1e6; d > 1e-3*float64(a.Ended) || d < -1e-3*float64(a.Ended) {
		t.Errorf("reward sum mismatch by %v", d)
	}
	if a.Reclaimed != killed.Load() {
		t.Errorf("reclaimed %d episodes, %d clients were killed", a.Reclaimed, killed.Load())
	}
	if a.Aborted != aborted.Load() {
		t.Errorf("aborted %d, want %d", a.Aborted, aborted.Load())
	}
	if a.Claimed != int64(clients*perClient) {
		t.Errorf("claimed %d, want %d", a.Claimed, clients*perClient)
	}
	if stepOf(ts.s) == 0 {
		t.Error("no training step happened under load")
	}
}
