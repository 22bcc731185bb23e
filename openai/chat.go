package openai

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/textgen"
)

// chatMessageIn and chatRequestIn are what a request's JSON is parsed
// into: pointers tell a missing field from a zero one, so that a 400 names
// it.

type chatMessageIn struct {
	Role       *string         `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       *string         `json:"name"`
	ToolCalls  []api.ToolCall  `json:"tool_calls"`
	ToolCallID *string         `json:"tool_call_id"`
}

// samplingIn are the fields chat and text completions share.
type samplingIn struct {
	Model               *string         `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	N                   *int            `json:"n"`
	Stop                json.RawMessage `json:"stop"`
	Seed                *int64          `json:"seed"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatRequestIn struct {
	samplingIn
	Messages    *[]chatMessageIn `json:"messages"`
	Logprobs    *bool            `json:"logprobs"`
	TopLogprobs *int             `json:"top_logprobs"`
	// AssistantPrefix is troupe's extension: the answer's forced start.
	AssistantPrefix *string `json:"assistant_prefix"`
	// AssistantContext is troupe's extension: answer text given before
	// the forced prefix, part of the recorded sample's prompt.
	AssistantContext *string         `json:"assistant_context"`
	Tools            []api.Tool      `json:"tools"`
	ToolChoice       json.RawMessage `json:"tool_choice"`
	ResponseFormat   json.RawMessage `json:"response_format"`
	// ParallelToolCalls is accepted; every complete call of the answer is
	// returned (the server does not constrain sampling).
	ParallelToolCalls *bool `json:"parallel_tool_calls"`
}

var validRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

// parseMessages flattens OpenAI messages to text.
func parseMessages(in []chatMessageIn) ([]api.Message, *httpx.Error) {
	if len(in) == 0 {
		return nil, httpx.BadRequest("messages", "must contain at least one message")
	}
	out := make([]api.Message, len(in))
	for i, m := range in {
		f := "messages[" + strconv.Itoa(i) + "]"
		if m.Role == nil {
			return nil, httpx.BadRequest(f+".role", "missing")
		}
		if !validRoles[*m.Role] {
			return nil, httpx.BadRequest(f+".role", "unknown role %q", *m.Role)
		}
		out[i].Role = *m.Role
		if m.Name != nil {
			out[i].Name = *m.Name
		}
		if len(m.ToolCalls) > 0 && *m.Role != "assistant" {
			return nil, httpx.BadRequest(f+".tool_calls", "only assistant messages carry tool calls")
		}
		for j, tc := range m.ToolCalls {
			tf := f + ".tool_calls[" + strconv.Itoa(j) + "]"
			switch {
			case tc.ID == "":
				return nil, httpx.BadRequest(tf+".id", "missing")
			case tc.Type != "function":
				return nil, httpx.BadRequest(tf+".type", "must be \"function\", got %q", tc.Type)
			case tc.Function.Name == "":
				return nil, httpx.BadRequest(tf+".function.name", "missing")
			}
			out[i].ToolCalls = append(out[i].ToolCalls, api.ToolCall{ID: tc.ID, Type: tc.Type,
				Function: api.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
		}
		if m.ToolCallID != nil {
			if *m.Role != "tool" {
				return nil, httpx.BadRequest(f+".tool_call_id", "only tool messages answer a tool call")
			}
			out[i].ToolCallID = *m.ToolCallID
		}
		if *m.Role == "tool" && out[i].ToolCallID == "" {
			return nil, httpx.BadRequest(f+".tool_call_id", "missing: a tool message answers the tool call of that id")
		}
		c := bytes.TrimSpace(m.Content)
		switch {
		case len(c) == 0 || string(c) == "null":
		case c[0] == '"':
			if err := json.Unmarshal(c, &out[i].Content); err != nil {
				return nil, httpx.BadRequest(f+".content", "invalid string")
			}
		case c[0] == '[':
			var parts []struct {
				Type *string `json:"type"`
				Text *string `json:"text"`
			}
			if err := json.Unmarshal(c, &parts); err != nil {
				return nil, httpx.BadRequest(f+".content", "expected a string or an array of content parts")
			}
			var sb strings.Builder
			for j, p := range parts {
				pf := f + ".content[" + strconv.Itoa(j) + "]"
				if p.Type == nil {
					return nil, httpx.BadRequest(pf+".type", "missing")
				}
				if *p.Type != "text" {
					return nil, httpx.BadRequest(pf+".type", "unsupported content part type %q (only text)", *p.Type)
				}
				if p.Text == nil {
					return nil, httpx.BadRequest(pf+".text", "missing")
				}
				sb.WriteString(*p.Text)
			}
			out[i].Content = sb.String()
		default:
			return nil, httpx.BadRequest(f+".content", "expected a string or an array of content parts")
		}
	}
	return out, nil
}

func parseStop(raw json.RawMessage) ([]string, *httpx.Error) {
	c := bytes.TrimSpace(raw)
	if len(c) == 0 || string(c) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(c, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(c, &many); err != nil {
		return nil, httpx.BadRequest("stop", "expected a string or an array of strings")
	}
	if len(many) > 4 {
		return nil, httpx.BadRequest("stop", "at most 4 stop sequences, got %d", len(many))
	}
	out := many[:0]
	for _, s := range many {
		if len(s) > 256 {
			return nil, httpx.BadRequest("stop", "stop sequence longer than 256 bytes")
		}
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// sampling are the parsed fields chat and text completions share.
type sampling struct {
	maxTokens   int
	temperature float64
	topP        float64
	n           int
	stop        []string
	seed        *int64
	stream      bool
	usage       bool
	model       string
}

// options are the generation options of the request's parameters; forced
// tokens count in max_tokens.
func (p *sampling) options(forced int, logprobs int) textgen.GenerateOptions {
	o := textgen.GenerateOptions{MaxTokens: p.maxTokens - forced, Temperature: p.temperature, TopP: p.topP, Seed: rand.Uint64(), TopLogProbs: logprobs}
	if p.seed != nil {
		o.Seed = uint64(*p.seed)
	}
	return o
}

type chatParams struct {
	sampling
	msgs        []api.Message
	logprobs    bool
	topLogprobs int
	prefix      *string // assistant_prefix
	context     *string // assistant_context
	tools       []api.Tool
	toolChoice  string // "auto" or "none"
}

// parseTools says whether tool calls are parsed from the answers.
func (p *chatParams) parseTools() bool { return len(p.tools) > 0 && p.toolChoice != "none" }

// maxTools bounds the tools of one request.
const maxTools = 128

// parseToolsRequest validates tools, tool_choice and response_format.
func parseToolsRequest(req *chatRequestIn, p *chatParams) *httpx.Error {
	if len(req.Tools) > maxTools {
		return httpx.BadRequest("tools", "at most %d tools, got %d", maxTools, len(req.Tools))
	}
	seen := map[string]bool{}
	for i, t := range req.Tools {
		f := "tools[" + strconv.Itoa(i) + "]"
		if t.Type != "function" {
			return httpx.BadRequest(f+".type", "must be \"function\", got %q", t.Type)
		}
		name := t.Function.Name
		if name == "" || len(name) > 64 || strings.IndexFunc(name, func(r rune) bool {
			return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		}) >= 0 {
			return httpx.BadRequest(f+".function.name", "must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -, got %q", name)
		}
		if seen[name] {
			return httpx.BadRequest(f+".function.name", "duplicate tool %q", name)
		}
		seen[name] = true
		params := bytes.TrimSpace(t.Function.Parameters)
		if len(params) > 0 && string(params) != "null" {
			var obj map[string]json.RawMessage
			if json.Unmarshal(params, &obj) != nil {
				return httpx.BadRequest(f+".function.parameters", "must be a JSON Schema object")
			}
		} else {
			params = nil
		}
		p.tools = append(p.tools, api.Tool{Type: t.Type, Function: api.Function{Name: name, Description: t.Function.Description, Parameters: params}})
	}
	p.toolChoice = "none"
	if len(p.tools) > 0 {
		p.toolChoice = "auto"
	}
	if c := bytes.TrimSpace(req.ToolChoice); len(c) > 0 && string(c) != "null" {
		var choice string
		if json.Unmarshal(c, &choice) != nil {
			// {"type": "function", "function": {"name": ...}}
			return httpx.BadRequest("tool_choice", "forcing a named function is not supported: this server does not constrain sampling (use \"auto\" or \"none\")")
		}
		switch choice {
		case "none", "auto":
			p.toolChoice = choice
		case "required":
			return httpx.BadRequest("tool_choice", "\"required\" is not supported: this server does not constrain sampling (use \"auto\" or \"none\")")
		default:
			return httpx.BadRequest("tool_choice", "unknown value %q (want \"auto\" or \"none\")", choice)
		}
	}
	if c := bytes.TrimSpace(req.ResponseFormat); len(c) > 0 && string(c) != "null" {
		var rf struct {
			Type *string `json:"type"`
		}
		if json.Unmarshal(c, &rf) != nil || rf.Type == nil {
			return httpx.BadRequest("response_format", "expected an object with a type")
		}
		switch *rf.Type {
		case "text":
		case "json_object", "json_schema":
			return httpx.BadRequest("response_format", "type %q is not supported: this server does not constrain sampling to JSON; ask for JSON in the prompt and validate the answer (for example in the reward)", *rf.Type)
		default:
			return httpx.BadRequest("response_format", "unknown type %q", *rf.Type)
		}
	}
	return nil
}

// Hermes/Qwen tool-call markup: the model answers a call as
// <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>.
const (
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
)

// parseToolCalls splits an answer into its text and its tool calls: the
// text is what precedes the first <tool_call> (trailing white space
// removed), and every later non-blank part must be a complete call of a
// declared tool whose JSON has a "name" and an object of "arguments". When
// anything does not fit, ok is false and the answer stays plain text, so
// nothing the model wrote is lost.
func parseToolCalls(text string, tools []api.Tool) (content string, calls []api.ToolCall, ok bool) {
	i := strings.Index(text, toolCallOpen)
	if i < 0 {
		return text, nil, false
	}
	declared := map[string]bool{}
	for _, t := range tools {
		declared[t.Function.Name] = true
	}
	rest := text[i:]
	for {
		rest = strings.TrimLeft(rest, " \t\r\n")
		if rest == "" {
			break
		}
		body, ok := strings.CutPrefix(rest, toolCallOpen)
		if !ok {
			return text, nil, false
		}
		end := strings.Index(body, toolCallClose)
		if end < 0 {
			return text, nil, false
		}
		var c struct {
			Name      *string         `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		dec := json.NewDecoder(strings.NewReader(body[:end]))
		if dec.Decode(&c) != nil || dec.More() || c.Name == nil || !declared[*c.Name] {
			return text, nil, false
		}
		args := bytes.TrimSpace(c.Arguments)
		if len(args) == 0 || string(args) == "null" {
			args = []byte("{}")
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(args, &obj) != nil {
			return text, nil, false
		}
		var compact bytes.Buffer
		if json.Compact(&compact, args) != nil {
			return text, nil, false
		}
		calls = append(calls, api.ToolCall{ID: "call_" + randHex(12), Type: "function", Function: api.FunctionCall{Name: *c.Name, Arguments: compact.String()}})
		rest = body[end+len(toolCallClose):]
	}
	return strings.TrimRight(text[:i], " \t\r\n"), calls, true
}

// indexCalls copies tool calls; with indexed, each carries its index
// (streamed deltas).
func indexCalls(calls []api.ToolCall, indexed bool) []api.ToolCall {
	out := make([]api.ToolCall, len(calls))
	for k, c := range calls {
		out[k] = api.ToolCall{ID: c.ID, Type: c.Type, Function: api.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}}
		if indexed {
			out[k].Index = &k
		}
	}
	return out
}

// FoldToolCalls renders the tool calls of assistant messages into their
// content in the Hermes form, for a model without a tool chat template: the
// prompt then shows the calls as the model would have written them instead
// of dropping them.
func FoldToolCalls(msgs []api.Message) []api.Message {
	out := slices.Clone(msgs)
	for i, m := range out {
		if len(m.ToolCalls) == 0 {
			continue
		}
		var sb strings.Builder
		sb.WriteString(m.Content)
		for _, c := range m.ToolCalls {
			args := c.Function.Arguments
			if !json.Valid([]byte(args)) {
				b, _ := json.Marshal(args)
				args = string(b)
			}
			name, _ := json.Marshal(c.Function.Name)
			if sb.Len() > 0 {
				sb.WriteString("\n")
			}
			fmt.Fprintf(&sb, "%s\n{\"name\": %s, \"arguments\": %s}\n%s", toolCallOpen, name, args, toolCallClose)
		}
		out[i].Content, out[i].ToolCalls = sb.String(), nil
	}
	return out
}

// chatPrompt renders the request's messages (and tools) with the model's
// chat template.
func chatPrompt(ctx context.Context, m Model, p *chatParams) ([]int, *httpx.Error) {
	var tools []api.Tool
	if p.toolChoice != "none" {
		tools = p.tools
	}
	prompt, err := m.ChatPrompt(ctx, p.msgs, tools)
	switch {
	case errors.Is(err, ErrNoToolTemplate):
		return nil, httpx.BadRequest("tools", "model %q has no chat template for tools; send the request without tools", m.Name())
	case errors.Is(err, ErrTemplateBudget):
		return nil, &httpx.Error{Status: http.StatusBadRequest, Param: "messages", Code: "template_budget", Msg: err.Error()}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return nil, &httpx.Error{Status: http.StatusServiceUnavailable, Msg: "rendering the chat template: " + err.Error(), Code: "template_timeout"}
	case err != nil:
		return nil, httpx.BadRequest("messages", "%v", err)
	}
	return prompt, nil
}

// parseSampling checks the fields chat and text completions share; maxResp
// bounds max_tokens (and is its default with n = 1).
func (h *Handler) parseSampling(req *samplingIn, maxResp int) (sampling, *httpx.Error) {
	p := sampling{temperature: 1, topP: 1, n: 1, maxTokens: maxResp}
	if req.Model != nil {
		p.model = *req.Model
	}
	if req.Temperature != nil {
		if !(*req.Temperature >= 0 && *req.Temperature <= 2) {
			return p, httpx.BadRequest("temperature", "must be in [0, 2], got %v", *req.Temperature)
		}
		p.temperature = *req.Temperature
	}
	if req.TopP != nil {
		if !(*req.TopP > 0 && *req.TopP <= 1) {
			return p, httpx.BadRequest("top_p", "must be in (0, 1], got %v", *req.TopP)
		}
		p.topP = *req.TopP
	}
	if req.N != nil {
		if *req.N < 1 || *req.N > h.cfg.MaxN {
			return p, httpx.BadRequest("n", "must be in [1, %d], got %d", h.cfg.MaxN, *req.N)
		}
		p.n = *req.N
	}
	// n × max_tokens is the sampling work of the request: bounded.
	mt := req.MaxCompletionTokens
	field := "max_completion_tokens"
	if mt == nil {
		mt, field = req.MaxTokens, "max_tokens"
	}
	perChoice := max(1, h.cfg.MaxRequestTokens/p.n)
	if mt != nil {
		if *mt < 1 || *mt > maxResp {
			return p, httpx.BadRequest(field, "must be in [1, %d], got %d", maxResp, *mt)
		}
		if *mt > perChoice {
			return p, httpx.BadRequest(field, "n × %s = %d × %d exceeds this server's limit of %d sampled tokens per request", field, p.n, *mt, h.cfg.MaxRequestTokens)
		}
		p.maxTokens = *mt
	} else {
		p.maxTokens = min(maxResp, perChoice)
	}
	var e *httpx.Error
	if p.stop, e = parseStop(req.Stop); e != nil {
		return p, e
	}
	p.seed = req.Seed
	if req.Stream != nil {
		p.stream = *req.Stream
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage != nil {
		if !p.stream {
			return p, httpx.BadRequest("stream_options", "only allowed when stream is true")
		}
		p.usage = *req.StreamOptions.IncludeUsage
	}
	return p, nil
}

func (h *Handler) parseChat(body []byte, maxResp int) (*chatParams, *httpx.Error) {
	var req chatRequestIn
	if e := httpx.DecodeJSON(body, &req); e != nil {
		return nil, e
	}
	sp, e := h.parseSampling(&req.samplingIn, maxResp)
	if e != nil {
		return nil, e
	}
	p := &chatParams{sampling: sp}
	if req.Messages == nil {
		return nil, httpx.BadRequest("messages", "missing")
	}
	if p.msgs, e = parseMessages(*req.Messages); e != nil {
		return nil, e
	}
	if e = parseToolsRequest(&req, p); e != nil {
		return nil, e
	}
	if req.Logprobs != nil {
		p.logprobs = *req.Logprobs
	}
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > 20 {
			return nil, httpx.BadRequest("top_logprobs", "must be in [0, 20], got %d", *req.TopLogprobs)
		}
		if !p.logprobs && *req.TopLogprobs > 0 {
			return nil, httpx.BadRequest("top_logprobs", "requires logprobs to be true")
		}
		p.topLogprobs = *req.TopLogprobs
	}
	if req.AssistantPrefix != nil {
		switch {
		case *req.AssistantPrefix == "":
			return nil, httpx.BadRequest("assistant_prefix", "must not be empty")
		case p.n != 1:
			return nil, httpx.BadRequest("assistant_prefix", "needs n = 1, got %d", p.n)
		case p.stream:
			return nil, httpx.BadRequest("assistant_prefix", "cannot be streamed")
		}
		p.prefix = req.AssistantPrefix
	}
	if req.AssistantContext != nil {
		switch {
		case *req.AssistantContext == "":
			return nil, httpx.BadRequest("assistant_context", "must not be empty")
		case p.prefix == nil:
			return nil, httpx.BadRequest("assistant_context", "needs assistant_prefix (the action it is the context of)")
		}
		p.context = req.AssistantContext
	}
	return p, nil
}

// Chat answers one chat completion on the model that resolve picks for
// the request's model field; see Call for what the host decides.
func (h *Handler) Chat(w http.ResponseWriter, r *http.Request, resolve func(model string) (*Call, *httpx.Error)) {
	body, e := httpx.ReadBody(w, r, h.cfg.MaxBodyBytes)
	if e != nil {
		httpx.OpenAIError(w, e)
		return
	}
	var peek struct {
		Model *string `json:"model"`
	}
	if e := httpx.DecodeJSON(body, &peek); e != nil {
		httpx.OpenAIError(w, e)
		return
	}
	name := ""
	if peek.Model != nil {
		name = *peek.Model
	}
	c, e := resolve(name)
	if e != nil {
		httpx.OpenAIError(w, e)
		return
	}
	if c.Done != nil {
		defer c.Done()
	}
	release, e := h.admit(r.Context(), c.Client)
	if e != nil {
		w.Header().Set("Retry-After", "1")
		httpx.OpenAIError(w, e)
		return
	}
	defer release()
	p, e := h.parseChat(body, c.MaxResponseTokens)
	if e != nil {
		httpx.OpenAIError(w, e)
		return
	}
	prompt, e := chatPrompt(r.Context(), c.Model, p)
	if e != nil {
		httpx.OpenAIError(w, e)
		return
	}
	if len(prompt) > c.MaxPromptTokens {
		httpx.OpenAIError(w, &httpx.Error{Status: http.StatusBadRequest, Param: "messages", Code: "context_length_exceeded",
			Msg: fmt.Sprintf("prompt has %d tokens, more than the limit of %d", len(prompt), c.MaxPromptTokens)})
		return
	}
	// A forced prefix: its tokens are the recorded sample's actions, the
	// generation continues after them (the budget counts them). A context
	// before it extends the prompt: given, neither sampled nor trained.
	var forced []int
	if p.prefix != nil {
		enc, ok := c.Model.(TextEncoder)
		if !ok {
			httpx.OpenAIError(w, httpx.BadRequest("assistant_prefix", "model %q cannot encode text (it does not implement openai.TextEncoder)", c.Model.Name()))
			return
		}
		if p.context != nil {
			given, err := enc.EncodeText(*p.context)
			if err != nil || len(given) == 0 {
				httpx.OpenAIError(w, httpx.BadRequest("assistant_context", "cannot be encoded: %v", err))
				return
			}
			if len(prompt)+len(given) > c.MaxPromptTokens {
				httpx.OpenAIError(w, &httpx.Error{Status: http.StatusBadRequest, Param: "assistant_context", Code: "context_length_exceeded",
					Msg: fmt.Sprintf("prompt and assistant_context have %d tokens, more than the limit of %d", len(prompt)+len(given), c.MaxPromptTokens)})
				return
			}
			prompt = append(slices.Clip(prompt), given...)
		}
		var err error
		if forced, err = enc.EncodeText(*p.prefix); err != nil || len(forced) == 0 {
			httpx.OpenAIError(w, httpx.BadRequest("assistant_prefix", "cannot be encoded: %v", err))
			return
		}
		if len(forced) >= p.maxTokens {
			httpx.OpenAIError(w, httpx.BadRequest("assistant_prefix", "is %d tokens, which leaves no room in max_tokens %d", len(forced), p.maxTokens))
			return
		}
	}
	if c.Reserve != nil {
		// The worst case of this request, for the host's budget.
		if e := c.Reserve(len(prompt) + p.n*p.maxTokens); e != nil {
			httpx.OpenAIError(w, e)
			return
		}
	}
	prompts := make([][]int, p.n)
	for i := range prompts {
		prompts[i] = prompt
		if forced != nil {
			prompts[i] = append(slices.Clip(prompt), forced...)
		}
	}
	top := 0
	if p.logprobs {
		top = p.topLogprobs
	}
	opts := p.options(len(forced), top)
	if len(p.stop) > 0 {
		opts.Stop = stopFunc(c.Model.TokenBytes, p.n, p.stop)
	}

	id := "chatcmpl-" + randHex(12)
	created := time.Now().Unix()
	var f streamFormat
	spec := streamSpec{n: p.n, stop: p.stop, logprobs: p.logprobs, usage: p.usage}
	if p.stream {
		if p.parseTools() {
			spec.tools = p.tools
		}
		f = &chatFormat{m: c.Model, id: id, model: c.Name, created: created, logprobs: p.logprobs}
	}
	gens, cs, ok := h.generate(w, r, c.Model, prompts, opts, spec, f)
	if !ok {
		return
	}
	version := int64(0)
	if len(gens) > 0 {
		version = gens[0].Version
	}
	// Record before the stream's [DONE]: a client that saw the whole
	// completion may end its episode at once.
	if c.Record != nil {
		if e := c.Record(Completion{Prompt: prompt, Forced: forced, Gens: gens, Temperature: p.temperature}); e != nil {
			if cs != nil && cs.started {
				cs.sendError(e)
			} else {
				httpx.OpenAIError(w, e)
			}
			return
		}
	}
	completion := 0
	for _, g := range gens {
		completion += len(g.Tokens)
	}
	if h.cfg.OnTokens != nil {
		h.cfg.OnTokens(len(prompt), completion)
	}
	usage := &api.Usage{PromptTokens: len(prompt) + len(forced), CompletionTokens: completion, TotalTokens: len(prompt) + len(forced) + completion}
	if cs != nil {
		cs.finish(gens, usage)
		return
	}
	httpx.RenewWriteDeadline(w, h.cfg.WriteTimeout)
	w.Header().Set("X-Troupe-Param-Version", strconv.FormatInt(version, 10))
	choices := make([]api.Choice, len(gens))
	for i, g := range gens {
		content, truncated := stopContent(tokenText(c.Model, g.Tokens), p.stop)
		finish := g.FinishReason
		if truncated {
			finish = "stop"
		}
		msg := api.Message{Role: "assistant", Content: content}
		if p.parseTools() {
			if text, calls, ok := parseToolCalls(content, p.tools); ok {
				msg.Content, msg.ToolCalls, finish = text, indexCalls(calls, false), "tool_calls"
			}
		}
		choices[i] = api.Choice{Index: i, Message: msg, FinishReason: finish}
		if p.logprobs {
			choices[i].LogProbs = logprobsObject(c.Model, g, 0, len(g.Tokens))
		}
	}
	httpx.WriteJSON(w, http.StatusOK, api.ChatResponse{ObjectHeader: api.ObjectHeader{ID: id, Object: "chat.completion", Created: created, Model: c.Name},
		Choices: choices, Usage: usage, SystemFingerprint: fingerprint(version)})
}

// generate runs prompts on m; with a stream format f it streams the tokens
// through it as they are sampled. It answers a failure itself (an error
// event when the stream has begun) and returns ok = false; a client gone
// before the end is not answered.
func (h *Handler) generate(w http.ResponseWriter, r *http.Request, m Model, prompts [][]int, opts textgen.GenerateOptions, spec streamSpec, f streamFormat) (gens []textgen.Generation, cs *stream, ok bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var emit func(textgen.TokenEvent)
	if f != nil {
		cs = newStream(h, m, w, cancel, spec, f)
		emit = cs.push
		go cs.run()
	}
	gens, err := m.Generate(ctx, prompts, opts, emit)
	if cs != nil {
		cs.close() // the writer has drained its queue; w is ours again
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err == nil {
		return gens, cs, true
	}
	if ctx.Err() != nil {
		// The client went away (or a stream write failed) before the
		// completion was finished: nothing is recorded.
		return nil, nil, false
	}
	e := generateError(err)
	if cs != nil && cs.started {
		cs.sendError(e)
	} else {
		if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		httpx.OpenAIError(w, e)
	}
	return nil, nil, false
}

// generateError is the answer to a failed generation: the engine's load
// errors are 429/503 with a reason, a request it can never hold is 400,
// anything else a 500.
func generateError(err error) *httpx.Error {
	switch {
	case errors.Is(err, textgen.ErrQueueFull):
		return &httpx.Error{Status: http.StatusTooManyRequests, Msg: err.Error(), Code: "engine_queue_full"}
	case errors.Is(err, textgen.ErrBusy), errors.Is(err, textgen.ErrClosed):
		return &httpx.Error{Status: http.StatusServiceUnavailable, Msg: err.Error(), Code: "engine_busy"}
	case errors.Is(err, textgen.ErrTooLarge):
		return &httpx.Error{Status: http.StatusBadRequest, Msg: err.Error(), Code: "request_too_large"}
	case errors.Is(err, textgen.ErrInvalid):
		return &httpx.Error{Status: http.StatusBadRequest, Msg: err.Error(), Code: "invalid_request"}
	}
	return &httpx.Error{Status: http.StatusInternalServerError, Msg: "generation failed: " + err.Error()}
}

func fingerprint(version int64) string { return "troupe-v" + strconv.FormatInt(version, 10) }

// stopFunc returns the GenerateOptions.Stop of a request with stop
// sequences: it ends a choice as soon as its text contains one of them.
// Only the bytes that the newest token can complete are searched, the last
// token's length plus the longest stop sequence minus one, so a stop that
// spans several tokens, or a long token that contains a whole stop, is found.
func stopFunc(tokenBytes func(int) []byte, n int, stops []string) func(int, []int) bool {
	tails := make([][]byte, n)
	maxStop := 0
	for _, st := range stops {
		maxStop = max(maxStop, len(st))
	}
	return func(i int, toks []int) bool {
		if i < 0 || i >= n || len(toks) == 0 {
			return false
		}
		b := tokenBytes(toks[len(toks)-1])
		tails[i] = append(tails[i], b...)
		win := tails[i]
		if keep := maxStop - 1 + len(b); len(win) > keep {
			win = win[len(win)-keep:]
		}
		// keep only what a later token can still need
		if len(tails[i]) > 4*maxStop+256 {
			tails[i] = append(tails[i][:0], tails[i][len(tails[i])-(maxStop-1):]...)
		}
		for _, st := range stops {
			if bytes.Contains(win, []byte(st)) {
				return true
			}
		}
		return false
	}
}

// tokenText is the bytes of tokens without special tokens.
func tokenText(m Model, toks []int) []byte {
	var b []byte
	for _, t := range toks {
		b = append(b, m.TokenBytes(t)...)
	}
	return b
}

// stopContent cuts text before the earliest stop sequence (OpenAI leaves the
// stop sequence out of the content) and says whether it did.
func stopContent(text []byte, stops []string) (string, bool) {
	cut := -1
	for _, st := range stops {
		if k := bytes.Index(text, []byte(st)); k >= 0 && (cut < 0 || k < cut) {
			cut = k
		}
	}
	if cut < 0 {
		return string(text), false
	}
	return string(text[:cut]), true
}

func logprobsObject(m Model, g textgen.Generation, from, to int) *api.LogProbs {
	lp := &api.LogProbs{Content: []api.LogProb{}}
	for t := from; t < to; t++ {
		b := m.TokenBytes(g.Tokens[t])
		if b == nil {
			continue // special tokens (end of sequence) are not reported
		}
		e := api.LogProb{Token: string(b), LogProb: g.LogProbs[t], Bytes: bytesToInts(b), TopLogProbs: []api.TopLogProb{}}
		if t < len(g.TopLogProbs) {
			for _, alt := range g.TopLogProbs[t] {
				ab := m.TokenBytes(alt.Token)
				tok := string(ab)
				if ab == nil {
					tok = "<|endoftext|>"
				}
				e.TopLogProbs = append(e.TopLogProbs, api.TopLogProb{Token: tok, LogProb: alt.LogProb, Bytes: bytesToInts(ab)})
			}
		}
		lp.Content = append(lp.Content, e)
	}
	return lp
}

func bytesToInts(b []byte) []int {
	if b == nil {
		return nil
	}
	out := make([]int, len(b))
	for i, x := range b {
		out[i] = int(x)
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return hex.EncodeToString(b)
}
