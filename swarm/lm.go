package swarm

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
)

// LMModelConfig configures an LMModel.
type LMModelConfig struct {
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

// LMPresets are the transformer sizes the command line knows.
var LMPresets = map[string]LMModelConfig{
	"lm-tiny":  {Name: "lm-tiny", LM: nn.LMConfig{Dim: 32, Layers: 1, Heads: 2, MaxLen: 128}, LR: 3e-3, ClipNorm: 1, Seed: 1},
	"lm-small": {Name: "lm-small", LM: nn.LMConfig{Dim: 64, Layers: 2, Heads: 4, MaxLen: 256}, LR: 1e-3, ClipNorm: 1, Seed: 2},
}

// LMModel serves a freshly initialised nn.LM (a GPT-style transformer) with
// the nn/tokenizer byte-level BPE chat template and trains it with rl
// through rl/policies.LM. It is an Adapter over TokenizerChat, LMSampler and
// LMState; wrap an existing nn.LM the same way with NewAdapter.
type LMModel struct {
	*Adapter
	lm *nn.LM
}

var _ Model = (*LMModel)(nil)

// lmCorpus trains the default tokenizer: a few sentences of plain English
// and digits, enough for frequent merges.
const lmCorpus = `The swarm server hosts one trainable model. A client begins an episode,
asks the model through an OpenAI compatible endpoint, and reports a reward at the end.
When enough episodes are finished the server runs one training step and the version grows.
Answer with a number: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000.
You are a helpful assistant. Say yes or no. Hello, how are you? I am fine, thank you.`

// DefaultLMTokenizer trains a small deterministic byte-level BPE tokenizer
// (vocabulary 384) with the default chat specials.
func DefaultLMTokenizer() (*tokenizer.Tokenizer, error) {
	var texts []string
	for _, l := range strings.Split(lmCorpus, "\n") {
		texts = append(texts, l, l, l)
	}
	return tokenizer.Train(texts, tokenizer.TrainOptions{VocabSize: 384})
}

// NewLMModel builds the transformer and its trainer.
func NewLMModel(cfg LMModelConfig) (*LMModel, error) {
	tok := cfg.Tokenizer
	if tok == nil {
		var err error
		if tok, err = DefaultLMTokenizer(); err != nil {
			return nil, fmt.Errorf("swarm: default tokenizer: %w", err)
		}
	}
	end, ok := tok.EndID()
	if !ok {
		return nil, fmt.Errorf("swarm: tokenizer has no %s token", tokenizer.End)
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
				err = fmt.Errorf("swarm: invalid LM config: %v", v)
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
		return nil, fmt.Errorf("swarm: unknown optimizer %q", cfg.Optimizer)
	}
	tj, err := tok.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("swarm: tokenizer: %w", err)
	}
	tr := nn.NewLMTrainer(lm, opt, nn.TrainConfig{ClipNorm: cfg.ClipNorm})
	a, err := NewAdapter(AdapterConfig{
		Name:      cfg.Name,
		Tokenizer: TokenizerChat{tok},
		Sampler:   NewLMSampler(lm, end),
		Policy:    policies.NewLM(lm, tr),
		Trainer:   cfg.Trainer,
		State:     &LMState{Store: lm.Store, Opt: opt, Meta: map[string]string{"tokenizer": string(tj)}},
		MaxLen:    cfg.LM.MaxLen,
	})
	if err != nil {
		return nil, err
	}
	return &LMModel{Adapter: a, lm: lm}, nil
}

// NewLMPreset returns the LMModel of a named preset.
func NewLMPreset(name string) (*LMModel, error) {
	cfg, ok := LMPresets[name]
	if !ok {
		return nil, fmt.Errorf("swarm: unknown LM preset %q", name)
	}
	return NewLMModel(cfg)
}

// NumParams is the number of trainable parameters.
func (m *LMModel) NumParams() int { return m.lm.Store.NumParams() }

// Checksum hashes the parameters.
func (m *LMModel) Checksum() uint64 {
	h := uint64(14695981039346656037)
	for _, name := range m.lm.Store.Names() {
		for _, x := range m.lm.Store.Param(name).Data() {
			h ^= uint64(math.Float32bits(x))
			h *= 1099511628211
		}
	}
	return h
}

// TokenizerChat is a ChatTokenizer over an nn/tokenizer byte-level BPE
// tokenizer and its chat template. Roles the template lacks are mapped:
// developer to system, tool and function to user.
type TokenizerChat struct {
	Tok *tokenizer.Tokenizer
}

// ChatPrompt implements ChatTokenizer.
func (t TokenizerChat) ChatPrompt(msgs []Message) ([]int, error) {
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

// TokenBytes implements ChatTokenizer.
func (t TokenizerChat) TokenBytes(tok int) []byte {
	if tok < 0 || tok >= t.Tok.VocabSize() || t.Tok.IsSpecial(tok) {
		return nil
	}
	return t.Tok.TokenBytes(tok)
}

// EncodeText implements ChatTokenizer.
func (t TokenizerChat) EncodeText(s string) ([]int, error) { return t.Tok.Encode(s), nil }

// LMSampler is a Sampler over nn.LM's KV-cache generation. It generates one
// batch at a time (a mutex), so the model's generation code needs no
// thread safety. The whole batch is seeded from GenerateOptions.Rand[0]
// (nn seeds prompt i as PCG(seed, i)); cancellation is checked before the
// batch starts.
type LMSampler struct {
	LM *nn.LM
	// StopTokens end a generation (the end-of-turn token).
	StopTokens []int
	mu         sync.Mutex
}

// NewLMSampler returns a sampler of lm that ends generations at stop.
func NewLMSampler(lm *nn.LM, stop ...int) *LMSampler {
	return &LMSampler{LM: lm, StopTokens: stop}
}

// Generate implements Sampler.
func (s *LMSampler) Generate(ctx context.Context, prompts [][]int, opts GenerateOptions) ([]Generation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var seed uint64
	if len(opts.Rand) > 0 && opts.Rand[0] != nil {
		seed = opts.Rand[0].Uint64()
	}
	s.mu.Lock()
	gens, err := s.LM.Generate(prompts, nn.GenerateOptions{Temperature: opts.Temperature, TopP: opts.TopP,
		StopTokens: s.StopTokens, MaxTokens: opts.MaxTokens, Seed: seed, TopLogProbs: opts.TopLogProbs})
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make([]Generation, len(gens))
	for i, g := range gens {
		out[i] = Generation{Tokens: g.Tokens, LogProbs: g.LogProbs, FinishReason: g.FinishReason}
		for _, pos := range g.TopLogProbs {
			out[i].Top = append(out[i].Top, topOf(pos))
		}
	}
	return out, nil
}

// LMState is a Checkpointer of an nn.Store and its optimizer, written with
// nn.SaveCheckpoint (safetensors with the optimizer's moments).
type LMState struct {
	Store *nn.Store
	Opt   nn.Optimizer
	// Meta is written into the checkpoint's metadata (the tokenizer, say).
	Meta map[string]string
}

// Save implements Checkpointer.
func (s *LMState) Save(w io.Writer) error {
	dir, err := os.MkdirTemp("", "swarm-lm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "lm.safetensors")
	if err := nn.SaveCheckpoint(path, s.Store, s.Opt, s.Meta); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// Load implements Checkpointer.
func (s *LMState) Load(r io.Reader) error {
	dir, err := os.MkdirTemp("", "swarm-lm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "lm.safetensors")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if _, err := nn.LoadCheckpoint(path, s.Store, s.Opt); err != nil {
		return fmt.Errorf("LM checkpoint: %w", err)
	}
	return nil
}
