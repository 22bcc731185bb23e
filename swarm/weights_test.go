package swarm

import (
	"bytes"
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/bus"
)

// TestWeightsParts: weights larger than one part are split and read back
// whole; the announcing object comes last, and pruning leaves no part.
func TestWeightsParts(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	defer func(p int) { weightsPart = p }(weightsPart)
	weightsPart = 1000
	obs, err := b.JetStream().CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: WeightsBucket("m")})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 999, 1000, 1001, 3500} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + n)
		}
		if err := PublishWeights(ctx, obs, int64(n), data); err != nil {
			t.Fatal(err)
		}
		info, err := obs.GetInfo(ctx, WeightsObject(int64(n)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := getWeights(ctx, obs, info)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read back %d bytes that differ", n, len(got))
		}
	}
	for _, tc := range []struct {
		name     string
		step     int64
		part, ok bool
	}{{"step-000000000012", 12, false, true}, {"step-000000000012.p00003", 12, true, true}, {"other", 0, false, false}, {"step-x", 0, false, false}} {
		step, part, ok := weightsStep(tc.name)
		if step != tc.step || part != tc.part || ok != tc.ok {
			t.Errorf("weightsStep(%q) = %d, %v, %v; want %d, %v, %v", tc.name, step, part, ok, tc.step, tc.part, tc.ok)
		}
	}
}
