package hfmodel

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/nn/tokenizer/jinja"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/swarm/adapter"
	"github.com/troupe-ml/troupe/textgen"
)

// Chat is the adapter.ChatTokenizer of a pretrained model: its own Hugging
// Face tokenizer and Jinja chat template, tools included.
type Chat struct {
	Tok *hf.Tokenizer
	// Extra are further template variables (enable_thinking, ...).
	Extra map[string]any
}

// ChatPrompt implements adapter.ChatTokenizer: the template renders the
// conversation (and tools) with the generation prompt, and the text is
// encoded as transformers' apply_chat_template does (special tokens in the
// text are matched, none are added).
func (c Chat) ChatPrompt(ctx context.Context, msgs []api.Message, tools []api.Tool) ([]int, error) {
	in := jinja.ChatInput{AddGenerationPrompt: true, Extra: c.Extra}
	for _, m := range msgs {
		jm, err := templateMessage(m)
		if err != nil {
			return nil, err
		}
		in.Messages = append(in.Messages, jm)
	}
	for _, t := range tools {
		fn := map[string]any{"name": t.Function.Name}
		if t.Function.Description != "" {
			fn["description"] = t.Function.Description
		}
		if len(t.Function.Parameters) > 0 {
			p, err := jinja.ParseJSON(t.Function.Parameters)
			if err != nil {
				return nil, fmt.Errorf("tool %q: parameters: %w", t.Function.Name, err)
			}
			fn["parameters"] = p
		}
		typ := t.Type
		if typ == "" {
			typ = "function"
		}
		in.Tools = append(in.Tools, map[string]any{"type": typ, "function": fn})
	}
	s, err := c.Tok.RenderContext(ctx, in)
	if errors.Is(err, jinja.ErrBudget) {
		return nil, fmt.Errorf("%w: %w", openai.ErrTemplateBudget, err)
	}
	if err != nil {
		return nil, err
	}
	return c.Tok.Encode(s), nil
}

// templateMessage is a message as chat templates read it; a tool call's
// arguments are passed as the JSON object they encode (templates print them
// with tojson), or as the string when they are not JSON.
func templateMessage(m api.Message) (map[string]any, error) {
	jm := map[string]any{"role": m.Role, "content": m.Content}
	if m.Name != "" {
		jm["name"] = m.Name
	}
	if m.ToolCallID != "" {
		jm["tool_call_id"] = m.ToolCallID
	}
	if len(m.ToolCalls) > 0 {
		var calls []any
		for _, tc := range m.ToolCalls {
			var args any = tc.Function.Arguments
			if v, err := jinja.ParseJSON([]byte(tc.Function.Arguments)); err == nil {
				args = v
			}
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			call := map[string]any{"type": typ, "function": map[string]any{"name": tc.Function.Name, "arguments": args}}
			if tc.ID != "" {
				call["id"] = tc.ID
			}
			calls = append(calls, call)
		}
		jm["tool_calls"] = calls
	}
	return jm, nil
}

// TokenBytes implements adapter.ChatTokenizer.
func (c Chat) TokenBytes(tok int) []byte { return c.Tok.TokenBytes(tok) }

// EncodeText implements adapter.ChatTokenizer.
func (c Chat) EncodeText(s string) ([]int, error) { return c.Tok.Encode(s), nil }

// Sampler samples from a pretrained model with a LoRA adapter, through a
// shared textgen.Engine when it has one (requests of every agent on the
// base are then decoded together) or one request at a time otherwise.
// Sequences sample from the adapter snapshot that was current when they
// started (Publish), so that training the adapter never changes a
// sequence midway and each Generation names the version it came from.
type Sampler struct {
	Base *hf.Model
	// Engine, when set, generates for every agent of Base at once.
	Engine *textgen.Engine
	// StopTokens end a generation (the tokenizer's end-of-turn tokens).
	StopTokens []int
	snap       atomic.Pointer[snapshot]
}

// snapshot is an adapter's frozen matrices and their version.
type snapshot struct {
	lora    *hf.LoRA
	version int64
}

// Publish makes a frozen copy of ad (nil: the base alone) at version the
// one new sequences sample from. The caller keeps optimizer steps out of
// ad while it is copied.
func (s *Sampler) Publish(ad *hf.LoRA, version int64) {
	sn := &snapshot{version: version}
	if ad != nil {
		sn.lora = ad.Snapshot()
	}
	s.snap.Store(sn)
}

func (s *Sampler) bind() (any, int64) {
	sn := s.snap.Load()
	if sn == nil {
		return (*hf.LoRA)(nil), 0
	}
	return sn.lora, sn.version
}

// Generate implements adapter.Sampler.
func (s *Sampler) Generate(ctx context.Context, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	opts.StopTokens = append(slices.Clip(opts.StopTokens), s.StopTokens...)
	if s.Engine != nil {
		return s.Engine.Generate(ctx, textgen.Request{Prompts: prompts, Options: opts, Bind: s.bind, Emit: emit})
	}
	ad, version := s.bind()
	if emit != nil {
		inner := emit
		emit = func(ev textgen.TokenEvent) {
			ev.Version = version
			inner(ev)
		}
	}
	gens, err := s.Base.Generate(ctx, ad.(*hf.LoRA), prompts, opts, emit)
	for i := range gens {
		gens[i].Version = version
	}
	return gens, err
}

// Config configures a pretrained model served with a trainable LoRA
// adapter.
type Config struct {
	// Name is the model id; clients may also name it in a request's model
	// field.
	Name string
	// Base is the frozen pretrained model; several HF models may share it.
	Base *hf.Model
	// Engine, when set, is the generation engine over Base that every
	// agent on it shares (NewEngine); without it each request generates
	// alone.
	Engine *textgen.Engine
	// Tokenizer is the base's tokenizer and chat template.
	Tokenizer *hf.Tokenizer
	// LoRA is an existing adapter (loaded with hf.LoadLoRA); when nil one
	// is made from LoRAConfig (its zero fields take hf's LoRA defaults).
	LoRA       *hf.LoRA
	LoRAConfig hf.LoRAConfig
	// LR is AdamW's learning rate (DefaultLR when zero), ClipNorm the
	// gradient clipping norm (DefaultClipNorm when zero).
	LR, ClipNorm float64
	// Trainer is the policy-gradient algorithm; GRPO when nil.
	Trainer rl.Trainer
	// MaxLen is the context length (the smaller of the model's
	// max_position_embeddings and DefaultMaxLen when zero).
	MaxLen int
	// TemplateVars are extra chat-template variables (enable_thinking, ...).
	TemplateVars map[string]any
	// AdapterDir, when set, receives the adapter in PEFT's layout
	// (adapter_config.json, adapter_model.safetensors) with every
	// checkpoint, so that a run's adapters can be loaded by
	// troupe lm generate --lora, troupe serve --lora-modules or PEFT;
	// BaseName is recorded as its base_model_name_or_path.
	AdapterDir, BaseName string
}

// Checkpoint metadata that describes the adapter, so that a checkpoint
// can be exported as a PEFT directory without the server's flags.
const (
	metaLoRA = "hfmodel.lora_config"
	metaBase = "hfmodel.base_model"
)

// peftState saves the adapter's matrices and optimizer state (the
// checkpoint) and, with a directory, the adapter in PEFT's layout.
type peftState struct {
	adapter.StoreState
	ad        *hf.LoRA
	dir, base string
}

func (s *peftState) Save(w io.Writer) error {
	if err := s.StoreState.Save(w); err != nil {
		return err
	}
	if s.dir == "" {
		return nil
	}
	if err := s.ad.Save(s.dir, s.base); err != nil {
		return fmt.Errorf("PEFT adapter %s: %w", s.dir, err)
	}
	return nil
}

// LoadCheckpoint reads the adapter of a checkpoint that New's models
// saved (a swarm run's checkpoint.safetensors) for base, and the base
// model's name it was trained on.
func LoadCheckpoint(base *hf.Model, checkpoint string) (*hf.LoRA, string, error) {
	f, err := safetensors.Open(checkpoint)
	if err != nil {
		return nil, "", fmt.Errorf("hfmodel: %w", err)
	}
	meta := f.Metadata
	f.Close()
	var lc hf.LoRAConfig
	if err := json.Unmarshal([]byte(meta[metaLoRA]), &lc); err != nil {
		return nil, "", fmt.Errorf("hfmodel: %s holds no LoRA adapter description (%s): %v", checkpoint, metaLoRA, err)
	}
	ad, err := hf.NewLoRA(base, lc)
	if err != nil {
		return nil, "", fmt.Errorf("hfmodel: %s: %w", checkpoint, err)
	}
	if _, err := nn.LoadCheckpoint(checkpoint, ad.Store, nil); err != nil {
		return nil, "", fmt.Errorf("hfmodel: %w", err)
	}
	return ad, meta[metaBase], nil
}

// Defaults of Config.
const (
	DefaultLR       = 1e-5
	DefaultClipNorm = 1
	DefaultMaxLen   = 4096
)

// New serves a pretrained model: its tokenizer and chat template,
// generation with its LoRA adapter, and GRPO training of the adapter alone
// (the base is never written), checkpointed with its optimizer state. The
// adapter's matrices keep PEFT's names in the checkpoint. Generation never
// waits for training: sequences sample from the snapshot of the adapter
// published after each step.
func New(cfg Config) (*adapter.Adapter, *policies.LoRA, error) {
	if cfg.Base == nil || cfg.Tokenizer == nil {
		return nil, nil, fmt.Errorf("hfmodel: %q needs a Base and a Tokenizer", cfg.Name)
	}
	if !cfg.Tokenizer.HasChatTemplate() {
		return nil, nil, fmt.Errorf("hfmodel: %q: the tokenizer has no chat_template", cfg.Name)
	}
	if v := cfg.Tokenizer.VocabSize(); v > cfg.Base.Config.Vocab {
		return nil, nil, fmt.Errorf("hfmodel: %q: the tokenizer has %d tokens, the model's vocabulary only %d", cfg.Name, v, cfg.Base.Config.Vocab)
	}
	ad := cfg.LoRA
	if ad == nil {
		var err error
		if ad, err = hf.NewLoRA(cfg.Base, cfg.LoRAConfig); err != nil {
			return nil, nil, fmt.Errorf("hfmodel: %q: %w", cfg.Name, err)
		}
	}
	cfg.LR = cmp.Or(cfg.LR, DefaultLR)
	cfg.ClipNorm = cmp.Or(cfg.ClipNorm, DefaultClipNorm)
	cfg.MaxLen = cmp.Or(cfg.MaxLen, min(cfg.Base.Config.MaxPos, DefaultMaxLen))
	opt := nn.NewAdamW(nn.Constant(cfg.LR), 0)
	pol := policies.NewLoRA(ad, opt, cfg.ClipNorm)
	lc, _ := json.Marshal(ad.Config)
	sampler := &Sampler{Base: cfg.Base, Engine: cfg.Engine, StopTokens: cfg.Tokenizer.StopTokens()}
	sampler.Publish(ad, 0)
	a, err := adapter.New(adapter.Config{
		Name:       cfg.Name,
		Tokenizer:  Chat{Tok: cfg.Tokenizer, Extra: cfg.TemplateVars},
		Sampler:    sampler,
		Policy:     pol,
		Trainer:    cfg.Trainer,
		State:      &peftState{StoreState: adapter.StoreState{Store: ad.Store, Opt: opt, Meta: map[string]string{metaLoRA: string(lc), metaBase: cfg.BaseName}}, ad: ad, dir: cfg.AdapterDir, base: cfg.BaseName},
		MaxLen:     cfg.MaxLen,
		Concurrent: true,
		OnUpdate:   func(version int64) { sampler.Publish(ad, version) },
	})
	if err != nil {
		return nil, nil, err
	}
	return a, pol, nil
}

// NewEngine returns the generation engine of a base model, for the agents
// on it (Config.Engine) and for plain inference.
func NewEngine(base *hf.Model, cfg textgen.EngineConfig) *textgen.Engine {
	return textgen.NewEngine(base.Decoder(), cfg)
}

// Inference is a pretrained model served for inference only: its chat
// template, and generation with a fixed adapter (or none) through the
// base's engine. It implements openai.Model and openai.TextEncoder.
type Inference struct {
	Chat
	name    string
	maxLen  int
	sampler *Sampler
}

var (
	_ openai.Model       = (*Inference)(nil)
	_ openai.TextEncoder = (*Inference)(nil)
)

// NewInference serves base with adapter ad (nil: the base alone) under
// name, generating through engine (nil: one request at a time).
func NewInference(name string, base *hf.Model, tok *hf.Tokenizer, engine *textgen.Engine, ad *hf.LoRA) (*Inference, error) {
	if !tok.HasChatTemplate() {
		return nil, fmt.Errorf("hfmodel: %q: the tokenizer has no chat_template", name)
	}
	if v := tok.VocabSize(); v > base.Config.Vocab {
		return nil, fmt.Errorf("hfmodel: %q: the tokenizer has %d tokens, the model's vocabulary only %d", name, v, base.Config.Vocab)
	}
	s := &Sampler{Base: base, Engine: engine, StopTokens: tok.StopTokens()}
	s.Publish(ad, 0)
	return &Inference{Chat: Chat{Tok: tok}, name: name, maxLen: base.Config.MaxPos, sampler: s}, nil
}

// Name implements openai.Model.
func (m *Inference) Name() string { return m.name }

// MaxLen is the model's context length.
func (m *Inference) MaxLen() int { return m.maxLen }

// Generate implements openai.Model.
func (m *Inference) Generate(ctx context.Context, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	return m.sampler.Generate(ctx, prompts, opts, emit)
}
