package swarm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/ensemble"
)

// RegistryBucket is the JetStream key-value bucket in which every server
// on a NATS announces itself (key <model>.<url>), so that a client or a
// scheduler can find a model's front-ends. Entries expire RegistryTTL
// after their server's last refresh, so a dead front-end drops out.
const RegistryBucket = "TROUPE_REGISTRY"

// RegistryTTL is how long a registry entry outlives its last refresh.
const RegistryTTL = 30 * time.Second

// Frontend is one server's registry entry.
type Frontend struct {
	Model        string    `json:"model"`
	URL          string    `json:"url"`
	Role         string    `json:"role"`
	GlobalStep   int64     `json:"global_step"`
	OpenEpisodes int       `json:"open_episodes"`
	MaxOpen      int       `json:"max_open_episodes"`
	Updated      time.Time `json:"updated"`
}

func openRegistry(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: RegistryBucket, Description: "swarm servers by model", TTL: RegistryTTL,
		Storage: jetstream.FileStorage, Replicas: max(1, replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("swarm: registry bucket: %w", err)
	}
	return kv, nil
}

func registryKey(model, url string) string { return bus.Subject(model) + "." + bus.Subject(url) }

// register writes this server's entry (from the reaper, every
// RegistryTTL/3, and after every training step).
func (s *Server) register() {
	if s.kv == nil {
		return
	}
	s.mu.Lock()
	e := Frontend{Model: s.journalName(), URL: s.registryURL(), Role: cmp.Or(s.cfg.Role, "both"), GlobalStep: s.step.Load(),
		OpenEpisodes: len(s.episodes), MaxOpen: s.train.MaxOpenEpisodes, Updated: time.Now().UTC()}
	s.mu.Unlock()
	b, _ := json.Marshal(e)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.journalTimeout())
	defer cancel()
	if _, err := s.kv.Put(ctx, registryKey(e.Model, e.URL), b); err != nil {
		s.log.Warn("registry: refresh failed", "err", err)
	}
}

func (s *Server) registryURL() string { return cmp.Or(s.cfg.RegistryURL, s.cfg.PublicURL) }

func (s *Server) journalName() string { return cmp.Or(s.cfg.JournalName, s.model.Name()) }

// ListFrontends returns the live registry entries of model (every model
// when empty), sorted by model and URL.
func ListFrontends(ctx context.Context, js jetstream.JetStream, model string) ([]Frontend, error) {
	kv, err := js.KeyValue(ctx, RegistryBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("swarm: registry: %w", err)
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("swarm: registry keys: %w", err)
	}
	var out []Frontend
	prefix := bus.Subject(model) + "."
	for _, k := range keys {
		if model != "" && !strings.HasPrefix(k, prefix) {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // expired between Keys and Get
		}
		var f Frontend
		if json.Unmarshal(e.Value(), &f) == nil {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b Frontend) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.URL, b.URL))
	})
	return out, nil
}

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
	servers []*Server
	total   int
	sched   *ensemble.Scheduler
	last    []float64
	seen    []bool
}

// NewBalancer returns a balancer of total in-flight episodes over
// servers; temperature and floor are ensemble.Scheduler's (a floor of
// 0.1/len(servers) keeps every model rolling).
func NewBalancer(servers []*Server, total int, temperature, floor float64) (*Balancer, error) {
	if len(servers) == 0 || total < len(servers) {
		return nil, fmt.Errorf("swarm: a balancer needs servers and a total of at least one episode each (got %d servers, total %d)", len(servers), total)
	}
	if !(temperature > 0) || floor < 0 || floor*float64(len(servers)) > 1 {
		return nil, fmt.Errorf("swarm: balancer temperature %g must be > 0 and floor %g within [0, 1/%d]", temperature, floor, len(servers))
	}
	return &Balancer{servers: servers, total: total, sched: ensemble.NewScheduler(len(servers), temperature, floor, 0.5),
		last: make([]float64, len(servers)), seen: make([]bool, len(servers))}, nil
}

// Observe records server i's training step (call it from each server's
// OnTrainStep) and rebalances.
func (b *Balancer) Observe(i int, ts TrainStep) []int {
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
		s.setInFlight(max(1, alloc[i]))
	}
	return alloc
}

// setInFlight sets the server's share of in-flight episodes.
func (s *Server) setInFlight(n int) {
	s.mu.Lock()
	s.train.MaxOpenEpisodes = n
	pending := max(n, 2*s.train.BatchSize*s.train.NumRepeat)
	s.mu.Unlock()
	if s.jr == nil || s.jr.consumer == nil {
		return
	}
	cfg := *s.jr.consumer
	if cfg.MaxAckPending == pending {
		return
	}
	cfg.MaxAckPending = pending
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.journalTimeout())
	defer cancel()
	if _, err := s.jr.stream.UpdateConsumer(ctx, cfg); err != nil {
		s.log.Warn("balancer: consumer update failed", "max_ack_pending", pending, "err", err)
		return
	}
	s.jr.consumer = &cfg
}
