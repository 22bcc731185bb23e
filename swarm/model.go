package swarm

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/rl"
)

// Message is one chat message of an OpenAI chat-completions request, with its
// content flattened to text. Role is "system", "user", "assistant" or
// "tool"; an assistant message may carry the ToolCalls it made, and a tool
// message answers the call named by ToolCallID.
type Message struct {
	Role       string
	Content    string
	Name       string
	ToolCalls  []ToolCall
	ToolCallID string
}

// Tool is one entry of a chat request's "tools": a function the model may
// call. Type is "function".
type Tool struct {
	Type     string
	Function ToolFunction
}

// ToolFunction describes a callable function. Parameters is its JSON Schema,
// kept verbatim so that a chat template renders it as the client sent it.
type ToolFunction struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// ToolCall is one function call made by the assistant. Type is "function";
// ID is what the answering tool message names as its ToolCallID.
type ToolCall struct {
	ID       string
	Type     string
	Function ToolCallFunction
}

// ToolCallFunction is the called function and its arguments, a JSON object
// encoded as a string (as OpenAI's API sends it).
type ToolCallFunction struct {
	Name      string
	Arguments string
}

// ToolChatPrompter is an optional interface of a Model whose chat template
// renders tool definitions (for example Qwen's and Hermes's templates, which
// list them in the system turn and expect calls back as
// <tool_call>{"name": ..., "arguments": {...}}</tool_call>). The server sends
// a request that carries "tools" through it, and refuses such a request with
// 400 when the model does not implement it. tools may be empty, for a
// conversation whose earlier turns hold tool calls or tool results.
type ToolChatPrompter interface {
	ChatPromptTools(msgs []Message, tools []Tool) ([]int, error)
}

// TokenLogProb is one candidate token and its log-probability.
type TokenLogProb struct {
	Token   int
	LogProb float32
}

// GenerateOptions controls sampling. The zero value samples at temperature
// 0 (greedy) with MaxTokens 0, which generates nothing: callers set both.
type GenerateOptions struct {
	// MaxTokens bounds the number of sampled tokens per prompt.
	MaxTokens int
	// Temperature divides the logits before sampling; 0 means greedy.
	Temperature float64
	// TopP keeps the smallest set of tokens whose probability reaches TopP
	// (nucleus sampling, Holtzman et al. 2020); 0 or 1 disables it.
	TopP float64
	// TopLogProbs asks for the TopLogProbs most likely tokens at every step.
	TopLogProbs int
	// Rand is the random source, one per prompt (len(Rand) == len(prompts));
	// it must be seeded by the caller.
	Rand []*rand.Rand
	// Stop, when not nil, is called after every sampled token with the tokens
	// of that prompt so far; returning true ends that generation with
	// finish reason "stop".
	Stop func(prompt int, tokens []int) bool
}

// Generation is the output of one prompt.
type Generation struct {
	// Tokens are the sampled tokens, including a final end-of-sequence token
	// when the model chose to stop.
	Tokens []int
	// LogProbs are the log-probabilities of Tokens under the model's
	// parameters at temperature 1 without truncation: the behaviour
	// log-probabilities that policy-gradient training needs.
	LogProbs []float32
	// Top holds, per token, the most likely alternatives when
	// GenerateOptions.TopLogProbs > 0.
	Top [][]TokenLogProb
	// FinishReason is "stop" (end-of-sequence or a stop sequence) or
	// "length" (MaxTokens reached).
	FinishReason string
}

// Model is what a swarm Server hosts: a tokenizer with a chat template, a
// sampler and a trainer. The server never looks inside it, so a tiny tabular
// policy and a transformer language model are served the same way.
//
// Concurrency: the Server calls Generate from many goroutines at once, and
// calls Train, Save and Load only while no Generate is running (it holds a
// read-write lock). Implementations need no locking of their own for that
// pattern.
type Model interface {
	// Name is the model id reported by GET /v1/models.
	Name() string
	// ChatPrompt renders messages with the chat template, ending with the
	// assistant turn's opening, and tokenises the result.
	ChatPrompt(msgs []Message) ([]int, error)
	// TokenBytes returns the bytes a token decodes to; nil for special tokens
	// such as end-of-sequence.
	TokenBytes(tok int) []byte
	// Generate samples one continuation per prompt.
	Generate(ctx context.Context, prompts [][]int, opts GenerateOptions) ([]Generation, error)
	// Train performs one optimisation step on the batch (samples carry the
	// episode reward and TaskID) and increments Version. It returns the
	// step's statistics (loss, gradient norm, ...).
	Train(batch []rl.Sample) (rl.Stats, error)
	// Version is the number of training steps applied so far (the swarm
	// global step).
	Version() int64
	// Save writes the parameters, optimizer state and version.
	Save(w io.Writer) error
	// Load restores what Save wrote, including the version.
	Load(r io.Reader) error
}

// TextEncoder is an optional interface of a Model: it tokenises plain text
// the way the model's generations are tokenised. A model that implements it
// accepts the chat endpoint's assistant_prefix (see the package doc, "Forced
// prefixes").
type TextEncoder interface {
	EncodeText(s string) ([]int, error)
}

// TokenEvent reports one sampled token of a streaming generation.
type TokenEvent struct {
	// Prompt is the index of the prompt (the choice) the token belongs to.
	Prompt int
	// Token and LogProb are what Generation.Tokens and Generation.LogProbs
	// will hold at this position.
	Token   int
	LogProb float32
	// Top are the alternatives when GenerateOptions.TopLogProbs > 0.
	Top []TokenLogProb
	// FinishReason is empty while the prompt's generation goes on and
	// "stop" or "length" on its last token.
	FinishReason string
}

// StreamGenerator is an optional interface of a Model that reports tokens
// while it samples them; the server uses it for "stream": true so that the
// first chunk reaches the client before sampling finishes. Models without
// it are streamed after Generate returns.
//
// GenerateStream must return exactly what Generate returns for the same
// arguments and random sources, and call emit (from the calling goroutine)
// once per sampled token, in order per prompt, ending every prompt with an
// event whose FinishReason is set. emit never blocks for long: the server
// queues the events and writes them to the network from another goroutine,
// so a slow client does not hold the model.
type StreamGenerator interface {
	GenerateStream(ctx context.Context, prompts [][]int, opts GenerateOptions, emit func(TokenEvent)) ([]Generation, error)
}
