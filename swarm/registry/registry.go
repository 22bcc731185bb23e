// Package registry is where swarm servers on one NATS announce themselves
// (a JetStream key-value bucket, key <model>.<url>), so that a client, a
// scheduler or a dashboard can find a model's front-ends. Entries expire
// TTL after their server's last refresh, so a dead front-end drops out.
package registry

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

// Bucket is the registry's JetStream key-value bucket.
const Bucket = "TROUPE_REGISTRY"

// TTL is how long an entry outlives its last refresh; servers refresh
// every TTL/3 and after every training step.
const TTL = 30 * time.Second

// Frontend is one server's entry.
type Frontend struct {
	Model        string    `json:"model"`
	URL          string    `json:"url"`
	Role         string    `json:"role"`
	GlobalStep   int64     `json:"global_step"`
	OpenEpisodes int       `json:"open_episodes"`
	MaxOpen      int       `json:"max_open_episodes"`
	Updated      time.Time `json:"updated"`
}

// Open creates (or updates) the bucket.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "swarm servers by model", TTL: TTL,
		Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("registry: bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// Put writes f's entry.
func Put(ctx context.Context, kv jetstream.KeyValue, f Frontend) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, bus.Subject(f.Model)+"."+bus.Subject(f.URL), b)
	return err
}

// List returns the live entries of model (every model when empty),
// sorted by model and URL; none when the bucket does not exist.
func List(ctx context.Context, js jetstream.JetStream, model string) ([]Frontend, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: keys: %w", err)
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
