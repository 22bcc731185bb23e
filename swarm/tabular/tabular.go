package tabular

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/textgen"
)

// Model serves a policies.Tabular with a byte-level chat template
// "<|role|>content\n" ... "<|assistant|>" (no tools; earlier tool calls
// are folded into the text), and trains it with an rl.Trainer (rl.GRPO by
// default; one Update with the default schedule is one optimizer step).
// Generation and training exclude each other (a read-write lock).
type Model struct {
	Policy  *policies.Tabular
	Trainer rl.Trainer
	mu      sync.RWMutex
}

// New returns a model of the given configuration trained by rl.GRPO (clip
// 0.2, the importance ratio of negative advantages capped at 3 for stale
// samples, one step per Update, no KL term).
func New(cfg policies.TabularConfig) *Model {
	return &Model{Policy: policies.NewTabular(cfg), Trainer: rl.NewGRPO(rl.GRPOConfig{ClipEps: 0.2, MaxImportanceWeight: 3})}
}

// Presets are the tabular model sizes the command line knows.
var Presets = policies.TabularPresets

// NewPreset returns the tabular model of a named preset.
func NewPreset(name string) (*Model, error) {
	cfg, ok := Presets[name]
	if !ok {
		return nil, fmt.Errorf("tabular: unknown model preset %q", name)
	}
	return New(cfg), nil
}

// Name implements openai.Model.
func (m *Model) Name() string { return m.Policy.Config().Name }

// ChatPrompt implements openai.Model.
func (m *Model) ChatPrompt(_ context.Context, msgs []api.Message, tools []api.Tool) ([]int, error) {
	if len(tools) > 0 {
		return nil, openai.ErrNoToolTemplate
	}
	msgs = openai.FoldToolCalls(msgs)
	var n int
	for _, msg := range msgs {
		n += len(msg.Role) + len(msg.Content) + 5
	}
	toks := make([]int, 0, n+13)
	add := func(s string) {
		for i := 0; i < len(s); i++ {
			toks = append(toks, int(s[i]))
		}
	}
	for _, msg := range msgs {
		add("<|")
		add(msg.Role)
		add("|>")
		add(msg.Content)
		add("\n")
	}
	add("<|assistant|>")
	return toks, nil
}

// TokenBytes implements openai.Model.
func (m *Model) TokenBytes(tok int) []byte {
	if tok < 0 || tok >= 256 {
		return nil
	}
	return byteTokens[tok : tok+1]
}

// EncodeText implements openai.TextEncoder: a token per byte, as the chat
// template.
func (m *Model) EncodeText(s string) ([]int, error) {
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int(s[i])
	}
	return out, nil
}

var byteTokens = func() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// Generate implements openai.Model (policies.Tabular.Generate), waiting
// for a training step in progress.
func (m *Model) Generate(ctx context.Context, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.Policy.Generate(ctx, prompts, opts, emit)
}

// Train implements swarm.Model.
func (m *Model) Train(batch []rl.Sample) (rl.Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.Trainer.Update(m.Policy, batch)
}

// Version implements swarm.Model.
func (m *Model) Version() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.Policy.Version()
}

// Checksum hashes the parameters.
func (m *Model) Checksum() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.Policy.Checksum()
}

// Save implements swarm.Model (policies.Tabular.Save).
func (m *Model) Save(w io.Writer) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.Policy.Save(w)
}

// Load implements swarm.Model (policies.Tabular.Load).
func (m *Model) Load(r io.Reader) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.Policy.Load(r)
}

var (
	_ openai.Model       = (*Model)(nil)
	_ openai.TextEncoder = (*Model)(nil)
)
