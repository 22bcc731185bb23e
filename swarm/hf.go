package swarm

import (
	"context"
	"fmt"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/nn/tokenizer/jinja"
	"github.com/troupe-ml/troupe/rl"
)

// HFChat is the ChatTokenizer of a pretrained model: its own Hugging Face
// tokenizer and Jinja chat template, tools included (ToolChatPrompter).
type HFChat struct {
	Tok *hf.Tokenizer
	// Extra are further template variables (enable_thinking, ...).
	Extra map[string]any
}

var _ ToolChatPrompter = HFChat{}

// ChatPrompt implements ChatTokenizer: the template renders the
// conversation with the generation prompt, and the text is encoded as
// transformers' apply_chat_template does (special tokens in the text are
// matched, none are added).
func (c HFChat) ChatPrompt(msgs []Message) ([]int, error) { return c.ChatPromptTools(msgs, nil) }

// ChatPromptTools implements ToolChatPrompter.
func (c HFChat) ChatPromptTools(msgs []Message, tools []Tool) ([]int, error) {
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
	s, err := c.Tok.Render(in)
	if err != nil {
		return nil, err
	}
	return c.Tok.Encode(s), nil
}

// templateMessage is a message as chat templates read it; a tool call's
// arguments are passed as the JSON object they encode (templates print them
// with tojson), or as the string when they are not JSON.
func templateMessage(m Message) (map[string]any, error) {
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

// TokenBytes implements ChatTokenizer.
func (c HFChat) TokenBytes(tok int) []byte { return c.Tok.TokenBytes(tok) }

// EncodeText implements ChatTokenizer.
func (c HFChat) EncodeText(s string) ([]int, error) { return c.Tok.Encode(s), nil }

// HFSampler samples from a pretrained model with a LoRA adapter (nil: the
// base alone). The model keeps no per-request state, so samplers of several
// adapters generate from one base at once.
type HFSampler struct {
	Base *hf.Model
	LoRA *hf.LoRA
	// StopTokens end a generation (the tokenizer's end-of-turn tokens).
	StopTokens []int
}

var _ StreamGenerator = (*HFSampler)(nil)

func (s *HFSampler) nnOptions(opts GenerateOptions) nn.GenerateOptions {
	var seed uint64
	if len(opts.Rand) > 0 && opts.Rand[0] != nil {
		seed = opts.Rand[0].Uint64()
	}
	return nn.GenerateOptions{Temperature: opts.Temperature, TopP: opts.TopP, StopTokens: s.StopTokens,
		MaxTokens: opts.MaxTokens, Seed: seed, TopLogProbs: opts.TopLogProbs}
}

// Generate implements Sampler. The whole batch is seeded from
// GenerateOptions.Rand[0] (request i samples from PCG(seed, i)).
func (s *HFSampler) Generate(ctx context.Context, prompts [][]int, opts GenerateOptions) ([]Generation, error) {
	return s.GenerateStream(ctx, prompts, opts, nil)
}

// GenerateStream implements StreamGenerator: emit receives every token as
// it is sampled.
func (s *HFSampler) GenerateStream(ctx context.Context, prompts [][]int, opts GenerateOptions, emit func(TokenEvent)) ([]Generation, error) {
	var cb func(hf.Token)
	if emit != nil {
		cb = func(t hf.Token) {
			emit(TokenEvent{Prompt: t.Prompt, Token: t.Token, LogProb: t.LogProb, Top: topOf(t.Top), FinishReason: t.Finish})
		}
	}
	gens, err := s.Base.Generate(ctx, s.LoRA, prompts, s.nnOptions(opts), cb)
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

func topOf(pos []nn.TokenLogProb) []TokenLogProb {
	if pos == nil {
		return nil
	}
	top := make([]TokenLogProb, len(pos))
	for k, c := range pos {
		top[k] = TokenLogProb{Token: c.Token, LogProb: c.LogProb}
	}
	return top
}

// HFModelConfig configures a pretrained model served with a trainable LoRA
// adapter.
type HFModelConfig struct {
	// Name is the model id; clients may also name it in a request's model
	// field.
	Name string
	// Base is the frozen pretrained model; several HF models may share it.
	Base *hf.Model
	// Tokenizer is the base's tokenizer and chat template.
	Tokenizer *hf.Tokenizer
	// LoRA is an existing adapter (loaded with hf.LoadLoRA); when nil one
	// is made from LoRAConfig (rank 16, alpha 32, the seven projections
	// when zero).
	LoRA       *hf.LoRA
	LoRAConfig hf.LoRAConfig
	// LR is AdamW's learning rate (default 1e-5), ClipNorm the gradient
	// clipping norm (default 1).
	LR, ClipNorm float64
	// Trainer is the policy-gradient algorithm; GRPO when nil.
	Trainer rl.Trainer
	// MaxLen is the context length (default: the smaller of the model's
	// max_position_embeddings and 4096).
	MaxLen int
	// TemplateVars are extra chat-template variables (enable_thinking, ...).
	TemplateVars map[string]any
}

// NewHFModel serves a pretrained model: its tokenizer and chat template,
// generation with its LoRA adapter, and GRPO training of the adapter alone
// (the base is never written), checkpointed with its optimizer state. The
// adapter's matrices keep PEFT's names in the checkpoint.
func NewHFModel(cfg HFModelConfig) (*Adapter, *hf.Policy, error) {
	if cfg.Base == nil || cfg.Tokenizer == nil {
		return nil, nil, fmt.Errorf("swarm: HF model %q needs a Base and a Tokenizer", cfg.Name)
	}
	if !cfg.Tokenizer.HasChatTemplate() {
		return nil, nil, fmt.Errorf("swarm: HF model %q: the tokenizer has no chat_template", cfg.Name)
	}
	if v := cfg.Tokenizer.VocabSize(); v > cfg.Base.Config.Vocab {
		return nil, nil, fmt.Errorf("swarm: HF model %q: the tokenizer has %d tokens, the model's vocabulary only %d", cfg.Name, v, cfg.Base.Config.Vocab)
	}
	ad := cfg.LoRA
	if ad == nil {
		lc := cfg.LoRAConfig
		if lc.Rank == 0 {
			lc.Rank, lc.Alpha = 16, 32
		}
		var err error
		if ad, err = hf.NewLoRA(cfg.Base, lc); err != nil {
			return nil, nil, fmt.Errorf("swarm: HF model %q: %w", cfg.Name, err)
		}
	}
	if cfg.LR == 0 {
		cfg.LR = 1e-5
	}
	if cfg.ClipNorm == 0 {
		cfg.ClipNorm = 1
	}
	if cfg.MaxLen == 0 {
		cfg.MaxLen = min(cfg.Base.Config.MaxPos, 4096)
	}
	opt := nn.NewAdamW(nn.Constant(cfg.LR), 0)
	pol := hf.NewPolicy(ad, opt, cfg.ClipNorm)
	a, err := NewAdapter(AdapterConfig{
		Name:      cfg.Name,
		Tokenizer: HFChat{Tok: cfg.Tokenizer, Extra: cfg.TemplateVars},
		Sampler:   &HFSampler{Base: cfg.Base, LoRA: ad, StopTokens: cfg.Tokenizer.StopTokens()},
		Policy:    pol,
		Trainer:   cfg.Trainer,
		State:     &LMState{Store: ad.Store, Opt: opt},
		MaxLen:    cfg.MaxLen,
	})
	if err != nil {
		return nil, nil, err
	}
	return a, pol, nil
}
