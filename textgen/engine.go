package textgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-ml/troupe/tensor"
)

// Errors of Engine.Generate and Generate that a server maps to answers:
// ErrInvalid wraps what is wrong with a request (a prompt too long for the
// context, a token outside the vocabulary, bad options: 400);
// ErrQueueFull and ErrBusy are load (429/503 with Retry-After); ErrTooLarge
// is a request no budget can hold (400).
var (
	ErrInvalid   = errors.New("textgen: invalid request")
	ErrQueueFull = errors.New("textgen: the engine's request queue is full")
	ErrBusy      = errors.New("textgen: the request waited too long for room in the engine")
	ErrTooLarge  = errors.New("textgen: the request needs more than the engine can hold")
	ErrClosed    = errors.New("textgen: the engine is closed")
)

// EngineConfig configures an Engine. Zero fields take the defaults below.
type EngineConfig struct {
	// MaxSeqs bounds the sequences decoded together (vLLM's max_num_seqs;
	// DefaultMaxSeqs). A request asks for one sequence per prompt.
	MaxSeqs int
	// MaxBatchTokens bounds the tokens of one step while no sequence is
	// decoding (vLLM's max_num_batched_tokens; DefaultMaxBatchTokens):
	// prompts are prefilled up to this many tokens at a time.
	MaxBatchTokens int
	// PrefillChunk bounds the prompt tokens a step adds while sequences are
	// decoding (DefaultPrefillChunk), so that a long prompt delays the
	// others' next tokens by at most the time of this many tokens.
	PrefillChunk int
	// KVCacheBytes bounds the cache memory reserved by admitted sequences:
	// each reserves its worst case (prompt plus max tokens) when it is
	// admitted, so the engine never runs out of memory mid-generation;
	// requests beyond it wait. DefaultKVCacheBytes(dec) when zero.
	KVCacheBytes int64
	// MaxQueue bounds the requests waiting for admission (DefaultMaxQueue);
	// a request beyond it fails at once with ErrQueueFull.
	MaxQueue int
	// QueueTimeout bounds how long a request waits for admission
	// (DefaultQueueTimeout); then it fails with ErrBusy.
	QueueTimeout time.Duration
	// OnStep, when set, receives every step's statistics (from the
	// engine's goroutine; it must be quick).
	OnStep func(StepStats)
	// OnFirstToken, when set, receives each request's time from submission
	// to its first sampled token.
	OnFirstToken func(time.Duration)
}

// Engine defaults.
const (
	DefaultMaxSeqs        = 64
	DefaultMaxBatchTokens = 2048
	DefaultPrefillChunk   = 64
	DefaultMaxQueue       = 1024
	DefaultQueueTimeout   = 60 * time.Second
)

// DefaultKVCacheBytes is the cache budget of an engine over dec when
// EngineConfig.KVCacheBytes is zero: a quarter of the memory available to
// the process (MemAvailable of /proc/meminfo; 4 GiB where unknown), at
// least enough for one full-length sequence and at most what DefaultMaxSeqs
// full-length sequences take.
func DefaultKVCacheBytes(dec Decoder) int64 {
	full := int64(dec.MaxLen()) * dec.KVBytes()
	avail := availableMemory()
	if avail <= 0 {
		avail = 16 << 30
	}
	return min(max(avail/4, full), int64(DefaultMaxSeqs)*full)
}

func (c EngineConfig) withDefaults(dec Decoder) EngineConfig {
	if c.MaxSeqs <= 0 {
		c.MaxSeqs = DefaultMaxSeqs
	}
	if c.MaxBatchTokens <= 0 {
		c.MaxBatchTokens = DefaultMaxBatchTokens
	}
	if c.PrefillChunk <= 0 {
		c.PrefillChunk = DefaultPrefillChunk
	}
	if c.KVCacheBytes <= 0 {
		c.KVCacheBytes = DefaultKVCacheBytes(dec)
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = DefaultQueueTimeout
	}
	return c
}

// StepStats describes one engine step.
type StepStats struct {
	// Seqs is the number of sequences the step ran (decoding and
	// prefilling); Decoding of them sampled a token after a previous one;
	// Tokens is the number of tokens fed.
	Seqs, Decoding, Tokens int
	// Adapters is the number of distinct adapters in the batch.
	Adapters int
	// Duration is the forward pass and sampling time.
	Duration time.Duration
	// Waiting and Running are the requests queued and the sequences
	// admitted after the step; KVUsed and KVReserved the cache bytes held
	// and reserved.
	Waiting, Running   int
	KVUsed, KVReserved int64
}

// EngineStats is a snapshot of an engine's state.
type EngineStats struct {
	Waiting, Running   int
	KVUsed, KVReserved int64
	KVBudget           int64
	Steps, Tokens      int64
}

// Request is one generation request: a sequence per prompt, sampled with
// Options (prompt i from PCG(Options.Seed, i)). Identical prompts are
// prefilled once and their caches forked.
type Request struct {
	Prompts [][]int
	Options GenerateOptions
	// Bind, when set, is called when the request is admitted and returns
	// the adapter its sequences run with (Input.Adapter) and the parameter
	// version that is, reported in each Generation.Version. Binding at
	// admission rather than submission makes every token of a sequence
	// come from one version, the newest one when it starts.
	Bind func() (adapter any, version int64)
	// Emit, when set, receives every sampled token, from the engine's
	// goroutine; it must not block.
	Emit func(TokenEvent)
}

// Engine generates for many concurrent requests at once with
// iteration-level scheduling (continuous batching, Yu et al. 2022, "Orca"):
// every step runs one token of every decoding sequence of every request and
// adapter together, plus chunks of newly admitted prompts; a sequence joins
// at the next step after its request is admitted and leaves as soon as it
// finishes or its request is cancelled. Admission is first come, first
// served, within MaxSeqs sequences and KVCacheBytes of reserved cache.
// Create it with NewEngine; it is safe for concurrent use.
type Engine struct {
	dec Decoder
	cfg EngineConfig

	mu       sync.Mutex
	cond     *sync.Cond
	incoming []*request
	queued   int // incoming + waiting
	closed   bool
	loopDone chan struct{}

	// owned by the loop
	waiting  []*request
	running  []*request
	nRunning int // sequences of the running requests not finished
	reserved int64
	logp     []float32
	draws    []draw // a step's token draws, reused

	stats struct {
		waiting, running   atomic.Int64
		kvUsed, kvReserved atomic.Int64
		steps, tokens      atomic.Int64
	}
}

type request struct {
	ctx       context.Context
	req       Request
	opts      GenerateOptions
	seqs      []*seq
	need      int64
	pending   int
	admitted  bool
	submitted time.Time
	first     bool // a token was sampled
	adapter   any
	version   int64
	out       []Generation
	err       error
	done      chan struct{} // closed when finished (nil for Generate's own loop)
	finished  bool
}

type seqState int

const (
	statePrefill seqState = iota // feeding its prompt
	stateAwait                   // waiting for an identical prompt's prefill
	stateDecode                  // feeding its last sampled token
	stateDone
)

type seq struct {
	r      *request
	i      int
	prompt []int
	cap    int
	need   int64
	held   bool // its cache reservation is counted
	cache  Cache
	fed    int
	state  seqState
	shares []*seq // sequences awaiting this one's prefill
	next   int
	rng    *rand.Rand
	gen    Generation
}

// NewEngine starts an engine over dec. Close stops it.
func NewEngine(dec Decoder, cfg EngineConfig) *Engine {
	e := &Engine{dec: dec, cfg: cfg.withDefaults(dec), loopDone: make(chan struct{})}
	e.cond = sync.NewCond(&e.mu)
	go e.loop()
	return e
}

// Config returns the engine's configuration with its defaults filled in.
func (e *Engine) Config() EngineConfig { return e.cfg }

// Stats returns a snapshot of the engine's queue, sequences and cache.
func (e *Engine) Stats() EngineStats {
	return EngineStats{Waiting: int(e.stats.waiting.Load()), Running: int(e.stats.running.Load()),
		KVUsed: e.stats.kvUsed.Load(), KVReserved: e.stats.kvReserved.Load(), KVBudget: e.cfg.KVCacheBytes,
		Steps: e.stats.steps.Load(), Tokens: e.stats.tokens.Load()}
}

// Close stops the engine; requests in flight and later ones fail with
// ErrClosed.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.cond.Broadcast()
	e.mu.Unlock()
	<-e.loopDone
}

// Generate runs req and returns one Generation per prompt. It returns when
// every sequence finished, when ctx ends (ctx.Err(); the sequences leave
// the batch at the next step), or with ErrQueueFull, ErrBusy, ErrTooLarge,
// ErrClosed or an invalid request's error.
func (e *Engine) Generate(ctx context.Context, req Request) ([]Generation, error) {
	r, err := e.newRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	if r.need > e.cfg.KVCacheBytes {
		return nil, fmt.Errorf("%w: %d sequences of up to %d tokens need %d bytes of cache, the budget is %d",
			ErrTooLarge, len(r.seqs), r.seqs[0].cap, r.need, e.cfg.KVCacheBytes)
	}
	if len(r.seqs) > e.cfg.MaxSeqs {
		return nil, fmt.Errorf("%w: %d sequences, the engine runs at most %d at once", ErrTooLarge, len(r.seqs), e.cfg.MaxSeqs)
	}
	r.done = make(chan struct{})
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return nil, ErrClosed
	case e.queued >= e.cfg.MaxQueue:
		e.mu.Unlock()
		return nil, fmt.Errorf("%w (%d requests waiting)", ErrQueueFull, e.queued)
	}
	e.incoming = append(e.incoming, r)
	e.queued++
	e.stats.waiting.Store(int64(e.queued))
	e.cond.Broadcast()
	e.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		// The loop sees the cancellation at its next step; wait for it so
		// that Emit is never called after Generate returns.
		e.mu.Lock()
		e.cond.Broadcast()
		e.mu.Unlock()
		<-r.done
	}
	return r.out, r.err
}

// Generate samples a continuation of every prompt with dec on the calling
// goroutine: the prompts are prefilled in one pass (identical prompts
// once), then every step decodes all unfinished sequences together. emit,
// when not nil, receives every token as it is sampled. ctx is checked
// between steps. It is the loop of Engine without a queue or budget.
func Generate(ctx context.Context, dec Decoder, prompts [][]int, opts GenerateOptions, emit func(TokenEvent)) ([]Generation, error) {
	e := &Engine{dec: dec, cfg: EngineConfig{MaxSeqs: len(prompts), MaxBatchTokens: 1 << 30, PrefillChunk: 1 << 30, KVCacheBytes: 1 << 62}}
	r, err := e.newRequest(ctx, Request{Prompts: prompts, Options: opts, Emit: emit})
	if err != nil {
		return nil, err
	}
	e.waiting = []*request{r}
	for !r.finished {
		e.step()
	}
	return r.out, r.err
}

// newRequest validates req and lays out its sequences.
func (e *Engine) newRequest(ctx context.Context, req Request) (*request, error) {
	if len(req.Prompts) == 0 {
		return nil, fmt.Errorf("%w: a request needs at least one prompt", ErrInvalid)
	}
	vocab, maxLen := e.dec.Vocab(), e.dec.MaxLen()
	opts, err := req.Options.Validate(vocab)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	r := &request{ctx: ctx, req: req, opts: opts, submitted: time.Now(), out: make([]Generation, len(req.Prompts))}
	r.seqs = make([]*seq, len(req.Prompts))
	for i, p := range req.Prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("%w: prompt %d is empty", ErrInvalid, i)
		}
		if len(p) >= maxLen {
			return nil, fmt.Errorf("%w: prompt %d has %d tokens, the model's context is %d", ErrInvalid, i, len(p), maxLen)
		}
		for _, t := range p {
			if t < 0 || t >= vocab {
				return nil, fmt.Errorf("%w: prompt %d: token %d outside the vocabulary [0,%d)", ErrInvalid, i, t, vocab)
			}
		}
		s := &seq{r: r, i: i, prompt: p, cap: min(len(p)+opts.MaxTokens, maxLen), rng: rand.New(rand.NewPCG(opts.Seed, uint64(i)))}
		s.need = int64(s.cap) * e.dec.KVBytes()
		r.need += s.need
		for _, o := range r.seqs[:i] {
			if o.state == statePrefill && slices.Equal(o.prompt, p) {
				s.state = stateAwait
				o.shares = append(o.shares, s)
				break
			}
		}
		r.seqs[i] = s
	}
	r.pending = len(r.seqs)
	return r, nil
}

func (e *Engine) loop() {
	defer close(e.loopDone)
	for {
		e.mu.Lock()
		for len(e.incoming) == 0 && len(e.waiting) == 0 && len(e.running) == 0 && !e.closed {
			e.cond.Wait()
		}
		e.waiting = append(e.waiting, e.incoming...)
		clear(e.incoming)
		e.incoming = e.incoming[:0]
		closed := e.closed
		e.mu.Unlock()
		if closed {
			for _, r := range e.running {
				e.finish(r, ErrClosed)
			}
			for _, r := range e.waiting {
				e.finish(r, ErrClosed)
			}
			return
		}
		e.step()
	}
}

// step runs one iteration: cancellations, admissions, one batched forward
// pass, sampling.
func (e *Engine) step() {
	now := time.Now()
	e.waiting = slices.DeleteFunc(e.waiting, func(r *request) bool {
		switch {
		case r.ctx.Err() != nil:
			e.finish(r, r.ctx.Err())
		case e.cfg.QueueTimeout > 0 && now.Sub(r.submitted) > e.cfg.QueueTimeout:
			e.finish(r, fmt.Errorf("%w (%s in the queue)", ErrBusy, e.cfg.QueueTimeout))
		default:
			return false
		}
		return true
	})
	e.running = slices.DeleteFunc(e.running, func(r *request) bool {
		if err := r.ctx.Err(); err != nil {
			e.finish(r, err)
			return true
		}
		return r.finished
	})
	for len(e.waiting) > 0 {
		r := e.waiting[0]
		if e.nRunning+len(r.seqs) > e.cfg.MaxSeqs || e.reserved+r.need > e.cfg.KVCacheBytes {
			break
		}
		e.waiting = e.waiting[1:]
		e.admit(r)
	}
	inputs, items := e.batch()
	if len(inputs) == 0 {
		e.publish()
		return
	}
	start := time.Now()
	nl := 0
	tokens := 0
	for _, in := range inputs {
		if in.Logits {
			nl++
		}
		tokens += len(in.Tokens)
	}
	if need := nl * e.dec.Vocab(); cap(e.logp) < need {
		e.logp = make([]float32, need)
	}
	logp := e.logp[:nl*e.dec.Vocab()]
	if err := e.dec.Step(inputs, logp); err != nil {
		for _, r := range e.running {
			e.finish(r, fmt.Errorf("textgen: forward pass: %w", err))
		}
		e.running = e.running[:0]
		e.publish()
		return
	}
	V := e.dec.Vocab()
	row := 0
	decoding, adapters := 0, 0
	var last any = inputs[0].Adapter
	draws := e.draws[:0]
	for k, it := range items {
		if k == 0 || inputs[k].Adapter != last {
			adapters++
			last = inputs[k].Adapter
		}
		if !inputs[k].Logits {
			continue
		}
		lp := logp[row*V : (row+1)*V]
		row++
		s := it
		if s.state == statePrefill {
			s.state = stateDecode
			for _, o := range s.shares {
				o.cache = s.cache.Fork()
				o.state = stateDecode
				draws = append(draws, draw{s: o, lp: lp})
			}
			s.shares = nil
		} else {
			decoding++
		}
		draws = append(draws, draw{s: s, lp: lp})
	}
	// Each sequence draws from its own random source, so the draws run on
	// the forward pass's threads (a pass over the vocabulary each, which on
	// one thread would hold up the step) and are then taken in order.
	tensor.ParallelFor(len(draws), max(1, drawGrain/V), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			draws[i].pick()
		}
	})
	for i := range draws {
		e.accept(&draws[i])
	}
	clear(draws)
	e.draws = draws[:0]
	e.stats.steps.Add(1)
	e.stats.tokens.Add(int64(tokens))
	e.running = slices.DeleteFunc(e.running, func(r *request) bool { return r.finished })
	e.publish()
	if e.cfg.OnStep != nil {
		e.cfg.OnStep(StepStats{Seqs: len(inputs), Decoding: decoding, Tokens: tokens, Adapters: adapters, Duration: time.Since(start),
			Waiting: int(e.stats.waiting.Load()), Running: e.nRunning, KVUsed: e.stats.kvUsed.Load(), KVReserved: e.reserved})
	}
}

// admit reserves a request's cache and makes its sequences part of the
// next batches.
func (e *Engine) admit(r *request) {
	if r.req.Bind != nil {
		r.adapter, r.version = r.req.Bind()
	}
	for _, s := range r.seqs {
		if s.state == statePrefill {
			s.cache = e.dec.NewCache(s.cap)
		}
		s.held = true
	}
	r.admitted = true
	e.reserved += r.need
	e.nRunning += len(r.seqs)
	e.running = append(e.running, r)
	if r.done != nil {
		e.mu.Lock()
		e.queued--
		e.mu.Unlock()
	}
}

// batch lays out the step: one token of every decoding sequence, then
// chunks of prompts within the step's prefill budget, grouped by adapter.
func (e *Engine) batch() ([]Input, []*seq) {
	var inputs []Input
	var items []*seq
	for _, r := range e.running {
		for _, s := range r.seqs {
			if s.state == stateDecode {
				inputs = append(inputs, Input{Cache: s.cache, Tokens: []int{s.next}, Adapter: r.adapter, Logits: true})
				items = append(items, s)
			}
		}
	}
	budget := e.cfg.PrefillChunk
	if len(inputs) == 0 {
		budget = e.cfg.MaxBatchTokens
	}
	for _, r := range e.running {
		for _, s := range r.seqs {
			if s.state != statePrefill || budget <= 0 {
				continue
			}
			n := min(len(s.prompt)-s.fed, budget)
			inputs = append(inputs, Input{Cache: s.cache, Tokens: s.prompt[s.fed : s.fed+n], Adapter: r.adapter, Logits: s.fed+n == len(s.prompt)})
			items = append(items, s)
			s.fed += n
			budget -= n
		}
	}
	groupByAdapter(inputs, items)
	return inputs, items
}

// groupByAdapter reorders the batch, stably, so that inputs with the same
// adapter are contiguous, in order of first appearance.
func groupByAdapter(inputs []Input, items []*seq) {
	rank := map[any]int{}
	for _, in := range inputs {
		if _, ok := rank[in.Adapter]; !ok {
			rank[in.Adapter] = len(rank)
		}
	}
	if len(rank) < 2 {
		return
	}
	idx := make([]int, len(inputs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return rank[inputs[a].Adapter] - rank[inputs[b].Adapter] })
	in2, it2 := slices.Clone(inputs), slices.Clone(items)
	for k, i := range idx {
		inputs[k], items[k] = in2[i], it2[i]
	}
}

// drawGrain is the fewest vocabulary entries worth a goroutine when
// drawing tokens.
const drawGrain = 1 << 16

// draw is one sequence's token drawn from one row of log-probabilities.
type draw struct {
	s   *seq
	lp  []float32
	tok int
	top []TokenLogProb
}

// pick draws d's token (and its top log-probabilities): it reads d.lp and
// uses only d.s's random source.
func (d *draw) pick() {
	o := &d.s.r.opts
	d.tok = SampleTokenOnePass(d.lp, *o, d.s.rng)
	if o.TopLogProbs > 0 {
		d.top = TopLogProbs(d.lp, o.TopLogProbs)
	}
}

// accept appends d's token to its sequence and finishes the sequence when
// it stops.
func (e *Engine) accept(d *draw) {
	s, lp, tok := d.s, d.lp, d.tok
	r := s.r
	o := &r.opts
	ev := TokenEvent{Prompt: s.i, Token: tok, LogProb: lp[tok], Version: r.version}
	s.gen.Tokens = append(s.gen.Tokens, tok)
	s.gen.LogProbs = append(s.gen.LogProbs, lp[tok])
	if o.TopLogProbs > 0 {
		ev.TopLogProbs = d.top
		s.gen.TopLogProbs = append(s.gen.TopLogProbs, ev.TopLogProbs)
	}
	switch {
	case StopsAt(s.gen.Tokens, *o) || o.Stop != nil && o.Stop(s.i, s.gen.Tokens):
		s.gen.FinishReason = "stop"
	case len(s.gen.Tokens) >= o.MaxTokens || len(s.prompt)+len(s.gen.Tokens) >= s.cap:
		s.gen.FinishReason = "length"
	default:
		s.next = tok
	}
	ev.FinishReason = s.gen.FinishReason
	if !r.first {
		r.first = true
		if e.cfg.OnFirstToken != nil {
			e.cfg.OnFirstToken(time.Since(r.submitted))
		}
	}
	if r.req.Emit != nil {
		r.req.Emit(ev)
	}
	if s.gen.FinishReason == "" {
		return
	}
	e.release(s)
	s.gen.Version = r.version
	r.out[s.i] = s.gen
	if r.pending--; r.pending == 0 {
		e.finish(r, nil)
	}
}

// finish ends a request: its unfinished sequences release their cache.
func (e *Engine) finish(r *request, err error) {
	if r.finished {
		return
	}
	r.finished = true
	for _, s := range r.seqs {
		e.release(s)
	}
	if err != nil {
		r.out, r.err = nil, err
	}
	if r.done != nil {
		if !r.admitted {
			e.mu.Lock()
			e.queued--
			e.mu.Unlock()
		}
		close(r.done)
	}
}

// release ends a sequence and returns its cache reservation.
func (e *Engine) release(s *seq) {
	if s.held {
		s.held = false
		e.reserved -= s.need
		e.nRunning--
	}
	s.state, s.cache = stateDone, nil
}

// publish updates the snapshot Stats reads.
func (e *Engine) publish() {
	var used int64
	for _, r := range e.running {
		for _, s := range r.seqs {
			if s.cache != nil {
				used += int64(s.cache.Len())
			}
		}
	}
	e.stats.kvUsed.Store(used * e.dec.KVBytes())
	e.stats.kvReserved.Store(e.reserved)
	e.stats.running.Store(int64(e.nRunning))
	e.mu.Lock()
	e.stats.waiting.Store(int64(e.queued))
	e.mu.Unlock()
}
