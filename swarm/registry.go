package swarm

import (
	"cmp"
	"context"
	"time"

	"github.com/troupe-ml/troupe/swarm/registry"
)

// register writes this server's entry (from the reaper, every
// RegistryTTL/3, and after every training step).
func (s *Server) register() {
	if s.kv == nil {
		return
	}
	s.mu.Lock()
	e := registry.Frontend{Model: s.journalName(), URL: s.registryURL(), Role: cmp.Or(s.cfg.Role, "both"), GlobalStep: s.step.Load(),
		OpenEpisodes: len(s.eps.open), MaxOpen: s.train.MaxOpenEpisodes, Updated: time.Now().UTC()}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.JournalTimeout)
	defer cancel()
	if err := registry.Put(ctx, s.kv, e); err != nil {
		s.log.Warn("registry: refresh failed", "err", err)
	}
}

// registryURL is the URL clients reach this server at: its public URL,
// else the one it was told (troupe swarm serve: its listen address).
func (s *Server) registryURL() string { return cmp.Or(s.cfg.PublicURL, s.cfg.RegistryURL) }

func (s *Server) journalName() string { return cmp.Or(s.cfg.JournalName, s.model.Name()) }

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
