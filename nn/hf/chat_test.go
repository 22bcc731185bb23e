package hf

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/nn/tokenizer/jinja"
)

// tokenizerDir writes a minimal byte-level BPE tokenizer with the given
// chat template.
func tokenizerDir(t *testing.T, template string) string {
	t.Helper()
	dir := t.TempDir()
	tj := `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`
	cj, err := json.Marshal(map[string]any{"chat_template": template, "eos_token": "a"})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tokenizer.json": []byte(tj), "tokenizer_config.json": cj} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestTokenizerRenderContext: the chat template renders within the
// tokenizer's ChatLimits and the request's context.
func TestTokenizerRenderContext(t *testing.T) {
	chat := jinja.ChatInput{Messages: []map[string]any{{"role": "user", "content": strings.Repeat("x ", 1<<19)}}}

	tok, err := LoadTokenizer(tokenizerDir(t, "{% for m in messages %}{{ m.role }}{{ eos_token }}{% endfor %}"))
	if err != nil {
		t.Fatal(err)
	}
	for _, render := range []func() (string, error){
		func() (string, error) { return tok.Render(chat) },
		func() (string, error) { return tok.RenderContext(context.Background(), chat) },
	} {
		if out, err := render(); err != nil || out != "usera" {
			t.Errorf("got %q, %v, want \"usera\"", out, err)
		}
	}

	// A million scans of the 1 MiB message.
	hostile := "{% for i in range(1000000) %}{% if 'y' in messages[0].content %}{% endif %}{% endfor %}"
	tok, err = LoadTokenizer(tokenizerDir(t, hostile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Render(chat); !errors.Is(err, jinja.ErrBudget) {
		t.Errorf("hostile template, default limits: got %v, want a budget error", err)
	}
	tok.ChatLimits = jinja.Limits{MaxWorkBytes: 10 << 20}
	_, err = tok.RenderContext(context.Background(), chat)
	var be *jinja.BudgetError
	if !errors.As(err, &be) || be.Limit != "MaxWorkBytes" || be.Value != 10<<20 {
		t.Errorf("hostile template, MaxWorkBytes 10 MiB: got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tok.ChatLimits = jinja.Limits{MaxWorkBytes: 1 << 62}
	if _, err := tok.RenderContext(ctx, chat); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled request: got %v, want context.Canceled", err)
	}
}
