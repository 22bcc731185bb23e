package adapter

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/textgen"
)

// byteTok is a ChatTokenizer of bytes: token b+1 is byte b, token 0 is the
// end of a turn.
type byteTok struct{}

func (byteTok) ChatPrompt(_ context.Context, msgs []api.Message, tools []api.Tool) ([]int, error) {
	if len(tools) > 0 {
		return nil, openai.ErrNoToolTemplate
	}
	msgs = openai.FoldToolCalls(msgs)
	var ids []int
	for _, m := range msgs {
		t, _ := byteTok{}.EncodeText(m.Role + ": " + m.Content + "\n")
		ids = append(ids, t...)
	}
	return ids, nil
}

func (byteTok) TokenBytes(t int) []byte {
	if t < 1 || t > 256 {
		return nil
	}
	return []byte{byte(t - 1)}
}

func (byteTok) EncodeText(s string) ([]int, error) {
	ids := make([]int, len(s))
	for i := range len(s) {
		ids[i] = int(s[i]) + 1
	}
	return ids, nil
}

// toolTok renders tools as one extra token per tool.
type toolTok struct{ byteTok }

func (t toolTok) ChatPrompt(ctx context.Context, msgs []api.Message, tools []api.Tool) ([]int, error) {
	ids, err := t.byteTok.ChatPrompt(ctx, msgs, nil)
	for range tools {
		ids = append(ids, 257)
	}
	return ids, err
}

// textSampler answers every prompt with the bytes of answer, up to
// MaxTokens or Stop, emitting the tokens of the prompts in turn so that
// their events interleave, and records the options it received.
type textSampler struct {
	answer string
	got    []textgen.GenerateOptions
}

func (s *textSampler) Generate(_ context.Context, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	s.got = append(s.got, opts)
	toks, _ := byteTok{}.EncodeText(s.answer)
	gens := make([]textgen.Generation, len(prompts))
	done := make([]bool, len(prompts))
	for k := 0; ; k++ {
		more := false
		for i := range prompts {
			g := &gens[i]
			if done[i] {
				continue
			}
			if k == opts.MaxTokens || k == len(toks) {
				done[i] = true
				g.FinishReason = "length"
				continue
			}
			more = true
			tok := toks[k] + i // prompts differ by a shift
			g.Tokens = append(g.Tokens, tok)
			g.LogProbs = append(g.LogProbs, -float32(k+1))
			ev := textgen.TokenEvent{Prompt: i, Token: tok, LogProb: -float32(k + 1)}
			switch {
			case opts.Stop != nil && opts.Stop(i, g.Tokens):
				g.FinishReason, done[i] = "stop", true
			case k+1 == opts.MaxTokens || k+1 == len(toks):
				g.FinishReason, done[i] = "length", true
			}
			ev.FinishReason = g.FinishReason
			if emit != nil {
				emit(ev)
			}
		}
		if !more {
			return gens, nil
		}
	}
}

// countPolicy is an rl.Policy whose Step counts versions; skip makes steps
// skipped (as a NaN loss does).
type countPolicy struct {
	version int64
	skip    bool
}

func (p *countPolicy) LogProbs(batch []rl.Sample) ([][]float32, error) {
	out := make([][]float32, len(batch))
	for i, s := range batch {
		out[i] = make([]float32, len(s.Actions))
	}
	return out, nil
}

func (p *countPolicy) ForwardBackward(batch []rl.Sample, loss rl.LossFunc) error {
	lp, _ := p.LogProbs(batch)
	loss(lp, nil)
	return nil
}

func (p *countPolicy) Step() (rl.StepInfo, error) {
	if p.skip {
		return rl.StepInfo{Skipped: true}, nil
	}
	p.version++
	return rl.StepInfo{}, nil
}

func (p *countPolicy) Version() int64 { return p.version }

// evalPolicy adds rl.Evaluator.
type evalPolicy struct{ countPolicy }

func (p *evalPolicy) Evaluate(batch []rl.Sample) ([][]float32, [][]float32, error) {
	lp, err := p.LogProbs(batch)
	return lp, nil, err
}

// recTrainer takes one step per Update and records what it saw.
type recTrainer struct {
	versions  []int64 // the policy's Version at each Update
	sizes     []int
	evaluator bool
	dropped   int // reported as its own Stats.Dropped
}

func (t *recTrainer) Update(p rl.Policy, batch []rl.Sample) (rl.Stats, error) {
	t.versions = append(t.versions, p.Version())
	t.sizes = append(t.sizes, len(batch))
	_, t.evaluator = p.(rl.Evaluator)
	_, err := p.Step()
	return rl.Stats{Samples: len(batch), Dropped: t.dropped}, err
}

// floatState is a Checkpointer of a parameter vector in a plain binary
// layout (not safetensors): a count, then the values.
type floatState struct {
	params  []float64
	failErr error // returned by Load
}

func (s *floatState) Save(w io.Writer) error {
	if err := binary.Write(w, binary.LittleEndian, uint32(len(s.params))); err != nil {
		return err
	}
	return binary.Write(w, binary.LittleEndian, s.params)
}

func (s *floatState) Load(r io.Reader) error {
	if s.failErr != nil {
		return s.failErr
	}
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return err
	}
	if int(n) != len(s.params) {
		return fmt.Errorf("%d parameters, want %d", n, len(s.params))
	}
	return binary.Read(r, binary.LittleEndian, s.params)
}

// stState is a Checkpointer that writes safetensors with metadata of its own.
type stState struct {
	w    []float32
	meta map[string]string // what Load read
}

func (s *stState) Save(w io.Writer) error {
	return safetensors.Write(w, []safetensors.Tensor{safetensors.FromFloat32("w", []int{len(s.w)}, s.w)}, map[string]string{"own": "kept"})
}

func (s *stState) Load(r io.Reader) error {
	meta, w, err := readW(r)
	if err != nil {
		return err
	}
	if len(w) != len(s.w) {
		return errors.New("no tensor w of the right size")
	}
	copy(s.w, w)
	s.meta = meta
	return nil
}

// readW reads a safetensors file's metadata and its float32 tensor "w".
func readW(r io.Reader) (map[string]string, []float32, error) {
	f, err := safetensors.Read(r)
	if err != nil {
		return nil, nil, err
	}
	t, ok := f.Tensor("w")
	if !ok {
		return f.Metadata, nil, nil
	}
	w, err := t.Float32s()
	return f.Metadata, w, err
}

type fakeModel struct {
	a     *Adapter
	pol   *countPolicy
	tr    *recTrainer
	state *floatState
}

func newFake(t *testing.T, mod func(*Config)) fakeModel {
	t.Helper()
	f := fakeModel{pol: &countPolicy{}, tr: &recTrainer{}, state: &floatState{params: []float64{1, 2, 3}}}
	cfg := Config{Name: "fake", Tokenizer: byteTok{}, Sampler: &textSampler{answer: "hello"}, Policy: f.pol, Trainer: f.tr, State: f.state}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.a = a
	return f
}

func batchOf(rewards ...float64) []rl.Sample {
	var b []rl.Sample
	for _, r := range rewards {
		b = append(b, rl.Sample{TaskID: "t", Prompt: []int{1, 2}, Actions: []int{3}, LogProbs: []float32{-1}, Reward: r})
	}
	return b
}

// TestAdapterVersionRestore: a checkpoint restores the version into a model
// whose Policy counts from another number, training continues from it, and
// the Trainer sees the restored version (so that staleness is measured in
// the server's steps).
func TestAdapterVersionRestore(t *testing.T) {
	src := newFake(t, nil)
	for range 3 {
		if _, err := src.a.Train(batchOf(0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	src.state.params = []float64{4, 5, 6}
	var buf bytes.Buffer
	if err := src.a.Save(&buf); err != nil {
		t.Fatal(err)
	}

	dst := newFake(t, nil)
	dst.pol.version = 2 // the Policy already took steps of its own
	if err := dst.a.Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if got := dst.a.Version(); got != 3 {
		t.Fatalf("restored version %d, want 3", got)
	}
	if !cmp.Equal(dst.state.params, []float64{4, 5, 6}) {
		t.Fatalf("restored parameters %v", dst.state.params)
	}
	if _, err := dst.a.Train(batchOf(0, 1)); err != nil {
		t.Fatal(err)
	}
	if got := dst.a.Version(); got != 4 {
		t.Fatalf("version after a step %d, want 4", got)
	}
	if got := dst.tr.versions; !cmp.Equal(got, []int64{3}) {
		t.Fatalf("the trainer saw versions %v, want [3]", got)
	}
	// A skipped step does not count, from a restored version too.
	dst.pol.skip = true
	if _, err := dst.a.Train(batchOf(0, 1)); err != nil {
		t.Fatal(err)
	}
	if got := dst.a.Version(); got != 4 {
		t.Fatalf("version after a skipped step %d, want 4", got)
	}
}

// TestAdapterPrepare: Prepare's kept samples reach the trainer and its drop
// count is added to the trainer's; a batch it empties trains nothing.
func TestAdapterPrepare(t *testing.T) {
	positive := func(batch []rl.Sample) ([]rl.Sample, int) {
		var kept []rl.Sample
		for _, s := range batch {
			if s.Reward > 0 {
				kept = append(kept, s)
			}
		}
		return kept, len(batch) - len(kept)
	}
	f := newFake(t, func(c *Config) { c.Prepare = positive })
	f.tr.dropped = 2
	tests := []struct {
		rewards     []float64
		wantSize    []int // trainer batch sizes so far
		wantDropped int
		wantVersion int64
	}{
		{[]float64{0, 1, -1, 2, 3}, []int{3}, 2 + 2, 1},
		{[]float64{0, -1}, []int{3}, 2, 1}, // emptied: no update, only Prepare's drops
		{[]float64{5}, []int{3, 1}, 0 + 2, 2},
	}
	for i, tt := range tests {
		st, err := f.a.Train(batchOf(tt.rewards...))
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if st.Dropped != tt.wantDropped || !cmp.Equal(f.tr.sizes, tt.wantSize) || f.a.Version() != tt.wantVersion {
			t.Errorf("batch %d: dropped %d (want %d), trainer batches %v (want %v), version %d (want %d)",
				i, st.Dropped, tt.wantDropped, f.tr.sizes, tt.wantSize, f.a.Version(), tt.wantVersion)
		}
	}
}

// TestAdapterSaveLoad round-trips both kinds of State: plain bytes (held as
// one U8 tensor) and safetensors (the version and name join its metadata,
// its own metadata and tensors are kept).
func TestAdapterSaveLoad(t *testing.T) {
	t.Run("opaque", func(t *testing.T) {
		src := newFake(t, nil)
		src.pol.version = 9
		src.state.params = []float64{math.Pi, -0.5, 1e300}
		var buf bytes.Buffer
		if err := src.a.Save(&buf); err != nil {
			t.Fatal(err)
		}
		meta, ts, err := readSafetensorsU8(buf.Bytes())
		if err != nil {
			t.Fatalf("the checkpoint is not safetensors: %v", err)
		}
		if meta[metaVersion] != "9" || meta[metaName] != "fake" || len(ts) != 1 {
			t.Fatalf("metadata %v, tensors %v", meta, ts)
		}
		dst := newFake(t, nil)
		if err := dst.a.Load(&buf); err != nil {
			t.Fatal(err)
		}
		if dst.a.Version() != 9 || !cmp.Equal(dst.state.params, src.state.params) {
			t.Fatalf("loaded version %d, parameters %v", dst.a.Version(), dst.state.params)
		}
	})
	t.Run("safetensors", func(t *testing.T) {
		src := newFake(t, func(c *Config) { c.State = &stState{w: []float32{1, 2, 3}} })
		src.pol.version = 4
		var buf bytes.Buffer
		if err := src.a.Save(&buf); err != nil {
			t.Fatal(err)
		}
		meta, w, err := readW(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"own": "kept", metaVersion: "4", metaName: "fake"}
		if !cmp.Equal(meta, want) || !cmp.Equal(w, []float32{1, 2, 3}) {
			t.Fatalf("checkpoint metadata %v (want %v), w %v", meta, want, w)
		}
		st := &stState{w: make([]float32, 3)}
		dst := newFake(t, func(c *Config) { c.State = st })
		if err := dst.a.Load(&buf); err != nil {
			t.Fatal(err)
		}
		if dst.a.Version() != 4 || !cmp.Equal(st.w, []float32{1, 2, 3}) {
			t.Fatalf("loaded version %d, w %v", dst.a.Version(), st.w)
		}
	})
}

// readSafetensorsU8 reads a safetensors file's metadata and the raw bytes
// of its tensors.
func readSafetensorsU8(b []byte) (map[string]string, map[string][]byte, error) {
	f, err := safetensors.Read(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	ts := map[string][]byte{}
	for _, name := range f.Names() {
		t, _ := f.Tensor(name)
		if t.DType != safetensors.U8 {
			return nil, nil, fmt.Errorf("tensor %s has dtype %s, want U8", name, t.DType)
		}
		ts[name] = t.Data
	}
	return f.Metadata, ts, nil
}

func TestAdapterErrors(t *testing.T) {
	t.Run("config", func(t *testing.T) {
		ok := Config{Name: "m", Tokenizer: byteTok{}, Sampler: &textSampler{}, Policy: &countPolicy{}}
		for _, tt := range []struct {
			name string
			mod  func(*Config)
			want string
		}{
			{"name", func(c *Config) { c.Name = "" }, "Name"},
			{"tokenizer", func(c *Config) { c.Tokenizer = nil }, "Tokenizer"},
			{"sampler", func(c *Config) { c.Sampler = nil }, "Sampler"},
			{"policy", func(c *Config) { c.Policy = nil }, "Policy"},
			{"maxlen", func(c *Config) { c.MaxLen = -1 }, "MaxLen"},
		} {
			c := ok
			tt.mod(&c)
			if _, err := New(c); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: %v, want an error naming %s", tt.name, err, tt.want)
			}
		}
		if _, err := New(ok); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no state", func(t *testing.T) {
		f := newFake(t, func(c *Config) { c.State = nil })
		if err := f.a.Save(io.Discard); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
			t.Errorf("Save without State: %v", err)
		}
		if err := f.a.Load(strings.NewReader("")); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
			t.Errorf("Load without State: %v", err)
		}
	})
	t.Run("bad checkpoints", func(t *testing.T) {
		var good bytes.Buffer
		src := newFake(t, nil)
		src.pol.version = 5
		if err := src.a.Save(&good); err != nil {
			t.Fatal(err)
		}
		header := func(h string) []byte {
			b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
			return append(b, h...)
		}
		for _, tt := range []struct {
			name string
			data []byte
			want string
		}{
			{"empty", nil, "header length"},
			{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), "exceeds"},
			{"short header", binary.LittleEndian.AppendUint64(nil, 100), "header"},
			{"not json", header("{nope"), "header"},
			{"no version", header(`{"__metadata__":{"swarm.name":"x"}}`), "swarm.version"},
			{"negative version", header(`{"__metadata__":{"swarm.version":"-2"}}`), "swarm.version"},
			{"no state tensor", header(`{"__metadata__":{"swarm.version":"1","swarm.opaque_state":"state"}}`), "state tensor"},
			{"truncated state", good.Bytes()[:good.Len()-3], "truncated"},
		} {
			f := newFake(t, nil)
			f.pol.version = 1
			if err := f.a.Load(bytes.NewReader(tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
			}
			if f.a.Version() != 1 {
				t.Errorf("%s: a failed load changed the version to %d", tt.name, f.a.Version())
			}
		}
		f := newFake(t, nil)
		f.state.failErr = errors.New("disk on fire")
		if err := f.a.Load(bytes.NewReader(good.Bytes())); err == nil || !strings.Contains(err.Error(), "disk on fire") || f.a.Version() != 0 {
			t.Errorf("State.Load failing: %v, version %d", err, f.a.Version())
		}
	})
	t.Run("context", func(t *testing.T) {
		f := newFake(t, func(c *Config) { c.MaxLen = 12 })
		if _, err := f.a.ChatPrompt(context.Background(), []api.Message{{Role: "user", Content: "a long question"}}, nil); err == nil || !strings.Contains(err.Error(), "12-token context") {
			t.Errorf("prompt too long: %v", err)
		}
		if _, err := f.a.Generate(context.Background(), [][]int{make([]int, 12)}, textgen.GenerateOptions{MaxTokens: 4}, nil); err == nil {
			t.Error("Generate with no room left: no error")
		}
		if _, err := f.a.Train([]rl.Sample{{TaskID: "t", Prompt: make([]int, 10), Actions: make([]int, 3)}}); err == nil || !strings.Contains(err.Error(), "does not fit") {
			t.Errorf("sample too long: %v", err)
		}
		if len(f.tr.sizes) != 0 {
			t.Error("a sample that does not fit reached the trainer")
		}
	})
	t.Run("sampler breaks its contract", func(t *testing.T) {
		f := newFake(t, func(c *Config) { c.Sampler = badSampler{} })
		if _, err := f.a.Generate(context.Background(), [][]int{{1}, {2}}, textgen.GenerateOptions{MaxTokens: 4}, nil); err == nil || !strings.Contains(err.Error(), "1 generations for 2 prompts") {
			t.Errorf("short generations: %v", err)
		}
	})
	t.Run("tools", func(t *testing.T) {
		ctx := context.Background()
		f := newFake(t, nil)
		if _, err := f.a.ChatPrompt(ctx, []api.Message{{Role: "user", Content: "x"}}, []api.Tool{{Type: "function"}}); !errors.Is(err, openai.ErrNoToolTemplate) {
			t.Errorf("tools without a tool template: %v", err)
		}
		// without tools, a conversation with tool calls is rendered with
		// the calls folded into the text
		msgs := []api.Message{{Role: "assistant", ToolCalls: []api.ToolCall{{ID: "1", Type: "function", Function: api.FunctionCall{Name: "f", Arguments: "{}"}}}}}
		got, err := f.a.ChatPrompt(ctx, msgs, nil)
		want, _ := f.a.ChatPrompt(ctx, openai.FoldToolCalls(msgs), nil)
		if err != nil || !cmp.Equal(got, want) || len(want) <= len("assistant: \n") {
			t.Errorf("tool history without a tool template: %v (%v), want %v", got, err, want)
		}
		f = newFake(t, func(c *Config) { c.Tokenizer = toolTok{} })
		ids, err := f.a.ChatPrompt(ctx, []api.Message{{Role: "user", Content: "x"}}, []api.Tool{{Type: "function"}, {Type: "function"}})
		if err != nil || len(ids) != len("user: x\n")+2 {
			t.Errorf("tools through the tokenizer: %v %v", ids, err)
		}
	})
}

type badSampler struct{}

func (badSampler) Generate(context.Context, [][]int, textgen.GenerateOptions, func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	return []textgen.Generation{{}}, nil
}

// TestAdapterGenerate: the Sampler gets the request's options with a
// MaxTokens that fits the context; its events reach emit with the
// adapter's version, and every generation reports that version.
func TestAdapterGenerate(t *testing.T) {
	prompts := [][]int{{1, 2, 3}, {4, 5, 6, 7, 8}}
	ts := &textSampler{answer: "hello"}
	f := newFake(t, func(c *Config) { c.Sampler = ts; c.MaxLen = 9 })
	f.pol.version = 7
	stop := func(i int, toks []int) bool { return i == 0 && toks[len(toks)-1] == 'l'+1 }
	var evs []textgen.TokenEvent
	gens, err := f.a.Generate(context.Background(), prompts, textgen.GenerateOptions{MaxTokens: 10, Stop: stop}, func(ev textgen.TokenEvent) { evs = append(evs, ev) })
	if err != nil {
		t.Fatal(err)
	}
	if got := ts.got[0]; got.Stop == nil || got.MaxTokens != 4 {
		t.Errorf("the sampler got Stop %v and MaxTokens %d, want the request's Stop and 4 (context 9, prompt 5)", got.Stop != nil, got.MaxTokens)
	}
	want := []textgen.Generation{
		{Tokens: []int{'h' + 1, 'e' + 1, 'l' + 1}, LogProbs: []float32{-1, -2, -3}, FinishReason: "stop", Version: 7},
		{Tokens: []int{'h' + 2, 'e' + 2, 'l' + 2, 'l' + 2}, LogProbs: []float32{-1, -2, -3, -4}, FinishReason: "length", Version: 7},
	}
	if diff := cmp.Diff(want, gens); diff != "" {
		t.Errorf("generations (-want +got):\n%s", diff)
	}
	perPrompt := map[int][]int{}
	for _, ev := range evs {
		perPrompt[ev.Prompt] = append(perPrompt[ev.Prompt], ev.Token)
		if ev.Version != 7 {
			t.Errorf("event %+v: version %d, want 7", ev, ev.Version)
		}
	}
	for i, g := range want {
		if !cmp.Equal(perPrompt[i], g.Tokens) {
			t.Errorf("prompt %d streamed %v, want %v", i, perPrompt[i], g.Tokens)
		}
	}
}

// TestAdapterEvaluator: a Policy's rl.Evaluator stays visible to the
// Trainer through the version wrapper.
func TestAdapterEvaluator(t *testing.T) {
	for _, tt := range []struct {
		pol  rl.Policy
		want bool
	}{{&countPolicy{}, false}, {&evalPolicy{}, true}} {
		tr := &recTrainer{}
		a, err := New(Config{Name: "m", Tokenizer: byteTok{}, Sampler: &textSampler{}, Policy: tt.pol, Trainer: tr})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Train(batchOf(1, 2)); err != nil {
			t.Fatal(err)
		}
		if tr.evaluator != tt.want {
			t.Errorf("%T: trainer saw an Evaluator %v, want %v", tt.pol, tr.evaluator, tt.want)
		}
	}
}

// TestAdapterServed trains an Adapter over a tabular policy through a
// server with the default GRPO trainer: the version (global step) grows and
// a checkpointed server resumes at it.
func TestAdapterServed(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	newModel := func() *Adapter {
		tab := policies.NewTabular(policies.TabularConfig{Name: "tab", Order: 1, Optimizer: "sgd", LR: 1, Seed: 1})
		a, err := New(Config{Name: "tab", Tokenizer: byteTok{}, Sampler: &textSampler{answer: "ok"}, Policy: tab, State: &floatState{params: make([]float64, 0)}})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat = 1, 2
	s, url, stop, err := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: newModel(), Train: tc, CheckpointDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cli := client.New(url)
	ctx := context.Background()
	for i := range 2 {
		_, err := client.RunWorkflow(ctx, []*client.Client{cli}, nil, "t", func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
			if _, err := eps[0].Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "hi"}}, MaxTokens: 2}); err != nil {
				return nil, err
			}
			return []client.WorkflowResult{{Reward: float64(i)}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for st, _, g := s.Status(); g != 1 || st != swarm.StatusRolling; st, _, g = s.Status() {
		if time.Now().After(deadline) {
			t.Fatal("no training step")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	s2, err := swarm.NewServer(swarm.ServerConfig{Model: newModel(), CheckpointDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.Start(); err != nil {
		t.Fatal(err)
	}
	if _, _, g := s2.Status(); g != 1 {
		t.Fatalf("restarted server at global step %d, want 1", g)
	}
}
