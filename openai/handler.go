package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/textgen"
)

// Model is what a chat completion runs on: a chat template and tokenizer,
// and generation. Generate may be called from many goroutines at once.
type Model interface {
	// Name is the model id reported in responses.
	Name() string
	// ChatPrompt renders msgs (and tools, when not empty) with the chat
	// template, ending with the assistant turn's opening, and tokenises
	// the result. A model whose template cannot render tools returns an
	// error wrapping ErrNoToolTemplate when tools is not empty, and folds
	// earlier turns' tool calls into their text (FoldToolCalls). ctx
	// bounds the rendering.
	ChatPrompt(ctx context.Context, msgs []api.Message, tools []api.Tool) ([]int, error)
	// TokenBytes returns the bytes a token decodes to; nil for special
	// tokens such as end-of-sequence.
	TokenBytes(tok int) []byte
	// Generate samples one continuation per prompt (prompt i from
	// PCG(opts.Seed, i)); emit, when not nil, receives every token as it
	// is sampled, from one goroutine, and must not block.
	Generate(ctx context.Context, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error)
}

// TextEncoder is an optional interface of a Model: it tokenises plain text
// the way its generations are tokenised. A model that implements it accepts
// the chat endpoint's assistant_prefix and the completions endpoint.
type TextEncoder interface {
	EncodeText(s string) ([]int, error)
}

// Errors a Model's ChatPrompt wraps so that the request is refused with
// 400 and a reason: ErrNoToolTemplate when the chat template cannot render
// tools, ErrTemplateBudget when rendering these messages exceeds the
// template's work, output or memory budget.
var (
	ErrNoToolTemplate = errors.New("the model's chat template does not render tools")
	ErrTemplateBudget = errors.New("the chat template exceeded its budget")
)

// Config bounds the requests a Handler takes. Zero fields take the
// defaults below.
type Config struct {
	// MaxN bounds a request's n (DefaultMaxN).
	MaxN int
	// MaxRequestTokens bounds n × max_tokens of one request, the sampling
	// work it can ask for (DefaultMaxRequestTokens). A request that sets
	// max_tokens beyond it gets 400; one that leaves max_tokens out gets at
	// most MaxRequestTokens/n tokens per choice.
	MaxRequestTokens int
	// MaxBodyBytes bounds request bodies (DefaultMaxBodyBytes); larger
	// ones get 413.
	MaxBodyBytes int64
	// WriteTimeout bounds each write of a response (renewed per streamed
	// chunk), so a client that stops reading is cut; 0: no deadline.
	WriteTimeout time.Duration
	// OnTokens, when set, receives each completion's prompt and sampled
	// token counts.
	OnTokens func(prompt, completion int)
	// MaxInFlight bounds the completions running at once
	// (DefaultMaxInFlight); a request beyond it waits up to QueueWait for
	// one to end, then gets 429 with Retry-After.
	MaxInFlight int
	// MaxInFlightPerClient bounds the completions one client
	// (Call.Client) runs at once (DefaultMaxInFlightPerClient); beyond it
	// a request gets 429 at once.
	MaxInFlightPerClient int
	// QueueWait is how long a request waits for room under MaxInFlight
	// (DefaultQueueWait).
	QueueWait time.Duration
	// MaxStreamBacklog bounds the token events a stream holds for a
	// client that reads slower than the model samples
	// (DefaultMaxStreamBacklog); beyond it the stream ends with an error
	// and the generation stops, so an unread stream cannot pin memory.
	MaxStreamBacklog int
}

// Handler defaults.
const (
	DefaultMaxN                 = 16
	DefaultMaxRequestTokens     = 16384
	DefaultMaxBodyBytes         = 1 << 20
	DefaultMaxInFlight          = 1024
	DefaultMaxInFlightPerClient = 256
	DefaultQueueWait            = 10 * time.Second
	DefaultMaxStreamBacklog     = 1 << 14
)

// Handler answers OpenAI chat completions for a host that decides, per
// request, which model runs it and what is recorded: a swarm server (the
// episode's key selects its model and records the completion for
// training) or a plain inference server (package openai's Server).
type Handler struct {
	cfg   Config
	slots chan struct{} // MaxInFlight tokens

	mu        sync.Mutex
	perClient map[string]int
}

// NewHandler returns a Handler with cfg's defaults filled in.
func NewHandler(cfg Config) *Handler {
	if cfg.MaxN <= 0 {
		cfg.MaxN = DefaultMaxN
	}
	if cfg.MaxRequestTokens <= 0 {
		cfg.MaxRequestTokens = DefaultMaxRequestTokens
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxInFlightPerClient <= 0 {
		cfg.MaxInFlightPerClient = DefaultMaxInFlightPerClient
	}
	if cfg.QueueWait <= 0 {
		cfg.QueueWait = DefaultQueueWait
	}
	if cfg.MaxStreamBacklog <= 0 {
		cfg.MaxStreamBacklog = DefaultMaxStreamBacklog
	}
	return &Handler{cfg: cfg, slots: make(chan struct{}, cfg.MaxInFlight), perClient: map[string]int{}}
}

// admit takes a slot of the request's client and of the handler, waiting
// up to QueueWait (or the request's end) for the latter; release returns
// them.
func (h *Handler) admit(ctx context.Context, client string) (release func(), e *httpx.Error) {
	h.mu.Lock()
	if h.perClient[client] >= h.cfg.MaxInFlightPerClient {
		n := h.perClient[client]
		h.mu.Unlock()
		return nil, &httpx.Error{Status: http.StatusTooManyRequests, Code: "client_limit",
			Msg: fmt.Sprintf("this client has %d completions running, the limit of this server; wait for one to end", n)}
	}
	h.perClient[client]++
	h.mu.Unlock()
	done := func() {
		h.mu.Lock()
		if h.perClient[client]--; h.perClient[client] <= 0 {
			delete(h.perClient, client)
		}
		h.mu.Unlock()
	}
	t := time.NewTimer(h.cfg.QueueWait)
	defer t.Stop()
	select {
	case h.slots <- struct{}{}:
		return func() { <-h.slots; done() }, nil
	case <-t.C:
		done()
		return nil, &httpx.Error{Status: http.StatusTooManyRequests, Code: "server_busy",
			Msg: fmt.Sprintf("%d completions are running, the limit of this server, and none ended within %s", h.cfg.MaxInFlight, h.cfg.QueueWait)}
	case <-ctx.Done():
		done()
		return nil, &httpx.Error{Status: http.StatusServiceUnavailable, Code: "cancelled", Msg: "the request ended while it waited"}
	}
}

// Config returns the handler's configuration with its defaults.
func (h *Handler) Config() Config { return h.cfg }

// Call is what the host decided about one request.
type Call struct {
	// Model runs the request; Name is reported as its model.
	Model Model
	Name  string
	// MaxPromptTokens and MaxResponseTokens bound the rendered prompt and
	// max_tokens (the default when a request leaves it out).
	MaxPromptTokens, MaxResponseTokens int
	// Reserve, when set, is called before generation with the request's
	// worst-case token count (prompt plus n × max_tokens); an error is the
	// answer.
	Reserve func(tokens int) *httpx.Error
	// Record, when set, receives the finished completion before the
	// response is completed; an error is the answer (or the stream's error
	// event).
	Record func(Completion) *httpx.Error
	// Done, when set, is called when the request is over, whatever its
	// outcome.
	Done func()
	// Client names who the request counts against under
	// Config.MaxInFlightPerClient ("" counts as one client).
	Client string
}

// Completion is a finished chat completion as a host records it.
type Completion struct {
	// Prompt is the rendered prompt (with assistant_context appended);
	// Forced the tokens of assistant_prefix (nil without one).
	Prompt, Forced []int
	// Gens are the choices, each with the version it was sampled under.
	Gens []textgen.Generation
	// Temperature is the request's sampling temperature.
	Temperature float64
}
