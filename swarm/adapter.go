package swarm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"

	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/safetensors"
)

// ChatTokenizer renders chats and maps tokens to bytes: the text side of a
// model served through an Adapter.
type ChatTokenizer interface {
	// ChatPrompt renders messages with the chat template, ending with the
	// assistant turn's opening, and tokenises the result.
	ChatPrompt(msgs []Message) ([]int, error)
	// TokenBytes returns the bytes a token decodes to; nil for special
	// tokens and for ids outside the vocabulary.
	TokenBytes(tok int) []byte
	// EncodeText tokenises plain text the way generations are tokenised.
	EncodeText(s string) ([]int, error)
}

// Sampler generates continuations: the generation code of an nn.LM (see
// LMSampler) or of a pretrained model sits behind it. It receives
// GenerateOptions without Stop (the Adapter applies stop conditions itself)
// and with MaxTokens already bounded by the context length. A Sampler that
// also implements StreamGenerator is streamed token by token.
type Sampler interface {
	Generate(ctx context.Context, prompts [][]int, opts GenerateOptions) ([]Generation, error)
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

// AdapterConfig describes a model to serve: its tokenizer, sampler, the
// policy that training updates, and how its state is saved.
type AdapterConfig struct {
	// Name is the model id (GET /v1/models).
	Name string
	// Tokenizer renders chats. When it implements ToolChatPrompter, so do
	// requests with tools.
	Tokenizer ChatTokenizer
	// Sampler generates completions.
	Sampler Sampler
	// Policy is what Trainer updates; its Version counts the steps applied
	// to it since it was built (a skipped NaN/Inf step does not count).
	Policy rl.Policy
	// Trainer is the policy-gradient algorithm; rl.GRPO with ClipEps 0.2
	// when nil.
	Trainer rl.Trainer
	// State saves and restores the trainable state; when nil, Save and Load
	// return an error saying that the model has no checkpoint.
	State Checkpointer
	// MaxLen is the context length: prompts must be shorter, generations
	// are cut to fit it, and training samples must fit it. 0: unlimited.
	MaxLen int
	// Prepare, when set, filters or rewrites a training batch before the
	// context check and the Trainer (truncating prompts, dropping samples
	// of another version, ...). It returns the samples to train on and how
	// many it dropped, which Train adds to Stats.Dropped. It may build new
	// samples but must not write into the slices of the samples it is
	// given, which belong to the server.
	Prepare func(batch []rl.Sample) (kept []rl.Sample, dropped int)
}

// Adapter turns a tokenizer, a sampler, a policy and a trainer into a Model,
// so that any existing model is served and trained by a swarm Server
// without writing the Model interface again. It also implements
// TextEncoder, StreamGenerator (token by token when the Sampler streams,
// replayed after sampling otherwise) and ToolChatPrompter (through the
// Tokenizer's; without it, tools are an error and earlier tool calls are
// folded into the text).
//
// The Adapter keeps the model's version: the Policy's own step count plus
// the version a checkpoint restored, so a restarted server resumes at the
// global step it saved although the Policy counts from zero.
type Adapter struct {
	cfg     AdapterConfig
	trainer rl.Trainer
	pol     versioned
	// train is what the Trainer updates: &pol, or &pol with the Policy's
	// Evaluator when it has one.
	train rl.Policy
}

var (
	_ Model            = (*Adapter)(nil)
	_ TextEncoder      = (*Adapter)(nil)
	_ StreamGenerator  = (*Adapter)(nil)
	_ ToolChatPrompter = (*Adapter)(nil)
)

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

// NewAdapter checks cfg and returns the Adapter. Name, Tokenizer, Sampler and
// Policy are required.
func NewAdapter(cfg AdapterConfig) (*Adapter, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("swarm: adapter: Name is empty")
	case cfg.Tokenizer == nil:
		return nil, fmt.Errorf("swarm: adapter %q: Tokenizer is nil", cfg.Name)
	case cfg.Sampler == nil:
		return nil, fmt.Errorf("swarm: adapter %q: Sampler is nil", cfg.Name)
	case cfg.Policy == nil:
		return nil, fmt.Errorf("swarm: adapter %q: Policy is nil", cfg.Name)
	case cfg.MaxLen < 0:
		return nil, fmt.Errorf("swarm: adapter %q: MaxLen %d is negative", cfg.Name, cfg.MaxLen)
	}
	a := &Adapter{cfg: cfg, trainer: cfg.Trainer}
	if a.trainer == nil {
		a.trainer = rl.NewGRPO(rl.GRPOConfig{ClipEps: 0.2})
	}
	a.pol.Policy = cfg.Policy
	a.train = &a.pol
	if ev, ok := cfg.Policy.(rl.Evaluator); ok {
		a.train = versionedEval{&a.pol, ev}
	}
	return a, nil
}

// Name implements Model.
func (a *Adapter) Name() string { return a.cfg.Name }

// ChatPrompt implements Model; a prompt that leaves no room in the context
// is an error.
func (a *Adapter) ChatPrompt(msgs []Message) ([]int, error) {
	ids, err := a.cfg.Tokenizer.ChatPrompt(msgs)
	if err != nil {
		return nil, err
	}
	return ids, a.fits(ids)
}

// ChatPromptTools implements ToolChatPrompter through the Tokenizer's. A
// Tokenizer without it renders a conversation without tools as the server
// does for models without ToolChatPrompter (earlier tool calls folded into
// the assistant's text), and cannot render tools, which is an error.
func (a *Adapter) ChatPromptTools(msgs []Message, tools []Tool) ([]int, error) {
	tp, ok := a.cfg.Tokenizer.(ToolChatPrompter)
	if !ok {
		if len(tools) > 0 {
			return nil, fmt.Errorf("model %q's chat template does not render tools; send the request without tools", a.cfg.Name)
		}
		return a.ChatPrompt(foldToolCalls(msgs))
	}
	ids, err := tp.ChatPromptTools(msgs, tools)
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

// TokenBytes implements Model.
func (a *Adapter) TokenBytes(tok int) []byte { return a.cfg.Tokenizer.TokenBytes(tok) }

// EncodeText implements TextEncoder.
func (a *Adapter) EncodeText(s string) ([]int, error) { return a.cfg.Tokenizer.EncodeText(s) }

// samplerOptions is what the Sampler receives: no Stop, and MaxTokens within
// the context left by the longest prompt.
func (a *Adapter) samplerOptions(prompts [][]int, opts GenerateOptions) (GenerateOptions, error) {
	opts.Stop = nil
	if a.cfg.MaxLen > 0 {
		for _, p := range prompts {
			opts.MaxTokens = min(opts.MaxTokens, a.cfg.MaxLen-len(p))
		}
		if opts.MaxTokens < 1 {
			return opts, fmt.Errorf("swarm: no room left in the %d-token context", a.cfg.MaxLen)
		}
	}
	return opts, nil
}

// Generate implements Model. GenerateOptions.Stop is applied to the
// Sampler's generations, called once per token in order as its contract
// says.
func (a *Adapter) Generate(ctx context.Context, prompts [][]int, opts GenerateOptions) ([]Generation, error) {
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
	gens, err := a.cfg.Sampler.Generate(ctx, prompts, inner)
	if err != nil {
		return nil, fmt.Errorf("swarm: %s: generate: %w", a.cfg.Name, err)
	}
	if err := checkGenerations(gens, len(prompts)); err != nil {
		return nil, fmt.Errorf("swarm: %s: %w", a.cfg.Name, err)
	}
	if opts.Stop != nil {
		for i := range gens {
			for k := range gens[i].Tokens {
				if opts.Stop(i, gens[i].Tokens[:k+1]) {
					gens[i] = cutGeneration(gens[i], k+1)
					break
				}
			}
		}
	}
	return gens, nil
}

// checkGenerations guards the server against a Sampler that breaks its
// contract: one generation per prompt, one log-probability per token.
func checkGenerations(gens []Generation, n int) error {
	if len(gens) != n {
		return fmt.Errorf("sampler returned %d generations for %d prompts", len(gens), n)
	}
	for i, g := range gens {
		if len(g.LogProbs) != len(g.Tokens) {
			return fmt.Errorf("sampler's generation %d has %d log-probabilities for %d tokens", i, len(g.LogProbs), len(g.Tokens))
		}
		if g.Top != nil && len(g.Top) != len(g.Tokens) {
			return fmt.Errorf("sampler's generation %d has %d top log-probability lists for %d tokens", i, len(g.Top), len(g.Tokens))
		}
	}
	return nil
}

// cutGeneration keeps the first n tokens of g, which a stop condition ended.
func cutGeneration(g Generation, n int) Generation {
	g.Tokens, g.LogProbs, g.FinishReason = g.Tokens[:n], g.LogProbs[:n], "stop"
	if g.Top != nil {
		g.Top = g.Top[:n]
	}
	return g
}

// GenerateStream implements StreamGenerator. A streaming Sampler's tokens
// are passed on as it samples them, a prompt's events ending where Stop
// ends it; any other Sampler's generations are replayed to emit after
// Generate returns.
func (a *Adapter) GenerateStream(ctx context.Context, prompts [][]int, opts GenerateOptions, emit func(TokenEvent)) ([]Generation, error) {
	sg, ok := a.cfg.Sampler.(StreamGenerator)
	if !ok {
		gens, err := a.Generate(ctx, prompts, opts)
		if err != nil {
			return nil, err
		}
		for i, g := range gens {
			for t, tok := range g.Tokens {
				ev := TokenEvent{Prompt: i, Token: tok, LogProb: g.LogProbs[t]}
				if g.Top != nil {
					ev.Top = g.Top[t]
				}
				if t == len(g.Tokens)-1 {
					ev.FinishReason = g.FinishReason
				}
				emit(ev)
			}
		}
		return gens, nil
	}
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
	// cut[i] is the length at which Stop ended prompt i (0: not ended);
	// the tokens seen so far are kept to call Stop with.
	cut := make([]int, len(prompts))
	seen := make([][]int, len(prompts))
	gens, err := sg.GenerateStream(ctx, prompts, inner, func(ev TokenEvent) {
		i := ev.Prompt
		if i < 0 || i >= len(prompts) || cut[i] > 0 {
			return
		}
		seen[i] = append(seen[i], ev.Token)
		if opts.Stop != nil && opts.Stop(i, seen[i]) {
			cut[i] = len(seen[i])
			ev.FinishReason = "stop"
		}
		emit(ev)
	})
	if err != nil {
		return nil, fmt.Errorf("swarm: %s: generate: %w", a.cfg.Name, err)
	}
	if err := checkGenerations(gens, len(prompts)); err != nil {
		return nil, fmt.Errorf("swarm: %s: %w", a.cfg.Name, err)
	}
	for i, n := range cut {
		if n > 0 && n <= len(gens[i].Tokens) {
			gens[i] = cutGeneration(gens[i], n)
		}
	}
	return gens, nil
}

// Train implements Model: Prepare (when set), the context check, then one
// Trainer update of the Policy. Stats.Dropped includes what Prepare dropped;
// a batch that Prepare empties trains nothing and is not an error.
func (a *Adapter) Train(batch []rl.Sample) (rl.Stats, error) {
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
				return rl.Stats{}, fmt.Errorf("swarm: %s: sample %d of %d+%d tokens does not fit the %d-token context", a.cfg.Name, i, len(s.Prompt), len(s.Actions), a.cfg.MaxLen)
			}
		}
	}
	st, err := a.trainer.Update(a.train, batch)
	st.Dropped += dropped
	return st, err
}

// Version implements Model: the restored version plus the steps the Policy
// applied since.
func (a *Adapter) Version() int64 { return a.pol.Version() }

// Checkpoint metadata the Adapter adds to the State's bytes.
const (
	metaVersion = "swarm.version"
	metaName    = "swarm.name"
	// metaOpaque marks a checkpoint whose State bytes are not safetensors
	// and are held as the single U8 tensor named by its value.
	metaOpaque = "swarm.opaque_state"
)

// Save implements Model: the State's bytes with the version and name added.
func (a *Adapter) Save(w io.Writer) error {
	if a.cfg.State == nil {
		return fmt.Errorf("swarm: model %q has no checkpoint (its AdapterConfig.State is nil)", a.cfg.Name)
	}
	var buf bytes.Buffer
	if err := a.cfg.State.Save(&buf); err != nil {
		return fmt.Errorf("swarm: save %s: %w", a.cfg.Name, err)
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
	meta[metaVersion] = strconv.FormatInt(a.Version(), 10)
	meta[metaName] = a.cfg.Name
	if err := safetensors.Write(w, tensors, meta); err != nil {
		return fmt.Errorf("swarm: save %s: %w", a.cfg.Name, err)
	}
	return nil
}

// Load implements Model: it restores the State and then the version, so a
// failed load leaves the version as it was.
func (a *Adapter) Load(r io.Reader) error {
	if a.cfg.State == nil {
		return fmt.Errorf("swarm: model %q has no checkpoint (its AdapterConfig.State is nil)", a.cfg.Name)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("swarm: load %s: %w", a.cfg.Name, err)
	}
	f, err := safetensors.Read(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("swarm: load %s: %w", a.cfg.Name, err)
	}
	v, err := strconv.ParseInt(f.Metadata[metaVersion], 10, 64)
	if err != nil || v < 0 {
		return fmt.Errorf("swarm: load %s: checkpoint has no valid %s (%q)", a.cfg.Name, metaVersion, f.Metadata[metaVersion])
	}
	state := b
	if name, ok := f.Metadata[metaOpaque]; ok {
		t, ok := f.Tensor(name)
		if !ok || t.DType != safetensors.U8 {
			return fmt.Errorf("swarm: load %s: checkpoint lacks its state tensor %q", a.cfg.Name, name)
		}
		state = t.Data
	}
	if err := a.cfg.State.Load(bytes.NewReader(state)); err != nil {
		return fmt.Errorf("swarm: load %s: %w", a.cfg.Name, err)
	}
	a.pol.base = v - a.cfg.Policy.Version()
	return nil
}
