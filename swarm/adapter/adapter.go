package adapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"
	"sync"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/textgen"
)

// ChatTokenizer renders chats and maps tokens to bytes: the text side of a
// model served through an Adapter.
type ChatTokenizer interface {
	// ChatPrompt renders messages (and tools) with the chat template,
	// ending with the assistant turn's opening, and tokenises the result,
	// as openai.Model.ChatPrompt.
	ChatPrompt(ctx context.Context, msgs []api.Message, tools []api.Tool) ([]int, error)
	// TokenBytes returns the bytes a token decodes to; nil for special
	// tokens and for ids outside the vocabulary.
	TokenBytes(tok int) []byte
	// EncodeText tokenises plain text the way generations are tokenised.
	EncodeText(s string) ([]int, error)
}

// Sampler generates continuations: textgen's loop over an nn.LM (see
// lmmodel) or a pretrained model's engine sits behind it. It honours every
// GenerateOptions field (Stop included), calls emit (when not nil) for
// every sampled token, and receives MaxTokens already bounded by the
// context length.
type Sampler interface {
	Generate(ctx context.Context, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error)
}

// Checkpointer saves and restores the trainable state of a model
// (parameters and optimizer state). The Adapter adds the model's version and
// name: when Save writes a safetensors file (as nn.SaveCheckpoint does) they
// go into its metadata, so the checkpoint stays an ordinary safetensors file
// of the parameters; any other bytes are stored as one U8 tensor.
type Checkpointer interface {
	Save(w io.Writer) error
	Load(r io.Reader) error
}

// Config describes a model to serve: its tokenizer, sampler, the
// policy that training updates, and how its state is saved.
type Config struct {
	// Name is the model id (GET /v1/models).
	Name string
	// Tokenizer renders chats.
	Tokenizer ChatTokenizer
	// Sampler generates completions.
	Sampler Sampler
	// Policy is what Trainer updates; its Version counts the steps applied
	// to it since it was built (a skipped NaN/Inf step does not count).
	Policy rl.Policy
	// Trainer is the policy-gradient algorithm; rl.GRPO with ClipEps 0.2
	// and MaxImportanceWeight 3 (stale samples' ratios bounded) when nil.
	Trainer rl.Trainer
	// State saves and restores the trainable state; when nil, Save and Load
	// return an error saying that the model has no checkpoint.
	State Checkpointer
	// MaxLen is the context length: prompts must be shorter, generations
	// are cut to fit it, and training samples must fit it. 0: unlimited.
	MaxLen int
	// Concurrent says that the Sampler may generate while the Policy
	// trains (it samples from a snapshot of the parameters and reports
	// its version in each Generation). Otherwise Generate and Train
	// exclude each other: a training step waits for the generations in
	// flight, and generations wait for the step.
	Concurrent bool
	// OnUpdate, when set, is called with the new version after every
	// Train that stepped the Policy and every Load, while nothing writes
	// the parameters: a concurrent Sampler publishes its snapshot there.
	OnUpdate func(version int64)
	// Prepare, when set, filters or rewrites a training batch before the
	// context check and the Trainer (truncating prompts, dropping samples
	// of another version, ...). It returns the samples to train on and how
	// many it dropped, which Train adds to Stats.Dropped. It may build new
	// samples but must not write into the slices of the samples it is
	// given, which belong to the server.
	Prepare func(batch []rl.Sample) (kept []rl.Sample, dropped int)
}

// Adapter turns a tokenizer, a sampler, a policy and a trainer into a model
// that a swarm server hosts (swarm.Model), so that any existing model is
// served and trained without writing that interface again. It also
// implements openai.TextEncoder.
//
// The Adapter keeps the model's version: the Policy's own step count plus
// the version a checkpoint restored, so a restarted server resumes at the
// global step it saved although the Policy counts from zero.
type Adapter struct {
	cfg     Config
	trainer rl.Trainer
	pol     versioned
	// train is what the Trainer updates: &pol, or &pol with the Policy's
	// Evaluator when it has one.
	train rl.Policy
	// mu keeps training out of generation unless the sampler is
	// concurrent; it always orders Train, Save, Load and Version.
	mu sync.RWMutex
}

// versioned is a Policy whose Version continues from a checkpoint: base is
// the restored version minus the steps the Policy had taken when it was
// restored. The Trainer sees this version, so the staleness of a sample is
// measured in the server's global steps.
type versioned struct {
	rl.Policy
	base int64
}

func (p *versioned) Version() int64 { return p.base + p.Policy.Version() }

// versionedEval keeps the Policy's rl.Evaluator visible to trainers that use
// it (PPO).
type versionedEval struct {
	*versioned
	rl.Evaluator
}

// New checks cfg and returns the Adapter. Name, Tokenizer, Sampler and
// Policy are required.
func New(cfg Config) (*Adapter, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("adapter: Name is empty")
	case cfg.Tokenizer == nil:
		return nil, fmt.Errorf("adapter %q: Tokenizer is nil", cfg.Name)
	case cfg.Sampler == nil:
		return nil, fmt.Errorf("adapter %q: Sampler is nil", cfg.Name)
	case cfg.Policy == nil:
		return nil, fmt.Errorf("adapter %q: Policy is nil", cfg.Name)
	case cfg.MaxLen < 0:
		return nil, fmt.Errorf("adapter %q: MaxLen %d is negative", cfg.Name, cfg.MaxLen)
	}
	a := &Adapter{cfg: cfg, trainer: cfg.Trainer}
	if a.trainer == nil {
		a.trainer = rl.NewGRPO(rl.GRPOConfig{ClipEps: 0.2, MaxImportanceWeight: 3})
	}
	a.pol.Policy = cfg.Policy
	a.train = &a.pol
	if ev, ok := cfg.Policy.(rl.Evaluator); ok {
		a.train = versionedEval{&a.pol, ev}
	}
	return a, nil
}

// Name implements openai.Model.
func (a *Adapter) Name() string { return a.cfg.Name }

// ChatPrompt implements openai.Model; a prompt that leaves no room in the
// context is an error.
func (a *Adapter) ChatPrompt(ctx context.Context, msgs []api.Message, tools []api.Tool) ([]int, error) {
	ids, err := a.cfg.Tokenizer.ChatPrompt(ctx, msgs, tools)
	if err != nil {
		return nil, err
	}
	return ids, a.fits(ids)
}

func (a *Adapter) fits(prompt []int) error {
	if a.cfg.MaxLen > 0 && len(prompt) >= a.cfg.MaxLen {
		return fmt.Errorf("prompt of %d tokens does not fit the model's %d-token context", len(prompt), a.cfg.MaxLen)
	}
	return nil
}

// TokenBytes implements openai.Model.
func (a *Adapter) TokenBytes(tok int) []byte { return a.cfg.Tokenizer.TokenBytes(tok) }

// EncodeText implements openai.TextEncoder.
func (a *Adapter) EncodeText(s string) ([]int, error) { return a.cfg.Tokenizer.EncodeText(s) }

// samplerOptions bounds MaxTokens by the context left by the longest
// prompt.
func (a *Adapter) samplerOptions(prompts [][]int, opts textgen.GenerateOptions) (textgen.GenerateOptions, error) {
	if a.cfg.MaxLen > 0 {
		for _, p := range prompts {
			opts.MaxTokens = min(opts.MaxTokens, a.cfg.MaxLen-len(p))
		}
		if opts.MaxTokens < 1 {
			return opts, fmt.Errorf("adapter: no room left in the %d-token context", a.cfg.MaxLen)
		}
	}
	return opts, nil
}

// Generate implements openai.Model through the Sampler. Without
// Config.Concurrent, a training step waits for it and it waits for a
// training step; each Generation's Version is then the Adapter's.
func (a *Adapter) Generate(ctx context.Context, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(prompts) == 0 {
		return nil, nil
	}
	inner, err := a.samplerOptions(prompts, opts)
	if err != nil {
		return nil, err
	}
	var version int64
	if !a.cfg.Concurrent {
		a.mu.RLock()
		defer a.mu.RUnlock()
		version = a.pol.Version()
		if emit != nil {
			inner := emit
			emit = func(ev textgen.TokenEvent) {
				ev.Version = version
				inner(ev)
			}
		}
	}
	gens, err := a.cfg.Sampler.Generate(ctx, prompts, inner, emit)
	if err != nil {
		return nil, fmt.Errorf("%s: generate: %w", a.cfg.Name, err)
	}
	if err := checkGenerations(gens, len(prompts)); err != nil {
		return nil, fmt.Errorf("%s: %w", a.cfg.Name, err)
	}
	if !a.cfg.Concurrent {
		for i := range gens {
			gens[i].Version = version
		}
	}
	return gens, nil
}

// checkGenerations guards the server against a Sampler that breaks its
// contract: one generation per prompt, one log-probability per token.
func checkGenerations(gens []textgen.Generation, n int) error {
	if len(gens) != n {
		return fmt.Errorf("sampler returned %d generations for %d prompts", len(gens), n)
	}
	for i, g := range gens {
		if len(g.LogProbs) != len(g.Tokens) {
			return fmt.Errorf("sampler's generation %d has %d log-probabilities for %d tokens", i, len(g.LogProbs), len(g.Tokens))
		}
		if g.TopLogProbs != nil && len(g.TopLogProbs) != len(g.Tokens) {
			return fmt.Errorf("sampler's generation %d has %d top log-probability lists for %d tokens", i, len(g.TopLogProbs), len(g.Tokens))
		}
	}
	return nil
}

// Train implements swarm.Model: Prepare (when set), the context check,
// then one Trainer update of the Policy. Stats.Dropped includes what
// Prepare dropped; a batch that Prepare empties trains nothing and is not
// an error.
func (a *Adapter) Train(batch []rl.Sample) (rl.Stats, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	dropped := 0
	if a.cfg.Prepare != nil {
		batch, dropped = a.cfg.Prepare(batch)
		if len(batch) == 0 {
			return rl.Stats{Dropped: dropped}, nil
		}
	}
	if a.cfg.MaxLen > 0 {
		for i, s := range batch {
			if len(s.Prompt) == 0 || len(s.Prompt)+len(s.Actions) > a.cfg.MaxLen {
				return rl.Stats{}, fmt.Errorf("%s: sample %d of %d+%d tokens does not fit the %d-token context", a.cfg.Name, i, len(s.Prompt), len(s.Actions), a.cfg.MaxLen)
			}
		}
	}
	before := a.pol.Version()
	st, err := a.trainer.Update(a.train, batch)
	st.Dropped += dropped
	if v := a.pol.Version(); v != before && a.cfg.OnUpdate != nil {
		a.cfg.OnUpdate(v)
	}
	return st, err
}

// Version implements swarm.Model: the restored version plus the steps the
// Policy applied since.
func (a *Adapter) Version() int64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.pol.Version()
}

// Checkpoint metadata the Adapter adds to the State's bytes.
const (
	metaVersion = "swarm.version"
	metaName    = "swarm.name"
	// metaOpaque marks a checkpoint whose State bytes are not safetensors
	// and are held as the single U8 tensor named by its value.
	metaOpaque = "swarm.opaque_state"
)

// Save implements swarm.Model: the State's bytes with the version and name
// added.
func (a *Adapter) Save(w io.Writer) error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.cfg.State == nil {
		return fmt.Errorf("model %q has no checkpoint (its adapter.Config.State is nil)", a.cfg.Name)
	}
	var buf bytes.Buffer
	if err := a.cfg.State.Save(&buf); err != nil {
		return fmt.Errorf("save %s: %w", a.cfg.Name, err)
	}
	meta := map[string]string{}
	var tensors []safetensors.Tensor
	if f, err := safetensors.Read(bytes.NewReader(buf.Bytes())); err == nil {
		maps.Copy(meta, f.Metadata)
		for _, name := range f.Names() {
			t, _ := f.Tensor(name)
			tensors = append(tensors, t)
		}
	} else {
		meta[metaOpaque] = "state"
		tensors = []safetensors.Tensor{{Name: "state", DType: safetensors.U8, Shape: []int{buf.Len()}, Data: buf.Bytes()}}
	}
	meta[metaVersion] = strconv.FormatInt(a.pol.Version(), 10)
	meta[metaName] = a.cfg.Name
	if err := safetensors.Write(w, tensors, meta); err != nil {
		return fmt.Errorf("save %s: %w", a.cfg.Name, err)
	}
	return nil
}

// Load implements swarm.Model: it restores the State and then the
// version, so a failed load leaves the version as it was.
func (a *Adapter) Load(r io.Reader) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cfg.State == nil {
		return fmt.Errorf("model %q has no checkpoint (its adapter.Config.State is nil)", a.cfg.Name)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("load %s: %w", a.cfg.Name, err)
	}
	f, err := safetensors.Read(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("load %s: %w", a.cfg.Name, err)
	}
	v, err := strconv.ParseInt(f.Metadata[metaVersion], 10, 64)
	if err != nil || v < 0 {
		return fmt.Errorf("load %s: checkpoint has no valid %s (%q)", a.cfg.Name, metaVersion, f.Metadata[metaVersion])
	}
	state := b
	if name, ok := f.Metadata[metaOpaque]; ok {
		t, ok := f.Tensor(name)
		if !ok || t.DType != safetensors.U8 {
			return fmt.Errorf("load %s: checkpoint lacks its state tensor %q", a.cfg.Name, name)
		}
		state = t.Data
	}
	if err := a.cfg.State.Load(bytes.NewReader(state)); err != nil {
		return fmt.Errorf("load %s: %w", a.cfg.Name, err)
	}
	a.pol.base = v - a.cfg.Policy.Version()
	if a.cfg.OnUpdate != nil {
		a.cfg.OnUpdate(v)
	}
	return nil
}
