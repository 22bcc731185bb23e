package replay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/troupe-ml/troupe/bus"
)

// openBus starts an embedded NATS server for one test.
func openBus(t testing.TB, cfg bus.Config) *bus.Bus {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// serve hosts a new buffer under name on b.
func serve(t testing.TB, b *bus.Bus, name string, capacity int, alpha float64, cfg ServiceConfig) *Service {
	t.Helper()
	s, err := NewService(b.Conn(), name, New[[]byte](capacity, alpha), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// TestServiceMatchesLocalBuffer drives a served buffer and a local one
// through the same adds, samples and updates: with the service's documented
// generator, every sampled item (ID, value, priority, probability and
// importance weight) is bit-identical to the local buffer's.
func TestServiceMatchesLocalBuffer(t *testing.T) {
	const seed = 7
	b := openBus(t, bus.Config{})
	serve(t, b, "match", 50, 0.6, ServiceConfig{Seed: seed})
	c := NewClient(b.Conn(), "match")
	local := New[[]byte](50, 0.6)
	rng := rand.New(rand.NewPCG(seed, seed))
	ctx := context.Background()

	data := rand.New(rand.NewPCG(1, 1))
	for batch := range 8 { // 80 items into 50 slots: the oldest 30 are evicted
		vals := make([][]byte, 10)
		ps := make([]float64, 10)
		for k := range vals {
			vals[k] = u64(uint64(batch*10 + k))
			if k%3 != 0 { // every third item takes the largest priority (p = 0)
				ps[k] = 0.1 + 5*data.Float64()
			}
		}
		first, err := c.Add(ctx, vals, ps)
		if err != nil {
			t.Fatal(err)
		}
		if want := local.AddBatch(vals, ps); first != want {
			t.Fatalf("batch %d: first ID %d, local %d", batch, first, want)
		}
	}
	for round, beta := range []float64{0.4, 0.7, 1} {
		got, err := c.Sample(ctx, 64, beta)
		if err != nil {
			t.Fatal(err)
		}
		want := local.Sample(64, beta, rng)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("round %d: service sample differs from the local buffer's (-local +service):\n%s", round, diff)
		}
		ids := make([]uint64, len(got))
		ps := make([]float64, len(got))
		for k, it := range got {
			ids[k], ps[k] = it.ID, 0.01+data.Float64()*it.Weight*10
		}
		ids = append(ids, 3) // evicted: ignored by both
		ps = append(ps, 1e6)
		if err := c.Update(ctx, ids, ps); err != nil {
			t.Fatal(err)
		}
		local.Update(ids, ps)
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := local.Stats(); st != want {
		t.Errorf("stats %+v, local %+v", st, want)
	}
	if st.Len != 50 || st.Added != 80 || st.Capacity != 50 || st.Alpha != 0.6 {
		t.Errorf("stats %+v", st)
	}
}

// TestServiceProducersChiSquare has producers in goroutines add items
// through their own clients, then checks that the learner's samples
// through the service follow P(i) ∝ p_i^α (Pearson χ² at the 0.999
// quantile), that the same counts are far from uniform (the test has
// power), and that each item's weight is (N·P(i))^−β / max_k (N·P(k))^−β.
func TestServiceProducersChiSquare(t *testing.T) {
	const (
		producers, per = 5, 20
		k              = producers * per
		alpha, beta    = 0.8, 0.5
	)
	b := openBus(t, bus.Config{})
	serve(t, b, "chi", k, alpha, ServiceConfig{Seed: 3})
	prio := func(i int) float64 { return 0.2 + float64(i%17) } // a spread of 0.2 to 16.2
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for w := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := NewClient(b.Conn(), "chi")
			for i := w * per; i < (w+1)*per; i += 4 {
				vals := [][]byte{u64(uint64(i)), u64(uint64(i + 1)), u64(uint64(i + 2)), u64(uint64(i + 3))}
				if _, err := c.Add(context.Background(), vals, []float64{prio(i), prio(i + 1), prio(i + 2), prio(i + 3)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	pr := make([]float64, k)
	var z float64
	for i := range pr {
		pr[i] = math.Pow(prio(i), alpha)
		z += pr[i]
	}
	minP := math.Inf(1)
	for i := range pr {
		pr[i] /= z
		minP = math.Min(minP, pr[i])
	}
	c := NewClient(b.Conn(), "chi")
	counts := make([]int, k)
	const draws = 100000
	for range draws / 1000 {
		items, err := c.Sample(context.Background(), 1000, beta)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			i := int(binary.LittleEndian.Uint64(it.Value))
			counts[i]++
			wantW := math.Pow(k*pr[i], -beta) / math.Pow(k*minP, -beta)
			if math.Abs(it.Prob-pr[i]) > 1e-12 || math.Abs(it.Weight-wantW) > 1e-12 || it.Priority != prio(i) {
				t.Fatalf("item %d: P %.6g w %.6g p %g, want %.6g %.6g %g", i, it.Prob, it.Weight, it.Priority, pr[i], wantW, prio(i))
			}
		}
	}
	// Samples of 1000 are stratified, so their counts vary less than
	// multinomial ones and χ² falls well below its df: the bound is one-sided.
	crit := distuv.ChiSquared{K: k - 1}.Quantile(0.999)
	x2 := chiSquare(counts, pr, draws)
	t.Logf("χ² = %.1f (df %d, 0.999 critical %.1f)", x2, k-1, crit)
	if x2 > crit {
		t.Errorf("sampling frequencies through the service do not match the priorities: χ² %.1f > %.1f", x2, crit)
	}
	uniform := make([]float64, k)
	for i := range uniform {
		uniform[i] = 1.0 / k
	}
	if chiSquare(counts, uniform, draws) < crit {
		t.Error("chi-square test cannot tell prioritized from uniform sampling")
	}
}

// TestServiceConcurrent runs producers and a learner that samples and
// updates at the same time (run it with -race): every add is accounted for
// and the buffer holds the newest items.
func TestServiceConcurrent(t *testing.T) {
	const producers, per, capacity = 6, 40, 100
	b := openBus(t, bus.Config{})
	serve(t, b, "conc", capacity, 0.6, ServiceConfig{Seed: 5})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, producers+1)
	for w := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := NewClient(b.Conn(), "conc")
			for i := range per {
				if _, err := c.Add(ctx, [][]byte{{byte(w), byte(i)}}, []float64{float64(1 + i%5)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { // the learner
		defer close(done)
		c := NewClient(b.Conn(), "conc")
		rng := rand.New(rand.NewPCG(9, 9))
		for range 60 {
			items, err := c.Sample(ctx, 16, 0.5)
			if err != nil {
				errs <- err
				return
			}
			ids := make([]uint64, len(items))
			ps := make([]float64, len(items))
			for k, it := range items {
				if len(it.Value) != 2 || int(it.Value[0]) >= producers {
					errs <- fmt.Errorf("sampled a corrupt value %v", it.Value)
					return
				}
				ids[k], ps[k] = it.ID, 0.1+rng.Float64()
			}
			if err := c.Update(ctx, ids, ps); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, err := NewClient(b.Conn(), "conc").Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Added != producers*per || st.Len != capacity {
		t.Fatalf("stats %+v: want %d added, %d held", st, producers*per, capacity)
	}
}

// raw builds a request by hand, for the malformed ones.
func raw(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func f64b(v float64) []byte { return u64(math.Float64bits(v)) }

func TestServiceRefusesBadRequests(t *testing.T) {
	b := openBus(t, bus.Config{})
	serve(t, b, "bad", 16, 0.6, ServiceConfig{MaxSample: 100})
	v := []byte{wireVersion}
	huge := binary.AppendUvarint(nil, 1<<40)
	for _, tc := range []struct {
		verb string
		msg  []byte
		want string // in the description
	}{
		{"add", nil, "empty message"},
		{"add", []byte{9}, "wire version 9"},
		{"add", raw(v, []byte{1}), "count 1 does not fit"},
		{"add", raw(v, huge, f64b(1)), "does not fit"},
		{"add", raw(v, []byte{1}, f64b(1), []byte{5, 'a'}), "value of 5 bytes, 1 left"},
		{"add", raw(v, []byte{1}, f64b(math.NaN()), []byte{0}), "priority 0 is NaN"},
		{"add", raw(v, []byte{1}, f64b(math.Inf(1)), []byte{0}), "priority 0 is +Inf"},
		{"add", raw(v, []byte{2}, f64b(1), []byte{0}, f64b(-2), []byte{0}), "priority 1 is -2"},
		{"add", raw(v, []byte{0}, []byte{7}), "1 trailing bytes"},
		{"add", raw(v, []byte{0x80}), "bad uvarint"},
		{"sample", raw(v, []byte{0}, f64b(0.4)), "0 items requested, want 1 to 100"},
		{"sample", raw(v, []byte{101}, f64b(0.4)), "101 items requested"},
		{"sample", raw(v, huge, f64b(0.4)), "items requested"},
		{"sample", raw(v, []byte{4}, f64b(math.NaN())), "beta NaN"},
		{"sample", raw(v, []byte{4}, f64b(-1)), "beta -1, want 0 to 1"},
		{"sample", raw(v, []byte{4}, f64b(1.5)), "beta 1.5"},
		{"add", raw(v, []byte{1}, f64b(2e12), []byte{0}), "priority 0 is 2e+12: want 0 to 1e+12"},
		{"sample", raw(v, []byte{4}), "message ends early"},
		{"update", raw(v, []byte{1}, u64(0)), "does not fit"},
		{"update", raw(v, []byte{1}, u64(0), f64b(math.Inf(-1))), "priority 0 is -Inf"},
		{"stats", []byte("{}"), "must be empty"},
	} {
		t.Run(tc.verb+"/"+tc.want, func(t *testing.T) {
			msg, err := b.Conn().Request("troupe.replay.bad."+tc.verb, tc.msg, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			code, desc := msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader)
			if code != "400" || !strings.Contains(desc, tc.want) {
				t.Fatalf("reply code %q %q, want 400 and %q", code, desc, tc.want)
			}
		})
	}
	// The client's own checks, and the service still serves.
	c := NewClient(b.Conn(), "bad")
	ctx := context.Background()
	if _, err := c.Add(ctx, [][]byte{{1}}, []float64{1, 2}); err == nil {
		t.Error("Add with mismatched lengths")
	}
	if err := c.Update(ctx, []uint64{1}, nil); err == nil {
		t.Error("Update with mismatched lengths")
	}
	if _, err := c.Sample(ctx, 0, 1); err == nil {
		t.Error("Sample of 0 items")
	}
	var re *RemoteError
	if _, err := c.Add(ctx, [][]byte{{1}}, []float64{math.NaN()}); !errors.As(err, &re) || re.Code != "400" {
		t.Errorf("NaN priority through the client: %v", err)
	}
	if items, err := c.Sample(ctx, 4, 1); err != nil || len(items) != 0 {
		t.Errorf("sample of an empty buffer: %v %v", items, err)
	}
	if _, err := c.Add(ctx, [][]byte{{1}, {2}}, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Stats(ctx); err != nil || st.Len != 2 {
		t.Errorf("after the refused requests: %+v %v", st, err)
	}
}

func TestServiceLimits(t *testing.T) {
	b := openBus(t, bus.Config{MaxPayload: 4096})
	svc := serve(t, b, "small", 16, 1, ServiceConfig{})
	c := NewClient(b.Conn(), "small")
	ctx := context.Background()
	if _, err := c.Add(ctx, [][]byte{{1}}, []float64{1e-300}); err != nil {
		t.Fatal(err)
	}
	if it := svc.Buffer().Items(); len(it) != 1 || it[0].Priority != MinPriority {
		t.Errorf("a priority of 1e-300 is stored as %+v, want MinPriority", it)
	}
	if _, err := c.Add(ctx, [][]byte{make([]byte, 5000)}, nil); err == nil || !strings.Contains(err.Error(), "max payload 4096") {
		t.Errorf("oversized add: %v", err)
	}
	if _, err := c.Add(ctx, [][]byte{make([]byte, 1500), make([]byte, 1500)}, nil); err != nil {
		t.Fatal(err)
	}
	var re *RemoteError
	if _, err := c.Sample(ctx, 4, 1); !errors.As(err, &re) || re.Code != "413" {
		t.Errorf("a sample over the max payload: %v", err)
	}
	if items, err := c.Sample(ctx, 2, 1); err != nil || len(items) != 2 {
		t.Errorf("a sample that fits: %d items, %v", len(items), err)
	}
	if _, err := NewClient(b.Conn(), "nobody").Stats(ctx); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("no service: %v", err)
	}
}

// FuzzServiceRequest feeds arbitrary bytes to every endpoint's handler:
// nothing panics, a refused request leaves the buffer as it was, and an
// accepted one leaves a buffer whose sampling mass is finite.
func FuzzServiceRequest(f *testing.F) {
	f.Add(uint8(0), encodeAdd([][]byte{{1, 2}, nil}, []float64{1, 0}))
	f.Add(uint8(1), encodeSample(3, 0.5))
	f.Add(uint8(2), encodeUpdate([]uint64{0, 1, 99}, []float64{2, 0, 1}))
	f.Add(uint8(3), []byte{})
	f.Add(uint8(0), []byte{wireVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add(uint8(0), encodeAdd([][]byte{{1}, {2}}, []float64{1e12, 5e-324}))
	f.Add(uint8(2), encodeUpdate([]uint64{0, 1}, []float64{1e-300, 1e12}))
	f.Fuzz(func(t *testing.T, verb uint8, msg []byte) {
		s := &Service{buf: New[[]byte](8, 0.7), maxSample: 64, rng: rand.New(rand.NewPCG(1, 1)),
			maxPayload: func() int64 { return 1 << 10 }}
		s.buf.Add([]byte{1}, 2)
		s.buf.Add([]byte{2}, 0.5)
		before := s.buf.Stats()
		h := [...]func([]byte) ([]byte, *requestError){s.add, s.sample, s.update, s.stats}[int(verb)%4]
		var resp []byte
		var rerr *requestError
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("handler %d panicked on %x: %v", verb%4, msg, r)
				}
			}()
			resp, rerr = h(msg)
		}()
		after := s.buf.Stats()
		if rerr != nil && after != before {
			t.Fatalf("refused request changed the buffer: %+v -> %+v", before, after)
		}
		if math.IsNaN(after.Mass) || math.IsInf(after.Mass, 0) || math.IsInf(after.MaxPriority, 0) {
			t.Fatalf("buffer corrupted: %+v", after)
		}
		for _, it := range s.buf.Sample(16, 1, s.rng) {
			if !(it.Prob > 0 && it.Prob <= 1 && it.Weight > 0 && it.Weight <= 1) {
				t.Fatalf("after %x: item %d has P %g, w %g", msg, it.ID, it.Prob, it.Weight)
			}
		}
		if rerr == nil {
			var err error
			switch verb % 4 {
			case 0:
				_, _, err = decodeAddResponse(resp)
			case 1:
				_, err = decodeSampleResponse(resp)
			}
			if err != nil {
				t.Fatalf("reply of handler %d does not decode: %v", verb%4, err)
			}
		}
	})
}

// TestWireRoundTrip checks that each message decodes to what was encoded.
func TestWireRoundTrip(t *testing.T) {
	vals := [][]byte{{}, {1}, make([]byte, 300)}
	ps := []float64{0, 1.5, 1e-300}
	gv, gp, err := decodeAdd(encodeAdd(vals, ps))
	if err != nil || !cmp.Equal(gv, vals) || !cmp.Equal(gp, ps) {
		t.Errorf("add: %v %v %v", gv, gp, err)
	}
	n, beta, err := decodeSample(encodeSample(300, 0.25))
	if err != nil || n != 300 || beta != 0.25 {
		t.Errorf("sample: %d %g %v", n, beta, err)
	}
	items := []Item[[]byte]{{ID: 1 << 40, Value: []byte("x"), Priority: 2, Prob: 0.5, Weight: 0.75}, {Value: []byte{}}}
	gi, err := decodeSampleResponse(encodeSampleResponse(items))
	if err != nil || !cmp.Equal(gi, items) {
		t.Errorf("sample reply: %+v %v", gi, err)
	}
	ids := []uint64{0, math.MaxUint64}
	gids, gp, err := decodeUpdate(encodeUpdate(ids, ps[:2]))
	if err != nil || !cmp.Equal(gids, ids) || !cmp.Equal(gp, ps[:2]) {
		t.Errorf("update: %v %v %v", gids, gp, err)
	}
	first, c, err := decodeAddResponse(encodeAddResponse(42, 7))
	if err != nil || first != 42 || c != 7 {
		t.Errorf("add reply: %d %d %v", first, c, err)
	}
}

// ExampleService shares one prioritized buffer between producers and a
// learner through NATS (an embedded server here; producers in other
// processes would connect to bus.Config.Listen's address).
func ExampleService() {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	svc, err := NewService(b.Conn(), "demo", New[[]byte](1000, 1), ServiceConfig{Seed: 1})
	if err != nil {
		panic(err)
	}
	defer svc.Stop()

	producer := NewClient(b.Conn(), "demo")
	if _, err := producer.Add(ctx, [][]byte{[]byte("rare"), []byte("common")}, []float64{1, 9}); err != nil {
		panic(err)
	}

	learner := NewClient(b.Conn(), "demo")
	items, err := learner.Sample(ctx, 100, 1)
	if err != nil {
		panic(err)
	}
	n := map[string]int{}
	for _, it := range items {
		n[string(it.Value)]++
	}
	fmt.Println(n["rare"], n["common"])
	// Output: 10 90
}

// BenchmarkService measures the learner's round trip through the service
// on an embedded server (sample 32 items of 64 bytes and update their
// priorities) against the same calls on a local Buffer, and a producer's
// adds in batches of 32.
func BenchmarkService(b *testing.B) {
	const capacity, batch = 1 << 14, 32
	fill := func(add func([][]byte, []float64)) {
		vals := make([][]byte, batch)
		for k := range vals {
			vals[k] = make([]byte, 64)
		}
		ps := make([]float64, batch)
		for i := 0; i < capacity; i += batch {
			for k := range ps {
				ps[k] = float64(1 + (i+k)%13)
			}
			add(vals, ps)
		}
	}
	b.Run("local/sample32+update", func(b *testing.B) {
		buf := New[[]byte](capacity, 0.6)
		fill(func(v [][]byte, p []float64) { buf.AddBatch(v, p) })
		rng := rand.New(rand.NewPCG(1, 1))
		ids, ps := make([]uint64, batch), make([]float64, batch)
		for b.Loop() {
			for k, it := range buf.Sample(batch, 0.5, rng) {
				ids[k], ps[k] = it.ID, it.Priority*1.01
			}
			buf.Update(ids, ps)
		}
		b.ReportMetric(batch*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
	})
	bb := openBus(b, bus.Config{})
	serve(b, bb, "bench", capacity, 0.6, ServiceConfig{Seed: 1})
	c := NewClient(bb.Conn(), "bench")
	ctx := context.Background()
	fill(func(v [][]byte, p []float64) {
		if _, err := c.Add(ctx, v, p); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("nats/sample32+update", func(b *testing.B) {
		ids, ps := make([]uint64, batch), make([]float64, batch)
		for b.Loop() {
			items, err := c.Sample(ctx, batch, 0.5)
			if err != nil {
				b.Fatal(err)
			}
			for k, it := range items {
				ids[k], ps[k] = it.ID, it.Priority*1.01
			}
			if err := c.Update(ctx, ids, ps); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(batch*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/roundtrip")
	})
	b.Run("nats/add32", func(b *testing.B) {
		vals := make([][]byte, batch)
		for k := range vals {
			vals[k] = make([]byte, 64)
		}
		for b.Loop() {
			if _, err := c.Add(ctx, vals, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(batch*float64(b.N)/b.Elapsed().Seconds(), "adds/s")
	})
}

// TestServiceAnswersOtherConnectionsAtOnce: a client on another connection
// (another process, in practice) is answered by a service as soon as
// NewService returns, never told that no one responds.
func TestServiceAnswersOtherConnectionsAtOnce(t *testing.T) {
	b := openBus(t, bus.Config{})
	nc, err := nats.Connect("", nats.InProcessServer(b.Server()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 200 {
		name := "fresh-" + strconv.Itoa(i)
		s, err := NewService(b.Conn(), name, New[[]byte](4, 1), ServiceConfig{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = NewClient(nc, name).Add(ctx, [][]byte{u64(uint64(i))}, nil)
		s.Stop()
		if err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
	}
}
