package textgen

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/troupe-ml/troupe/tensor"
)

// fakeDecoder is a deterministic language model: the distribution after a
// sequence depends on its last three tokens and its adapter (an *int, the
// adapter's "weights"), so tests can compare exactly. It records every
// step's batch.
type fakeDecoder struct {
	vocab, maxLen int
	delay         time.Duration

	mu    sync.Mutex
	steps []stepLog
}

type stepLog struct {
	seqs, tokens, prefill, adapters int
}

type fakeCache struct {
	toks []int
	cap  int
}

func (c *fakeCache) Len() int { return len(c.toks) }
func (c *fakeCache) Fork() Cache {
	return &fakeCache{toks: append(make([]int, 0, c.cap), c.toks...), cap: c.cap}
}

func (d *fakeDecoder) Vocab() int                  { return d.vocab }
func (d *fakeDecoder) MaxLen() int                 { return d.maxLen }
func (d *fakeDecoder) KVBytes() int64              { return 100 }
func (d *fakeDecoder) NewCache(capacity int) Cache { return &fakeCache{cap: capacity} }

func (d *fakeDecoder) Step(batch []Input, logp []float32) error {
	if d.delay > 0 {
		time.Sleep(d.delay)
	}
	log := stepLog{seqs: len(batch)}
	seen := map[any]bool{}
	row := 0
	for k, in := range batch {
		if k > 0 && in.Adapter != batch[k-1].Adapter && seen[in.Adapter] {
			return fmt.Errorf("inputs of adapter %v are not contiguous", in.Adapter)
		}
		seen[in.Adapter] = true
		c := in.Cache.(*fakeCache)
		if len(c.toks)+len(in.Tokens) > c.cap {
			return fmt.Errorf("cache of capacity %d overflows with %d+%d tokens", c.cap, len(c.toks), len(in.Tokens))
		}
		c.toks = append(c.toks, in.Tokens...)
		log.tokens += len(in.Tokens)
		if len(in.Tokens) > 1 || !in.Logits {
			log.prefill += len(in.Tokens)
		}
		if in.Logits {
			d.dist(logp[row*d.vocab:(row+1)*d.vocab], c.toks, in.Adapter)
			row++
		}
	}
	log.adapters = len(seen)
	d.mu.Lock()
	d.steps = append(d.steps, log)
	d.mu.Unlock()
	return nil
}

// dist writes a log-softmax that depends on the last three tokens and the
// adapter's value.
func (d *fakeDecoder) dist(out []float32, toks []int, adapter any) {
	h := fnv.New64a()
	for _, t := range toks[max(0, len(toks)-3):] {
		fmt.Fprint(h, t, ",")
	}
	if a, ok := adapter.(*int); ok && a != nil {
		fmt.Fprint(h, "a", *a)
	}
	seed := h.Sum64()
	var z float64
	for i := range out {
		seed = seed*6364136223846793005 + 1442695040888963407
		out[i] = float32(seed>>40) / float32(1<<24) * 4
		z += math.Exp(float64(out[i]))
	}
	lz := float32(math.Log(z))
	for i := range out {
		out[i] -= lz
	}
}

func (d *fakeDecoder) log() []stepLog {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.steps)
}

func newFake() *fakeDecoder { return &fakeDecoder{vocab: 17, maxLen: 64} }

// TestEngineMatchesGenerate: requests submitted concurrently, so that they
// share steps, get exactly the tokens each gets alone (textgen.Generate),
// log-probabilities included.
func TestEngineMatchesGenerate(t *testing.T) {
	dec := newFake()
	dec.delay = time.Millisecond
	e := NewEngine(dec, EngineConfig{KVCacheBytes: 1 << 20})
	defer e.Close()
	type job struct {
		prompts [][]int
		opts    GenerateOptions
	}
	var jobs []job
	for i := range 12 {
		p := []int{1 + i%5, 2 + i%3, 3}
		jobs = append(jobs, job{[][]int{p, p, {4, 5}}, GenerateOptions{MaxTokens: 5 + i%7, Temperature: float64(i%3) / 2, Seed: uint64(i), StopTokens: []int{16}, TopLogProbs: i % 3}})
	}
	got := make([][]Generation, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			got[i], err = e.Generate(context.Background(), Request{Prompts: j.prompts, Options: j.opts})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i, j := range jobs {
		want, err := Generate(context.Background(), newFake(), j.prompts, j.opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got[i]); d != "" {
			t.Errorf("request %d: engine differs from alone (-alone +engine):\n%s", i, d)
		}
	}
	maxSeqs := 0
	for _, s := range dec.log() {
		maxSeqs = max(maxSeqs, s.seqs)
	}
	if maxSeqs < 4 {
		t.Errorf("at most %d sequences shared a step: concurrent requests were not batched", maxSeqs)
	}
	if st := e.Stats(); st.Running != 0 || st.KVReserved != 0 || st.Waiting != 0 {
		t.Errorf("after all requests: %+v, want nothing running, reserved or waiting", st)
	}
}

// TestEngineSharesPrefill: n identical prompts are prefilled once and the
// choices fork the cache.
func TestEngineSharesPrefill(t *testing.T) {
	dec := newFake()
	p := []int{1, 2, 3, 4, 5, 6, 7, 8}
	if _, err := Generate(context.Background(), dec, [][]int{p, p, p, p}, GenerateOptions{MaxTokens: 3, Temperature: 1, Seed: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if first := dec.log()[0]; first.prefill != len(p) {
		t.Errorf("first step prefilled %d tokens, want %d (one prompt for four choices)", first.prefill, len(p))
	}
}

// TestEngineJoinAndChunkedPrefill: a request arriving while another decodes
// joins the batch at the next step, and its long prompt is fed in chunks
// of at most PrefillChunk tokens, so the decoding request gets a token at
// every step.
func TestEngineJoinAndChunkedPrefill(t *testing.T) {
	dec := newFake()
	dec.delay = 2 * time.Millisecond
	e := NewEngine(dec, EngineConfig{PrefillChunk: 4, KVCacheBytes: 1 << 20})
	defer e.Close()
	first := make(chan struct{})
	done := make(chan []Generation, 1)
	go func() {
		var once sync.Once
		g, err := e.Generate(context.Background(), Request{Prompts: [][]int{{1}}, Options: GenerateOptions{MaxTokens: 40},
			Emit: func(TokenEvent) { once.Do(func() { close(first) }) }})
		if err != nil {
			t.Error(err)
		}
		done <- g
	}()
	<-first
	long := make([]int, 30)
	for i := range long {
		long[i] = i % 16
	}
	if _, err := e.Generate(context.Background(), Request{Prompts: [][]int{long}, Options: GenerateOptions{MaxTokens: 2}}); err != nil {
		t.Fatal(err)
	}
	<-done
	chunks := 0
	for _, s := range dec.log() {
		if s.prefill > 0 && s.seqs > 1 {
			chunks++
			if s.prefill > 4 {
				t.Errorf("a step fed %d prompt tokens while another sequence decoded, want at most 4", s.prefill)
			}
		}
	}
	if chunks < 30/4 {
		t.Errorf("the 30-token prompt shared %d steps with the decoding request, want at least %d chunks", chunks, 30/4)
	}
}

// TestEngineCancel: a cancelled request returns its context's error, its
// sequences leave the batch at once, the others finish unchanged and the
// cache reservation is returned.
func TestEngineCancel(t *testing.T) {
	dec := newFake()
	dec.delay = time.Millisecond
	e := NewEngine(dec, EngineConfig{KVCacheBytes: 1 << 20})
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var n int
	var mu sync.Mutex
	errc := make(chan error, 1)
	go func() {
		_, err := e.Generate(ctx, Request{Prompts: [][]int{{1, 2}}, Options: GenerateOptions{MaxTokens: 60},
			Emit: func(TokenEvent) {
				mu.Lock()
				n++
				if n == 5 {
					cancel()
				}
				mu.Unlock()
			}})
		errc <- err
	}()
	opts := GenerateOptions{MaxTokens: 20, Seed: 3, Temperature: 1}
	other, err := e.Generate(context.Background(), Request{Prompts: [][]int{{3, 4}}, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v, want context.Canceled", err)
	}
	mu.Lock()
	emitted := n
	mu.Unlock()
	if emitted > 7 {
		t.Errorf("the cancelled request got %d tokens, want it to leave within a step or two of the 5th", emitted)
	}
	alone, _ := Generate(context.Background(), newFake(), [][]int{{3, 4}}, opts, nil)
	if d := cmp.Diff(alone, other); d != "" {
		t.Errorf("the other request changed (-alone +engine):\n%s", d)
	}
	if st := e.Stats(); st.Running != 0 || st.KVReserved != 0 {
		t.Errorf("after the requests: %+v", st)
	}
}

// TestEngineBudget: requests beyond the cache budget wait for room (and run
// once there is), a request larger than the budget is refused at once, a
// full queue refuses, and a request waiting past QueueTimeout gets ErrBusy.
func TestEngineBudget(t *testing.T) {
	dec := newFake()
	dec.delay = time.Millisecond
	// One sequence of 2+20 tokens takes 2,200 bytes: room for one at a time.
	e := NewEngine(dec, EngineConfig{KVCacheBytes: 3000, MaxQueue: 2, QueueTimeout: time.Minute})
	defer e.Close()
	var wg sync.WaitGroup
	var order []int
	var mu sync.Mutex
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			if _, err := e.Generate(context.Background(), Request{Prompts: [][]int{{1, 2}}, Options: GenerateOptions{MaxTokens: 20}}); err != nil {
				t.Error(err)
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, s := range dec.log() {
		if s.seqs > 1 {
			t.Fatalf("a step ran %d sequences; the budget holds one", s.seqs)
		}
	}
	if !slices.Equal(order, []int{0, 1}) {
		t.Errorf("finish order %v, want first come first served", order)
	}
	if _, err := e.Generate(context.Background(), Request{Prompts: [][]int{{1, 2}, {1, 2}}, Options: GenerateOptions{MaxTokens: 20}}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a request beyond the budget: %v, want ErrTooLarge", err)
	}

	slow := newFake()
	slow.delay = 20 * time.Millisecond
	q := NewEngine(slow, EngineConfig{KVCacheBytes: 3000, MaxQueue: 1, QueueTimeout: 50 * time.Millisecond})
	defer q.Close()
	go q.Generate(context.Background(), Request{Prompts: [][]int{{1}}, Options: GenerateOptions{MaxTokens: 20}})
	time.Sleep(30 * time.Millisecond) // admitted and decoding
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := q.Generate(context.Background(), Request{Prompts: [][]int{{1}}, Options: GenerateOptions{MaxTokens: 20}})
			errs <- err
		}()
	}
	e1, e2 := <-errs, <-errs
	if !(errors.Is(e1, ErrQueueFull) && errors.Is(e2, ErrBusy) || errors.Is(e2, ErrQueueFull) && errors.Is(e1, ErrBusy)) {
		t.Errorf("with a queue of one behind a long request: %v and %v, want ErrQueueFull and ErrBusy", e1, e2)
	}
}

// TestEngineAdapterUpdateMidDecode: a sequence keeps the adapter version it
// was admitted with while the binding changes (a training step published a
// new one); requests admitted after the change sample from the new one;
// sequences of different adapters share steps.
func TestEngineAdapterUpdateMidDecode(t *testing.T) {
	dec := newFake()
	dec.delay = time.Millisecond
	e := NewEngine(dec, EngineConfig{KVCacheBytes: 1 << 20})
	defer e.Close()
	v1, v2, other := 1, 2, 7
	var mu sync.Mutex
	cur, version := &v1, int64(1)
	bind := func() (any, int64) {
		mu.Lock()
		defer mu.Unlock()
		return cur, version
	}
	opts := GenerateOptions{MaxTokens: 30, Temperature: 1, Seed: 9}
	started := make(chan struct{})
	res := make(chan []Generation, 1)
	go func() {
		var once sync.Once
		g, err := e.Generate(context.Background(), Request{Prompts: [][]int{{5, 6}}, Options: opts, Bind: bind,
			Emit: func(TokenEvent) { once.Do(func() { close(started) }) }})
		if err != nil {
			t.Error(err)
		}
		res <- g
	}()
	<-started
	mu.Lock()
	cur, version = &v2, 2
	mu.Unlock()
	oth := make(chan []Generation, 1)
	go func() {
		g, _ := e.Generate(context.Background(), Request{Prompts: [][]int{{1}}, Options: opts, Bind: func() (any, int64) { return &other, 5 }})
		oth <- g
	}()
	late, err := e.Generate(context.Background(), Request{Prompts: [][]int{{5, 6}}, Options: opts, Bind: bind})
	if err != nil {
		t.Fatal(err)
	}
	early := <-res
	<-oth
	alone := func(a *int) []Generation {
		g, _ := Generate(context.Background(), adapterFake{newFake(), a}, [][]int{{5, 6}}, opts, nil)
		return g
	}
	wantEarly, wantLate := alone(&v1), alone(&v2)
	wantEarly[0].Version, wantLate[0].Version = 1, 2
	if d := cmp.Diff(wantEarly, early); d != "" {
		t.Errorf("the sequence started at version 1 changed (-v1 alone +engine):\n%s", d)
	}
	if d := cmp.Diff(wantLate, late); d != "" {
		t.Errorf("the request after the update (-v2 alone +engine):\n%s", d)
	}
	multi := 0
	for _, s := range dec.log() {
		if s.adapters > 1 {
			multi++
		}
	}
	if multi == 0 {
		t.Error("no step mixed adapters")
	}
}

// adapterFake runs every input with one adapter.
type adapterFake struct {
	*fakeDecoder
	a *int
}

func (d adapterFake) Step(batch []Input, logp []float32) error {
	for i := range batch {
		batch[i].Adapter = d.a
	}
	return d.fakeDecoder.Step(batch, logp)
}

// TestGenerateStops: stop tokens, stop sequences, Stop, MaxTokens and the
// context length end generations with the right reasons.
func TestGenerateStops(t *testing.T) {
	dec := newFake()
	g0, _ := Generate(context.Background(), dec, [][]int{{1}}, GenerateOptions{MaxTokens: 50, Temperature: 1, Seed: 4}, nil)
	toks := g0[0].Tokens
	if len(toks) != 50 || g0[0].FinishReason != "length" {
		t.Fatalf("unstopped: %d tokens, %q", len(toks), g0[0].FinishReason)
	}
	for _, tt := range []struct {
		name string
		opts GenerateOptions
		n    int
		why  string
	}{
		{"stop token", GenerateOptions{StopTokens: []int{toks[6]}}, slices.Index(toks, toks[6]) + 1, "stop"},
		{"stop sequence", GenerateOptions{StopSequences: [][]int{toks[3:5]}}, 5, "stop"},
		{"stop func", GenerateOptions{Stop: func(_ int, t []int) bool { return len(t) == 9 }}, 9, "stop"},
		{"max tokens", GenerateOptions{MaxTokens: 7}, 7, "length"},
	} {
		o := tt.opts
		o.Temperature, o.Seed = 1, 4
		if o.MaxTokens == 0 {
			o.MaxTokens = 50
		}
		g, err := Generate(context.Background(), newFake(), [][]int{{1}}, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(g[0].Tokens) != tt.n || g[0].FinishReason != tt.why || !slices.Equal(g[0].Tokens, toks[:tt.n]) {
			t.Errorf("%s: %d tokens %q, want %d %q", tt.name, len(g[0].Tokens), g[0].FinishReason, tt.n, tt.why)
		}
	}
	short := &fakeDecoder{vocab: 17, maxLen: 10}
	g, _ := Generate(context.Background(), short, [][]int{{1, 2, 3}}, GenerateOptions{MaxTokens: 50}, nil)
	if len(g[0].Tokens) != 7 || g[0].FinishReason != "length" {
		t.Errorf("context of 10 after a 3-token prompt: %d tokens %q, want 7 length", len(g[0].Tokens), g[0].FinishReason)
	}
	if _, err := Generate(context.Background(), short, [][]int{{1, 99}}, GenerateOptions{}, nil); err == nil {
		t.Error("a token outside the vocabulary was accepted")
	}
	if _, err := Generate(context.Background(), short, [][]int{make([]int, 10)}, GenerateOptions{}, nil); err == nil {
		t.Error("a prompt as long as the context was accepted")
	}
}

// TestEngineDrawsOnThreads: with a vocabulary large enough that a step's
// draws split over the threads, every sequence gets the tokens (and top
// log-probabilities) it gets with the draws on one thread, identical
// prompts (one prefill, forked draws) included.
func TestEngineDrawsOnThreads(t *testing.T) {
	prompts := [][]int{{1, 2, 3}, {1, 2, 3}, {4, 5}, {6}, {7, 8, 9, 10}}
	opts := GenerateOptions{MaxTokens: 6, Temperature: 1, Seed: 7, TopLogProbs: 2}
	run := func(threads int) []Generation {
		prev := tensor.SetThreads(threads)
		defer tensor.SetThreads(prev)
		got, err := Generate(context.Background(), &fakeDecoder{vocab: drawGrain, maxLen: 64}, prompts, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := run(1)
	if d := cmp.Diff(want, run(3)); d != "" {
		t.Errorf("draws on 3 threads differ from one (-one +three):\n%s", d)
	}
}
