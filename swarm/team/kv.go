package team

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// kv is the little of a key-value store the team state needs: reads with
// a revision, and writes that succeed only against the revision read.
type kv interface {
	get(ctx context.Context, key string) ([]byte, uint64, error)
	create(ctx context.Context, key string, val []byte) (uint64, error)
	update(ctx context.Context, key string, val []byte, rev uint64) (uint64, error)
	put(ctx context.Context, key string, val []byte) error
}

var (
	errNotFound = errors.New("not found")
	errConflict = errors.New("revision conflict")
)

// Bucket is the JetStream key-value bucket of the team documents.
const Bucket = "TROUPE_TEAMS"

// BucketTTL is how long a team document or heartbeat lives after its last
// change: a team left pending that long is gone, and members that end
// later find it Discarded (ReasonMissing).
const BucketTTL = 24 * time.Hour

// Open returns a store in js's TROUPE_TEAMS bucket, creating it.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Store, error) {
	b, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "team episodes: members and decisions; server heartbeats",
		TTL: BucketTTL, Storage: jetstream.FileStorage, Replicas: max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("team: bucket %s: %w", Bucket, err)
	}
	return newStore(jsKV{b}), nil
}

type jsKV struct{ b jetstream.KeyValue }

func (k jsKV) get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := k.b.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, errNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

func (k jsKV) create(ctx context.Context, key string, val []byte) (uint64, error) {
	rev, err := k.b.Create(ctx, key, val)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, errConflict
	}
	return rev, err
}

func (k jsKV) update(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	r, err := k.b.Update(ctx, key, val, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, errConflict
	}
	return r, err
}

func (k jsKV) put(ctx context.Context, key string, val []byte) error {
	_, err := k.b.Put(ctx, key, val)
	return err
}

// memKV is a kv in this process's memory.
type memKV struct {
	mu  sync.Mutex
	m   map[string]memEntry
	rev uint64
}

type memEntry struct {
	val []byte
	rev uint64
}

func (k *memKV) get(_ context.Context, key string) ([]byte, uint64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[key]
	if !ok {
		return nil, 0, errNotFound
	}
	return e.val, e.rev, nil
}

func (k *memKV) set(key string, val []byte, check func(e memEntry, ok bool) bool) (uint64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[key]
	if !check(e, ok) {
		return 0, errConflict
	}
	k.rev++
	k.m[key] = memEntry{val: append([]byte(nil), val...), rev: k.rev}
	return k.rev, nil
}

func (k *memKV) create(_ context.Context, key string, val []byte) (uint64, error) {
	return k.set(key, val, func(_ memEntry, ok bool) bool { return !ok })
}

func (k *memKV) update(_ context.Context, key string, val []byte, rev uint64) (uint64, error) {
	return k.set(key, val, func(e memEntry, ok bool) bool { return ok && e.rev == rev })
}

func (k *memKV) put(_ context.Context, key string, val []byte) error {
	_, err := k.set(key, val, func(memEntry, bool) bool { return true })
	return err
}
