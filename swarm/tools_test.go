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

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/textgen"
)

// scriptModel answers every prompt with a fixed text, byte by byte (token b
// is byte b, token 256 ends the sequence); its tool template records what
// it was given.
type scriptModel struct {
	script string

	mu        sync.Mutex
	lastTools []api.Tool
	lastMsgs  []api.Message
	toolCalls int
}

func (*scriptModel) Name() string { return "script" }
func (m *scriptModel) ChatPrompt(_ context.Context, msgs []api.Message, tools []api.Tool) ([]int, error) {
	if len(tools) > 0 {
		return nil, openai.ErrNoToolTemplate
	}
	msgs = openai.FoldToolCalls(msgs)
	return m.render(msgs), nil
}
func (m *scriptModel) render(msgs []api.Message) []int {
	m.mu.Lock()
	m.lastMsgs = msgs
	m.mu.Unlock()
	var out []int
	for _, msg := range msgs {
		for _, b := range []byte(msg.Role + ": " + msg.Content + "\n") {
			out = append(out, int(b))
		}
	}
	return out
}
func (*scriptModel) TokenBytes(tok int) []byte {
	if tok < 0 || tok > 255 {
		return nil
	}
	return []byte{byte(tok)}
}
func (m *scriptModel) Generate(ctx context.Context, prompts [][]int, o textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	m.mu.Lock()
	script := m.script
	m.mu.Unlock()
	out := make([]textgen.Generation, len(prompts))
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
		for t, tok := range g.Tokens {
			ev := textgen.TokenEvent{Prompt: i, Token: tok}
			if t == len(g.Tokens)-1 {
				ev.FinishReason = g.FinishReason
			}
			if emit != nil {
				emit(ev)
			}
		}
	}
	return out, ctx.Err()
}
func (*scriptModel) Train([]rl.Sample) (rl.Stats, error) { return rl.Stats{}, nil }
func (*scriptModel) Version() int64                      { return 0 }
func (*scriptModel) Save(io.Writer) error                { return nil }
func (*scriptModel) Load(io.Reader) error                { return nil }

// toolScriptModel adds a tool chat template to scriptModel.
type toolScriptModel struct{ scriptModel }

func (m *toolScriptModel) ChatPrompt(_ context.Context, msgs []api.Message, tools []api.Tool) ([]int, error) {
	m.mu.Lock()
	m.lastTools = tools
	m.mu.Unlock()
	if len(tools) == 0 && !hasToolCalls(msgs) {
		return m.render(msgs), nil
	}
	m.mu.Lock()
	m.toolCalls++
	m.mu.Unlock()
	p, err := m.render(msgs), error(nil)
	for _, t := range tools {
		for _, b := range []byte("tool " + t.Function.Name + "\n") {
			p = append(p, int(b))
		}
	}
	return p, err
}

func hasToolCalls(msgs []api.Message) bool {
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

const weatherTools = `[{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
	{"type": "function", "function": {"name": "get_time"}}]`

func TestToolCallsOverHTTP(t *testing.T) {
	m := &toolScriptModel{scriptModel{script: "Let me check. \n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"}}
	tc := testTrainConfig(4, 4)
	tc.MaxResponseTokens = 512
	ts := startServer(t, m, tc, nil)
	ep, err := ts.cli.BeginEpisode(ctxT(t), client.BeginOptions{})
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
	var resp api.ChatResponse
	b, _ := json.Marshal(r)
	json.Unmarshal(b, &resp)
	c := resp.Choices[0]
	want := []api.ToolCall{{Type: "function", Function: api.FunctionCall{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}
	if diff := cmp.Diff(want, c.Message.ToolCalls, cmpopts.IgnoreFields(api.ToolCall{}, "ID")); diff != "" || c.FinishReason != "tool_calls" || c.Message.Content != "Let me check." {
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
	var calls []api.ToolCall
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
	ep, err := ts.cli.BeginEpisode(ctxT(t), client.BeginOptions{})
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
func streamChunks(t *testing.T, url, body string, hdr map[string]string) []api.ChatChunk {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
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
	var out []api.ChatChunk
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
		var ch api.ChatChunk
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
