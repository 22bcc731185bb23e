package swarm

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/rl"
)

// MaxEpisodeCompletions bounds the completions one episode may record (its
// memory); further requests get 429.
const MaxEpisodeCompletions = 4096

// OpenAI chat-completions wire types (the subset this server implements).

type chatMessageIn struct {
	Role       *string         `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       *string         `json:"name"`
	ToolCalls  []ChatToolCall  `json:"tool_calls"`
	ToolCallID *string         `json:"tool_call_id"`
}

type chatRequestIn struct {
	Model               *string          `json:"model"`
	Messages            *[]chatMessageIn `json:"messages"`
	MaxTokens           *int             `json:"max_tokens"`
	MaxCompletionTokens *int             `json:"max_completion_tokens"`
	Temperature         *float64         `json:"temperature"`
	TopP                *float64         `json:"top_p"`
	N                   *int             `json:"n"`
	Stop                json.RawMessage  `json:"stop"`
	Seed                *int64           `json:"seed"`
	Logprobs            *bool            `json:"logprobs"`
	TopLogprobs         *int             `json:"top_logprobs"`
	Stream              *bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	// AssistantPrefix is troupe's extension: the answer's forced start.
	AssistantPrefix *string `json:"assistant_prefix"`
	// AssistantContext is troupe's extension: answer text given before
	// the forced prefix, part of the recorded sample's prompt.
	AssistantContext *string         `json:"assistant_context"`
	Tools            []ChatTool      `json:"tools"`
	ToolChoice       json.RawMessage `json:"tool_choice"`
	ResponseFormat   json.RawMessage `json:"response_format"`
	// ParallelToolCalls is accepted; every complete call of the answer is
	// returned (the server does not constrain sampling).
	ParallelToolCalls *bool `json:"parallel_tool_calls"`
}

// ChatTool is one entry of a request's "tools".
type ChatTool struct {
	Type     string           `json:"type"`
	Function ChatToolFunction `json:"function"`
}

// ChatToolFunction describes a callable function; Parameters is a JSON
// Schema object.
type ChatToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ChatToolCall is a function call of an assistant message (or, with Index
// set, of a streamed delta).
type ChatToolCall struct {
	Index    *int                 `json:"index,omitempty"`
	ID       string               `json:"id"`
	Type     string               `json:"type"`
	Function ChatToolCallFunction `json:"function"`
}

// ChatToolCallFunction is the called function and its JSON-encoded
// arguments.
type ChatToolCallFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatLogProb is one entry of an OpenAI logprobs.content list.
type ChatLogProb struct {
	Token       string        `json:"token"`
	LogProb     float32       `json:"logprob"`
	Bytes       []int         `json:"bytes"`
	TopLogProbs []ChatTopProb `json:"top_logprobs"`
}

// ChatTopProb is one alternative token.
type ChatTopProb struct {
	Token   string  `json:"token"`
	LogProb float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// ChatLogProbs is the logprobs object of a choice.
type ChatLogProbs struct {
	Content []ChatLogProb `json:"content"`
	Refusal *string       `json:"refusal"`
}

// ChatMessage is a message of a response (and of a request, for the client).
type ChatMessage struct {
	Role       string         `json:"role"`
	Content    string         `json:"content"`
	Refusal    *string        `json:"refusal,omitempty"`
	Name       string         `json:"name,omitempty"`
	ToolCalls  []ChatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// ChatChoice is one choice of a response.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      ChatMessage   `json:"message"`
	LogProbs     *ChatLogProbs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ChatResponse is a chat.completion object.
type ChatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage,omitempty"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

// ChatDelta is the delta of a streamed chunk.
type ChatDelta struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []ChatToolCall `json:"tool_calls,omitempty"`
}

// ChatChunkChoice is one choice of a streamed chunk.
type ChatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChatDelta     `json:"delta"`
	LogProbs     *ChatLogProbs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// ChatChunk is a chat.completion.chunk object.
type ChatChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	SystemFingerprint string            `json:"system_fingerprint"`
	Choices           []ChatChunkChoice `json:"choices"`
	Usage             *Usage            `json:"usage,omitempty"`
}

func openaiError(w http.ResponseWriter, e *apiError) {
	typ := "invalid_request_error"
	switch e.status {
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusInternalServerError:
		typ = "server_error"
	}
	var param, code any
	if e.param != "" {
		param = e.param
	}
	if e.code != "" {
		code = e.code
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"message": e.msg, "type": typ, "param": param, "code": code}})
}

var validRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

// parseMessages flattens OpenAI messages to text.
func parseMessages(in []chatMessageIn) ([]Message, *apiError) {
	if len(in) == 0 {
		return nil, badRequest("messages", "must contain at least one message")
	}
	out := make([]Message, len(in))
	for i, m := range in {
		f := "messages[" + strconv.Itoa(i) + "]"
		if m.Role == nil {
			return nil, badRequest(f+".role", "missing")
		}
		if !validRoles[*m.Role] {
			return nil, badRequest(f+".role", "unknown role %q", *m.Role)
		}
		out[i].Role = *m.Role
		if m.Name != nil {
			out[i].Name = *m.Name
		}
		if len(m.ToolCalls) > 0 && *m.Role != "assistant" {
			return nil, badRequest(f+".tool_calls", "only assistant messages carry tool calls")
		}
		for j, tc := range m.ToolCalls {
			tf := f + ".tool_calls[" + strconv.Itoa(j) + "]"
			switch {
			case tc.ID == "":
				return nil, badRequest(tf+".id", "missing")
			case tc.Type != "function":
				return nil, badRequest(tf+".type", "must be \"function\", got %q", tc.Type)
			case tc.Function.Name == "":
				return nil, badRequest(tf+".function.name", "missing")
			}
			out[i].ToolCalls = append(out[i].ToolCalls, ToolCall{ID: tc.ID, Type: tc.Type,
				Function: ToolCallFunction{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
		}
		if m.ToolCallID != nil {
			if *m.Role != "tool" {
				return nil, badRequest(f+".tool_call_id", "only tool messages answer a tool call")
			}
			out[i].ToolCallID = *m.ToolCallID
		}
		if *m.Role == "tool" && out[i].ToolCallID == "" {
			return nil, badRequest(f+".tool_call_id", "missing: a tool message answers the tool call of that id")
		}
		c := bytes.TrimSpace(m.Content)
		switch {
		case len(c) == 0 || string(c) == "null":
		case c[0] == '"':
			if err := json.Unmarshal(c, &out[i].Content); err != nil {
				return nil, badRequest(f+".content", "invalid string")
			}
		case c[0] == '[':
			var parts []struct {
				Type *string `json:"type"`
				Text *string `json:"text"`
			}
			if err := json.Unmarshal(c, &parts); err != nil {
				return nil, badRequest(f+".content", "expected a string or an array of content parts")
			}
			var sb strings.Builder
			for j, p := range parts {
				pf := f + ".content[" + strconv.Itoa(j) + "]"
				if p.Type == nil {
					return nil, badRequest(pf+".type", "missing")
				}
				if *p.Type != "text" {
					return nil, badRequest(pf+".type", "unsupported content part type %q (only text)", *p.Type)
				}
				if p.Text == nil {
					return nil, badRequest(pf+".text", "missing")
				}
				sb.WriteString(*p.Text)
			}
			out[i].Content = sb.String()
		default:
			return nil, badRequest(f+".content", "expected a string or an array of content parts")
		}
	}
	return out, nil
}

func parseStop(raw json.RawMessage) ([]string, *apiError) {
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
		return nil, badRequest("stop", "expected a string or an array of strings")
	}
	if len(many) > 4 {
		return nil, badRequest("stop", "at most 4 stop sequences, got %d", len(many))
	}
	out := many[:0]
	for _, s := range many {
		if len(s) > 256 {
			return nil, badRequest("stop", "stop sequence longer than 256 bytes")
		}
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

type chatParams struct {
	msgs        []Message
	maxTokens   int
	temperature float64
	topP        float64
	n           int
	stop        []string
	seed        *int64
	logprobs    bool
	topLogprobs int
	stream      bool
	usage       bool
	model       string
	prefix      *string // assistant_prefix
	context     *string // assistant_context
	tools       []Tool
	toolChoice  string // "auto" or "none"
}

// parseTools says whether tool calls are parsed from the answers.
func (p *chatParams) parseTools() bool { return len(p.tools) > 0 && p.toolChoice != "none" }

// hasToolHistory says whether earlier turns hold tool calls or results,
// which only a tool chat template renders faithfully.
func (p *chatParams) hasToolHistory() bool {
	for _, m := range p.msgs {
		if len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

// maxTools bounds the tools of one request.
const maxTools = 128

// parseToolsRequest validates tools, tool_choice and response_format.
func parseToolsRequest(req *chatRequestIn, p *chatParams) *apiError {
	if len(req.Tools) > maxTools {
		return badRequest("tools", "at most %d tools, got %d", maxTools, len(req.Tools))
	}
	seen := map[string]bool{}
	for i, t := range req.Tools {
		f := "tools[" + strconv.Itoa(i) + "]"
		if t.Type != "function" {
			return badRequest(f+".type", "must be \"function\", got %q", t.Type)
		}
		name := t.Function.Name
		if name == "" || len(name) > 64 || strings.IndexFunc(name, func(r rune) bool {
			return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		}) >= 0 {
			return badRequest(f+".function.name", "must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -, got %q", name)
		}
		if seen[name] {
			return badRequest(f+".function.name", "duplicate tool %q", name)
		}
		seen[name] = true
		params := bytes.TrimSpace(t.Function.Parameters)
		if len(params) > 0 && string(params) != "null" {
			var obj map[string]json.RawMessage
			if json.Unmarshal(params, &obj) != nil {
				return badRequest(f+".function.parameters", "must be a JSON Schema object")
			}
		} else {
			params = nil
		}
		p.tools = append(p.tools, Tool{Type: t.Type, Function: ToolFunction{Name: name, Description: t.Function.Description, Parameters: params}})
	}
	p.toolChoice = "none"
	if len(p.tools) > 0 {
		p.toolChoice = "auto"
	}
	if c := bytes.TrimSpace(req.ToolChoice); len(c) > 0 && string(c) != "null" {
		var choice string
		if json.Unmarshal(c, &choice) != nil {
			// {"type": "function", "function": {"name": ...}}
			return badRequest("tool_choice", "forcing a named function is not supported: this server does not constrain sampling (use \"auto\" or \"none\")")
		}
		switch choice {
		case "none", "auto":
			p.toolChoice = choice
		case "required":
			return badRequest("tool_choice", "\"required\" is not supported: this server does not constrain sampling (use \"auto\" or \"none\")")
		default:
			return badRequest("tool_choice", "unknown value %q (want \"auto\" or \"none\")", choice)
		}
	}
	if c := bytes.TrimSpace(req.ResponseFormat); len(c) > 0 && string(c) != "null" {
		var rf struct {
			Type *string `json:"type"`
		}
		if json.Unmarshal(c, &rf) != nil || rf.Type == nil {
			return badRequest("response_format", "expected an object with a type")
		}
		switch *rf.Type {
		case "text":
		case "json_object", "json_schema":
			return badRequest("response_format", "type %q is not supported: this server does not constrain sampling to JSON; ask for JSON in the prompt and validate the answer (for example in the reward)", *rf.Type)
		default:
			return badRequest("response_format", "unknown type %q", *rf.Type)
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
func parseToolCalls(text string, tools []Tool) (content string, calls []ToolCall, ok bool) {
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
		calls = append(calls, ToolCall{ID: "call_" + randHex(12), Type: "function", Function: ToolCallFunction{Name: *c.Name, Arguments: compact.String()}})
		rest = body[end+len(toolCallClose):]
	}
	return strings.TrimRight(text[:i], " \t\r\n"), calls, true
}

// wireToolCalls converts tool calls to their wire form; with indexed, each
// carries its index (streamed deltas).
func wireToolCalls(calls []ToolCall, indexed bool) []ChatToolCall {
	out := make([]ChatToolCall, len(calls))
	for k, c := range calls {
		out[k] = ChatToolCall{ID: c.ID, Type: c.Type, Function: ChatToolCallFunction{Name: c.Function.Name, Arguments: c.Function.Arguments}}
		if indexed {
			out[k].Index = &k
		}
	}
	return out
}

// foldToolCalls renders the tool calls of assistant messages into their
// content in the Hermes form, for a model without a tool chat template: the
// prompt then shows the calls as the model would have written them instead
// of dropping them.
func foldToolCalls(msgs []Message) []Message {
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
func (s *Server) chatPrompt(p *chatParams) ([]int, *apiError) {
	tp, hasTools := s.model.(ToolChatPrompter)
	var prompt []int
	var err error
	switch {
	case hasTools && (len(p.tools) > 0 || p.hasToolHistory()):
		var tools []Tool
		if p.toolChoice != "none" {
			tools = p.tools
		}
		prompt, err = tp.ChatPromptTools(p.msgs, tools)
	case len(p.tools) > 0:
		return nil, badRequest("tools", "model %q has no chat template for tools (it does not implement swarm.ToolChatPrompter); send the request without tools", s.model.Name())
	default:
		prompt, err = s.model.ChatPrompt(foldToolCalls(p.msgs))
	}
	if err != nil {
		return nil, badRequest("messages", "%v", err)
	}
	return prompt, nil
}

func (s *Server) parseChat(body []byte, maxResp int) (*chatParams, *apiError) {
	var req chatRequestIn
	if e := decodeJSON(body, &req); e != nil {
		return nil, e
	}
	p := &chatParams{temperature: 1, topP: 1, n: 1, maxTokens: maxResp}
	if req.Model != nil {
		p.model = *req.Model
	}
	if req.Messages == nil {
		return nil, badRequest("messages", "missing")
	}
	var e *apiError
	if p.msgs, e = parseMessages(*req.Messages); e != nil {
		return nil, e
	}
	if req.Temperature != nil {
		if !(*req.Temperature >= 0 && *req.Temperature <= 2) {
			return nil, badRequest("temperature", "must be in [0, 2], got %v", *req.Temperature)
		}
		p.temperature = *req.Temperature
	}
	if req.TopP != nil {
		if !(*req.TopP > 0 && *req.TopP <= 1) {
			return nil, badRequest("top_p", "must be in (0, 1], got %v", *req.TopP)
		}
		p.topP = *req.TopP
	}
	if req.N != nil {
		if *req.N < 1 || *req.N > s.cfg.MaxN {
			return nil, badRequest("n", "must be in [1, %d], got %d", s.cfg.MaxN, *req.N)
		}
		p.n = *req.N
	}
	// n × max_tokens is the sampling work of the request: bounded.
	mt := req.MaxCompletionTokens
	field := "max_completion_tokens"
	if mt == nil {
		mt, field = req.MaxTokens, "max_tokens"
	}
	perChoice := max(1, s.cfg.MaxRequestTokens/p.n)
	if mt != nil {
		if *mt < 1 || *mt > maxResp {
			return nil, badRequest(field, "must be in [1, %d], got %d", maxResp, *mt)
		}
		if *mt > perChoice {
			return nil, badRequest(field, "n × %s = %d × %d exceeds this server's limit of %d sampled tokens per request", field, p.n, *mt, s.cfg.MaxRequestTokens)
		}
		p.maxTokens = *mt
	} else {
		p.maxTokens = min(maxResp, perChoice)
	}
	if p.stop, e = parseStop(req.Stop); e != nil {
		return nil, e
	}
	if e = parseToolsRequest(&req, p); e != nil {
		return nil, e
	}
	p.seed = req.Seed
	if req.Logprobs != nil {
		p.logprobs = *req.Logprobs
	}
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > 20 {
			return nil, badRequest("top_logprobs", "must be in [0, 20], got %d", *req.TopLogprobs)
		}
		if !p.logprobs && *req.TopLogprobs > 0 {
			return nil, badRequest("top_logprobs", "requires logprobs to be true")
		}
		p.topLogprobs = *req.TopLogprobs
	}
	if req.Stream != nil {
		p.stream = *req.Stream
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage != nil {
		if !p.stream {
			return nil, badRequest("stream_options", "only allowed when stream is true")
		}
		p.usage = *req.StreamOptions.IncludeUsage
	}
	if req.AssistantPrefix != nil {
		switch {
		case *req.AssistantPrefix == "":
			return nil, badRequest("assistant_prefix", "must not be empty")
		case p.n != 1:
			return nil, badRequest("assistant_prefix", "needs n = 1, got %d", p.n)
		case p.stream:
			return nil, badRequest("assistant_prefix", "cannot be streamed")
		}
		p.prefix = req.AssistantPrefix
	}
	if req.AssistantContext != nil {
		switch {
		case *req.AssistantContext == "":
			return nil, badRequest("assistant_context", "must not be empty")
		case p.prefix == nil:
			return nil, badRequest("assistant_context", "needs assistant_prefix (the action it is the context of)")
		}
		p.context = req.AssistantContext
	}
	return p, nil
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return r.Header.Get("api-key")
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	key := bearer(r)
	if key == "" {
		openaiError(w, &apiError{status: http.StatusUnauthorized, msg: "missing API key: send the episode's openai_api_key as Authorization: Bearer <key>", code: "invalid_api_key"})
		return
	}
	s.mu.Lock()
	ep := s.episodeForKeyLocked(key)
	if ep == nil {
		s.mu.Unlock()
		openaiError(w, &apiError{status: http.StatusUnauthorized, msg: "invalid API key, or its episode has ended", code: "invalid_api_key"})
		return
	}
	if ep.calls >= MaxEpisodeCompletions {
		s.mu.Unlock()
		openaiError(w, &apiError{status: http.StatusTooManyRequests, code: "episode_limit",
			msg: fmt.Sprintf("an episode may make at most %d completions", MaxEpisodeCompletions)})
		return
	}
	ep.inflight++
	ep.calls++
	ep.lastActive = time.Now()
	if ac := s.active[ep.client]; ac != nil {
		ac.lastActivity = ep.lastActive
	}
	tc := s.train
	s.mu.Unlock()
	recorded := false
	defer func() {
		if !recorded {
			s.mu.Lock()
			ep.inflight--
			ep.lastActive = time.Now()
			s.mu.Unlock()
		}
	}()

	body, e := readBody(w, r, s.cfg.MaxBodyBytes)
	if e != nil {
		openaiError(w, e)
		return
	}
	p, e := s.parseChat(body, tc.MaxResponseTokens)
	if e != nil {
		openaiError(w, e)
		return
	}
	prompt, e := s.chatPrompt(p)
	if e != nil {
		openaiError(w, e)
		return
	}
	if len(prompt) > tc.MaxPromptTokens {
		openaiError(w, &apiError{status: http.StatusBadRequest, param: "messages", code: "context_length_exceeded",
			msg: fmt.Sprintf("prompt has %d tokens, more than the limit of %d", len(prompt), tc.MaxPromptTokens)})
		return
	}
	// A forced prefix: its tokens are the recorded sample's actions, the
	// generation continues after them (the budget counts them). A context
	// before it extends the prompt: given, neither sampled nor trained.
	var forced []int
	if p.prefix != nil {
		enc, ok := s.model.(TextEncoder)
		if !ok {
			openaiError(w, badRequest("assistant_prefix", "model %q cannot encode text (it does not implement swarm.TextEncoder)", s.model.Name()))
			return
		}
		if p.context != nil {
			given, err := enc.EncodeText(*p.context)
			if err != nil || len(given) == 0 {
				openaiError(w, badRequest("assistant_context", "cannot be encoded: %v", err))
				return
			}
			if len(prompt)+len(given) > tc.MaxPromptTokens {
				openaiError(w, &apiError{status: http.StatusBadRequest, param: "assistant_context", code: "context_length_exceeded",
					msg: fmt.Sprintf("prompt and assistant_context have %d tokens, more than the limit of %d", len(prompt)+len(given), tc.MaxPromptTokens)})
				return
			}
			prompt = append(slices.Clip(prompt), given...)
		}
		var err error
		if forced, err = enc.EncodeText(*p.prefix); err != nil || len(forced) == 0 {
			openaiError(w, badRequest("assistant_prefix", "cannot be encoded: %v", err))
			return
		}
		if len(forced) >= p.maxTokens {
			openaiError(w, badRequest("assistant_prefix", "is %d tokens, which leaves no room in max_tokens %d", len(forced), p.maxTokens))
			return
		}
	}
	// Reserve the episode's token budget for the worst case of this request.
	reserve := len(prompt) + p.n*p.maxTokens
	s.mu.Lock()
	if ep.tokens+ep.reserved+reserve > s.cfg.MaxEpisodeTokens {
		s.mu.Unlock()
		openaiError(w, &apiError{status: http.StatusTooManyRequests, code: "episode_token_limit",
			msg: fmt.Sprintf("this completion could record %d tokens (prompt %d + n %d × max_tokens %d); the episode holds %d of its limit of %d: end it and begin another",
				reserve, len(prompt), p.n, p.maxTokens, ep.tokens+ep.reserved, s.cfg.MaxEpisodeTokens)})
		return
	}
	ep.reserved += reserve
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		ep.reserved -= reserve
		s.mu.Unlock()
	}()

	prompts := make([][]int, p.n)
	rngs := make([]*rand.Rand, p.n)
	for i := range prompts {
		prompts[i] = prompt
		if forced != nil {
			prompts[i] = append(slices.Clip(prompt), forced...)
		}
		if p.seed != nil {
			rngs[i] = rand.New(rand.NewPCG(uint64(*p.seed), uint64(i)))
		} else {
			rngs[i] = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		}
	}
	opts := GenerateOptions{MaxTokens: p.maxTokens - len(forced), Temperature: p.temperature, TopP: p.topP, Rand: rngs}
	if p.logprobs {
		opts.TopLogProbs = p.topLogprobs
	}
	if len(p.stop) > 0 {
		opts.Stop = stopFunc(s.model.TokenBytes, p.n, p.stop)
	}

	id := "chatcmpl-" + randHex(12)
	created := time.Now().Unix()
	model := s.model.Name()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var cs *chatStream
	var emit func(TokenEvent)
	if p.stream {
		cs = newChatStream(s, w, cancel, p, id, created, model)
		emit = cs.push
		go cs.run()
	}
	s.modelMu.RLock()
	version := s.model.Version()
	if cs != nil {
		cs.setVersion(version)
	}
	gens, err := s.generate(ctx, prompts, opts, emit)
	s.modelMu.RUnlock()
	if cs != nil {
		cs.close() // the writer has drained its queue; w is ours again
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			// The client went away (or a stream write failed) before the
			// completion was finished: nothing is recorded.
			return
		}
		e := &apiError{status: http.StatusInternalServerError, msg: "generation failed: " + err.Error()}
		if cs != nil && cs.started {
			cs.sendError(e)
		} else {
			openaiError(w, e)
		}
		return
	}

	// Record under the episode, before the stream's [DONE]: a client that
	// saw the whole completion may end the episode at once.
	completion := 0
	for _, g := range gens {
		completion += len(g.Tokens)
	}
	s.mu.Lock()
	recorded = true
	ep.inflight--
	ep.lastActive = time.Now()
	open := s.episodes[ep.id] == ep
	if open {
		for _, g := range gens {
			if forced != nil {
				// The decision alone: the trainer computes its behaviour
				// log-probabilities (ratio 1); the continuation only
				// scored it.
				ep.samples = append(ep.samples, rl.Sample{Prompt: prompt, Actions: forced, Version: version})
				continue
			}
			ep.samples = append(ep.samples, rl.Sample{Prompt: prompt, Actions: g.Tokens, LogProbs: g.LogProbs, Version: version, Temperature: p.temperature})
		}
		ep.tokens += len(prompt) + len(forced) + completion
	}
	s.mu.Unlock()
	if !open {
		e := &apiError{status: http.StatusConflict, msg: "the episode was closed while this completion was generated; its result was not recorded", code: "episode_closed"}
		if cs != nil && cs.started {
			cs.sendError(e)
		} else {
			openaiError(w, e)
		}
		return
	}

	s.m.tokens.WithLabelValues("prompt").Add(float64(len(prompt)))
	s.m.tokens.WithLabelValues("completion").Add(float64(completion))
	usage := &Usage{PromptTokens: len(prompt) + len(forced), CompletionTokens: completion, TotalTokens: len(prompt) + len(forced) + completion}
	if cs != nil {
		cs.finish(gens, usage)
		return
	}
	s.renewWriteDeadline(w)
	w.Header().Set("X-Troupe-Param-Version", strconv.FormatInt(version, 10))
	choices := make([]ChatChoice, len(gens))
	for i, g := range gens {
		content, truncated := stopContent(tokenText(s.model, g.Tokens), p.stop)
		finish := g.FinishReason
		if truncated {
			finish = "stop"
		}
		msg := ChatMessage{Role: "assistant", Content: content}
		if p.parseTools() {
			if text, calls, ok := parseToolCalls(content, p.tools); ok {
				msg.Content, msg.ToolCalls, finish = text, wireToolCalls(calls, false), "tool_calls"
			}
		}
		choices[i] = ChatChoice{Index: i, Message: msg, FinishReason: finish}
		if p.logprobs {
			choices[i].LogProbs = s.logprobsObject(g, 0, len(g.Tokens))
		}
	}
	writeJSON(w, http.StatusOK, ChatResponse{ID: id, Object: "chat.completion", Created: created, Model: model,
		Choices: choices, Usage: usage, SystemFingerprint: fingerprint(version)})
}

// renewWriteDeadline gives the next write ServerConfig.WriteTimeout from
// now. The http.Server's WriteTimeout runs from the end of the request
// headers, which a long generation or stream would exceed; renewed before
// each write, it bounds how long one write may block instead, so a client
// that stops reading is cut. Writers without deadlines (test recorders)
// are left alone.
func (s *Server) renewWriteDeadline(w http.ResponseWriter) {
	if s.cfg.WriteTimeout > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	}
}

func fingerprint(version int64) string { return "troupe-v" + strconv.FormatInt(version, 10) }

// generate runs the model (the caller holds modelMu for reading). With emit,
// a StreamGenerator reports tokens as it samples them; any other model's
// tokens are replayed to emit after Generate returns.
func (s *Server) generate(ctx context.Context, prompts [][]int, opts GenerateOptions, emit func(TokenEvent)) ([]Generation, error) {
	if emit == nil {
		return s.model.Generate(ctx, prompts, opts)
	}
	if sg, ok := s.model.(StreamGenerator); ok {
		return sg.GenerateStream(ctx, prompts, opts, emit)
	}
	gens, err := s.model.Generate(ctx, prompts, opts)
	if err != nil {
		return nil, err
	}
	for i, g := range gens {
		for t, tok := range g.Tokens {
			ev := TokenEvent{Prompt: i, Token: tok}
			if t < len(g.LogProbs) {
				ev.LogProb = g.LogProbs[t]
			}
			if t < len(g.Top) {
				ev.Top = g.Top[t]
			}
			if t == len(g.Tokens)-1 {
				ev.FinishReason = g.FinishReason
			}
			emit(ev)
		}
	}
	return gens, nil
}

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

func (s *Server) logprobsObject(g Generation, from, to int) *ChatLogProbs {
	lp := &ChatLogProbs{Content: []ChatLogProb{}}
	for t := from; t < to; t++ {
		b := s.model.TokenBytes(g.Tokens[t])
		if b == nil {
			continue // special tokens (end of sequence) are not reported
		}
		e := ChatLogProb{Token: string(b), LogProb: g.LogProbs[t], Bytes: bytesToInts(b), TopLogProbs: []ChatTopProb{}}
		if t < len(g.Top) {
			for _, alt := range g.Top[t] {
				ab := s.model.TokenBytes(alt.Token)
				tok := string(ab)
				if ab == nil {
					tok = "<|endoftext|>"
				}
				e.TopLogProbs = append(e.TopLogProbs, ChatTopProb{Token: tok, LogProb: alt.LogProb, Bytes: bytesToInts(ab)})
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

func (s *Server) modelObject() map[string]any {
	return map[string]any{"id": s.model.Name(), "object": "model", "created": 0, "owned_by": "troupe"}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{s.modelObject()}})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") != s.model.Name() {
		openaiError(w, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("model %q does not exist; this server hosts %q", r.PathValue("id"), s.model.Name()), code: "model_not_found"})
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject())
}
