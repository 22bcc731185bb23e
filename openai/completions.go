package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/textgen"
)

// completionRequestIn is a (legacy) completions request as parsed.
type completionRequestIn struct {
	samplingIn
	Prompt           json.RawMessage `json:"prompt"`
	Logprobs         *int            `json:"logprobs"`
	Echo             *bool           `json:"echo"`
	Suffix           *string         `json:"suffix"`
	BestOf           *int            `json:"best_of"`
	LogitBias        map[string]any  `json:"logit_bias"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	User             *string         `json:"user"`
}

// maxCompletionPrompts bounds the prompts of one request.
const maxCompletionPrompts = 64

// parsePrompts reads a completions prompt: a string, a list of strings, a
// list of token ids or a list of such lists.
func parsePrompts(raw json.RawMessage, m Model) ([][]int, *httpx.Error) {
	c := bytes.TrimSpace(raw)
	if len(c) == 0 || string(c) == "null" {
		return nil, httpx.BadRequest("prompt", "missing")
	}
	enc, _ := m.(TextEncoder)
	text := func(s string) ([]int, *httpx.Error) {
		if enc == nil {
			return nil, httpx.BadRequest("prompt", "model %q cannot encode text; send token ids", m.Name())
		}
		ids, err := enc.EncodeText(s)
		if err != nil {
			return nil, httpx.BadRequest("prompt", "cannot be encoded: %v", err)
		}
		return ids, nil
	}
	var one string
	if json.Unmarshal(c, &one) == nil {
		ids, e := text(one)
		return [][]int{ids}, e
	}
	var ids []int
	if json.Unmarshal(c, &ids) == nil {
		return [][]int{ids}, nil
	}
	var many []string
	var lists [][]int
	var out [][]int
	switch {
	case json.Unmarshal(c, &many) == nil:
		for _, s := range many {
			ids, e := text(s)
			if e != nil {
				return nil, e
			}
			out = append(out, ids)
		}
	case json.Unmarshal(c, &lists) == nil:
		out = lists
	default:
		return nil, httpx.BadRequest("prompt", "expected a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	if len(out) == 0 || len(out) > maxCompletionPrompts {
		return nil, httpx.BadRequest("prompt", "must hold 1 to %d prompts, got %d", maxCompletionPrompts, len(out))
	}
	return out, nil
}

// Completion answers one (legacy) text completion on the model that
// resolve picks for the request's model field: POST /v1/completions.
// Prompts may be text or token ids; each prompt gets n choices (choice
// index prompt×n + j, sampled from PCG(seed, index)).
func (h *Handler) Completion(w http.ResponseWriter, r *http.Request, resolve func(model string) (*Call, *httpx.Error)) {
	body, e := httpx.ReadBody(w, r, h.cfg.MaxBodyBytes)
	if e == nil {
		var req completionRequestIn
		if e = httpx.DecodeJSON(body, &req); e == nil {
			e = h.completion(w, r, &req, resolve)
		}
	}
	if e != nil {
		httpx.OpenAIError(w, e)
	}
}

func (h *Handler) completion(w http.ResponseWriter, r *http.Request, req *completionRequestIn, resolve func(string) (*Call, *httpx.Error)) *httpx.Error {
	name := ""
	if req.Model != nil {
		name = *req.Model
	}
	c, e := resolve(name)
	if e != nil {
		return e
	}
	if c.Done != nil {
		defer c.Done()
	}
	release, e := h.admit(r.Context(), c.Client)
	if e != nil {
		w.Header().Set("Retry-After", "1")
		return e
	}
	defer release()
	if req.MaxTokens == nil && req.MaxCompletionTokens == nil {
		sixteen := 16 // OpenAI's default for completions
		req.MaxTokens = &sixteen
	}
	p, e := h.parseSampling(&req.samplingIn, c.MaxResponseTokens)
	if e != nil {
		return e
	}
	switch {
	case req.Suffix != nil && *req.Suffix != "":
		return httpx.BadRequest("suffix", "is not supported")
	case req.BestOf != nil && *req.BestOf != 1 && (req.N == nil || *req.BestOf != *req.N):
		return httpx.BadRequest("best_of", "only best_of = n is supported")
	case len(req.LogitBias) > 0:
		return httpx.BadRequest("logit_bias", "is not supported")
	case req.PresencePenalty != nil && *req.PresencePenalty != 0, req.FrequencyPenalty != nil && *req.FrequencyPenalty != 0:
		return httpx.BadRequest("presence_penalty", "presence and frequency penalties are not supported")
	}
	logprobs := -1
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > textgen.MaxTopLogProbs {
			return httpx.BadRequest("logprobs", "must be in [0, %d], got %d", textgen.MaxTopLogProbs, *req.Logprobs)
		}
		logprobs = *req.Logprobs
	}
	echo := req.Echo != nil && *req.Echo
	if echo && (logprobs >= 0 || p.stream) {
		return httpx.BadRequest("echo", "is supported without logprobs and stream only")
	}
	prompts, e := parsePrompts(req.Prompt, c.Model)
	if e != nil {
		return e
	}
	var all [][]int
	for i, pr := range prompts {
		if len(pr) == 0 {
			return httpx.BadRequest("prompt", "prompt %d is empty", i)
		}
		if len(pr) > c.MaxPromptTokens {
			return &httpx.Error{Status: http.StatusBadRequest, Param: "prompt", Code: "context_length_exceeded",
				Msg: fmt.Sprintf("prompt %d has %d tokens, more than the limit of %d", i, len(pr), c.MaxPromptTokens)}
		}
		for range p.n {
			all = append(all, pr)
		}
	}
	if len(all) > h.cfg.MaxN*maxCompletionPrompts || len(all)*p.maxTokens > h.cfg.MaxRequestTokens {
		return httpx.BadRequest("n", "%d choices × max_tokens %d exceed this server's limit of %d sampled tokens per request", len(all), p.maxTokens, h.cfg.MaxRequestTokens)
	}
	opts := p.options(0, max(logprobs, 0))
	if len(p.stop) > 0 {
		opts.Stop = stopFunc(c.Model.TokenBytes, len(all), p.stop)
	}
	id := "cmpl-" + randHex(12)
	f := &completionFormat{m: c.Model, id: id, model: c.Name, created: time.Now().Unix(), logprobs: logprobs >= 0}
	spec := streamSpec{n: len(all), stop: p.stop, logprobs: logprobs >= 0, usage: p.usage}
	var sf streamFormat
	if p.stream {
		sf = f
	}
	gens, cs, ok := h.generate(w, r, c.Model, all, opts, spec, sf)
	if !ok {
		return nil
	}
	promptTokens, completion := 0, 0
	for i, g := range gens {
		completion += len(g.Tokens)
		if i%p.n == 0 {
			promptTokens += len(all[i])
		}
	}
	if h.cfg.OnTokens != nil {
		h.cfg.OnTokens(promptTokens, completion)
	}
	usage := &api.Usage{PromptTokens: promptTokens, CompletionTokens: completion, TotalTokens: promptTokens + completion}
	if cs != nil {
		cs.finish(gens, usage)
		return nil
	}
	version := int64(0)
	resp := api.CompletionResponse{ObjectHeader: api.ObjectHeader{ID: id, Object: "text_completion", Created: f.created, Model: c.Name}, Usage: usage}
	for i, g := range gens {
		version = g.Version
		text, truncated := stopContent(tokenText(c.Model, g.Tokens), p.stop)
		reason := g.FinishReason
		if truncated {
			reason = "stop"
		}
		if echo {
			text = string(tokenText(c.Model, all[i])) + text
		}
		ch := api.CompletionChoice{Index: i, Text: text, FinishReason: &reason}
		if logprobs >= 0 {
			ch.LogProbs = f.logprobsOf(&g, 0, len(g.Tokens), 0)
		}
		resp.Choices = append(resp.Choices, ch)
	}
	resp.SystemFingerprint = fingerprint(version)
	httpx.RenewWriteDeadline(w, h.cfg.WriteTimeout)
	w.Header().Set("X-Troupe-Param-Version", strconv.FormatInt(version, 10))
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// completionFormat streams text_completion chunks.
type completionFormat struct {
	m         Model
	id, model string
	created   int64
	logprobs  bool
	offsets   map[int]int // text offset reached per choice
}

// logprobsOf is the logprobs object of tokens [from, to) of g, whose text
// starts at offset within the choice's text.
func (f *completionFormat) logprobsOf(g *textgen.Generation, from, to, offset int) *api.CompletionLogProbs {
	lp := &api.CompletionLogProbs{Tokens: []string{}, TokenLogProbs: []float32{}, TopLogProbs: []map[string]float32{}, TextOffset: []int{}}
	for t := from; t < to; t++ {
		b := f.m.TokenBytes(g.Tokens[t])
		lp.Tokens = append(lp.Tokens, string(b))
		lp.TokenLogProbs = append(lp.TokenLogProbs, g.LogProbs[t])
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += len(b)
		top := map[string]float32{}
		if t < len(g.TopLogProbs) {
			for _, alt := range g.TopLogProbs[t] {
				top[string(f.m.TokenBytes(alt.Token))] = alt.LogProb
			}
		}
		lp.TopLogProbs = append(lp.TopLogProbs, top)
	}
	return lp
}

func (f *completionFormat) chunk(fp string, ch ...api.CompletionChoice) api.CompletionResponse {
	return api.CompletionResponse{ObjectHeader: api.ObjectHeader{ID: f.id, Object: "text_completion", Created: f.created, Model: f.model}, SystemFingerprint: fp, Choices: ch}
}

func (f *completionFormat) open(string, int) any { return nil }

func (f *completionFormat) text(fp string, i int, piece string, g *textgen.Generation, from, to int) any {
	if piece == "" && !(f.logprobs && to > from) {
		return nil
	}
	ch := api.CompletionChoice{Index: i, Text: piece}
	if f.logprobs {
		if f.offsets == nil {
			f.offsets = map[int]int{}
		}
		ch.LogProbs = f.logprobsOf(g, from, to, f.offsets[i])
	}
	if f.offsets != nil {
		f.offsets[i] += len(piece)
	}
	return f.chunk(fp, ch)
}

func (f *completionFormat) close(fp string, i int, _ []api.ToolCall, reason string) []any {
	return []any{f.chunk(fp, api.CompletionChoice{Index: i, FinishReason: &reason})}
}

func (f *completionFormat) usage(fp string, u *api.Usage) any {
	c := f.chunk(fp)
	c.Choices, c.Usage = []api.CompletionChoice{}, u
	return c
}
