package swarm

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/troupe-ml/troupe/rl"
)

// scriptModel answers every prompt with a fixed text, byte by byte (token b
// is byte b, token 256 ends the sequence); its tool template records what
// it was given.
type scriptModel struct {
	script string

	mu        sync.Mutex
	lastTools []Tool
	lastMsgs  []Message
	toolCalls int
}

func (*scriptModel) Name() string { return "script" }
func (m *scriptModel) ChatPrompt(msgs []Message) ([]int, error) {
	m.mu.Lock()
	m.lastMsgs = msgs
	m.mu.Unlock()
	var out []int
	for _, msg := range msgs {
		for _, b := range []byte(msg.Role + ": " + msg.Content + "\n") {
			out = append(out, int(b))
		}
	}
	return out, nil
}
func (*scriptModel) TokenBytes(tok int) []byte {
	if tok < 0 || tok > 255 {
		return nil
	}
	return []byte{byte(tok)}
}
func (m *scriptModel) Generate(ctx context.Context, prompts [][]int, o GenerateOptions) ([]Generation, error) {
	m.mu.Lock()
	script := m.script
	m.mu.Unlock()
	out := make([]Generation, len(prompts))
	for i := range out {
		g := &out[i]
		g.FinishReason = "stop"
		bySequence := false
		for _, b := range []byte(script) {
			if len(g.Tokens) == o.MaxTokens {
				g.FinishReason = "length"
				break
			}
			g.Tokens = append(g.Tokens, int(b))
			if o.Stop != nil && o.Stop(i, g.Tokens) {
				bySequence = true // ends on the stop sequence's last token, as a sampler does
				break
			}
		}
		if g.FinishReason == "stop" && !bySequence && len(g.Tokens) < o.MaxTokens {
			g.Tokens = append(g.Tokens, 256)
		}
		g.LogProbs = make([]float32, len(g.Tokens))
	}
	return out, ctx.Err()
}
func (*scriptModel) Train([]rl.Sample) (rl.Stats, error) { return rl.Stats{}, nil }
func (*scriptModel) Version() int64                      { return 0 }
func (*scriptModel) Save(io.Writer) error                { return nil }
func (*scriptModel) Load(io.Reader) error                { return nil }

// toolScriptModel adds a tool chat template to scriptModel.
type toolScriptModel struct{ scriptModel }

func (m *toolScriptModel) ChatPromptTools(msgs []Message, tools []Tool) ([]int, error) {
	m.mu.Lock()
	m.lastTools, m.toolCalls = tools, m.toolCalls+1
	m.mu.Unlock()
	p, err := m.ChatPrompt(msgs)
	for _, t := range tools {
		for _, b := range []byte("tool " + t.Function.Name + "\n") {
			p = append(p, int(b))
		}
	}
	return p, err
}

const weatherTools = `[{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
	{"type": "function", "function": {"name": "get_time"}}]`

func TestParseToolCalls(t *testing.T) {
	tools := []Tool{{Type: "function", Function: ToolFunction{Name: "f"}}, {Type: "function", Function: ToolFunction{Name: "g"}}}
	for _, tt := range []struct {
		text, content string
		calls         []ToolCallFunction
	}{
		{"plain answer", "plain answer", nil},
		{"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", "", []ToolCallFunction{{"f", `{"a":1}`}}},
		{"Sure.\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>\n<tool_call>{\"name\": \"g\"}</tool_call>\n",
			"Sure.", []ToolCallFunction{{"f", `{"a":[1,2]}`}, {"g", `{}`}}},
		// anything that does not fit stays text
		{"x <tool_call>{\"name\": \"f\", \"arguments\": {}}", "x <tool_call>{\"name\": \"f\", \"arguments\": {}}", nil},                   // unterminated
		{"<tool_call>{\"name\": \"h\"}</tool_call>", "<tool_call>{\"name\": \"h\"}</tool_call>", nil},                                     // undeclared
		{"<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>", "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>", nil}, // not an object
		{"<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", nil},
		{"<tool_call>{\"name\": \"f\"}</tool_call> and more", "<tool_call>{\"name\": \"f\"}</tool_call> and more", nil}, // trailing text
		{"<tool_call>{\"name\": \"f\"} {}</tool_call>", "<tool_call>{\"name\": \"f\"} {}</tool_call>", nil},
	} {
		content, calls, ok := parseToolCalls(tt.text, tools)
		if ok != (tt.calls != nil) || content != tt.content {
			t.Errorf("%q: content %q ok %v, want %q ok %v", tt.text, content, ok, tt.content, tt.calls != nil)
		}
		var got []ToolCallFunction
		for _, c := range calls {
			if c.Type != "function" || !strings.HasPrefix(c.ID, "call_") {
				t.Errorf("%q: call %+v", tt.text, c)
			}
			got = append(got, c.Function)
		}
		if diff := cmp.Diff(tt.calls, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%q: calls (-want +got):\n%s", tt.text, diff)
		}
	}
}

// TestToolCallsOverHTTP: tools reach the model's tool template, calls come
// back as tool_calls with finish_reason "tool_calls", streamed the same
// way; tool messages are accepted; what cannot be honoured gets 400.
func TestToolCallsOverHTTP(t *testing.T) {
	m := &toolScriptModel{scriptModel{script: "Let me check. \n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"}}
	tc := testTrainConfig(4, 4)
	tc.MaxResponseTokens = 512
	ts := startServer(t, m, tc, nil)
	ep, err := ts.cli.BeginEpisode(ctxT(t), BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"Authorization": "Bearer " + ep.APIKey}
	url := ep.BaseURL + "/chat/completions"
	req := `{"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": ` + weatherTools + `, "max_tokens": 400}`
	code, r := rawPost(t, url, req, hdr)
	if code != 200 {
		t.Fatalf("chat with tools: %d %v", code, r)
	}
	var resp ChatResponse
	b, _ := json.Marshal(r)
	json.Unmarshal(b, &resp)
	c := resp.Choices[0]
	want := []ChatToolCall{{Type: "function", Function: ChatToolCallFunction{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}
	if diff := cmp.Diff(want, c.Message.ToolCalls, cmpopts.IgnoreFields(ChatToolCall{}, "ID")); diff != "" || c.FinishReason != "tool_calls" || c.Message.Content != "Let me check." {
		t.Fatalf("choice %+v (finish %q), tool calls (-want +got):\n%s", c.Message, c.FinishReason, diff)
	}
	m.mu.Lock()
	if len(m.lastTools) != 2 || m.lastTools[0].Function.Name != "get_weather" || !json.Valid(m.lastTools[0].Function.Parameters) || m.lastTools[1].Function.Parameters != nil {
		t.Errorf("tools given to the template: %+v", m.lastTools)
	}
	m.mu.Unlock()

	// streamed: the same content and calls
	chunks := streamChunks(t, url, strings.Replace(req, `"max_tokens": 400`, `"max_tokens": 400, "stream": true`, 1), hdr)
	var content strings.Builder
	var calls []ChatToolCall
	finish := ""
	for _, ch := range chunks {
		for _, cc := range ch.Choices {
			if cc.Delta.Content != nil {
				content.WriteString(*cc.Delta.Content)
			}
			calls = append(calls, cc.Delta.ToolCalls...)
			if cc.FinishReason != nil {
				finish = *cc.FinishReason
			}
		}
	}
	if content.String() != "Let me check." || finish != "tool_calls" || len(calls) != 1 || calls[0].Index == nil || *calls[0].Index != 0 ||
		calls[0].Function != want[0].Function || calls[0].ID == "" {
		t.Fatalf("streamed: content %q finish %q calls %+v", content.String(), finish, calls)
	}

	// the conversation goes on with the call and its result
	next := `{"messages": [{"role": "user", "content": "Weather in Paris?"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
		{"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}], "tools": ` + weatherTools + `, "max_tokens": 400}`
	if code, r := rawPost(t, url, next, hdr); code != 200 {
		t.Fatalf("tool result turn: %d %v", code, r)
	}
	m.mu.Lock()
	if got := m.lastMsgs; len(got) != 3 || len(got[1].ToolCalls) != 1 || got[1].ToolCalls[0].Function.Name != "get_weather" || got[2].ToolCallID != "call_1" {
		t.Errorf("messages given to the template: %+v", got)
	}
	m.mu.Unlock()

	// tool_choice none: tools not rendered, markup not parsed
	noneReq := strings.Replace(req, `"max_tokens": 400`, `"max_tokens": 400, "tool_choice": "none"`, 1)
	if code, r := rawPost(t, url, noneReq, hdr); code != 200 || !strings.Contains(fmtAny(r), `\u003ctool_call\u003e`) {
		t.Fatalf("tool_choice none: %d %v", code, r)
	}
	m.mu.Lock()
	if m.lastTools != nil {
		t.Errorf("tool_choice none rendered tools %+v", m.lastTools)
	}
	m.mu.Unlock()

	for body, field := range map[string]string{
		strings.Replace(req, `"max_tokens": 400`, `"tool_choice": "required"`, 1):                                                       "tool_choice",
		strings.Replace(req, `"max_tokens": 400`, `"tool_choice": {"type": "function", "function": {"name": "get_time"}}`, 1):           "tool_choice",
		strings.Replace(req, `"max_tokens": 400`, `"tool_choice": "sometimes"`, 1):                                                      "tool_choice",
		`{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}`:                                  "response_format",
		`{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {}}}`:               "response_format",
		`{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]}`:                "tools[0].function.name",
		`{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval"}]}`:                                            "tools[0].type",
		`{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a", "parameters": 3}}]}`: "tools[0].function.parameters",
		`{"messages": [{"role": "tool", "content": "x"}]}`:                                                                              "messages[0].tool_call_id",
		`{"messages": [{"role": "user", "content": "x", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f"}}]}]}`:  "messages[0].tool_calls",
		`{"messages": [{"role": "assistant", "content": "x", "tool_calls": [{"id": "", "type": "function"}]}]}`:                         "messages[0].tool_calls[0].id",
	} {
		code, r := rawPost(t, url, body, hdr)
		e, _ := r["error"].(map[string]any)
		if code != 400 || e == nil || !strings.Contains(fmtAny(e), field) {
			t.Errorf("%s: %d %v, want 400 naming %s", body, code, r, field)
		}
	}
	if code, r := rawPost(t, url, `{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "text"}, "max_tokens": 400}`, hdr); code != 200 {
		t.Errorf("response_format text: %d %v", code, r)
	}
}

// TestToolsNeedToolTemplate: a model without ToolChatPrompter refuses
// tools with 400 but accepts earlier tool calls, folded into the content.
func TestToolsNeedToolTemplate(t *testing.T) {
	m := &scriptModel{script: "ok"}
	ts := startServer(t, m, testTrainConfig(4, 4), nil)
	ep, err := ts.cli.BeginEpisode(ctxT(t), BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"Authorization": "Bearer " + ep.APIKey}
	url := ep.BaseURL + "/chat/completions"
	code, r := rawPost(t, url, `{"messages": [{"role": "user", "content": "x"}], "tools": `+weatherTools+`}`, hdr)
	if e, _ := r["error"].(map[string]any); code != 400 || e == nil || e["param"] != "tools" {
		t.Fatalf("tools on a model without a tool template: %d %v", code, r)
	}
	hist := `{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
		{"role": "tool", "tool_call_id": "c1", "content": "noon"}], "max_tokens": 10}`
	if code, r := rawPost(t, url, hist, hdr); code != 200 {
		t.Fatalf("tool history on a plain model: %d %v", code, r)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if got := m.lastMsgs[0].Content; got != "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>" {
		t.Fatalf("folded assistant content %q", got)
	}
}

// streamChunks posts a streaming request and decodes its chunks up to
// [DONE].
func streamChunks(t *testing.T, url, body string, hdr map[string]string) []ChatChunk {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	var out []ChatChunk
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch ChatChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		out = append(out, ch)
	}
	if !done {
		t.Fatal("stream without [DONE]")
	}
	return out
}
