package swarm

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
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

// LMModel serves an nn.LM (a GPT-style transformer) with the nn/tokenizer
// byte-level BPE chat template and trains it with rl through an nn.LMTrainer.
// Generation holds a mutex (one batch at a time), so the model's own
// generation code needs no thread safety.
type LMModel struct {
	cfg     LMModelConfig
	tok     *tokenizer.Tokenizer
	lm      *nn.LM
	opt     nn.Optimizer
	trainer *nn.LMTrainer
	pol     restoredLM
	rlt     rl.Trainer
	endID   int
	genMu   sync.Mutex
}

// restoredLM is rl/policies.LM whose version continues from a checkpoint:
// policies.LM counts applied steps from zero and has no setter, so the
// version a checkpoint restores is kept here as an offset. Everything else
// (log-probs, forward-backward, NaN/Inf skipping, the version growing only
// when a step is applied) is policies.LM's.
type restoredLM struct {
	*policies.LM
	base int64
}

// Version implements rl.Policy: the checkpoint's version plus the steps
// applied since.
func (p restoredLM) Version() int64 { return p.base + p.LM.Version() }

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
	rlt := cfg.Trainer
	if rlt == nil {
		rlt = rl.NewGRPO(rl.GRPOConfig{ClipEps: 0.2})
	}
	tr := nn.NewLMTrainer(lm, opt, nn.TrainConfig{ClipNorm: cfg.ClipNorm})
	return &LMModel{cfg: cfg, tok: tok, lm: lm, opt: opt, rlt: rlt, endID: end,
		trainer: tr, pol: restoredLM{LM: policies.NewLM(lm, tr)}}, nil
}

// NewLMPreset returns the LMModel of a named preset.
func NewLMPreset(name string) (*LMModel, error) {
	cfg, ok := LMPresets[name]
	if !ok {
		return nil, fmt.Errorf("swarm: unknown LM preset %q", name)
	}
	return NewLMModel(cfg)
}

// Name implements Model.
func (m *LMModel) Name() string { return m.cfg.Name }

// NumParams is the number of trainable parameters.
func (m *LMModel) NumParams() int { return m.lm.Store.NumParams() }

// ChatPrompt implements Model. Roles the template lacks are mapped:
// developer to system, tool and function to user.
func (m *LMModel) ChatPrompt(msgs []Message) ([]int, error) {
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
	ids, err := m.tok.ApplyChat(tm, true)
	if err != nil {
		return nil, err
	}
	if len(ids) >= m.cfg.LM.MaxLen {
		return nil, fmt.Errorf("prompt of %d tokens does not fit the model's %d-token context", len(ids), m.cfg.LM.MaxLen)
	}
	return ids, nil
}

// TokenBytes implements Model.
func (m *LMModel) TokenBytes(t int) []byte {
	if t < 0 || t >= m.tok.VocabSize() || m.tok.IsSpecial(t) {
		return nil
	}
	return m.tok.TokenBytes(t)
}

// EncodeText implements TextEncoder.
func (m *LMModel) EncodeText(s string) ([]int, error) { return m.tok.Encode(s), nil }

// Generate implements Model. Top log-probs are not available from nn.LM
// (Generation.Top stays nil) and cancellation is checked between batches.
func (m *LMModel) Generate(ctx context.Context, prompts [][]int, opts GenerateOptions) ([]Generation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(prompts) == 0 {
		return nil, nil
	}
	maxTok := opts.MaxTokens
	for _, p := range prompts {
		maxTok = min(maxTok, m.cfg.LM.MaxLen-len(p))
	}
	if maxTok < 1 {
		return nil, fmt.Errorf("swarm: no room left in the %d-token context", m.cfg.LM.MaxLen)
	}
	var seed uint64
	if len(opts.Rand) > 0 && opts.Rand[0] != nil {
		seed = opts.Rand[0].Uint64()
	}
	m.genMu.Lock()
	gens, err := m.lm.Generate(prompts, nn.GenerateOptions{Temperature: opts.Temperature, TopP: opts.TopP,
		StopTokens: []int{m.endID}, MaxTokens: maxTok, Seed: seed})
	m.genMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("swarm: LM generate: %w", err)
	}
	out := make([]Generation, len(gens))
	for i, g := range gens {
		out[i] = Generation{Tokens: g.Tokens, LogProbs: g.LogProbs, FinishReason: g.FinishReason}
		if opts.Stop != nil {
			for k := range g.Tokens {
				if opts.Stop(i, g.Tokens[:k+1]) {
					out[i].Tokens, out[i].LogProbs, out[i].FinishReason = g.Tokens[:k+1], g.LogProbs[:k+1], "stop"
					break
				}
			}
		}
	}
	return out, nil
}

// Train implements Model.
func (m *LMModel) Train(batch []rl.Sample) (rl.Stats, error) {
	for i, s := range batch {
		if len(s.Prompt) == 0 || len(s.Prompt)+len(s.Actions) > m.cfg.LM.MaxLen {
			return rl.Stats{}, fmt.Errorf("swarm: sample %d of %d+%d tokens does not fit the %d-token context", i, len(s.Prompt), len(s.Actions), m.cfg.LM.MaxLen)
		}
	}
	return m.rlt.Update(m.pol, batch)
}

// Version implements Model. A step skipped because of a NaN or Inf loss or
// gradient does not count (rl/policies.LM semantics, as for TabularPolicy).
func (m *LMModel) Version() int64 { return m.pol.Version() }

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

// Save implements Model with nn.SaveCheckpoint (safetensors with optimizer
// state; the version and tokenizer travel in the metadata).
func (m *LMModel) Save(w io.Writer) error {
	dir, err := os.MkdirTemp("", "swarm-lm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tj, err := m.tok.MarshalJSON()
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "lm.safetensors")
	meta := map[string]string{"swarm.version": strconv.FormatInt(m.Version(), 10), "swarm.name": m.cfg.Name, "tokenizer": string(tj)}
	if err := nn.SaveCheckpoint(path, m.lm.Store, m.opt, meta); err != nil {
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

// Load implements Model.
func (m *LMModel) Load(r io.Reader) error {
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
	meta, err := nn.LoadCheckpoint(path, m.lm.Store, m.opt)
	if err != nil {
		return fmt.Errorf("swarm: load LM: %w", err)
	}
	v, err := strconv.ParseInt(meta["swarm.version"], 10, 64)
	if err != nil {
		return fmt.Errorf("swarm: load LM: bad swarm.version %q", meta["swarm.version"])
	}
	m.pol.base = v - m.pol.LM.Version()
	return nil
}
