package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/textgen"
)

// stream writes a streamed completion (chat or text, by its format) as
// OpenAI server-sent events while the model samples it.
//
// The model's goroutine (holding the server's model read lock) only queues
// TokenEvents (push never blocks); a writer goroutine (run) turns them into
// chunks, writes and flushes each one. So a client that reads slowly, or not
// at all, never holds the model lock that training waits for; the queue is
// bounded by the request's n × max_tokens. A failed write cancels the
// generation.
//
// Content is emitted only where it is final:
//   - whole UTF-8 characters: bytes of a character split across byte-level
//     tokens are held until it is complete, so no chunk carries half a rune
//     (bytes that can never form a character are passed on; JSON encodes
//     each as U+FFFD, exactly as it does in the non-streamed content);
//   - nothing that could be the start of a stop sequence: such bytes are
//     held until the sequence is ruled out or completed (the content ends
//     before a stop sequence, as without streaming).
//
// The concatenated deltas therefore equal the non-streamed content for the
// same seed, and each choice's logprobs entries arrive with the content of
// their tokens (all of them, stop sequence included, by the finish chunk).
type stream struct {
	h       *Handler
	m       Model
	w       http.ResponseWriter
	fl      http.Flusher
	cancel  context.CancelFunc
	spec    streamSpec
	f       streamFormat
	stops   [][]byte
	maxStop int

	mu      sync.Mutex
	queue   []textgen.TokenEvent
	closed  bool
	version int64
	wake    chan struct{}
	done    chan struct{}

	// owned by the writer goroutine until close returns, then by the handler
	started bool // status and headers written
	failed  bool // a write failed; nothing more is written
	fp      string
	ver     int64 // the version of the events written, copied from version
	choices []choiceStream
}

// choiceStream is the writer's state of one choice.
type choiceStream struct {
	started, finished bool
	text              []byte // bytes of all tokens so far
	ends              []int  // byte offset after each token
	emitted           int    // bytes of text sent as content
	lpFrom            int    // first token whose logprobs entry is not sent
	g                 textgen.Generation
	toolAt            int  // offset of the first <tool_call> in text, when toolFound
	toolFound         bool // (requests with tools only)
}

// streamSpec is what a stream needs of its request.
type streamSpec struct {
	n        int        // choices
	stop     []string   // stop sequences (the text ends before them)
	logprobs bool       // send log-probabilities with the text
	usage    bool       // end with a usage chunk
	tools    []api.Tool // parse tool calls of these tools (chat with tools only)
}

// streamFormat builds the events of one kind of streamed completion; fp is
// the system fingerprint of the version sampled.
type streamFormat interface {
	// open is the event that begins choice i (nil: none).
	open(fp string, i int) any
	// text is the event of a piece of choice i's text, with the
	// log-probabilities of its tokens [from, to) when asked for; nil when
	// there is nothing to send.
	text(fp string, i int, piece string, g *textgen.Generation, from, to int) any
	// close is the event that ends choice i with its reason; calls are
	// its tool calls (chat only).
	close(fp string, i int, calls []api.ToolCall, reason string) []any
	// usage is the last chunk with the token counts.
	usage(fp string, u *api.Usage) any
}

func newStream(h *Handler, m Model, w http.ResponseWriter, cancel context.CancelFunc, spec streamSpec, f streamFormat) *stream {
	cs := &stream{h: h, m: m, w: w, cancel: cancel, spec: spec, f: f,
		wake: make(chan struct{}, 1), done: make(chan struct{}), choices: make([]choiceStream, spec.n)}
	cs.fl, _ = w.(http.Flusher)
	for _, st := range spec.stop {
		cs.stops = append(cs.stops, []byte(st))
		cs.maxStop = max(cs.maxStop, len(st))
	}
	return cs
}

// push queues one token event; called by the model's goroutine.
func (cs *stream) push(ev textgen.TokenEvent) {
	cs.mu.Lock()
	if len(cs.queue) >= cs.h.cfg.MaxStreamBacklog {
		// The client reads far slower than the model samples: stop
		// generating rather than hold its tokens.
		cs.mu.Unlock()
		cs.cancel()
		return
	}
	cs.version = ev.Version // the same for every event of a request
	cs.queue = append(cs.queue, ev)
	cs.mu.Unlock()
	select {
	case cs.wake <- struct{}{}:
	default:
	}
}

// close lets the writer drain what is queued and waits for it to return.
func (cs *stream) close() {
	cs.mu.Lock()
	cs.closed = true
	cs.mu.Unlock()
	select {
	case cs.wake <- struct{}{}:
	default:
	}
	<-cs.done
}

// run is the writer goroutine.
func (cs *stream) run() {
	defer close(cs.done)
	var batch []textgen.TokenEvent
	for {
		cs.mu.Lock()
		for len(cs.queue) == 0 && !cs.closed {
			cs.mu.Unlock()
			<-cs.wake
			cs.mu.Lock()
		}
		batch, cs.queue = cs.queue, batch[:0]
		closed := cs.closed
		cs.ver = cs.version
		cs.fp = fingerprint(cs.ver)
		cs.mu.Unlock()
		for _, ev := range batch {
			cs.token(ev)
		}
		clear(batch) // drop references to Top slices
		if closed {
			return
		}
	}
}

// send writes one event and flushes it.
func (cs *stream) send(v any) {
	if cs.failed {
		return
	}
	if !cs.started {
		h := cs.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		h.Set("X-Troupe-Param-Version", strconv.FormatInt(cs.ver, 10))
		cs.w.WriteHeader(http.StatusOK)
		cs.started = true
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"error":{"message":"encoding chunk failed","type":"server_error"}}`)
	}
	var buf bytes.Buffer
	buf.Grow(len(b) + 8)
	buf.WriteString("data: ")
	buf.Write(b)
	buf.WriteString("\n\n")
	httpx.RenewWriteDeadline(cs.w, cs.h.cfg.WriteTimeout)
	if _, err := cs.w.Write(buf.Bytes()); err != nil {
		cs.failed = true
		cs.cancel() // the client is gone: stop generating
		return
	}
	if cs.fl != nil {
		cs.fl.Flush()
	}
}

// token handles one sampled token.
func (cs *stream) token(ev textgen.TokenEvent) {
	if ev.Prompt < 0 || ev.Prompt >= len(cs.choices) {
		return
	}
	i := ev.Prompt
	ch := &cs.choices[i]
	if ch.finished {
		return
	}
	cs.add(i, ev)
	if ev.FinishReason != "" {
		cs.finishChoice(i, ev.FinishReason)
		return
	}
	safe := cs.safeEnd(ch)
	if safe > ch.emitted {
		j := ch.lpFrom
		for j < len(ch.ends) && ch.ends[j] <= safe {
			j++
		}
		cs.send(cs.f.text(cs.fp, i, string(ch.text[ch.emitted:safe]), &ch.g, ch.lpFrom, j))
		ch.lpFrom, ch.emitted = j, safe
	}
}

// add appends a token to choice i, sending its role chunk first.
func (cs *stream) add(i int, ev textgen.TokenEvent) {
	ch := &cs.choices[i]
	cs.begin(i)
	ch.g.Tokens = append(ch.g.Tokens, ev.Token)
	ch.g.LogProbs = append(ch.g.LogProbs, ev.LogProb)
	ch.g.TopLogProbs = append(ch.g.TopLogProbs, ev.TopLogProbs)
	ch.text = append(ch.text, cs.m.TokenBytes(ev.Token)...)
	ch.ends = append(ch.ends, len(ch.text))
}

// safeEnd is how far the choice's text is final: before any suffix that
// could begin a stop sequence, and at a character boundary.
func (cs *stream) safeEnd(ch *choiceStream) int {
	b := ch.text
	limit := len(b)
	for k := max(ch.emitted, len(b)-cs.maxStop+1); k < len(b); k++ {
		if cs.stopPrefix(b[k:]) {
			limit = k
			break
		}
	}
	if len(cs.spec.tools) > 0 {
		limit = min(limit, cs.toolSafeEnd(ch))
	}
	i := ch.emitted
	for i < limit && utf8.FullRune(b[i:]) {
		_, n := utf8.DecodeRune(b[i:])
		if i+n > limit {
			break
		}
		i += n
	}
	return i
}

// toolSafeEnd is how far the text of a request with tools is final: a
// <tool_call> (or what may begin one at the end) and everything after it
// wait for the finish, which parses the calls, and so does white space
// before it, which the message content leaves out when calls follow.
func (cs *stream) toolSafeEnd(ch *choiceStream) int {
	b := ch.text
	if !ch.toolFound {
		if k := bytes.Index(b[ch.emitted:], []byte(toolCallOpen)); k >= 0 {
			ch.toolAt, ch.toolFound = ch.emitted+k, true
		}
	}
	limit := len(b)
	if ch.toolFound {
		limit = ch.toolAt
	} else {
		for k := max(ch.emitted, len(b)-len(toolCallOpen)+1); k < len(b); k++ {
			if bytes.HasPrefix([]byte(toolCallOpen), b[k:]) {
				limit = k
				break
			}
		}
	}
	for limit > ch.emitted && strings.IndexByte(" \t\r\n", b[limit-1]) >= 0 {
		limit--
	}
	return limit
}

// stopPrefix says whether x is a proper prefix of a stop sequence.
func (cs *stream) stopPrefix(x []byte) bool {
	for _, st := range cs.stops {
		if len(x) < len(st) && bytes.HasPrefix(st, x) {
			return true
		}
	}
	return false
}

// begin sends the event that opens choice i, once.
func (cs *stream) begin(i int) {
	if ch := &cs.choices[i]; !ch.started {
		ch.started = true
		if ev := cs.f.open(cs.fp, i); ev != nil {
			cs.send(ev)
		}
	}
}

// finishChoice sends the rest of choice i's content (cut before a stop
// sequence), its remaining logprobs and its finish event.
func (cs *stream) finishChoice(i int, reason string) {
	ch := &cs.choices[i]
	cs.begin(i)
	content, cut := stopContent(ch.text, cs.spec.stop)
	if cut {
		reason = "stop"
	}
	var calls []api.ToolCall
	if len(cs.spec.tools) > 0 {
		if text, cc, ok := parseToolCalls(content, cs.spec.tools); ok {
			content, calls, reason = text, cc, "tool_calls"
		}
	}
	rest := ""
	if ch.emitted < len(content) {
		rest = content[ch.emitted:]
	}
	if ev := cs.f.text(cs.fp, i, rest, &ch.g, ch.lpFrom, len(ch.g.Tokens)); ev != nil {
		cs.send(ev)
	}
	ch.lpFrom, ch.emitted = len(ch.g.Tokens), len(content)
	for _, ev := range cs.f.close(cs.fp, i, calls, reason) {
		cs.send(ev)
	}
	ch.finished = true
}

// finish completes the stream after the completion was recorded: choices
// whose events did not end them are completed from gens, then the usage
// chunk (stream_options.include_usage) and [DONE] follow.
func (cs *stream) finish(gens []textgen.Generation, usage *api.Usage) {
	for i := range cs.choices {
		if i >= len(gens) || cs.choices[i].finished {
			continue
		}
		g := gens[i]
		for t := len(cs.choices[i].g.Tokens); t < len(g.Tokens); t++ {
			ev := textgen.TokenEvent{Prompt: i, Token: g.Tokens[t]}
			if t < len(g.LogProbs) {
				ev.LogProb = g.LogProbs[t]
			}
			if t < len(g.TopLogProbs) {
				ev.TopLogProbs = g.TopLogProbs[t]
			}
			cs.add(i, ev)
		}
		reason := g.FinishReason
		if reason == "" {
			reason = "length"
		}
		cs.finishChoice(i, reason)
	}
	if cs.spec.usage {
		cs.send(cs.f.usage(cs.fp, usage))
	}
	if cs.failed {
		return
	}
	httpx.RenewWriteDeadline(cs.w, cs.h.cfg.WriteTimeout)
	if _, err := cs.w.Write([]byte("data: [DONE]\n\n")); err == nil && cs.fl != nil {
		cs.fl.Flush()
	}
}

// sendError ends a stream that has begun with an OpenAI error event (the
// official SDKs raise it); no [DONE] follows.
func (cs *stream) sendError(e *httpx.Error) {
	typ := "server_error"
	if e.Status < 500 {
		typ = "invalid_request_error"
	}
	cs.send(map[string]any{"error": map[string]any{"message": e.Msg, "type": typ, "code": e.Code, "param": nil}})
}

// chatFormat streams chat.completion.chunk events.
type chatFormat struct {
	m         Model
	id, model string
	created   int64
	logprobs  bool
}

func (f *chatFormat) chunk(fp string, ch ...api.ChunkChoice) api.ChatChunk {
	return api.ChatChunk{ObjectHeader: api.ObjectHeader{ID: f.id, Object: "chat.completion.chunk", Created: f.created, Model: f.model},
		SystemFingerprint: fp, Choices: ch}
}

func (f *chatFormat) open(fp string, i int) any {
	empty := ""
	return f.chunk(fp, api.ChunkChoice{Index: i, Delta: api.Delta{Role: "assistant", Content: &empty}})
}

func (f *chatFormat) text(fp string, i int, piece string, g *textgen.Generation, from, to int) any {
	c := api.ChunkChoice{Index: i, Delta: api.Delta{Content: &piece}}
	if f.logprobs {
		c.LogProbs = logprobsObject(f.m, *g, from, to)
	}
	if piece == "" && (c.LogProbs == nil || len(c.LogProbs.Content) == 0) {
		return nil
	}
	return f.chunk(fp, c)
}

func (f *chatFormat) close(fp string, i int, calls []api.ToolCall, reason string) []any {
	var out []any
	if len(calls) > 0 {
		out = append(out, f.chunk(fp, api.ChunkChoice{Index: i, Delta: api.Delta{ToolCalls: indexCalls(calls, true)}}))
	}
	return append(out, f.chunk(fp, api.ChunkChoice{Index: i, Delta: api.Delta{}, FinishReason: &reason}))
}

func (f *chatFormat) usage(fp string, u *api.Usage) any {
	c := f.chunk(fp)
	c.Choices, c.Usage = []api.ChunkChoice{}, u
	return c
}
