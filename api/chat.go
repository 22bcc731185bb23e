package api

import "encoding/json"

// Message is one chat message. Role is "system", "developer", "user",
// "assistant" or "tool"; an assistant message may carry the ToolCalls it
// made, and a tool message answers the call named by ToolCallID. Content
// is text (a request's array of text parts is joined).
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	Refusal    *string    `json:"refusal,omitempty"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// Tool is one entry of a request's "tools": a function the model may call.
// Type is "function".
type Tool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function describes a callable function. Parameters is its JSON Schema,
// kept verbatim so that a chat template renders it as the client sent it.
type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ToolCall is one function call made by the assistant. Type is
// "function"; ID is what the answering tool message names as its
// ToolCallID. Index is set in streamed deltas only.
type ToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the called function and its arguments, a JSON object
// encoded as a string (as OpenAI's API sends it).
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatRequest is a chat-completions request as a client sends it.
type ChatRequest struct {
	Model       string    `json:"model"`
	Messages    []Message `json:"messages"`
	MaxTokens   int       `json:"max_tokens,omitempty"`
	Temperature *float64  `json:"temperature,omitempty"`
	TopP        *float64  `json:"top_p,omitempty"`
	N           int       `json:"n,omitempty"`
	Stop        []string  `json:"stop,omitempty"`
	Seed        *int64    `json:"seed,omitempty"`
	Logprobs    bool      `json:"logprobs,omitempty"`
	TopLogprobs int       `json:"top_logprobs,omitempty"`
	Stream      bool      `json:"stream,omitempty"`
	// StreamOptions is sent only with Stream.
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	// AssistantPrefix forces the start of the answer (troupe's extension,
	// not OpenAI's; see package swarm, "Forced prefixes"): the response's
	// content is the continuation after it.
	AssistantPrefix string `json:"assistant_prefix,omitempty"`
	// AssistantContext is answer text given before AssistantPrefix
	// (troupe's extension): it extends the recorded sample's prompt, so
	// that the prefix is trained as an action taken after it.
	AssistantContext string `json:"assistant_context,omitempty"`
	// Tools are the functions the model may call; calls come back in
	// Message.ToolCalls.
	Tools []Tool `json:"tools,omitempty"`
	// ToolChoice is "auto" (the default with tools) or "none".
	ToolChoice string `json:"tool_choice,omitempty"`
}

// StreamOptions are the stream_options of a streaming request.
type StreamOptions struct {
	// IncludeUsage asks for a last chunk with the token usage and no choices.
	IncludeUsage bool `json:"include_usage"`
}

// TopLogProb is one alternative token of a logprobs entry.
type TopLogProb struct {
	Token   string  `json:"token"`
	LogProb float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// LogProb is one entry of a choice's logprobs.content.
type LogProb struct {
	Token       string       `json:"token"`
	LogProb     float32      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogProbs []TopLogProb `json:"top_logprobs"`
}

// LogProbs is the logprobs object of a choice.
type LogProbs struct {
	Content []LogProb `json:"content"`
	Refusal *string   `json:"refusal"`
}

// Choice is one choice of a chat.completion.
type Choice struct {
	Index        int       `json:"index"`
	Message      Message   `json:"message"`
	LogProbs     *LogProbs `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ObjectHeader opens every completion object and chunk: its id, its type
// ("chat.completion", "chat.completion.chunk" or "text_completion"), when
// it was made (Unix seconds) and by which model.
type ObjectHeader struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
}

// ChatResponse is a chat.completion object.
type ChatResponse struct {
	ObjectHeader
	Choices           []Choice `json:"choices"`
	Usage             *Usage   `json:"usage,omitempty"`
	SystemFingerprint string   `json:"system_fingerprint"`
}

// Delta is the delta of a streamed chunk.
type Delta struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ChunkChoice is one choice of a streamed chunk.
type ChunkChoice struct {
	Index        int       `json:"index"`
	Delta        Delta     `json:"delta"`
	LogProbs     *LogProbs `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// ChatChunk is a chat.completion.chunk object.
type ChatChunk struct {
	ObjectHeader
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []ChunkChoice `json:"choices"`
	Usage             *Usage        `json:"usage,omitempty"`
}

// ModelObject is one entry of GET /v1/models.
type ModelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Root and Parent follow vLLM: an adapter's parent is its base model.
	Root   string  `json:"root,omitempty"`
	Parent *string `json:"parent"`
}

// ModelList is the answer of GET /v1/models.
type ModelList struct {
	Object string        `json:"object"`
	Data   []ModelObject `json:"data"`
}

// ErrorBody is OpenAI's error object.
type ErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    any    `json:"code"`
}

// CompletionRequest is a (legacy) completions request as a client sends it.
// Prompt is a string, a list of strings, a list of token ids or a list of
// lists of token ids.
type CompletionRequest struct {
	Model         string         `json:"model"`
	Prompt        any            `json:"prompt"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	TopP          *float64       `json:"top_p,omitempty"`
	N             int            `json:"n,omitempty"`
	Stop          []string       `json:"stop,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
	Logprobs      *int           `json:"logprobs,omitempty"`
	Echo          bool           `json:"echo,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
}

// CompletionLogProbs is the logprobs object of a completion choice.
type CompletionLogProbs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogProbs []float32            `json:"token_logprobs"`
	TopLogProbs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// CompletionChoice is one choice of a text_completion.
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	LogProbs     *CompletionLogProbs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// CompletionResponse is a text_completion object (and, streamed, each of
// its chunks).
type CompletionResponse struct {
	ObjectHeader
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
	SystemFingerprint string             `json:"system_fingerprint"`
}
