package swarm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/safetensors"
)

// byteTok is a ChatTokenizer of bytes: token b+1 is byte b, token 0 is the
// end of a turn.
type byteTok struct{}

func (byteTok) ChatPrompt(msgs []Message) ([]int, error) {
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

func (t toolTok) ChatPromptTools(msgs []Message, tools []Tool) ([]int, error) {
	ids, err := t.ChatPrompt(msgs)
	for range tools {
		ids = append(ids, 257)
	}
	return ids, err
}

// textSampler answers every prompt with the bytes of answer, up to
// MaxTokens, and records the options it received.
type textSampler struct {
	answer string
	got    []GenerateOptions
}

func (s *textSampler) Generate(_ context.Context, prompts [][]int, opts GenerateOptions) ([]Generation, error) {
	s.got = append(s.got, opts)
	toks, _ := byteTok{}.EncodeText(s.answer)
	gens := make([]Generation, len(prompts))
	for i := range prompts {
		g := Generation{FinishReason: "length"}
		for k, t := range toks {
			if k == opts.MaxTokens {
				break
			}
			g.Tokens = append(g.Tokens, t+i) // prompts differ by a shift
			g.LogProbs = append(g.LogProbs, -float32(k+1))
		}
		gens[i] = g
	}
	return gens, nil
}

// streamSampler is a textSampler that streams, alternating between prompts
// so that their events interleave.
type streamSampler struct{ textSampler }

func (s *streamSampler) GenerateStream(ctx context.Context, prompts [][]int, opts GenerateOptions, emit func(TokenEvent)) ([]Generation, error) {
	gens, err := s.Generate(ctx, prompts, opts)
	for k := 0; ; k++ {
		more := false
		for i, g := range gens {
			if k < len(g.Tokens) {
				ev := TokenEvent{Prompt: i, Token: g.Tokens[k], LogProb: g.LogProbs[k]}
				if k == len(g.Tokens)-1 {
					ev.FinishReason = g.FinishReason
				}
				emit(ev)
				more = true
			}
		}
		if !more {
			return gens, err
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
	return writeSafetensors(w, map[string]string{"own": "kept"}, []stTensor{{Name: "w", Shape: []int{len(s.w)}, F32: s.w}})
}

func (s *stState) Load(r io.Reader) error {
	meta, ts, err := readSafetensors(r)
	if err != nil {
		return err
	}
	t, ok := ts["w"]
	if !ok || len(t.F32) != len(s.w) {
		return errors.New("no tensor w of the right size")
	}
	copy(s.w, t.F32)
	s.meta = meta
	return nil
}

type fakeModel struct {
	a     *Adapter
	pol   *countPolicy
	tr    *recTrainer
	state *floatState
}

func newFake(t *testing.T, mod func(*AdapterConfig)) fakeModel {
	t.Helper()
	f := fakeModel{pol: &countPolicy{}, tr: &recTrainer{}, state: &floatState{params: []float64{1, 2, 3}}}
	cfg := AdapterConfig{Name: "fake", Tokenizer: byteTok{}, Sampler: &textSampler{answer: "hello"}, Policy: f.pol, Trainer: f.tr, State: f.state}
	if mod != nil {
		mod(&cfg)
	}
	a, err := NewAdapter(cfg)
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
	f := newFake(t, func(c *AdapterConfig) { c.Prepare = positive })
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
		src := newFake(t, func(c *AdapterConfig) { c.State = &stState{w: []float32{1, 2, 3}} })
		src.pol.version = 4
		var buf bytes.Buffer
		if err := src.a.Save(&buf); err != nil {
			t.Fatal(err)
		}
		meta, ts, err := readSafetensors(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"own": "kept", metaVersion: "4", metaName: "fake"}
		if !cmp.Equal(meta, want) || !cmp.Equal(ts["w"].F32, []float32{1, 2, 3}) {
			t.Fatalf("checkpoint metadata %v (want %v), w %v", meta, want, ts["w"].F32)
		}
		st := &stState{w: make([]float32, 3)}
		dst := newFake(t, func(c *AdapterConfig) { c.State = st })
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
		ok := AdapterConfig{Name: "m", Tokenizer: byteTok{}, Sampler: &textSampler{}, Policy: &countPolicy{}}
		for _, tt := range []struct {
			name string
			mod  func(*AdapterConfig)
			want string
		}{
			{"name", func(c *AdapterConfig) { c.Name = "" }, "Name"},
			{"tokenizer", func(c *AdapterConfig) { c.Tokenizer = nil }, "Tokenizer"},
			{"sampler", func(c *AdapterConfig) { c.Sampler = nil }, "Sampler"},
			{"policy", func(c *AdapterConfig) { c.Policy = nil }, "Policy"},
			{"maxlen", func(c *AdapterConfig) { c.MaxLen = -1 }, "MaxLen"},
		} {
			c := ok
			tt.mod(&c)
			if _, err := NewAdapter(c); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: %v, want an error naming %s", tt.name, err, tt.want)
			}
		}
		if _, err := NewAdapter(ok); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no state", func(t *testing.T) {
		f := newFake(t, func(c *AdapterConfig) { c.State = nil })
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
		f := newFake(t, func(c *AdapterConfig) { c.MaxLen = 12 })
		if _, err := f.a.ChatPrompt([]Message{{Role: "user", Content: "a long question"}}); err == nil || !strings.Contains(err.Error(), "12-token context") {
			t.Errorf("prompt too long: %v", err)
		}
		if _, err := f.a.Generate(context.Background(), [][]int{make([]int, 12)}, GenerateOptions{MaxTokens: 4}); err == nil {
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
		f := newFake(t, func(c *AdapterConfig) { c.Sampler = badSampler{} })
		if _, err := f.a.Generate(context.Background(), [][]int{{1}, {2}}, GenerateOptions{MaxTokens: 4}); err == nil || !strings.Contains(err.Error(), "1 generations for 2 prompts") {
			t.Errorf("short generations: %v", err)
		}
	})
	t.Run("tools", func(t *testing.T) {
		f := newFake(t, nil)
		if _, err := f.a.ChatPromptTools([]Message{{Role: "user", Content: "x"}}, []Tool{{Type: "function"}}); err == nil || !strings.Contains(err.Error(), "tools") {
			t.Errorf("tools without a tool template: %v", err)
		}
		// without tools, a conversation with tool calls is rendered with
		// the calls folded into the text, as for a model without a tool
		// template
		msgs := []Message{{Role: "assistant", ToolCalls: []ToolCall{{ID: "1", Type: "function", Function: ToolCallFunction{Name: "f", Arguments: "{}"}}}}}
		got, err := f.a.ChatPromptTools(msgs, nil)
		want, _ := f.a.ChatPrompt(foldToolCalls(msgs))
		if err != nil || !cmp.Equal(got, want) || len(want) <= len("assistant: \n") {
			t.Errorf("tool history without a tool template: %v (%v), want %v", got, err, want)
		}
		f = newFake(t, func(c *AdapterConfig) { c.Tokenizer = toolTok{} })
		ids, err := f.a.ChatPromptTools([]Message{{Role: "user", Content: "x"}}, []Tool{{Type: "function"}, {Type: "function"}})
		if err != nil || len(ids) != len("user: x\n")+2 {
			t.Errorf("tools through the tokenizer: %v %v", ids, err)
		}
	})
}

type badSampler struct{}

func (badSampler) Generate(context.Context, [][]int, GenerateOptions) ([]Generation, error) {
	return []Generation{{}}, nil
}

// TestAdapterGenerate: the Sampler gets no Stop and a MaxTokens that fits
// the context; Stop is called once per token in order and cuts the
// generation; the streamed events and the returned generations agree with
// Generate's, for a streaming Sampler and for one replayed after sampling.
func TestAdapterGenerate(t *testing.T) {
	prompts := [][]int{{1, 2, 3}, {4, 5, 6, 7, 8}}
	// stop after the 'l' of "hello" for prompt 0 (tokens shift by the
	// prompt index, so prompt 1 never sees an 'l' and runs to MaxTokens).
	newStop := func(calls *[]string) func(int, []int) bool {
		return func(i int, toks []int) bool {
			*calls = append(*calls, fmt.Sprint(i, len(toks)))
			return i == 0 && toks[len(toks)-1] == 'l'+1
		}
	}
	for _, streaming := range []bool{false, true} {
		ts := &streamSampler{textSampler{answer: "hello"}}
		var s Sampler = &ts.textSampler
		if streaming {
			s = ts
		}
		f := newFake(t, func(c *AdapterConfig) { c.Sampler = s; c.MaxLen = 9 })
		var calls []string
		var evs []TokenEvent
		gens, err := f.a.GenerateStream(context.Background(), prompts, GenerateOptions{MaxTokens: 10, Stop: newStop(&calls)}, func(ev TokenEvent) { evs = append(evs, ev) })
		if err != nil {
			t.Fatal(err)
		}
		got := ts.got[0]
		if got.Stop != nil || got.MaxTokens != 4 {
			t.Errorf("streaming %v: the sampler got Stop %v and MaxTokens %d, want none and 4 (context 9, prompt 5)", streaming, got.Stop != nil, got.MaxTokens)
		}
		want := []Generation{
			{Tokens: []int{'h' + 1, 'e' + 1, 'l' + 1}, LogProbs: []float32{-1, -2, -3}, FinishReason: "stop"},
			{Tokens: []int{'h' + 2, 'e' + 2, 'l' + 2, 'l' + 2}, LogProbs: []float32{-1, -2, -3, -4}, FinishReason: "length"},
		}
		if diff := cmp.Diff(want, gens); diff != "" {
			t.Errorf("streaming %v: generations (-want +got):\n%s", streaming, diff)
		}
		perPrompt := map[int][]int{}
		for _, ev := range evs {
			perPrompt[ev.Prompt] = append(perPrompt[ev.Prompt], ev.Token)
			if (ev.FinishReason != "") != (len(perPrompt[ev.Prompt]) == len(want[ev.Prompt].Tokens)) {
				t.Errorf("streaming %v: event %+v: finish reason on the wrong token", streaming, ev)
			}
		}
		for i, g := range want {
			if !cmp.Equal(perPrompt[i], g.Tokens) {
				t.Errorf("streaming %v: prompt %d streamed %v, want %v", streaming, i, perPrompt[i], g.Tokens)
			}
		}
		calls0 := 0
		for _, c := range calls {
			if c[0] == '0' {
				calls0++
			}
		}
		if calls0 != 3 || len(calls) != 3+4 {
			t.Errorf("streaming %v: Stop calls %v, want 3 for prompt 0 and 4 for prompt 1", streaming, calls)
		}
		// plain Generate gives the same generations
		calls = nil
		plain, err := f.a.Generate(context.Background(), prompts, GenerateOptions{MaxTokens: 10, Stop: newStop(&calls)})
		if err != nil || !cmp.Equal(plain, gens) {
			t.Errorf("streaming %v: Generate %v (%v), GenerateStream %v", streaming, plain, err, gens)
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
		a, err := NewAdapter(AdapterConfig{Name: "m", Tokenizer: byteTok{}, Sampler: &textSampler{}, Policy: tt.pol, Trainer: tr})
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
	newModel := func() *Adapter {
		tab := NewTabularPolicy(TabularConfig{Name: "tab", Order: 1, Optimizer: "sgd", LR: 1, Seed: 1})
		a, err := NewAdapter(AdapterConfig{Name: "tab", Tokenizer: byteTok{}, Sampler: &textSampler{answer: "ok"}, Policy: tab, State: &floatState{params: make([]float64, 0)}})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	m := newModel()
	ts := startServer(t, m, testTrainConfig(1, 2), func(c *ServerConfig) { c.CheckpointDir = dir })
	ctx := ctxT(t)
	for i := range 2 {
		_, err := RunWorkflow(ctx, []*Client{ts.cli}, nil, "t", func(ctx context.Context, eps []*Episode) ([]WorkflowResult, error) {
			if _, err := eps[0].Chat().Create(ctx, ChatRequest{Messages: []ChatMessage{{Role: "user", Content: "hi"}}, MaxTokens: 2}); err != nil {
				return nil, err
			}
			return []WorkflowResult{{Reward: float64(i)}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a training step", func() bool { st, _, g := ts.s.Status(); return g == 1 && st == StatusRolling })
	if err := ts.s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	s2, err := NewServer(ServerConfig{Model: newModel(), CheckpointDir: dir, Logger: quietLog})
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
