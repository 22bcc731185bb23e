package jinja

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

type chatTemplate struct {
	name     string
	src      string
	bos, eos string
}

// tokenToString reads a special token of tokenizer_config.json: a string,
// null, or an AddedToken object with "content".
func tokenToString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct{ Content string }
	if json.Unmarshal(raw, &obj) == nil {
		return obj.Content
	}
	return ""
}

func loadTemplates(t *testing.T) []chatTemplate {
	root := hfRefs(t)
	var out []chatTemplate
	for _, name := range []string{"qwen3", "llama3"} {
		path := filepath.Join(root, "tokenizer-"+name, "models", "tokenizer_config.json")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			ChatTemplate string          `json:"chat_template"`
			BOS          json.RawMessage `json:"bos_token"`
			EOS          json.RawMessage `json:"eos_token"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if cfg.ChatTemplate == "" {
			t.Fatalf("%s has no chat_template", path)
		}
		out = append(out, chatTemplate{name, cfg.ChatTemplate, tokenToString(cfg.BOS), tokenToString(cfg.EOS)})
	}
	src, err := os.ReadFile(filepath.Join("testdata", "llama3.2-instruct.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, chatTemplate{"llama3.2", string(src), "<|begin_of_text|>", "<|eot_id|>"})
	return out
}

const toolsJSON = `[
 {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.",
  "parameters": {"type": "object", "properties": {
   "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}},
   "required": ["location"]}}},
 {"type": "function", "function": {"name": "search", "description": "Search the web; returns the top results.",
  "parameters": {"type": "object", "properties": {
   "query": {"type": "string", "description": "Query text (any language: 天气, météo)"},
   "limit": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3}},
   "required": ["query"]}}}
]`

type conversation struct {
	name     string
	messages string // JSON array
	tools    bool
	extra    map[string]any
}

var conversations = []conversation{
	{name: "system user assistant user", messages: `[
		{"role": "system", "content": "You are a concise assistant."},
		{"role": "user", "content": "What is 2+2?"},
		{"role": "assistant", "content": "4."},
		{"role": "user", "content": "And 3+3?"}]`},
	{name: "no system", messages: `[
		{"role": "user", "content": "Hello!"},
		{"role": "assistant", "content": "Hi. How can I help?"},
		{"role": "user", "content": "Tell me a joke."}]`},
	{name: "multilingual", messages: `[
		{"role": "system", "content": "  你是一个乐于助人的助手。Réponds en français si on te parle français.  "},
		{"role": "user", "content": "Привет! ¿Qué tal? 😀 مرحبا שלום\n"},
		{"role": "assistant", "content": "こんにちは — straße ΣΑΣ\u00a0"},
		{"role": "user", "content": "\tनमस्ते 👩‍👩‍👧 e\u0301  "}]`},
	{name: "tools", tools: true, messages: `[
		{"role": "system", "content": "Use tools when they help."},
		{"role": "user", "content": "What's the weather in Paris?"}]`},
	{name: "tools without system", tools: true, messages: `[
		{"role": "user", "content": "Search for Go generics."}]`},
	{name: "tool call with object arguments", tools: true, messages: `[
		{"role": "user", "content": "Weather in Paris in celsius?"},
		{"role": "assistant", "content": "", "tool_calls": [
			{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}}]},
		{"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 21, \"condition\": \"sunny\"}"},
		{"role": "assistant", "content": "It is 21 °C and sunny in Paris."},
		{"role": "user", "content": "Thanks!"}]`},
	{name: "tool call with string arguments", tools: true, messages: `[
		{"role": "user", "content": "Find news about Qwen3."},
		{"role": "assistant", "content": "Let me search.", "tool_calls": [
			{"id": "c2", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"Qwen3\", \"limit\": 2}"}}]},
		{"role": "tool", "tool_call_id": "c2", "content": "1. Qwen3 released\n2. Benchmarks"}]`},
	{name: "two tool calls and two tool results", tools: true, messages: `[
		{"role": "user", "content": "Weather in Paris and Tokyo?"},
		{"role": "assistant", "content": "", "tool_calls": [
			{"type": "function", "function": {"name": "get_weather", "arguments": {"location": "Paris"}}},
			{"type": "function", "function": {"name": "get_weather", "arguments": {"location": "東京"}}}]},
		{"role": "tool", "content": "18"},
		{"role": "tool", "content": "25"},
		{"role": "assistant", "content": "Paris 18, Tokyo 25."}]`},
	{name: "reasoning_content", messages: `[
		{"role": "user", "content": "Is 17 prime?"},
		{"role": "assistant", "content": "Yes.", "reasoning_content": "\n17 has no divisors but 1 and 17.\n"},
		{"role": "user", "content": "And 21?"},
		{"role": "assistant", "content": "No: 3 × 7.", "reasoning_content": "21 = 3 * 7"}]`},
	{name: "think in content", messages: `[
		{"role": "user", "content": "Capital of France?"},
		{"role": "assistant", "content": "<think>\nEasy one.\n</think>\n\nParis."},
		{"role": "user", "content": "<tool_response>\nnot a real query\n</tool_response>"},
		{"role": "assistant", "content": "<think>\nHmm.\n</think>\n\nNoted."}]`},
	{name: "enable_thinking false", extra: map[string]any{"enable_thinking": false}, messages: `[
		{"role": "user", "content": "Quick: 5*5?"}]`},
	{name: "enable_thinking true", extra: map[string]any{"enable_thinking": true}, messages: `[
		{"role": "user", "content": "Quick: 5*5?"}]`},
	{name: "date_string given", extra: map[string]any{"date_string": "01 Jan 2030"}, messages: `[
		{"role": "user", "content": "What day is it?"}]`},
	{name: "tools in system message", tools: true, extra: map[string]any{"tools_in_user_message": false}, messages: `[
		{"role": "system", "content": "Be precise."},
		{"role": "user", "content": "Weather in Oslo?"}]`},
	{name: "tools and no messages", tools: true, messages: `[]`},
	{name: "ipython message with mapping content", messages: `[
		{"role": "user", "content": "Run it."},
		{"role": "ipython", "content": {"stdout": "42\n", "exit": 0}}]`},
}

// shallowGo turns the top level of a parsed JSON object into a Go map,
// leaving nested objects as *Map so that their key order survives.
func shallowGo(m *Map) map[string]any {
	out := make(map[string]any, m.Len())
	for _, k := range m.Keys() {
		v, _ := m.Get(k)
		out[k] = v
	}
	return out
}

// deepGo turns a parsed JSON value into plain Go maps and slices.
func deepGo(v any) any {
	switch v := v.(type) {
	case *Map:
		out := make(map[string]any, v.Len())
		for _, k := range v.Keys() {
			x, _ := v.Get(k)
			out[k] = deepGo(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = deepGo(x)
		}
		return out
	}
	return v
}

func chatInput(t *testing.T, tpl chatTemplate, c conversation, agp, plainMaps bool) ChatInput {
	in := ChatInput{AddGenerationPrompt: agp, BOSToken: tpl.bos, EOSToken: tpl.eos, Extra: c.extra}
	for _, m := range mustJSON(t, c.messages).([]any) {
		if plainMaps {
			in.Messages = append(in.Messages, deepGo(m).(map[string]any))
		} else {
			in.Messages = append(in.Messages, shallowGo(m.(*Map)))
		}
	}
	if c.tools {
		for _, tool := range mustJSON(t, toolsJSON).([]any) {
			if plainMaps {
				in.Tools = append(in.Tools, deepGo(tool).(map[string]any))
			} else {
				in.Tools = append(in.Tools, shallowGo(tool.(*Map)))
			}
		}
	}
	return in
}

// TestChatTemplatesMatchJS renders every conversation with the real Qwen3,
// Llama 3 and Llama 3.2 templates, with and without the generation prompt,
// and compares the result with @huggingface/jinja's byte for byte. Where
// the JS engine fails, Go must fail too, and where Go's failure is the
// template's raise_exception, with the message JS gives.
func TestChatTemplatesMatchJS(t *testing.T) {
	pinClock(t, testNow)
	templates := loadTemplates(t)
	type run struct {
		name string
		out  string
		err  error
	}
	var runs []run
	var js []jsCase
	for _, tpl := range templates {
		parsed, err := Parse(tpl.src)
		if err != nil {
			t.Fatalf("%s: %v", tpl.name, err)
		}
		for _, c := range conversations {
			for _, agp := range []bool{false, true} {
				for _, plain := range []bool{false, true} {
					in := chatInput(t, tpl, c, agp, plain)
					out, err := parsed.RenderChat(in)
					runs = append(runs, run{fmt.Sprintf("%s/%s/agp=%v/plainMaps=%v", tpl.name, c.name, agp, plain), out, err})
					ctx, order := in.context()
					js = append(js, jsCase{template: tpl.src, ctx: ctx, order: order})
				}
			}
		}
	}
	res := jsRenderAll(t, testNow, js)
	rendered := 0
	for i, r := range runs {
		j := res[i]
		switch {
		case j.Error != nil:
			var ex *Exception
			switch {
			case r.err == nil:
				t.Errorf("%s: JS failed (%s), Go rendered %q", r.name, *j.Error, r.out)
			case errors.As(r.err, &ex) && ex.Message != *j.Error:
				t.Errorf("%s: Go raised %q, JS failed with %q", r.name, ex.Message, *j.Error)
			}
		case r.err != nil:
			t.Errorf("%s: Go failed (%v), JS rendered %q", r.name, r.err, *j.Output)
		case r.out != *j.Output:
			t.Errorf("%s: Go and JS differ\n go: %q\n js: %q", r.name, r.out, *j.Output)
		default:
			rendered++
		}
	}
	if rendered < len(runs)*3/4 {
		t.Errorf("only %d of %d renders succeeded; the conversations should mostly be valid", rendered, len(runs))
	}
}

// TestQwen3Shapes checks, independently of the JS engine, the parts of the
// Qwen3 prompt that the conversations are meant to exercise, so that a
// template branch that silently stopped firing would show.
func TestQwen3Shapes(t *testing.T) {
	var qwen chatTemplate
	for _, tpl := range loadTemplates(t) {
		if tpl.name == "qwen3" {
			qwen = tpl
		}
	}
	find := func(name string) conversation {
		for _, c := range conversations {
			if c.name == name {
				return c
			}
		}
		t.Fatalf("no conversation %q", name)
		return conversation{}
	}
	for _, c := range []struct {
		conv string
		agp  bool
		want []string
	}{
		{"tools", true, []string{`{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.", "parameters": {"type": "object", "properties": {"location":`, "<|im_start|>assistant\n"}},
		{"tool call with object arguments", false, []string{`{"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}`, "<|im_start|>user\n<tool_response>\n{\"temperature\": 21"}},
		{"tool call with string arguments", false, []string{`"arguments": {"query": "Qwen3", "limit": 2}}`}},
		{"reasoning_content", false, []string{"<|im_start|>assistant\nYes.<|im_end|>", "<think>\n21 = 3 * 7\n</think>\n\nNo: 3 × 7."}},
		{"enable_thinking false", true, []string{"<|im_start|>assistant\n<think>\n\n</think>\n\n"}},
	} {
		out, err := RenderChat(qwen.src, chatInput(t, qwen, find(c.conv), c.agp, false))
		if err != nil {
			t.Errorf("%s: %v", c.conv, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", c.conv, w, out)
			}
		}
	}
}

func TestLlamaDate(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "llama3.2-instruct.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	pinClock(t, testNow)
	out, err := RenderChat(string(src), ChatInput{Messages: []map[string]any{{"role": "user", "content": "hi"}}, BOSToken: "<|begin_of_text|>"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Today Date: 07 Sep 2025\n"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	_, err = RenderChat(string(src), ChatInput{Tools: []map[string]any{{"type": "function"}}})
	var ex *Exception
	if !errors.As(err, &ex) || !strings.Contains(ex.Message, "no first user message") {
		t.Errorf("tools without messages: got %v, want the template's exception", err)
	}
}

// randomConversation draws a conversation from roles, contents (scripts,
// whitespace, <think> blocks, tool-response wrappers) and tool calls, with
// a seeded generator.
func randomConversation(r *rand.Rand) ChatInput {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	content := func() string {
		var b strings.Builder
		for k := 1 + r.IntN(3); k > 0; k-- {
			b.WriteString(pick("Hello", " 你好 ", "\n", "  ", "<think>\nplan\n</think>\n\n", "</think>", "<think>",
				"مرحبا", "😀", "\t", "answer", "<tool_response>", "</tool_response>", "{\"a\": 1}", "é", ""))
		}
		return b.String()
	}
	in := ChatInput{AddGenerationPrompt: r.IntN(2) == 0, Extra: map[string]any{}}
	if r.IntN(3) == 0 {
		in.Extra["enable_thinking"] = r.IntN(2) == 0
	}
	if r.IntN(3) == 0 {
		in.Tools = []map[string]any{{"type": "function", "function": NewMap("name", "f", "description", content(),
			"parameters", NewMap("type", "object", "properties", NewMap("x", NewMap("type", "string"))))}}
	}
	if r.IntN(2) == 0 {
		in.Messages = append(in.Messages, map[string]any{"role": "system", "content": content()})
	}
	for k := 1 + r.IntN(6); k > 0; k-- {
		m := map[string]any{"role": pick("user", "user", "assistant", "assistant", "tool"), "content": content()}
		if m["role"] == "assistant" {
			if r.IntN(3) == 0 {
				m["reasoning_content"] = content()
			}
			if r.IntN(3) == 0 {
				var args any = NewMap("x", content(), "n", int64(r.IntN(5)))
				if r.IntN(2) == 0 {
					args = `{"x": "` + pick("a", "b") + `"}`
				}
				m["tool_calls"] = []any{NewMap("type", "function", "function", NewMap("name", "f", "arguments", args))}
			}
		}
		in.Messages = append(in.Messages, m)
	}
	return in
}

// TestRandomConversationsMatchJS renders seeded random conversations with
// the real templates in both engines.
func TestRandomConversationsMatchJS(t *testing.T) {
	pinClock(t, testNow)
	templates := loadTemplates(t)
	seed := uint64(5)
	if s, err := strconv.ParseUint(os.Getenv("JINJA_RANDOM_SEED"), 10, 64); err == nil {
		seed = s
	}
	r := rand.New(rand.NewPCG(seed, 6))
	var js []jsCase
	type run struct {
		out string
		err error
	}
	var runs []run
	parsed := make([]*Template, len(templates))
	for i, tpl := range templates {
		var err error
		if parsed[i], err = Parse(tpl.src); err != nil {
			t.Fatalf("%s: %v", tpl.name, err)
		}
	}
	for i := 0; i < 200; i++ {
		in := randomConversation(r)
		for k, tpl := range templates {
			in.BOSToken, in.EOSToken = tpl.bos, tpl.eos
			out, err := parsed[k].RenderChat(in)
			runs = append(runs, run{out, err})
			ctx, order := in.context()
			js = append(js, jsCase{template: tpl.src, ctx: ctx, order: order})
		}
	}
	res := jsRenderAll(t, testNow, js)
	bad, rendered := 0, 0
	for i, j := range res {
		name := fmt.Sprintf("conversation %d with %s", i/len(templates), templates[i%len(templates)].name)
		switch {
		case j.Error != nil && runs[i].err == nil:
			t.Errorf("%s: JS failed (%s), Go rendered %q", name, *j.Error, runs[i].out)
		case j.Error == nil && runs[i].err != nil:
			t.Errorf("%s: Go failed (%v), JS rendered %q", name, runs[i].err, *j.Output)
		case j.Error == nil && *j.Output != runs[i].out:
			t.Errorf("%s: Go and JS differ\n go: %q\n js: %q", name, runs[i].out, *j.Output)
		default:
			if j.Error == nil {
				rendered++
			}
			continue
		}
		if bad++; bad > 10 {
			t.Fatal("too many differences")
		}
	}
	if rendered < len(runs)/2 {
		t.Errorf("only %d of %d renders succeeded", rendered, len(runs))
	}
	t.Logf("%d of %d renders succeeded (the rest failed in both engines)", rendered, len(runs))
}
