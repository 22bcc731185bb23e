// Package balance divides a budget of in-flight episodes among the swarm
// servers of a team by their reward progress.
package balance

import (
	"fmt"
	"sync"

	"github.com/troupe-ml/troupe/ensemble"
	"github.com/troupe-ml/troupe/swarm"
)

// Balancer divides a budget of in-flight episodes among the models of one
// team by ensemble's softmax scheduler over their recent progress (the
// change of each model's batch reward mean per training step): a model
// that is learning gets more of the rollouts. Each server's share becomes
// its TrainConfig.MaxOpenEpisodes (claims beyond it are refused as at
// capacity) and its journal consumer's max ack pending (the finished
// episodes its trainer may hold; never below two batches, so that
// training cannot stall).
type Balancer struct {
	mu      sync.Mutex
	servers []*swarm.Server
	total   int
	sched   *ensemble.Scheduler
	last    []float64
	seen    []bool
}

// New returns a balancer of total in-flight episodes over
// servers; temperature and floor are ensemble.Scheduler's (a floor of
// 0.1/len(servers) keeps every model rolling).
func New(servers []*swarm.Server, total int, temperature, floor float64) (*Balancer, error) {
	if len(servers) == 0 || total < len(servers) {
		return nil, fmt.Errorf("balance: a balancer needs servers and a total of at least one episode each (got %d servers, total %d)", len(servers), total)
	}
	if !(temperature > 0) || floor < 0 || floor*float64(len(servers)) > 1 {
		return nil, fmt.Errorf("balance: balancer temperature %g must be > 0 and floor %g within [0, 1/%d]", temperature, floor, len(servers))
	}
	return &Balancer{servers: servers, total: total, sched: ensemble.NewScheduler(len(servers), temperature, floor, 0.5),
		last: make([]float64, len(servers)), seen: make([]bool, len(servers))}, nil
}

// Observe records server i's training step (call it from each server's
// OnTrainStep) and rebalances.
func (b *Balancer) Observe(i int, ts swarm.TrainStep) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[i] {
		b.sched.Observe(i, ts.RewardMean-b.last[i])
	}
	b.last[i], b.seen[i] = ts.RewardMean, true
	return b.applyLocked()
}

// Apply sets every server's share from the current contributions.
func (b *Balancer) Apply() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applyLocked()
}

func (b *Balancer) applyLocked() []int {
	alloc := b.sched.Allocate(b.total)
	for i, s := range b.servers {
		s.SetMaxOpenEpisodes(max(1, alloc[i]))
	}
	return alloc
}
