package hf

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/troupe-ml/troupe/textgen"
)

// TestMultiAdapterBatch: one decoder step whose rows mix two random
// adapters, a snapshot of one of them and the base, with prompts of
// different lengths and a decoding row, gives every row the log-softmax
// that the row's own adapter gives it alone.
func TestMultiAdapterBatch(t *testing.T) {
	for name, c := range tinyConfigs() {
		t.Run(name, func(t *testing.T) {
			m := loadTiny(t, writeTiny(t, c, 13, WriteOptions{}))
			a, b := testAdapter(t, m, 3), testAdapter(t, m, 4)
			dec := m.Decoder()
			rng := rand.New(rand.NewPCG(7, 8))
			// A sequence already decoding: its cache holds a prompt.
			warm := dec.NewCache(32)
			if err := dec.Step([]textgen.Input{{Cache: warm, Tokens: randomIDs(rng, 6, c.Vocab), Adapter: a}}, make([]float32, 0)); err != nil {
				t.Fatal(err)
			}
			inputs := []textgen.Input{
				{Tokens: randomIDs(rng, 5, c.Vocab), Adapter: a, Logits: true},
				{Tokens: randomIDs(rng, 1, c.Vocab), Adapter: a, Logits: true, Cache: warm},
				{Tokens: randomIDs(rng, 9, c.Vocab), Adapter: b, Logits: true},
				{Tokens: randomIDs(rng, 3, c.Vocab), Adapter: b.Snapshot(), Logits: true},
				{Tokens: randomIDs(rng, 7, c.Vocab), Adapter: (*LoRA)(nil), Logits: true},
				{Tokens: randomIDs(rng, 4, c.Vocab), Adapter: (*LoRA)(nil), Logits: false},
			}
			// Alone: each row in a step of its own, on a copy of its cache.
			var want []float32
			for _, in := range inputs {
				cache := dec.NewCache(32)
				if in.Cache != nil {
					cache = in.Cache.Fork()
				}
				if !in.Logits {
					continue
				}
				row := make([]float32, c.Vocab)
				if err := dec.Step([]textgen.Input{{Cache: cache, Tokens: in.Tokens, Adapter: in.Adapter, Logits: true}}, row); err != nil {
					t.Fatal(err)
				}
				want = append(want, row...)
			}
			for i := range inputs {
				if inputs[i].Cache == nil {
					inputs[i].Cache = dec.NewCache(32)
				}
			}
			got := make([]float32, 5*c.Vocab)
			if err := dec.Step(inputs, got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 2e-5)); d != "" {
				t.Errorf("batched rows differ from each adapter's own forward:\n%s", d)
			}
		})
	}
}

// TestSnapshotSameBits: a snapshot (whose products read packed copies
// of the adapter's matrices) gives the bits of the live adapter, at one
// row (decoding) and at prompts of several lengths.
func TestSnapshotSameBits(t *testing.T) {
	c := tinyConfigs()["qwen2"]
	m := loadTiny(t, writeTiny(t, c, 19, WriteOptions{}))
	ad := testAdapter(t, m, 7)
	snap := ad.Snapshot()
	dec := m.Decoder()
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 5, 33} {
		toks := randomIDs(rng, n, c.Vocab)
		var logp [2][]float32
		for i, a := range []*LoRA{ad, snap} {
			logp[i] = make([]float32, c.Vocab)
			if err := dec.Step([]textgen.Input{{Cache: dec.NewCache(64), Tokens: toks, Adapter: a, Logits: true}}, logp[i]); err != nil {
				t.Fatal(err)
			}
		}
		for j := range logp[0] {
			if math.Float32bits(logp[0][j]) != math.Float32bits(logp[1][j]) {
				t.Fatalf("%d tokens: log-prob %d is %v live and %v from the snapshot", n, j, logp[0][j], logp[1][j])
			}
		}
	}
}

// TestEngineAdaptersMatchAlone: an engine over the model decodes requests
// of two adapters and the base together; every request's greedy tokens and
// log-probabilities equal those it gets alone.
func TestEngineAdaptersMatchAlone(t *testing.T) {
	c := tinyConfigs()["qwen2"]
	m := loadTiny(t, writeTiny(t, c, 17, WriteOptions{}))
	ads := []*LoRA{testAdapter(t, m, 5), testAdapter(t, m, 6), nil}
	e := textgen.NewEngine(m.Decoder(), textgen.EngineConfig{KVCacheBytes: 64 << 20})
	defer e.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	type job struct {
		ad     *LoRA
		prompt []int
	}
	var jobs []job
	for i := range 9 {
		jobs = append(jobs, job{ads[i%3], randomIDs(rng, 2+i, c.Vocab)})
	}
	opts := textgen.GenerateOptions{MaxTokens: 12}
	got := make([][]textgen.Generation, len(jobs))
	done := make(chan int)
	for i, j := range jobs {
		go func() {
			g, err := e.Generate(context.Background(), textgen.Request{Prompts: [][]int{j.prompt}, Options: opts,
				Bind: func() (any, int64) { return j.ad, 0 }})
			if err != nil {
				t.Error(err)
			}
			got[i] = g
			done <- i
		}()
	}
	for range jobs {
		<-done
	}
	for i, j := range jobs {
		want, err := m.Generate(context.Background(), j.ad, [][]int{j.prompt}, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(want[0].Tokens, got[i][0].Tokens) {
			t.Errorf("request %d: engine tokens %v, alone %v", i, got[i][0].Tokens, want[0].Tokens)
		}
		if d := cmp.Diff(want[0].LogProbs, got[i][0].LogProbs, cmpopts.EquateApprox(0, 2e-5)); d != "" {
			t.Errorf("request %d: log-probs differ:\n%s", i, d)
		}
	}
}
