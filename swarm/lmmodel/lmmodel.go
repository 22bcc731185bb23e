package lmmodel

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/swarm/adapter"
	"github.com/troupe-ml/troupe/textgen"
)

// Config configures a Model.
type Config struct {
	// Name is the model id.
	Name string
	// LM is the transformer's shape; Vocab is taken from the tokenizer.
	LM nn.LMConfig
	// Tokenizer renders chats; DefaultLMTokenizer() when nil.
	Tokenizer *tokenizer.Tokenizer
	// Optimizer is "adam" (default) or "sgd", with learning rate LR.
	Optimizer string
	LR        float64
	// ClipNorm clips the global gradient norm (0: none).
	ClipNorm float64
	// Seed seeds the parameters.
	Seed uint64
	// Trainer is the policy-gradient algorithm; rl.GRPO when nil.
	Trainer rl.Trainer
}

// Presets are the transformer sizes the command line knows.
var Presets = map[string]Config{
	"lm-tiny":  {Name: "lm-tiny", LM: nn.LMConfig{Dim: 32, Layers: 1, Heads: 2, MaxLen: 128}, LR: 3e-3, ClipNorm: 1, Seed: 1},
	"lm-small": {Name: "lm-small", LM: nn.LMConfig{Dim: 64, Layers: 2, Heads: 4, MaxLen: 256}, LR: 1e-3, ClipNorm: 1, Seed: 2},
}

// Model serves a freshly initialised nn.LM (a GPT-style transformer) with
// the nn/tokenizer byte-level BPE chat template and trains it with rl
// through rl/policies.LM. It is an adapter.Adapter over TokenizerChat,
// Sampler and adapter.StoreState; wrap an existing nn.LM the same way with
// adapter.New.
type Model struct {
	*adapter.Adapter
	lm *nn.LM
}

// lmCorpus trains the default tokenizer: a few sentences of plain English
// and digits, enough for frequent merges.
const lmCorpus = `The swarm server hosts one trainable model. A client begins an episode,
asks the model through an OpenAI compatible endpoint, and reports a reward at the end.
When enough episodes are finished the server runs one training step and the version grows.
Answer with a number: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000.
You are a helpful assistant. Say yes or no. Hello, how are you? I am fine, thank you.`

// DefaultTokenizer trains a small deterministic byte-level BPE tokenizer
// (vocabulary 384) with the default chat specials.
func DefaultTokenizer() (*tokenizer.Tokenizer, error) {
	var texts []string
	for _, l := range strings.Split(lmCorpus, "\n") {
		texts = append(texts, l, l, l)
	}
	return tokenizer.Train(texts, tokenizer.TrainOptions{VocabSize: 384})
}

// New builds the transformer and its trainer.
func New(cfg Config) (*Model, error) {
	tok := cfg.Tokenizer
	if tok == nil {
		var err error
		if tok, err = DefaultTokenizer(); err != nil {
			return nil, fmt.Errorf("lmmodel: default tokenizer: %w", err)
		}
	}
	end, ok := tok.EndID()
	if !ok {
		return nil, fmt.Errorf("lmmodel: tokenizer has no %s token", tokenizer.End)
	}
	cfg.LM.Vocab = tok.VocabSize()
	if cfg.LR == 0 {
		cfg.LR = 1e-3
	}
	store := nn.NewStore(cfg.Seed)
	var lm *nn.LM
	err := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("lmmodel: invalid LM config: %v", v)
			}
		}()
		lm = nn.NewLM(store, cfg.LM)
		return nil
	}()
	if err != nil {
		return nil, err
	}
	var opt nn.Optimizer
	switch cfg.Optimizer {
	case "", "adam":
		opt = nn.NewAdam(nn.Constant(cfg.LR))
	case "sgd":
		opt = nn.NewSGD(nn.Constant(cfg.LR), 0)
	default:
		return nil, fmt.Errorf("lmmodel: unknown optimizer %q", cfg.Optimizer)
	}
	tj, err := tok.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("lmmodel: tokenizer: %w", err)
	}
	tr := nn.NewLMTrainer(lm, opt, nn.TrainConfig{ClipNorm: cfg.ClipNorm})
	a, err := adapter.New(adapter.Config{
		Name:      cfg.Name,
		Tokenizer: TokenizerChat{tok},
		Sampler:   NewSampler(lm, end),
		Policy:    policies.NewLM(lm, tr),
		Trainer:   cfg.Trainer,
		State:     &adapter.StoreState{Store: lm.Store, Opt: opt, Meta: map[string]string{"tokenizer": string(tj)}},
		MaxLen:    cfg.LM.MaxLen,
	})
	if err != nil {
		return nil, err
	}
	return &Model{Adapter: a, lm: lm}, nil
}

// NewPreset returns the Model of a named preset.
func NewPreset(name string) (*Model, error) {
	cfg, ok := Presets[name]
	if !ok {
		return nil, fmt.Errorf("lmmodel: unknown LM preset %q", name)
	}
	return New(cfg)
}

// NumParams is the number of trainable parameters.
func (m *Model) NumParams() int { return m.lm.Store.NumParams() }

// Checksum hashes the parameters.
func (m *Model) Checksum() uint64 {
	h := uint64(14695981039346656037)
	for _, name := range m.lm.Store.Names() {
		for _, x := range m.lm.Store.Param(name).Data() {
			h ^= uint64(math.Float32bits(x))
			h *= 1099511628211
		}
	}
	return h
}

// TokenizerChat is an adapter.ChatTokenizer over an nn/tokenizer
// byte-level BPE tokenizer and its chat template, which renders no tools
// (earlier tool calls are folded into the text). Roles the template lacks
// are mapped: developer to system, tool and function to user.
type TokenizerChat struct {
	Tok *tokenizer.Tokenizer
}

// ChatPrompt implements adapter.ChatTokenizer.
func (t TokenizerChat) ChatPrompt(_ context.Context, msgs []api.Message, tools []api.Tool) ([]int, error) {
	if len(tools) > 0 {
		return nil, openai.ErrNoToolTemplate
	}
	msgs = openai.FoldToolCalls(msgs)
	tm := make([]tokenizer.Message, len(msgs))
	for i, msg := range msgs {
		role := msg.Role
		switch role {
		case "developer":
			role = tokenizer.RoleSystem
		case "tool", "function":
			role = tokenizer.RoleUser
		}
		tm[i] = tokenizer.Message{Role: role, Content: msg.Content}
	}
	return t.Tok.ApplyChat(tm, true)
}

// TokenBytes implements adapter.ChatTokenizer.
func (t TokenizerChat) TokenBytes(tok int) []byte {
	if tok < 0 || tok >= t.Tok.VocabSize() || t.Tok.IsSpecial(tok) {
		return nil
	}
	return t.Tok.TokenBytes(tok)
}

// EncodeText implements adapter.ChatTokenizer.
func (t TokenizerChat) EncodeText(s string) ([]int, error) { return t.Tok.Encode(s), nil }

// Sampler is an adapter.Sampler over nn.LM's KV-cache generation
// (textgen's loop). It generates one batch at a time (a mutex), so the
// model's generation code needs no thread safety; cancellation is checked
// between steps.
type Sampler struct {
	LM *nn.LM
	// StopTokens end a generation (the end-of-turn token).
	StopTokens []int
	mu         sync.Mutex
}

// NewSampler returns a sampler of lm that ends generations at stop.
func NewSampler(lm *nn.LM, stop ...int) *Sampler {
	return &Sampler{LM: lm, StopTokens: stop}
}

// Generate implements adapter.Sampler.
func (s *Sampler) Generate(ctx context.Context, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	dec, err := s.LM.Decoder()
	if err != nil {
		return nil, err
	}
	opts.StopTokens = append(slices.Clip(opts.StopTokens), s.StopTokens...)
	return textgen.Generate(ctx, dec, prompts, opts, emit)
}
