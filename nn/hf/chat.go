package hf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/nn/tokenizer/jinja"
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
// <|end_of_text|>).
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
