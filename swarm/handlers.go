package swarm

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// apiError is an error a handler answers with.
type apiError struct {
	status int
	msg    string
	param  string // the offending field, for OpenAI-style errors
	code   string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(field, format string, args ...any) *apiError {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	return &apiError{status: http.StatusBadRequest, msg: msg, param: field}
}

// readBody reads at most limit bytes of the request body.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("request body exceeds the limit of %d bytes", limit), code: "request_too_large"}
		}
		return nil, &apiError{status: http.StatusBadRequest, msg: "reading request body: " + err.Error()}
	}
	return body, nil
}

// decodeJSON unmarshals body into dst and turns JSON errors into 400s that
// name the field.
func decodeJSON(body []byte, dst any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "empty request body; a JSON object is required")
	}
	err := json.Unmarshal(body, dst)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return badRequest("", "request body must be a JSON object, got %s", te.Value)
		}
		return badRequest(field, "expected %s, got %s", jsonKind(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		if hasNonFinite(body) {
			return badRequest("", "invalid JSON at byte %d: NaN and Infinity are not valid JSON numbers (rewards must be finite)", se.Offset)
		}
		return badRequest("", "invalid JSON at byte %d: %v", se.Offset, err)
	default:
		return badRequest("", "invalid JSON: %v", err)
	}
}

func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "float"), strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "a number"
	case k == "string":
		return "a string"
	case k == "bool":
		return "a boolean"
	case k == "slice":
		return "an array"
	case k == "map", k == "struct":
		return "an object"
	}
	return k
}

func hasNonFinite(b []byte) bool {
	return bytes.Contains(b, []byte("NaN")) || bytes.Contains(b, []byte("Infinity"))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"detail":"encoding response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// swarmError answers the way FastAPI's HTTPException does: {"detail": msg}.
// readJSON reads the request body (bounded by MaxBodyBytes) and decodes it
// into dst. On failure it has already answered the request and returns false.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, dst any) bool {
	body, e := readBody(w, r, s.cfg.MaxBodyBytes)
	if e == nil {
		e = decodeJSON(body, dst)
	}
	if e != nil {
		swarmError(w, e)
		return false
	}
	return true
}

// ids returns the request's required client and episode ids; on failure it
// has already answered the request and returns ok = false.
func (req *endRequest) ids(w http.ResponseWriter) (client, id string, ok bool) {
	client, e := requireString(req.ClientUUID, "client_uuid", false)
	if e == nil {
		id, e = requireString(req.EpisodeUUID, "episode_uuid", false)
	}
	if e != nil {
		swarmError(w, e)
		return "", "", false
	}
	return client, id, true
}

func swarmError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]any{"detail": e.msg, "success": false})
}

// statusRecorder captures the status code for metrics.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(c int) {
	if r.code == 0 {
		r.code = c
	}
	r.ResponseWriter.WriteHeader(c)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (write
// deadlines of streamed chunks).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// instrument counts and times a handler under an endpoint label.
func (s *Server) instrument(endpoint string, h http.HandlerFunc) http.Handler {
	lat := s.m.latency.WithLabelValues(endpoint)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		h(rec, r)
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		lat.Observe(time.Since(start).Seconds())
		s.m.requests.WithLabelValues(endpoint, strconv.Itoa(rec.code)).Inc()
	})
}

// recoverMiddleware is the last line of defence: a panic becomes a 500 and
// is counted. Tests drive the handlers without it to show they never panic.
func (s *Server) recoverMiddleware(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.m.panics.Inc()
				s.log.Error("handler panic", "path", redactPath(r.URL.Path), "panic", fmt.Sprint(v))
				writeJSON(w, http.StatusInternalServerError, map[string]any{"detail": "internal error"})
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("POST /claim_episode", s.instrument("claim_episode", s.handleClaim))
	mux.Handle("POST /end_episode", s.instrument("end_episode", s.handleEnd))
	mux.Handle("POST /abort_episode", s.instrument("abort_episode", s.handleAbort))
	mux.Handle("POST /can_continue_episode", s.instrument("can_continue_episode", s.handleCanContinue))
	mux.Handle("POST /is_episode_claimed", s.instrument("is_episode_claimed", s.handleIsClaimed))
	mux.Handle("POST /agree_sync_weight", s.instrument("agree_sync_weight", s.handleAgreeSyncWeight))
	mux.Handle("GET /get_engine_status", s.instrument("get_engine_status", s.handleEngineStatus))
	mux.Handle("POST /sync_train_config", s.instrument("sync_train_config", s.admin(s.handleSyncConfig)))
	mux.Handle("POST /sync_train_code", s.instrument("sync_train_code", s.admin(s.handleSyncCode)))
	mux.Handle("POST /start_engine", s.instrument("start_engine", s.admin(s.handleStartEngine)))
	mux.Handle("POST /stop_engine", s.instrument("stop_engine", s.admin(s.handleStopEngine)))
	mux.Handle("POST /get_episode_buffer", s.instrument("get_episode_buffer", s.handleEpisodeBuffer))
	mux.Handle("GET /get_current_batch_rollout_pool_information", s.instrument("pool_information", s.handlePoolInfo))
	mux.Handle("GET /get_server_experiment_dir", s.instrument("get_server_experiment_dir", s.handleExperimentDir))
	mux.Handle("GET /get_verbose_logs", s.instrument("get_verbose_logs", s.handleVerboseLogs))
	mux.Handle("POST /get_verbose_logs", s.instrument("get_verbose_logs", s.handleVerboseLogs))
	mux.Handle("POST /v1/chat/completions", s.instrument("chat_completions", s.handleChat))
	mux.Handle("GET /v1/models", s.instrument("models", s.handleModels))
	mux.Handle("GET /v1/models/{id}", s.instrument("models", s.handleModel))
	mux.Handle("GET /health", s.instrument("health", s.handleHealth))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.Handle("/", s.instrument("unknown", s.handleNoRoute))
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
		routeError(w, &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
			msg: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))})
		return
	}
	routeError(w, &apiError{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
}

// routeError answers in both error shapes at once: OpenAI's {"error":
// {...}} and FastAPI's {"detail": ...}, since the caller of an unknown
// route may be either kind of client.
func routeError(w http.ResponseWriter, e *apiError) {
	typ := "invalid_request_error"
	switch e.status {
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	}
	var code any
	if e.code != "" {
		code = e.code
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"message": e.msg, "type": typ, "param": nil, "code": code}, "detail": e.msg})
}

// adminCtxKey marks a request that carried the admin token in its path.
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
		for {
			rest, ok := strings.CutPrefix(path, tokenPrefixPath)
			if !ok {
				break
			}
			tok, after, _ := strings.Cut(rest, "/")
			if s.cfg.AdminToken == "" || !tokenEqual(tok, s.cfg.AdminToken) {
				routeError(w, &apiError{status: http.StatusUnauthorized, code: "invalid_admin_token",
					msg: "the /t/<token>/ path prefix carries a wrong admin token, or this server has none"})
				return
			}
			path, admin = "/"+after, true
		}
		if admin {
			u := *r.URL
			u.Path, u.RawPath = path, ""
			r = r.WithContext(context.WithValue(r.Context(), adminCtxKey{}, true))
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

// tokenEqual compares secrets in time independent of their content and
// length (both are hashed to 32 bytes first).
func tokenEqual(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// isAdmin reports whether the request carries the admin token (path
// prefix, Authorization: Bearer or X-Admin-Token), or the server has none.
func (s *Server) isAdmin(r *http.Request) bool {
	if s.cfg.AdminToken == "" || r.Context().Value(adminCtxKey{}) == true {
		return true
	}
	if tok := r.Header.Get("X-Admin-Token"); tok != "" {
		return tokenEqual(tok, s.cfg.AdminToken)
	}
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return tokenEqual(strings.TrimSpace(h[7:]), s.cfg.AdminToken)
	}
	return false
}

// admin requires the admin token when one is configured.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.isAdmin(r) {
			swarmError(w, &apiError{status: http.StatusUnauthorized,
				msg: "this endpoint requires the admin token (Authorization: Bearer <token>, X-Admin-Token, or the base URL http://host:port/t/<token>)"})
			return
		}
		h(w, r)
	}
}

// ---- request and response bodies (AgentJet's pydantic models) ---------------

type throttlePolicy struct {
	CurrentTaskID string `json:"current_task_id"`
}

type claimRequest struct {
	ClientUUID            *string         `json:"client_uuid"`
	EpisodeType           *string         `json:"episode_type"`
	DiscardEpisodeTimeout *float64        `json:"discard_episode_timeout"`
	ThrottlePolicy        *throttlePolicy `json:"throttle_policy"`
	PartitionLimit        *throttlePolicy `json:"partition_limit"`
}

type claimResponse struct {
	Success       bool   `json:"success"`
	ClientUUID    string `json:"client_uuid"`
	EpisodeUUID   string `json:"episode_uuid"`
	OpenAIBaseURL string `json:"openai_base_url"`
	OpenAIAPIKey  string `json:"openai_api_key"`
	FailCause     string `json:"fail_cause"`
}

// WorkflowOutput is what a workflow reports at the end of an episode.
type WorkflowOutput struct {
	Reward     *json.RawMessage           `json:"reward"`
	IsSuccess  *bool                      `json:"is_success"`
	Metadata   map[string]json.RawMessage `json:"metadata"`
	LogMetrics map[string]json.RawMessage `json:"log_metrics"`
}

type endRequest struct {
	ClientUUID     *string         `json:"client_uuid"`
	EpisodeUUID    *string         `json:"episode_uuid"`
	TaskID         *string         `json:"task_id"`
	WorkflowOutput *WorkflowOutput `json:"workflow_output"`
	// DeclareClientActive (AgentJet's default true) puts the client on the
	// agree-sync-weight active list when a train episode ends.
	DeclareClientActive *bool `json:"declare_client_active"`
}

type episodeRef struct {
	ClientUUID  *string `json:"client_uuid"`
	EpisodeUUID *string `json:"episode_uuid"`
}

const maxIDLen = 256

func requireString(p *string, field string, allowEmpty bool) (string, *apiError) {
	if p == nil {
		return "", badRequest(field, "missing")
	}
	if !allowEmpty && *p == "" {
		return "", badRequest(field, "must not be empty")
	}
	if len(*p) > maxIDLen {
		return "", badRequest(field, "longer than %d bytes", maxIDLen)
	}
	return *p, nil
}

// parseReward validates workflow_output.reward: a number, or a non-empty
// list of numbers (averaged), each finite with |r| ≤ bound.
func parseReward(wo *WorkflowOutput, bound float64) (float64, *apiError) {
	if wo == nil {
		return 0, badRequest("workflow_output", "missing")
	}
	if wo.Reward == nil || string(bytes.TrimSpace(*wo.Reward)) == "null" {
		return 0, badRequest("workflow_output.reward", "missing; a finite number is required")
	}
	raw := *wo.Reward
	var x float64
	if err := json.Unmarshal(raw, &x); err == nil {
		if !finite(x) {
			return 0, badRequest("workflow_output.reward", "must be finite, got %v", x)
		}
		if math.Abs(x) > bound {
			return 0, badRequest("workflow_output.reward", "|reward| must be at most %g, got %g", bound, x)
		}
		return x, nil
	}
	var xs []float64
	if err := json.Unmarshal(raw, &xs); err != nil {
		return 0, badRequest("workflow_output.reward", "expected a number or a list of numbers, got %.40s", string(raw))
	}
	if len(xs) == 0 {
		return 0, badRequest("workflow_output.reward", "empty list")
	}
	var w welford
	for _, v := range xs {
		if !finite(v) {
			return 0, badRequest("workflow_output.reward", "must be finite, got %v", v)
		}
		if math.Abs(v) > bound {
			return 0, badRequest("workflow_output.reward", "|reward| must be at most %g, got %g", bound, v)
		}
		w.add(v)
	}
	return w.mean, nil
}

// ---- swarm handlers ---------------------------------------------------------

func (s *Server) baseURL(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return strings.TrimRight(s.cfg.PublicURL, "/") + "/v1"
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/v1"
}

func notRollingCause(status string) string {
	cause := fmt.Sprintf("Engine not ready. Current status: [%s].", status)
	advise := ""
	switch status {
	case StatusOffline:
		advise = "Please start the engine first. Please use one of the client to run `client.sync_train_config() + client.start_engine()` to start the engine."
	case StatusBooting:
		advise = "Please wait until the engine is fully booted. Try again (maybe 1 minute) later."
	case StatusWeightSyncing:
		advise = "Engine is syncing weights. Try again (maybe 1 minute) later."
	case StatusRollingPost:
		advise = "Engine is in post-rolling phase. Try again (maybe 1 minute) later."
	}
	return cause + " " + advise
}

func (s *Server) handleClaim(w http.ResponseWriter, r *http.Request) {
	var req claimRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	client, e := requireString(req.ClientUUID, "client_uuid", false)
	if e != nil {
		swarmError(w, e)
		return
	}
	kind, e := requireString(req.EpisodeType, "episode_type", false)
	if e != nil {
		swarmError(w, e)
		return
	}
	if kind != EpisodeTrain && kind != EpisodeEval {
		swarmError(w, badRequest("episode_type", "unknown episode_type %q (want train or eval)", kind))
		return
	}
	if req.DiscardEpisodeTimeout == nil {
		swarmError(w, badRequest("discard_episode_timeout", "missing"))
		return
	}
	to := *req.DiscardEpisodeTimeout
	if maxTo := s.cfg.MaxDiscardTimeout.Seconds(); !(to > 0) || to > maxTo {
		swarmError(w, badRequest("discard_episode_timeout", "must be in (0, %g] seconds on this server, got %v", maxTo, to))
		return
	}
	hint := ""
	if req.ThrottlePolicy != nil {
		hint = req.ThrottlePolicy.CurrentTaskID
	} else if req.PartitionLimit != nil {
		hint = req.PartitionLimit.CurrentTaskID
	}
	if len(hint) > maxIDLen {
		swarmError(w, badRequest("throttle_policy.current_task_id", "longer than %d bytes", maxIDLen))
		return
	}
	resp := claimResponse{ClientUUID: client}
	addr := s.quotaAddr(r)
	s.mu.Lock()
	if ac := s.active[client]; ac != nil {
		ac.lastActivity = time.Now()
	}
	switch {
	case s.status != StatusRolling:
		resp.FailCause = notRollingCause(s.status)
	case s.perClient[client] >= s.cfg.MaxOpenPerClient:
		s.refuseQuotaLocked(w, resp, fmt.Sprintf("This client holds %d open episodes, the per-client limit of this server. End or abort one, then try again.", s.perClient[client]))
		return
	case addr != "" && s.perAddr[addr] >= s.cfg.MaxOpenPerAddress:
		s.refuseQuotaLocked(w, resp, fmt.Sprintf("Clients at this address hold %d open episodes, the per-address limit of this server. End or abort some, then try again.", s.perAddr[addr]))
		return
	case s.train.MaxOpenEpisodes > 0 && len(s.episodes) >= s.train.MaxOpenEpisodes:
		resp.FailCause = "No available episodes to claim. Try again (maybe 1 minute) later."
	default:
		id := newUUID()
		ep := &episode{id: id, client: client, kind: kind, key: newKey(id), taskHint: hint,
			lastActive: time.Now(), timeout: time.Duration(to * float64(time.Second))}
		s.episodes[id] = ep
		s.perClient[client]++
		if addr != "" {
			ep.addr = addr
			s.perAddr[addr]++
		}
		s.acct.Claimed++
		if kind == EpisodeTrain {
			s.openTrain++
		}
		s.m.open.Set(float64(len(s.episodes)))
		resp.Success, resp.EpisodeUUID, resp.OpenAIAPIKey = true, id, ep.key
		resp.OpenAIBaseURL = s.baseURL(r)
	}
	s.mu.Unlock()
	if resp.Success {
		s.m.episodes.WithLabelValues("claimed").Inc()
	} else {
		s.m.episodes.WithLabelValues("refused").Inc()
	}
	writeJSON(w, http.StatusOK, resp)
}

// lookupForEndLocked finds the open episode for end/abort or explains why not.
func (s *Server) lookupForEndLocked(id, client string) (*episode, *apiError) {
	ep := s.episodes[id]
	if ep == nil {
		ci, known := s.closed[id]
		switch {
		case !known:
			return nil, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("Episode %s not found.", id)}
		case ci.client != client:
			return nil, &apiError{status: http.StatusForbidden, msg: fmt.Sprintf("Episode %s belongs to a different client.", id)}
		case ci.reason == "reclaimed":
			return nil, &apiError{status: http.StatusGone, msg: fmt.Sprintf("Episode %s was reclaimed after being idle longer than its discard_episode_timeout; increase discard_episode_timeout when you begin an episode.", id)}
		case ci.reason == "stopped":
			return nil, &apiError{status: http.StatusGone, msg: fmt.Sprintf("Episode %s was discarded because the engine was stopped.", id)}
		default:
			return nil, &apiError{status: http.StatusConflict, msg: fmt.Sprintf("Episode %s was already %s.", id, ci.reason)}
		}
	}
	if ep.client != client {
		return nil, &apiError{status: http.StatusForbidden, msg: fmt.Sprintf("Episode %s is claimed by a different client.", id)}
	}
	return ep, nil
}

func (s *Server) handleEnd(w http.ResponseWriter, r *http.Request) {
	var req endRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	client, id, ok := req.ids(w)
	if !ok {
		return
	}
	task, e := requireString(req.TaskID, "task_id", false)
	if e != nil {
		swarmError(w, e)
		return
	}
	reward, e := parseReward(req.WorkflowOutput, s.cfg.MaxAbsReward)
	if e != nil {
		swarmError(w, e)
		return
	}
	if raw, ok := req.WorkflowOutput.Metadata["task_id"]; ok {
		var mt string
		if json.Unmarshal(raw, &mt) != nil || mt != task {
			swarmError(w, badRequest("workflow_output.metadata.task_id", "must equal task_id %q", task))
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.status {
	case StatusRolling, StatusRollingPost, StatusWeightSyncing:
	default:
		swarmError(w, &apiError{status: http.StatusConflict, msg: fmt.Sprintf("Engine is not in rolling state. Current status: [%s]. Cannot end episode.", s.status)})
		return
	}
	ep, e := s.lookupForEndLocked(id, client)
	if e != nil {
		swarmError(w, e)
		return
	}
	if ep.ending {
		swarmError(w, &apiError{status: http.StatusConflict, msg: fmt.Sprintf("Episode %s is being ended by another request.", id)})
		return
	}
	var fe *finishedEpisode
	if ep.kind == EpisodeTrain {
		fe = &finishedEpisode{id: id, taskID: task, client: client, reward: reward, samples: ep.samples, minVersion: -1}
		for i := range fe.samples {
			fe.samples[i].TaskID = task
			fe.samples[i].Reward = reward
			if fe.minVersion < 0 || fe.samples[i].Version < fe.minVersion {
				fe.minVersion = fe.samples[i].Version
			}
		}
		if s.jr != nil {
			// Journal before answering, without holding s.mu: the
			// episode is marked so that a concurrent end gets 409, and
			// in flight so that the reaper leaves it.
			ep.ending = true
			ep.inflight++
			s.publishing[id] = true
			s.mu.Unlock()
			seq, err := s.jr.publish(fe)
			s.mu.Lock()
			ep.ending = false
			ep.inflight--
			delete(s.publishing, id)
			if m := s.early[id]; m != nil && err != nil {
				// The acknowledgement was lost but the consumer saw the
				// episode stored: it is journaled.
				if md, merr := m.Metadata(); merr == nil {
					seq, err = md.Sequence.Stream, nil
				}
			}
			if err != nil {
				ep.lastActive = time.Now()
				s.m.journalErrors.Inc()
				s.log.Error("episode journal: publish failed; the episode stays open for a retry", "episode", id, "err", err)
				swarmError(w, &apiError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("Episode %s could not be journaled (%v); it is still open: retry end_episode.", id, err)})
				return
			}
			fe.seq = seq
		}
	}
	// A journaled episode is acknowledged even if the engine stopped
	// meanwhile (its open episodes closed): the journal holds it.
	if s.episodes[id] == ep {
		s.closeLocked(id, ep, "ended")
	} else {
		s.rememberClosedLocked(id, client, "ended")
	}
	s.m.rewardSum.WithLabelValues(ep.kind).Add(reward)
	s.m.rewardCount.WithLabelValues(ep.kind).Inc()
	if fe != nil {
		s.acceptFinishedLocked(fe)
		if req.DeclareClientActive == nil || *req.DeclareClientActive {
			if ac := s.active[client]; ac != nil {
				ac.lastActivity = time.Now()
			} else {
				s.active[client] = &activeClient{lastActivity: time.Now()}
			}
		}
		s.maybeTriggerLocked()
	}
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

// acceptFinishedLocked takes a finished train episode into the buffer of
// the next batch. This is where a finished episode is acknowledged: the
// caller answers end_episode with 200 right after it returns, so a journal
// that must hold every acknowledged reward (an episode stream) appends
// here, before the buffer takes it.
func (s *Server) acceptFinishedLocked(fe *finishedEpisode) {
	if fe.seq != 0 {
		if s.jseq[fe.seq] != nil {
			// A retried end of an episode whose first publish timed out
			// but was stored: the consumer buffered (and counted) it.
			return
		}
		e := &jentry{fe: fe, trained: -1}
		if m := s.early[fe.id]; m != nil {
			e.msg = m
			delete(s.early, fe.id)
		}
		s.jseq[fe.seq] = e
	}
	s.acct.Ended++
	s.acct.EndedRewardSum += fe.reward
	if s.cfg.Role == RoleRollout {
		// The trainer takes it from the journal.
		delete(s.jseq, fe.seq)
		return
	}
	s.bufferLocked(fe)
}

// bufferLocked appends a finished episode to the buffer of the next batch,
// dropping the oldest beyond the buffer's bound.
func (s *Server) bufferLocked(fe *finishedEpisode) {
	s.finished = append(s.finished, fe)
	if lim := s.bufferLimitLocked(); len(s.finished) > lim {
		n := len(s.finished) - lim
		for _, old := range s.finished[:n] {
			s.dropLocked(old, "overflow")
		}
		s.finished = append(s.finished[:0:0], s.finished[n:]...)
	}
}

// bufferLimitLocked bounds the finished episodes kept for training: eight
// batches, or, for the agree-sync-weight methods (whose batch is whatever
// the clients collected), 65536 episodes.
func (s *Server) bufferLimitLocked() int {
	switch s.train.CollectionMethod {
	case CollectAnyAgree, CollectAllAgree:
		return 1 << 16
	}
	return 8 * s.train.BatchSize * s.train.NumRepeat
}

// handleAgreeSyncWeight registers a client's vote for the next weight
// sync (AgentJet's /agree_sync_weight): accepted from a client on the
// active list while the engine rolls, answered {success, failure_reason}.
func (s *Server) handleAgreeSyncWeight(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ClientUUID *string `json:"client_uuid"`
	}
	if !s.readJSON(w, r, &req) {
		return
	}
	client, e := requireString(req.ClientUUID, "client_uuid", false)
	if e != nil {
		swarmError(w, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := map[string]any{"success": false, "failure_reason": ""}
	switch ac := s.active[client]; {
	case s.status != StatusRolling && s.status != StatusRollingPost:
		resp["failure_reason"] = fmt.Sprintf("Engine is not rolling (current status: [%s]); the agreement would be reset.", s.status)
	case s.train.CollectionMethod != CollectAnyAgree && s.train.CollectionMethod != CollectAllAgree:
		resp["failure_reason"] = fmt.Sprintf("agree_sync_weight only applies to %s and %s; the collection method is %s.", CollectAnyAgree, CollectAllAgree, s.train.CollectionMethod)
	case ac == nil:
		resp["failure_reason"] = "Client is not in the active list: end at least one rewarded train episode since the last weight sync first."
	default:
		ac.agreed, ac.lastActivity = true, time.Now()
		resp["success"] = true
		s.maybeTriggerLocked()
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleAbort(w http.ResponseWriter, r *http.Request) {
	var req endRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	client, id, ok := req.ids(w)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.episodes[id]
	if ep == nil {
		// idempotent, as in AgentJet: aborting a closed or unknown episode succeeds
		writeJSON(w, http.StatusOK, map[string]bool{"success": true})
		return
	}
	if ep.client != client {
		swarmError(w, &apiError{status: http.StatusForbidden, msg: fmt.Sprintf("Episode %s is claimed by a different client.", id)})
		return
	}
	if ep.ending {
		swarmError(w, &apiError{status: http.StatusConflict, msg: fmt.Sprintf("Episode %s is being ended.", id)})
		return
	}
	s.closeLocked(id, ep, "aborted")
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

func (s *Server) decodeRef(w http.ResponseWriter, r *http.Request) (string, string, bool) {
	var req episodeRef
	if !s.readJSON(w, r, &req) {
		return "", "", false
	}
	id, e := requireString(req.EpisodeUUID, "episode_uuid", true)
	if e != nil {
		swarmError(w, e)
		return "", "", false
	}
	client := ""
	if req.ClientUUID != nil {
		client = *req.ClientUUID
	}
	return id, client, true
}

func (s *Server) handleCanContinue(w http.ResponseWriter, r *http.Request) {
	id, _, ok := s.decodeRef(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	can := false
	if s.status == StatusRolling || s.status == StatusRollingPost || s.status == StatusWeightSyncing {
		_, can = s.episodes[id]
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]bool{"can_continue": can})
}

func (s *Server) handleIsClaimed(w http.ResponseWriter, r *http.Request) {
	id, _, ok := s.decodeRef(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	_, claimed := s.episodes[id]
	s.mu.Unlock()
	resp := map[string]any{"success": claimed, "failure_reason": ""}
	if !claimed {
		resp["failure_reason"] = "episode is not claimed"
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleEngineStatus(w http.ResponseWriter, r *http.Request) {
	st, detail, step := s.Status()
	writeJSON(w, http.StatusOK, map[string]any{"engine_status": st, "engine_status_detail": detail, "global_step": step})
}

func (s *Server) handleSyncConfig(w http.ResponseWriter, r *http.Request) {
	var req struct {
		YAML *string `json:"yaml_as_string"`
	}
	if !s.readJSON(w, r, &req) {
		return
	}
	if req.YAML == nil {
		swarmError(w, badRequest("yaml_as_string", "missing"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != StatusOffline {
		swarmError(w, &apiError{status: http.StatusBadRequest, msg: "Engine is already started. Call `stop_engine` first before syncing new training configuration."})
		return
	}
	tc := s.train
	if err := tc.ApplyYAML(*req.YAML); err != nil {
		swarmError(w, badRequest("yaml_as_string", "%v", err))
		return
	}
	if err := s.saveTrainConfig(*req.YAML); err != nil {
		s.log.Error("training config not persisted", "err", err)
		swarmError(w, &apiError{status: http.StatusInternalServerError, msg: err.Error()})
		return
	}
	s.train, s.syncedYAML = tc, *req.YAML
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

func (s *Server) handleStartEngine(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.status != StatusOffline {
		st := s.status
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"success": false, "error": "engine is " + st + "; stop it first"})
		return
	}
	s.status, s.detail, s.bootStart = StatusBooting, "loading checkpoint", time.Now()
	s.m.setStatus(s.status)
	s.mu.Unlock()
	go s.boot() // like AgentJet, booting continues after the reply; clients poll get_engine_status
	writeJSON(w, http.StatusOK, map[string]any{"success": true})
}

func (s *Server) handleStopEngine(w http.ResponseWriter, r *http.Request) {
	s.Stop()
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "failure_reason": ""})
}

// Episode and client ids are the claimants' secrets (an end_episode must
// name both), so the pool views show them to admins only; others get
// placeholders that keep the shapes and counts AgentJet's client reads.
const hiddenID = "hidden"

func (s *Server) handleEpisodeBuffer(w http.ResponseWriter, r *http.Request) {
	admin := s.isAdmin(r)
	s.mu.Lock()
	buf := make([]map[string]any, 0, len(s.episodes))
	now := time.Now()
	for _, ep := range s.sortedEpisodesLocked() {
		id, client := ep.id, ep.client
		if !admin {
			id, client = fmt.Sprintf("%s-%d", hiddenID, len(buf)+1), ""
		}
		buf = append(buf, map[string]any{
			"episode_uuid": id, "episode_status": "claimed", "episode_type": ep.kind,
			"client_uuid": client, "discard_episode_timeout": ep.timeout.Seconds(),
			"latest_activity_timestamp": float64(ep.lastActive.UnixNano()) / 1e9,
			"llm_call_count":            ep.calls, "optional_task_id": ep.taskHint,
			"idle_seconds": now.Sub(ep.lastActive).Seconds(),
		})
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"buffer": buf})
}

// sortedEpisodesLocked lists the open episodes oldest activity first, so
// that the placeholders of a redacted view do not follow map order.
func (s *Server) sortedEpisodesLocked() []*episode {
	eps := make([]*episode, 0, len(s.episodes))
	for _, ep := range s.episodes {
		eps = append(eps, ep)
	}
	slices.SortFunc(eps, func(a, b *episode) int {
		return cmp.Or(a.lastActive.Compare(b.lastActive), strings.Compare(a.id, b.id))
	})
	return eps
}

func (s *Server) handlePoolInfo(w http.ResponseWriter, r *http.Request) {
	admin := s.isAdmin(r)
	s.mu.Lock()
	running := map[string]map[string]string{}
	now := time.Now()
	for i, ep := range s.sortedEpisodesLocked() {
		id, client := ep.id, ep.client
		if !admin {
			id, client = fmt.Sprintf("%s-%d", hiddenID, i+1), ""
		}
		running[id] = map[string]string{
			"episode_status": "claimed", "client_uuid": client, "optional_task_id": ep.taskHint,
			"time_since_last_activity": fmt.Sprintf("%.1fs", now.Sub(ep.lastActive).Seconds()),
			"discard_episode_timeout":  fmt.Sprintf("%.1fs", ep.timeout.Seconds()),
			"llm_call_count":           strconv.Itoa(ep.calls),
		}
	}
	completed := map[string][]string{} // task → client uuids (newer AgentJet)
	details := map[string][]string{}   // task → episode uuids (older AgentJet)
	rewards := map[string][]float64{}  // task → rewards, one per episode
	for i, fe := range s.finished {
		id, client := fe.id, fe.client
		if !admin {
			id, client = fmt.Sprintf("%s-finished-%d", hiddenID, i+1), ""
		}
		completed[fe.taskID] = append(completed[fe.taskID], client)
		details[fe.taskID] = append(details[fe.taskID], id)
		rewards[fe.taskID] = append(rewards[fe.taskID], fe.reward)
	}
	full, nonDummy := 0, 0
	for _, rs := range rewards {
		if len(rs) < s.train.NumRepeat {
			continue
		}
		full++
		for _, r := range rs[1:] {
			if r != rs[0] {
				nonDummy++
				break
			}
		}
	}
	resp := map[string]any{
		"sample_collection_method": s.train.CollectionMethod,
		"engine_status":            s.status, "global_step": s.globalStep(),
		"completed_episodes": len(s.finished), "completed_episode_target": s.train.BatchSize * s.train.NumRepeat,
		"completed_tasks": full, "completed_task_target": s.train.BatchSize,
		"completed_non_dummy_tasks": nonDummy, "completed_non_dummy_task_target": s.train.BatchSize,
		"task_expected_num_repeat":     s.train.NumRepeat,
		"completed_tasks_details":      details,
		"completed_tasks_rewards":      rewards,
		"completed_tasks_client_uuids": completed, "running_episode_details": nil,
	}
	if len(running) > 0 {
		resp["running_episode_details"] = running
	}
	if s.status == StatusBooting {
		resp["booting_start_time"] = float64(s.bootStart.UnixNano()) / 1e9
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

// handleExperimentDir reports the run directory (AgentJet's
// /get_server_experiment_dir): the absolute CheckpointDir, or null when
// the server has none.
func (s *Server) handleExperimentDir(w http.ResponseWriter, r *http.Request) {
	var dir any
	if s.cfg.CheckpointDir != "" {
		abs, err := filepath.Abs(s.cfg.CheckpointDir)
		if err != nil {
			abs = s.cfg.CheckpointDir
		}
		dir = abs
	}
	writeJSON(w, http.StatusOK, map[string]any{"server_experiment_dir": dir})
}

// handleVerboseLogs returns recent engine events (AgentJet's
// /get_verbose_logs, {"entries": [{timestamp, tag, message}]}).
func (s *Server) handleVerboseLogs(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.ContentLength != 0 {
		if _, e := readBody(w, r, s.cfg.MaxBodyBytes); e != nil {
			swarmError(w, e)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": s.verboseLogs()})
}

// handleSyncCode answers AgentJet's /sync_train_code, which uploads a zip
// of AgentJet's Python trainer for its server to run. troupe trains with
// its own Go code, so the upload is refused the way AgentJet's server
// answers a failed operation: 200 with {"success": false, "message": ...},
// which its client raises as an error carrying the message.
func (s *Server) handleSyncCode(w http.ResponseWriter, r *http.Request) {
	if _, e := readBody(w, r, s.cfg.MaxBodyBytes); e != nil && e.status == http.StatusBadRequest {
		swarmError(w, e)
		return
	}
	msg := "troupe swarm servers train with their own code and cannot run an uploaded AgentJet trainer; configure training with sync_train_config instead"
	writeJSON(w, http.StatusOK, map[string]any{"success": false, "message": msg, "error": msg})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	st, _, step := s.Status()
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "engine_status": st, "global_step": step, "model": s.model.Name()})
}

// refuseQuotaLocked answers a claim beyond a quota with 429 and
// Retry-After, unlocking s.mu first.
func (s *Server) refuseQuotaLocked(w http.ResponseWriter, resp claimResponse, cause string) {
	s.mu.Unlock()
	s.m.episodes.WithLabelValues("quota").Inc()
	resp.FailCause = cause
	w.Header().Set("Retry-After", "2")
	writeJSON(w, http.StatusTooManyRequests, resp)
}

// quotaAddr is the remote IP a claim counts against MaxOpenPerAddress, or
// "" for loopback and admin requests.
func (s *Server) quotaAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || s.cfg.AdminToken != "" && s.isAdmin(r) {
		return ""
	}
	return host
}
