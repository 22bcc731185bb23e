package weightstore

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
	defer func(p int) { PartSize = p }(PartSize)
	PartSize = 1000
	obs, err := b.JetStream().CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: Bucket("m")})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 999, 1000, 1001, 3500} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + n)
		}
		if err := Put(ctx, obs, int64(n), data); err != nil {
			t.Fatal(err)
		}
		info, err := obs.GetInfo(ctx, Object(int64(n)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Get(ctx, obs, info)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read back %d bytes that differ", n, len(got))
		}
	}
	// Pruning up to step 1001 leaves the 3500 bytes of step 3500 alone:
	// its object and four parts.
	if err := Prune(ctx, obs, 1001); err != nil {
		t.Fatal(err)
	}
	left, err := obs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range left {
		if step, _, _ := Parse(info.Name); step != 3500 {
			t.Errorf("%s left after pruning", info.Name)
		}
	}
	if len(left) != 5 {
		t.Errorf("%d objects left after pruning, want step 3500's object and its 4 parts", len(left))
	}
	for _, tc := range []struct {
		name     string
		step     int64
		part, ok bool
	}{{"step-000000000012", 12, false, true}, {"step-000000000012.p00003", 12, true, true}, {"other", 0, false, false}, {"step-x", 0, false, false}} {
		step, part, ok := Parse(tc.name)
		if step != tc.step || part != tc.part || ok != tc.ok {
			t.Errorf("Parse(%q) = %d, %v, %v; want %d, %v, %v", tc.name, step, part, ok, tc.step, tc.part, tc.ok)
		}
	}
}
