package swarm

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/troupe-ml/troupe/dashboard"
	"github.com/troupe-ml/troupe/internal/httpx"
)

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	// Endpoints that change state take JSON only (httpx.RequireJSON).
	post := func(path, name string, h http.HandlerFunc) {
		mux.Handle("POST "+path, s.m.http.Instrument(name, httpx.RequireJSON(h).ServeHTTP))
	}
	post("/claim_episode", "claim_episode", s.handleClaim)
	post("/end_episode", "end_episode", s.handleEnd)
	post("/abort_episode", "abort_episode", s.handleAbort)
	mux.Handle("POST /can_continue_episode", s.m.http.Instrument("can_continue_episode", s.handleCanContinue))
	mux.Handle("POST /is_episode_claimed", s.m.http.Instrument("is_episode_claimed", s.handleIsClaimed))
	post("/agree_sync_weight", "agree_sync_weight", s.handleAgreeSyncWeight)
	mux.Handle("GET /get_engine_status", s.m.http.Instrument("get_engine_status", s.handleEngineStatus))
	post("/sync_train_config", "sync_train_config", s.admin(s.handleSyncConfig))
	// AgentJet uploads a zip; the answer refuses it and changes nothing.
	mux.Handle("POST /sync_train_code", s.m.http.Instrument("sync_train_code", s.admin(s.handleSyncCode)))
	post("/start_engine", "start_engine", s.admin(s.handleStartEngine))
	post("/stop_engine", "stop_engine", s.admin(s.handleStopEngine))
	mux.Handle("POST /get_episode_buffer", s.m.http.Instrument("get_episode_buffer", s.handleEpisodeBuffer))
	mux.Handle("GET /get_current_batch_rollout_pool_information", s.m.http.Instrument("pool_information", s.handlePoolInfo))
	mux.Handle("GET /get_server_experiment_dir", s.m.http.Instrument("get_server_experiment_dir", s.handleExperimentDir))
	mux.Handle("GET /get_verbose_logs", s.m.http.Instrument("get_verbose_logs", s.handleVerboseLogs))
	mux.Handle("POST /get_verbose_logs", s.m.http.Instrument("get_verbose_logs", s.handleVerboseLogs))
	post("/v1/chat/completions", "chat_completions", s.handleChat)
	mux.Handle("GET /v1/models", s.m.http.Instrument("models", s.handleModels))
	mux.Handle("GET /v1/models/{id}", s.m.http.Instrument("models", s.handleModel))
	mux.Handle("GET /health", s.m.http.Instrument("health", s.handleHealth))
	mux.Handle("GET /get_training_status", s.m.http.Instrument("get_training_status", s.handleTrainingStatus))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	if s.dash != nil {
		mux.Handle("/dashboard/", s.m.http.Instrument("dashboard", s.admin(http.StripPrefix("/dashboard", s.dash).ServeHTTP)))
		mux.Handle("GET /dashboard", http.RedirectHandler("dashboard/", http.StatusFound))
	}
	mux.Handle("/", s.m.http.Instrument("unknown", s.handleNoRoute))
	return mux
}

// probeMethods are the methods handleNoRoute tries to build an Allow header.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// handleNoRoute answers what no route matches with a JSON error: 405 with
// Allow when the path exists for other methods, 404 otherwise. (ServeMux's
// own answers are plain text, which OpenAI and AgentJet clients cannot
// parse.)
func (s *Server) handleNoRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range probeMethods {
		if m == r.Method {
			continue
		}
		probe := *r
		probe.Method = m
		if _, pat := s.mux.Handler(&probe); pat != "" && pat != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		httpx.RouteError(w, &httpx.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Msg: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))})
		return
	}
	httpx.RouteError(w, &httpx.Error{Status: http.StatusNotFound, Code: "not_found", Msg: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
}

// adminCtxKey marks a request that carried the admin token in its path;
// its value is the prefix that carried it.
type adminCtxKey struct{}

// tokenPrefixPath is the URL path prefix that carries the admin token.
const tokenPrefixPath = "/t/"

// tokenPrefix strips /t/<token>/ from the path of a request whose token is
// the admin token and marks the request as an admin's; a wrong token gets
// 401. A client given the base URL http://host:port/t/<token> thus reaches
// every endpoint with admin rights, and its OpenAI base URL (AgentJet's
// client puts its own base URL in front of /v1) works too. A repeated
// prefix is stripped as well.
func (s *Server) tokenPrefix(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, admin := r.URL.Path, false
		var prefix string
		for {
			rest, ok := strings.CutPrefix(path, tokenPrefixPath)
			if !ok {
				break
			}
			tok, after, _ := strings.Cut(rest, "/")
			if s.cfg.AdminToken == "" || !httpx.TokenEqual(tok, s.cfg.AdminToken) {
				httpx.RouteError(w, &httpx.Error{Status: http.StatusUnauthorized, Code: "invalid_admin_token",
					Msg: "the /t/<token>/ path prefix carries a wrong admin token, or this server has none"})
				return
			}
			prefix += path[:len(path)-len(after)-1]
			path, admin = "/"+after, true
		}
		if admin {
			u := *r.URL
			u.Path, u.RawPath = path, ""
			r = r.WithContext(context.WithValue(r.Context(), adminCtxKey{}, prefix))
			r.URL = &u
		}
		h.ServeHTTP(w, r)
	})
}

// redactPath hides the admin token of a /t/<token>/ path (for logs).
func redactPath(p string) string {
	if rest, ok := strings.CutPrefix(p, tokenPrefixPath); ok {
		_, after, _ := strings.Cut(rest, "/")
		return tokenPrefixPath + "***/" + after
	}
	return p
}

// isAdmin reports whether the request carries the admin token (path
// prefix, Authorization: Bearer or X-Admin-Token), or the server has none.
func (s *Server) isAdmin(r *http.Request) bool {
	if _, ok := r.Context().Value(adminCtxKey{}).(string); ok || s.cfg.AdminToken == "" {
		return true
	}
	if tok := r.Header.Get("X-Admin-Token"); tok != "" {
		return httpx.TokenEqual(tok, s.cfg.AdminToken)
	}
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return httpx.TokenEqual(strings.TrimSpace(h[7:]), s.cfg.AdminToken)
	}
	return false
}

// admin requires the admin token when one is configured.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.isAdmin(r) {
			httpx.SwarmError(w, &httpx.Error{Status: http.StatusUnauthorized,
				Msg: "this endpoint requires the admin token (Authorization: Bearer <token>, X-Admin-Token, or the base URL http://host:port/t/<token>)"})
			return
		}
		h(w, r)
	}
}

// openDashboard makes the dashboard of the run directory, served at
// /dashboard/ to admins (browsers use the base URL /t/<token>/).
func (s *Server) openDashboard() error {
	if err := os.MkdirAll(s.cfg.CheckpointDir, 0o755); err != nil {
		return fmt.Errorf("swarm: run directory: %w", err)
	}
	d, err := dashboard.New(dashboard.Config{Dir: s.cfg.CheckpointDir, Title: s.model.Name(), Logger: s.log,
		Mount: func(r *http.Request) string {
			p, _ := r.Context().Value(adminCtxKey{}).(string)
			return p + "/dashboard"
		}})
	if err != nil {
		return fmt.Errorf("swarm: %w", err)
	}
	s.dash = d
	return nil
}
