package hf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/nn/tokenizer/jinja"
	"github.com/troupe-ml/troupe/textgen"
)

// Tokenizer is a model directory's tokenizer (tokenizer.json) with its chat
// template (tokenizer_config.json) and the tokens that end a turn.
type Tokenizer struct {
	*tokenizer.HF
	// ChatLimits bound each rendering of the chat template, which comes
	// with the model directory and may be hostile; zero fields take
	// jinja's defaults. Set it before the Tokenizer is shared.
	ChatLimits jinja.Limits
	tmpl       *jinja.Template
	stop       []int
}

// LoadTokenizer reads dir's tokenizer.json and tokenizer_config.json, and
// the end-of-sequence ids of config.json and generation_config.json.
func LoadTokenizer(dir string) (*Tokenizer, error) {
	tok, err := tokenizer.LoadHF(dir)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	t := &Tokenizer{HF: tok}
	if src := tok.Config().ChatTemplate; src != "" {
		if t.tmpl, err = jinja.Parse(src); err != nil {
			return nil, fmt.Errorf("hf: %s: chat_template: %w", filepath.Join(dir, "tokenizer_config.json"), err)
		}
	}
	if id, ok := tok.TokenID(tok.Config().EOSToken); ok && tok.Config().EOSToken != "" {
		t.stop = append(t.stop, id)
	}
	for _, f := range []string{"config.json", "generation_config.json"} {
		b, err := readConfigFile(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("hf: %w", err)
		}
		var g struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(b, &g); err != nil {
			return nil, fmt.Errorf("hf: %s: %w", filepath.Join(dir, f), err)
		}
		ids, err := tokenIDs(g.EOS)
		if err != nil {
			return nil, fmt.Errorf("hf: %s: eos_token_id: %w", filepath.Join(dir, f), err)
		}
		for _, id := range ids {
			if !slices.Contains(t.stop, id) {
				t.stop = append(t.stop, id)
			}
		}
	}
	return t, nil
}

// StopTokens are the ids that end a generation: the tokenizer's eos_token
// and the eos_token_id of config.json and generation_config.json (Qwen's
// <|im_end|> and <|endoftext|>, Llama 3's <|eot_id|> and
// <|end_of_text|>). Model.Generate stops only at the StopTokens of its
// options: pass these there (textgen.GenerateOptions{StopTokens:
// tok.StopTokens()}), or call Model.Chat, which does.
func (t *Tokenizer) StopTokens() []int { return slices.Clone(t.stop) }

// HasChatTemplate reports whether tokenizer_config.json has a chat
// template.
func (t *Tokenizer) HasChatTemplate() bool { return t.tmpl != nil }

// Render renders a conversation with the model's chat template, as
// transformers' apply_chat_template(tokenize=False) does; the tokenizer's
// bos and eos tokens are set from tokenizer_config.json. It is
// RenderContext without a deadline.
func (t *Tokenizer) Render(in jinja.ChatInput) (string, error) {
	return t.RenderContext(context.Background(), in)
}

// RenderContext is Render within ChatLimits, stopping when ctx (a
// request's context) is done. A render past a limit fails with an error
// that matches jinja.ErrBudget; one stopped by ctx wraps ctx.Err().
func (t *Tokenizer) RenderContext(ctx context.Context, in jinja.ChatInput) (string, error) {
	if t.tmpl == nil {
		return "", errors.New("hf: the tokenizer has no chat_template")
	}
	cfg := t.Config()
	if in.BOSToken == "" {
		in.BOSToken = cfg.BOSToken
	}
	if in.EOSToken == "" {
		in.EOSToken = cfg.EOSToken
	}
	s, err := t.tmpl.RenderChatContext(ctx, in, t.ChatLimits)
	if err != nil {
		return "", fmt.Errorf("hf: chat template: %w", err)
	}
	return s, nil
}

// Message is one chat message: a role ("system", "user", "assistant") and
// its text, as chat templates read messages.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ApplyChatTemplate renders msgs with the model's chat template and
// encodes the text, as transformers' apply_chat_template(msgs,
// add_generation_prompt=...) does: with addGenerationPrompt the ids end
// with the opening of the assistant's turn, ready for Generate.
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt bool) ([]int, error) {
	return t.ApplyChatTemplateContext(context.Background(), msgs, addGenerationPrompt)
}

// ApplyChatTemplateContext is ApplyChatTemplate within ChatLimits,
// stopping when ctx is done.
func (t *Tokenizer) ApplyChatTemplateContext(ctx context.Context, msgs []Message, addGenerationPrompt bool) ([]int, error) {
	in := jinja.ChatInput{AddGenerationPrompt: addGenerationPrompt, Messages: make([]map[string]any, len(msgs))}
	for i, m := range msgs {
		in.Messages[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	s, err := t.RenderContext(ctx, in)
	if err != nil {
		return nil, err
	}
	return t.Encode(s), nil
}

// Reply is a model's answer to a conversation.
type Reply struct {
	// Text is the answer decoded without special tokens (the stop token
	// is left out), invalid UTF-8 replaced by U+FFFD.
	Text string
	// Generation holds the sampled tokens (with the stop token, when the
	// model stopped), their log-probabilities and the finish reason.
	textgen.Generation
	// Prompt is the encoded conversation the answer continues.
	Prompt []int
}

// Chat answers each conversation with the model and adapter ad (nil: the
// base): the prompt is the chat template's (ApplyChatTemplate with a
// generation prompt), and generation stops at tok's StopTokens as well as
// at those of opts. The zero opts decode greedily.
func (m *Model) Chat(ctx context.Context, tok *Tokenizer, ad *LoRA, convs [][]Message, opts textgen.GenerateOptions) ([]Reply, error) {
	prompts := make([][]int, len(convs))
	for i, c := range convs {
		var err error
		if prompts[i], err = tok.ApplyChatTemplateContext(ctx, c, true); err != nil {
			return nil, fmt.Errorf("hf: conversation %d: %w", i, err)
		}
	}
	opts.StopTokens = append(slices.Clip(opts.StopTokens), tok.stop...)
	gens, err := m.Generate(ctx, ad, prompts, opts, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Reply, len(gens))
	for i, g := range gens {
		out[i] = Reply{Text: strings.ToValidUTF8(tok.Decode(g.Tokens, true), "\uFFFD"), Generation: g, Prompt: prompts[i]}
	}
	return out, nil
}

// Open loads a model directory's model (Load) and its tokenizer with its
// chat template and stop tokens (LoadTokenizer).
func Open(dir string) (*Model, *Tokenizer, error) {
	tok, err := LoadTokenizer(dir)
	if err != nil {
		return nil, nil, err
	}
	m, err := Load(dir)
	if err != nil {
		return nil, nil, err
	}
	return m, tok, nil
}
