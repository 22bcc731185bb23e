package swarm

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/record"
)

// MaxEpisodeCompletions bounds the completions one episode may record (its
// memory); further requests get 429.
const MaxEpisodeCompletions = 4096

// handleChat answers POST /v1/chat/completions: the episode's key selects
// the model (whatever the request's model field says, as AgentJet's
// clients send any), the episode's token budget bounds the request, and
// the finished completion is recorded under the episode for training.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	key := httpx.Bearer(r)
	if key == "" {
		httpx.OpenAIError(w, &httpx.Error{Status: http.StatusUnauthorized, Msg: "missing API key: send the episode's openai_api_key as Authorization: Bearer <key>", Code: "invalid_api_key"})
		return
	}
	s.mu.Lock()
	ep := s.eps.forKey(key)
	if ep == nil {
		s.mu.Unlock()
		httpx.OpenAIError(w, &httpx.Error{Status: http.StatusUnauthorized, Msg: "invalid API key, or its episode has ended", Code: "invalid_api_key"})
		return
	}
	if ep.calls >= MaxEpisodeCompletions {
		s.mu.Unlock()
		httpx.OpenAIError(w, &httpx.Error{Status: http.StatusTooManyRequests, Code: "episode_limit",
			Msg: fmt.Sprintf("an episode may make at most %d completions", MaxEpisodeCompletions)})
		return
	}
	ep.inflight++
	ep.calls++
	ep.lastActive = time.Now()
	if ac := s.batch.active[ep.client]; ac != nil {
		ac.lastActivity = ep.lastActive
	}
	tc := s.train
	s.mu.Unlock()
	var msgs []api.Message
	if s.keepsConversations() {
		body, e := httpx.ReadBody(w, r, s.cfg.MaxBodyBytes)
		if e != nil {
			s.mu.Lock()
			ep.inflight--
			s.mu.Unlock()
			httpx.OpenAIError(w, e)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		msgs = record.Messages(body)
	}
	recorded, reserved := false, 0
	done := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		ep.reserved -= reserved
		if !recorded {
			ep.inflight--
			ep.lastActive = time.Now()
		}
	}
	call := &openai.Call{Model: s.model, Name: s.model.Name(), Client: ep.client, MaxPromptTokens: tc.MaxPromptTokens, MaxResponseTokens: tc.MaxResponseTokens, Done: done,
		Reserve: func(n int) *httpx.Error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if ep.tokens+ep.reserved+n > s.cfg.MaxEpisodeTokens {
				return &httpx.Error{Status: http.StatusTooManyRequests, Code: "episode_token_limit",
					Msg: fmt.Sprintf("this completion could record %d tokens (prompt and n × max_tokens); the episode holds %d of its limit of %d: end it and begin another",
						n, ep.tokens+ep.reserved, s.cfg.MaxEpisodeTokens)}
			}
			ep.reserved += n
			reserved = n
			return nil
		},
		Record: func(c openai.Completion) *httpx.Error {
			s.mu.Lock()
			defer s.mu.Unlock()
			recorded = true
			ep.inflight--
			ep.lastActive = time.Now()
			if s.eps.open[ep.id] != ep {
				return &httpx.Error{Status: http.StatusConflict, Msg: "the episode was closed while this completion was generated; its result was not recorded", Code: "episode_closed"}
			}
			for _, g := range c.Gens {
				if c.Forced != nil {
					// The decision alone: the trainer computes its behaviour
					// log-probabilities (ratio 1); the continuation only
					// scored it.
					ep.samples = append(ep.samples, rl.Sample{Prompt: c.Prompt, Actions: c.Forced, Version: g.Version, OnPolicy: true})
					continue
				}
				ep.samples = append(ep.samples, rl.Sample{Prompt: c.Prompt, Actions: g.Tokens, LogProbs: g.LogProbs, Version: g.Version, Temperature: c.Temperature})
			}
			ep.tokens += len(c.Prompt) + len(c.Forced)
			for _, g := range c.Gens {
				ep.tokens += len(g.Tokens)
			}
			if msgs != nil {
				s.keepConversationLocked(ep, msgs, c)
			}
			return nil
		}}
	s.chat.Chat(w, r, func(string) (*openai.Call, *httpx.Error) { return call, nil })
}

func (s *Server) modelObject() api.ModelObject {
	return api.ModelObject{ID: s.model.Name(), Object: "model", OwnedBy: "troupe", Root: s.model.Name()}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	httpx.WriteJSON(w, http.StatusOK, api.ModelList{Object: "list", Data: []api.ModelObject{s.modelObject()}})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") != s.model.Name() {
		httpx.OpenAIError(w, &httpx.Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("model %q does not exist; this server hosts %q", r.PathValue("id"), s.model.Name()), Code: "model_not_found"})
		return
	}
	httpx.WriteJSON(w, http.StatusOK, s.modelObject())
}

// keepsConversations says whether episodes keep their conversations: a
// server that writes sample files, or a front-end whose trainer may.
func (s *Server) keepsConversations() bool {
	return s.cfg.CheckpointDir != "" || s.cfg.Role == RoleRollout
}

// keepConversationLocked adds a recorded completion's messages and texts
// to its episode's conversation.
func (s *Server) keepConversationLocked(ep *episode, msgs []api.Message, c openai.Completion) {
	texts, finish := make([]string, len(c.Gens)), make([]string, len(c.Gens))
	for i, g := range c.Gens {
		toks := g.Tokens
		if c.Forced != nil {
			toks = c.Forced
		}
		var text []byte
		for _, t := range toks {
			text = append(text, s.model.TokenBytes(t)...)
		}
		texts[i], finish[i] = strings.ToValidUTF8(string(text), "\uFFFD"), g.FinishReason
	}
	ep.convo.Add(msgs, texts, finish)
}
