package swarm

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/troupe-ml/troupe/rl"
)

// MaxEpisodeCompletions bounds the completions one episode may record (its
// memory); further requests get 429.
const MaxEpisodeCompletions = 4096

// OpenAI chat-completions wire types (the subset this server implements).

type chatMessageIn struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    *string         `json:"name"`
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
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal,omitempty"`
	Name    string  `json:"name,omitempty"`
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
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
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
	mt := req.MaxCompletionTokens
	field := "max_completion_tokens"
	if mt == nil {
		mt, field = req.MaxTokens, "max_tokens"
	}
	if mt != nil {
		if *mt < 1 || *mt > maxResp {
			return nil, badRequest(field, "must be in [1, %d], got %d", maxResp, *mt)
		}
		p.maxTokens = *mt
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
	if p.stop, e = parseStop(req.Stop); e != nil {
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
	prompt, err := s.model.ChatPrompt(p.msgs)
	if err != nil {
		openaiError(w, badRequest("messages", "%v", err))
		return
	}
	if len(prompt) > tc.MaxPromptTokens {
		openaiError(w, &apiError{status: http.StatusBadRequest, param: "messages", code: "context_length_exceeded",
			msg: fmt.Sprintf("prompt has %d tokens, more than the limit of %d", len(prompt), tc.MaxPromptTokens)})
		return
	}
	prompts := make([][]int, p.n)
	rngs := make([]*rand.Rand, p.n)
	for i := range prompts {
		prompts[i] = prompt
		if p.seed != nil {
			rngs[i] = rand.New(rand.NewPCG(uint64(*p.seed), uint64(i)))
		} else {
			rngs[i] = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		}
	}
	opts := GenerateOptions{MaxTokens: p.maxTokens, Temperature: p.temperature, TopP: p.topP, Rand: rngs}
	if p.logprobs {
		opts.TopLogProbs = p.topLogprobs
	}
	var tails [][]byte
	if len(p.stop) > 0 {
		tails = make([][]byte, p.n)
		maxStop := 0
		for _, st := range p.stop {
			maxStop = max(maxStop, len(st))
		}
		opts.Stop = func(i int, toks []int) bool {
			tails[i] = append(tails[i], s.model.TokenBytes(toks[len(toks)-1])...)
			win := tails[i]
			if len(win) > maxStop+16 {
				win = win[len(win)-maxStop-16:]
			}
			for _, st := range p.stop {
				if bytes.Contains(win, []byte(st)) {
					return true
				}
			}
			return false
		}
	}
	s.modelMu.RLock()
	version := s.model.Version()
	gens, err := s.model.Generate(r.Context(), prompts, opts)
	s.modelMu.RUnlock()
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away; nothing is recorded
		}
		openaiError(w, &apiError{status: http.StatusInternalServerError, msg: "generation failed: " + err.Error()})
		return
	}

	// record under the episode
	s.mu.Lock()
	recorded = true
	ep.inflight--
	ep.lastActive = time.Now()
	open := s.episodes[ep.id] == ep
	if open {
		for _, g := range gens {
			ep.samples = append(ep.samples, rl.Sample{Prompt: prompt, Actions: g.Tokens, LogProbs: g.LogProbs, Version: version})
		}
	}
	s.mu.Unlock()
	if !open {
		openaiError(w, &apiError{status: http.StatusConflict, msg: "the episode was closed while this completion was generated; its result was not recorded", code: "episode_closed"})
		return
	}

	completion := 0
	for _, g := range gens {
		completion += len(g.Tokens)
	}
	s.m.tokens.WithLabelValues("prompt").Add(float64(len(prompt)))
	s.m.tokens.WithLabelValues("completion").Add(float64(completion))
	usage := &Usage{PromptTokens: len(prompt), CompletionTokens: completion, TotalTokens: len(prompt) + completion}
	id := "chatcmpl-" + randHex(12)
	created := time.Now().Unix()
	fp := "troupe-v" + strconv.FormatInt(version, 10)
	model := s.model.Name()
	w.Header().Set("X-Troupe-Param-Version", strconv.FormatInt(version, 10))

	choices := make([]ChatChoice, len(gens))
	for i, g := range gens {
		content := decodeTokens(s.model, g.Tokens)
		finish := g.FinishReason
		for _, st := range p.stop {
			if k := strings.Index(content, st); k >= 0 {
				content, finish = content[:k], "stop"
			}
		}
		choices[i] = ChatChoice{Index: i, Message: ChatMessage{Role: "assistant", Content: content}, FinishReason: finish}
		if p.logprobs {
			choices[i].LogProbs = s.logprobsObject(g, 0, len(g.Tokens))
		}
	}
	if !p.stream {
		writeJSON(w, http.StatusOK, ChatResponse{ID: id, Object: "chat.completion", Created: created, Model: model,
			Choices: choices, Usage: usage, SystemFingerprint: fp})
		return
	}
	s.streamChat(w, id, created, model, fp, gens, choices, p, usage)
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

// streamChat writes the completion as OpenAI server-sent events: per choice a
// role chunk, content chunks (whole UTF-8 characters, one or more tokens
// each) and a finish chunk; then an optional usage chunk and "[DONE]". The
// tiny models generate faster than a network round trip, so the events are
// written after sampling.
func (s *Server) streamChat(w http.ResponseWriter, id string, created int64, model, fp string, gens []Generation, choices []ChatChoice, p *chatParams, usage *Usage) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	var buf bytes.Buffer
	emit := func(c ChatChunk) {
		b, _ := json.Marshal(c)
		buf.WriteString("data: ")
		buf.Write(b)
		buf.WriteString("\n\n")
	}
	base := func(ch ...ChatChunkChoice) ChatChunk {
		return ChatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, SystemFingerprint: fp, Choices: ch}
	}
	empty := ""
	for i, g := range gens {
		emit(base(ChatChunkChoice{Index: i, Delta: ChatDelta{Role: "assistant", Content: &empty}}))
		content := choices[i].Message.Content
		emitted := 0
		var pending []byte
		first := 0
		for t := range g.Tokens {
			if emitted+len(pending) >= len(content) {
				break
			}
			pending = append(pending, s.model.TokenBytes(g.Tokens[t])...)
			if !utf8.Valid(pending) && len(pending) < 4 && t+1 < len(g.Tokens) {
				continue
			}
			piece := string(pending)
			if emitted+len(piece) > len(content) {
				piece = piece[:len(content)-emitted]
			}
			c := ChatChunkChoice{Index: i, Delta: ChatDelta{Content: &piece}}
			if p.logprobs {
				c.LogProbs = s.logprobsObject(g, first, t+1)
			}
			emit(base(c))
			emitted += len(piece)
			pending = pending[:0]
			first = t + 1
		}
		fr := choices[i].FinishReason
		emit(base(ChatChunkChoice{Index: i, Delta: ChatDelta{}, FinishReason: &fr}))
		if fl != nil && buf.Len() > 16<<10 {
			w.Write(buf.Bytes())
			buf.Reset()
			fl.Flush()
		}
	}
	if p.usage {
		c := base()
		c.Choices = []ChatChunkChoice{}
		c.Usage = usage
		emit(c)
	}
	buf.WriteString("data: [DONE]\n\n")
	w.Write(buf.Bytes())
	if fl != nil {
		fl.Flush()
	}
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
