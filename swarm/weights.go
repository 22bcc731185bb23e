package swarm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/swarm/weightstore"
)

// Server roles. A model's trainer and its rollout front-ends may run as
// separate processes on separate machines, joined by one NATS: the
// front-ends serve chat and episodes and publish finished episodes to the
// journal; the trainer consumes the journal, trains, checkpoints and
// publishes the weights of every step, which the front-ends load.
const (
	// RoleBoth serves, trains and checkpoints in one process (the default).
	RoleBoth = ""
	// RoleRollout serves chat and episodes, publishes finished episodes,
	// and loads the weights the trainer publishes; it never trains.
	RoleRollout = "rollout"
	// RoleTrain consumes the journal, trains, checkpoints and publishes
	// weights (its own endpoints keep working, as in RoleBoth).
	RoleTrain = "train"
)

// keepWeights is how many published steps a weights bucket keeps.
const keepWeights = 2

type weightStore struct {
	obs jetstream.ObjectStore
	w   jetstream.ObjectWatcher // rollout role only
}

// publishWeights puts the model's current weights into the bucket and
// deletes all but the last keepWeights steps.
func (s *Server) publishWeights(step int64) error {
	var buf bytes.Buffer
	s.trainMu.Lock()
	err := s.model.Save(&buf)
	s.trainMu.Unlock()
	if err != nil {
		return fmt.Errorf("swarm: serialise weights of step %d: %w", step, err)
	}
	start := time.Now()
	// Close cuts a transfer short: front-ends keep the previous step.
	ctx, cancel := context.WithTimeout(s.ctx, 10*s.cfg.JournalTimeout+time.Duration(buf.Len()/(1<<20))*time.Second)
	defer cancel()
	if err := weightstore.Put(ctx, s.ws.obs, step, buf.Bytes()); err != nil {
		return fmt.Errorf("swarm: publish weights of step %d: %w", step, err)
	}
	s.m.weightsPublished.Observe(time.Since(start).Seconds())
	if err := weightstore.Prune(ctx, s.ws.obs, step-keepWeights); err != nil {
		s.log.Warn("pruning published weights failed; the next step tries again", "err", err)
	}
	return nil
}

// watchWeights (rollout role) loads every newer step the trainer
// publishes, starting with the newest already in the bucket.
func (s *Server) watchWeights() error {
	w, err := s.ws.obs.Watch(s.ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("swarm: watch %s: %w", weightstore.Bucket(s.journalName()), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil { // closed while booting
		w.Stop()
		return errors.New("swarm: closed while booting")
	}
	s.ws.w = w
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for info := range w.Updates() {
			if info == nil {
				continue // the end of the initial listing
			}
			step, part, ok := weightstore.Parse(info.Name)
			if !ok || part || step <= s.step.Load() {
				continue
			}
			if err := s.loadPublished(info, step); err != nil {
				s.log.Error("loading published weights failed; serving the previous ones", "object", info.Name, "err", err)
			}
		}
	}()
	return nil
}

func (s *Server) loadPublished(info *jetstream.ObjectInfo, step int64) error {
	name := info.Name
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
	defer cancel()
	b, err := weightstore.Get(ctx, s.ws.obs, info)
	if err != nil {
		return err
	}
	s.trainMu.Lock()
	err = s.model.Load(bytes.NewReader(b))
	v := s.model.Version()
	s.trainMu.Unlock()
	if err != nil {
		return err
	}
	s.step.Store(v)
	s.m.globalStep.Set(float64(v))
	s.m.weightsLoaded.Inc()
	s.log.Info("loaded published weights", "object", name, "global_step", v, "bytes", len(b))
	return nil
}
