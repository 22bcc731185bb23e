package openai

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/internal/httpx"
)

// ServedModel is one model of a Server: a base model by its served name, or
// an adapter on it (Parent names the base).
type ServedModel struct {
	Name   string
	Parent string
	Model  Model
	// MaxLen is the model's context length: prompts must be shorter and
	// prompt plus max_tokens fit it.
	MaxLen int
}

// ServerConfig configures a plain inference Server.
type ServerConfig struct {
	// Handler bounds requests (see Config).
	Handler Config
	// APIKey, when set, is required of every /v1 request as
	// "Authorization: Bearer <key>" (vLLM's --api-key).
	APIKey string
	// Logger receives the server's log; slog.Default() when nil.
	Logger *slog.Logger
	// Registry receives the request metrics (prefix openai); a fresh one
	// when nil. GET /metrics serves it.
	Registry *prometheus.Registry
	// Hosts are the names besides IP addresses and localhost that the
	// server answers to on a loopback address, and that a cross-origin
	// request's Origin may carry (httpx.Guard: other web pages may not
	// use a local server through the visitor's browser).
	Hosts []string
}

// Server is a plain OpenAI-compatible inference server: /v1/models,
// /v1/chat/completions and /v1/completions (streamed too) over a set of
// models, selected by the request's model field, with nothing recorded for
// training. Its Handler is safe for concurrent use.
type Server struct {
	cfg     ServerConfig
	h       *Handler
	models  []ServedModel
	handler http.Handler
	http    *httpx.Metrics
}

// NewServer returns a server of models; the first is the default when a
// request names none.
func NewServer(cfg ServerConfig, models ...ServedModel) (*Server, error) {
	if len(models) == 0 {
		return nil, fmt.Errorf("openai: a server needs at least one model")
	}
	seen := map[string]bool{}
	for _, m := range models {
		switch {
		case m.Name == "" || m.Model == nil:
			return nil, fmt.Errorf("openai: a served model needs a name and a model")
		case seen[m.Name]:
			return nil, fmt.Errorf("openai: model %q is served twice", m.Name)
		case m.MaxLen < 2:
			return nil, fmt.Errorf("openai: model %q has a context of %d tokens", m.Name, m.MaxLen)
		}
		seen[m.Name] = true
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, h: NewHandler(cfg.Handler), models: slices.Clone(models), http: httpx.NewMetrics(cfg.Registry, "openai")}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", s.http.Instrument("chat_completions", s.auth(func(w http.ResponseWriter, r *http.Request) { s.h.Chat(w, r, s.resolver(r)) })))
	mux.Handle("POST /v1/completions", s.http.Instrument("completions", s.auth(func(w http.ResponseWriter, r *http.Request) { s.h.Completion(w, r, s.resolver(r)) })))
	mux.Handle("GET /v1/models", s.http.Instrument("models", s.auth(s.handleModels)))
	mux.Handle("GET /v1/models/{id}", s.http.Instrument("models", s.auth(s.handleModel)))
	mux.Handle("GET /health", s.http.Instrument("health", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	}))
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	mux.Handle("/", s.http.Instrument("unknown", func(w http.ResponseWriter, r *http.Request) {
		httpx.RouteError(w, &httpx.Error{Status: http.StatusNotFound, Code: "not_found", Msg: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	}))
	s.handler = httpx.Recover(httpx.Guard(mux, httpx.GuardConfig{Hosts: cfg.Hosts}), nil, cfg.Logger, nil)
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry is the server's Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.cfg.Registry }

// auth requires the API key when one is configured.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.APIKey != "" && !httpx.TokenEqual(httpx.Bearer(r), s.cfg.APIKey) {
			msg := "missing API key: send it as Authorization: Bearer <key>"
			if httpx.Bearer(r) != "" {
				msg = "incorrect API key"
			}
			httpx.OpenAIError(w, &httpx.Error{Status: http.StatusUnauthorized, Msg: msg, Code: "invalid_api_key"})
			return
		}
		h(w, r)
	}
}

// resolver picks the request's model by name (the first when it names
// none) and bounds it by the model's context.
func (s *Server) resolver(r *http.Request) func(string) (*Call, *httpx.Error) {
	client := clientKey(r)
	return func(name string) (*Call, *httpx.Error) {
		m, ok := s.lookup(name)
		if !ok {
			return nil, &httpx.Error{Status: http.StatusNotFound, Param: "model", Code: "model_not_found",
				Msg: fmt.Sprintf("The model `%s` does not exist; this server serves %s.", name, strings.Join(s.names(), ", "))}
		}
		return &Call{Model: m.Model, Name: m.Name, Client: client, MaxPromptTokens: m.MaxLen - 1, MaxResponseTokens: m.MaxLen - 1}, nil
	}
}

func (s *Server) lookup(name string) (ServedModel, bool) {
	if name == "" {
		return s.models[0], true
	}
	for _, m := range s.models {
		if m.Name == name {
			return m, true
		}
	}
	return ServedModel{}, false
}

func (s *Server) names() []string {
	var out []string
	for _, m := range s.models {
		out = append(out, m.Name)
	}
	return out
}

func object(m ServedModel) api.ModelObject {
	o := api.ModelObject{ID: m.Name, Object: "model", OwnedBy: "troupe", Root: m.Name}
	if m.Parent != "" {
		p := m.Parent
		o.Parent = &p
	}
	return o
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	list := api.ModelList{Object: "list"}
	for _, m := range s.models {
		list.Data = append(list.Data, object(m))
	}
	httpx.WriteJSON(w, http.StatusOK, list)
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	m, ok := s.lookup(r.PathValue("id"))
	if !ok || r.PathValue("id") == "" {
		httpx.OpenAIError(w, &httpx.Error{Status: http.StatusNotFound, Param: "model", Code: "model_not_found",
			Msg: fmt.Sprintf("The model `%s` does not exist.", r.PathValue("id"))})
		return
	}
	httpx.WriteJSON(w, http.StatusOK, object(m))
}

// clientKey names the client a request counts against: its API key's
// digest when it sends one, else its remote address.
func clientKey(r *http.Request) string {
	if k := httpx.Bearer(r); k != "" {
		d := sha256.Sum256([]byte(k))
		return "key:" + hex.EncodeToString(d[:8])
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}
