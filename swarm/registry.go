package swarm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/bus"
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
		Storage: jetstream.FileStorage, Replicas: replicas,
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
		OpenEpisodes: len(s.eps.open), MaxOpen: s.train.MaxOpenEpisodes, Updated: time.Now().UTC()}
	s.mu.Unlock()
	b, _ := json.Marshal(e)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.JournalTimeout)
	defer cancel()
	if _, err := s.kv.Put(ctx, registryKey(e.Model, e.URL), b); err != nil {
		s.log.Warn("registry: refresh failed", "err", err)
	}
}

// registryURL is the URL clients reach this server at: its public URL,
// else the one it was told (troupe swarm serve: its listen address).
func (s *Server) registryURL() string { return cmp.Or(s.cfg.PublicURL, s.cfg.RegistryURL) }

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

// SetMaxOpenEpisodes sets the server's share of in-flight episodes (its
// TrainConfig.MaxOpenEpisodes) and its journal consumer's max ack pending
// (the finished episodes its trainer may hold; never below two batches, so
// that training cannot stall). swarm/balance divides a team's budget this
// way.
func (s *Server) SetMaxOpenEpisodes(n int) {
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
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.JournalTimeout)
	defer cancel()
	if _, err := s.jr.stream.UpdateConsumer(ctx, cfg); err != nil {
		s.log.Warn("balancer: consumer update failed", "max_ack_pending", pending, "err", err)
		return
	}
	s.jr.consumer = &cfg
}
