package jinja

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseRender checks that no template, however malformed, makes Parse
// or Render panic, and that their errors are of the documented types.
func FuzzParseRender(f *testing.F) {
	for _, c := range engineCases(f) {
		f.Add(c.template)
	}
	if src, err := os.ReadFile(filepath.Join("testdata", "llama3.2-instruct.jinja")); err == nil {
		f.Add(string(src))
	}
	for _, s := range []string{"{%", "{{", "{#", "{{-", "-}}", "{% if %}", "{{ a[::0] }}", "{{ 'x' * 3 }}",
		"{% for %}", "{{ '\\u12 }}", "{{ {{ }} }}", "{% set %}", "{{ a.0.1 }}", "{{ 1.5.2 }}", "{{ -'a' }}"} {
		f.Add(s)
	}
	ctx := map[string]any{
		"messages": []any{
			NewMap("role", "system", "content", "S"),
			NewMap("role", "user", "content", "<think>x</think>y"),
			NewMap("role", "assistant", "content", "", "tool_calls", []any{NewMap("function", NewMap("name", "f", "arguments", NewMap("a", 1)))}),
		},
		"tools":                 []any{NewMap("type", "function", "function", NewMap("name", "f"))},
		"add_generation_prompt": true,
		"bos_token":             "<s>",
		"n":                     int64(3),
		"f":                     2.5,
	}
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(src)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse error %v is %T, want *SyntaxError", err, err)
			}
			return
		}
		_, err = tpl.RenderContext(context.Background(), ctx, Limits{MaxWorkBytes: 20000 * stepCost})
		if err != nil {
			var re *RenderError
			var ex *Exception
			var be *BudgetError
			if !errors.As(err, &re) && !errors.As(err, &ex) && !errors.As(err, &be) {
				t.Fatalf("Render error %v is %T, want *RenderError, *Exception or *BudgetError", err, err)
			}
		}
	})
}
