// Package weightstore keeps a model's published weights in a JetStream
// object store: one object per training step, split into parts of
// PartSize beyond that size, the older steps pruned.
package weightstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/bus"
)

// Bucket is the object-store bucket holding a model's published weights.
func Bucket(model string) string { return "TROUPE_WEIGHTS_" + bus.Subject(model) }

// Object names the weights of one step in a Bucket.
func Object(step int64) string { return fmt.Sprintf("step-%012d", step) }

// Parse parses an object name: the step, and whether it is one part
// of a step's weights (step-N.pK) rather than the object that announces
// the step.
func Parse(name string) (step int64, part, ok bool) {
	s, ok := strings.CutPrefix(name, "step-")
	if !ok {
		return 0, false, false
	}
	s, _, part = strings.Cut(s, ".p")
	n, err := strconv.ParseInt(s, 10, 64)
	return n, part, err == nil && n >= 0
}

// PartSize is the size of one object when a step's weights are split.
// The object store publishes an object's chunks without waiting for their
// acknowledgements, and a whole 1 GB model at once overruns a server's
// ingest queue (it answers 429); parts of this size are put one after the
// other, and the step's own object, naming the part count, comes last.
var PartSize = 32 << 20 // a variable so that tests can split small weights

// Put stores one step's weights: one object, or parts of
// PartSize bytes followed by the step's object naming their count.
func Put(ctx context.Context, obs jetstream.ObjectStore, step int64, data []byte) error {
	name := Object(step)
	if len(data) <= PartSize {
		_, err := obs.PutBytes(ctx, name, data)
		return err
	}
	n := (len(data) + PartSize - 1) / PartSize
	for i := range n {
		part := data[i*PartSize : min(len(data), (i+1)*PartSize)]
		if _, err := obs.PutBytes(ctx, fmt.Sprintf("%s.p%05d", name, i), part); err != nil {
			return err
		}
	}
	_, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: map[string]string{"parts": strconv.Itoa(n)}}, bytes.NewReader(nil))
	return err
}

// Get reads what Put stored under info.
func Get(ctx context.Context, obs jetstream.ObjectStore, info *jetstream.ObjectInfo) ([]byte, error) {
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

// Prune deletes the objects of every step up to and including step.
func Prune(ctx context.Context, obs jetstream.ObjectStore, step int64) error {
	lister, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, info := range lister {
		if n, _, ok := Parse(info.Name); ok && n <= step {
			if err := obs.Delete(ctx, info.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// Open creates (or updates) the weights bucket of model.
func Open(ctx context.Context, js jetstream.JetStream, model string, replicas int) (jetstream.ObjectStore, error) {
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      Bucket(model),
		Description: "weights of " + model + " published by its trainer, one object per step",
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("weightstore: bucket %s: %w", Bucket(model), err)
	}
	return obs, nil
}
