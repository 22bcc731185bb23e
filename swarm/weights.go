package swarm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/bus"
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

// WeightsBucket is the JetStream object-store bucket holding a model's
// published weights, one object per step (WeightsObject), the last two
// kept. Objects are chunked by the object store, so a large model's
// weights need no special handling.
func WeightsBucket(model string) string { return "TROUPE_WEIGHTS_" + bus.Subject(model) }

// WeightsObject names the weights of one step in WeightsBucket.
func WeightsObject(step int64) string { return fmt.Sprintf("step-%012d", step) }

// weightsStep parses an object name: the step, and whether it is one part
// of a step's weights (step-N.pK) rather than the object that announces
// the step.
func weightsStep(name string) (step int64, part, ok bool) {
	s, ok := strings.CutPrefix(name, "step-")
	if !ok {
		return 0, false, false
	}
	s, _, part = strings.Cut(s, ".p")
	n, err := strconv.ParseInt(s, 10, 64)
	return n, part, err == nil && n >= 0
}

// weightsPart is the size of one object when a step's weights are split.
// The object store publishes an object's chunks without waiting for their
// acknowledgements, and a whole 1 GB model at once overruns a server's
// ingest queue (it answers 429); parts of this size are put one after the
// other, and the step's own object, naming the part count, comes last.
var weightsPart = 32 << 20 // a variable so that tests can split small weights

const keepWeights = 2

type weightStore struct {
	obs jetstream.ObjectStore
	w   jetstream.ObjectWatcher // rollout role only
}

func openWeights(ctx context.Context, js jetstream.JetStream, name string, replicas int) (*weightStore, error) {
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      WeightsBucket(name),
		Description: "weights of " + name + " published by its trainer, one object per step",
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("swarm: weights bucket %s: %w", WeightsBucket(name), err)
	}
	return &weightStore{obs: obs}, nil
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*s.cfg.JournalTimeout+time.Duration(buf.Len()/(1<<20))*time.Second)
	defer cancel()
	if err := putWeights(ctx, s.ws.obs, step, buf.Bytes()); err != nil {
		return fmt.Errorf("swarm: publish weights of step %d: %w", step, err)
	}
	s.m.weightsPublished.Observe(time.Since(start).Seconds())
	lister, err := s.ws.obs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil // the weights are out; pruning waits for the next step
	}
	for _, info := range lister {
		if n, _, ok := weightsStep(info.Name); ok && n <= step-keepWeights {
			s.ws.obs.Delete(ctx, info.Name)
		}
	}
	return nil
}

// watchWeights (rollout role) loads every newer step the trainer
// publishes, starting with the newest already in the bucket.
func (s *Server) watchWeights() error {
	w, err := s.ws.obs.Watch(context.Background(), jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("swarm: watch %s: %w", WeightsBucket(s.journalName()), err)
	}
	s.ws.w = w
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for info := range w.Updates() {
			if info == nil {
				continue // the end of the initial listing
			}
			step, part, ok := weightsStep(info.Name)
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := getWeights(ctx, s.ws.obs, info)
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

// putWeights stores one step's weights: one object, or parts of
// weightsPart bytes followed by the step's object naming their count.
func putWeights(ctx context.Context, obs jetstream.ObjectStore, step int64, data []byte) error {
	name := WeightsObject(step)
	if len(data) <= weightsPart {
		_, err := obs.PutBytes(ctx, name, data)
		return err
	}
	n := (len(data) + weightsPart - 1) / weightsPart
	for i := range n {
		part := data[i*weightsPart : min(len(data), (i+1)*weightsPart)]
		if _, err := obs.PutBytes(ctx, fmt.Sprintf("%s.p%05d", name, i), part); err != nil {
			return err
		}
	}
	_, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: map[string]string{"parts": strconv.Itoa(n)}}, bytes.NewReader(nil))
	return err
}

// getWeights reads what putWeights stored under info.
func getWeights(ctx context.Context, obs jetstream.ObjectStore, info *jetstream.ObjectInfo) ([]byte, error) {
	p, ok := info.Metadata["parts"]
	if !ok {
		return obs.GetBytes(ctx, info.Name)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 1<<20 {
		return nil, fmt.Errorf("object %s: bad part count %q", info.Name, p)
	}
	var out []byte
	for i := range n {
		b, err := obs.GetBytes(ctx, fmt.Sprintf("%s.p%05d", info.Name, i))
		if err != nil {
			return nil, fmt.Errorf("object %s part %d of %d: %w", info.Name, i, n, err)
		}
		out = append(out, b...)
	}
	return out, nil
}

// PublishWeights stores one step's weights in obs (a WeightsBucket) as a
// trainer does, so that a program other than a swarm server (an
// evaluator, a benchmark) can take part.
func PublishWeights(ctx context.Context, obs jetstream.ObjectStore, step int64, data []byte) error {
	return putWeights(ctx, obs, step, data)
}
