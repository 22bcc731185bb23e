package dashboard

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed static templates
var assets embed.FS

// contentSecurityPolicy lets the page load only its own scripts, styles,
// images and event stream: no inline script, no other origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Config configures a Server.
type Config struct {
	// Dir is the run directory: a checkpoint directory of `troupe swarm
	// serve`, or a directory holding several (required).
	Dir string
	// Title heads the pages (default: Dir's base name).
	Title string
	// Logger receives read errors (default: slog.Default()).
	Logger *slog.Logger
	// PollInterval is how often the files are checked for new rows while
	// a page is open (default 1s).
	PollInterval time.Duration
	// MaxPoints caps the points drawn per series (default
	// DefaultMaxPoints).
	MaxPoints int
	// Servers, when set, lists the swarm servers a run's agents are
	// served by (troupe dashboard --nats reads them from the registry);
	// the pages show them with the live charts and /api/servers serves
	// them as JSON.
	Servers func(ctx context.Context) ([]ServerInfo, error)
	// Mount, when set, returns the path prefix a request reached the
	// dashboard under (the server is mounted below the root with
	// http.StripPrefix, e.g. "/dashboard"), which the pages put before
	// their links; nil: the dashboard is the root.
	Mount func(*http.Request) string
}

// ServerInfo is one swarm server as the dashboard lists it.
type ServerInfo struct {
	Model        string    `json:"model"`
	URL          string    `json:"url"`
	Role         string    `json:"role"`
	GlobalStep   int64     `json:"global_step"`
	OpenEpisodes int       `json:"open_episodes"`
	Updated      time.Time `json:"updated"`
}

// Server serves the dashboard of a run directory. It only reads the
// directory: every file is opened read-only for the length of one read.
type Server struct {
	cfg      Config
	root     string // Dir, absolute, symbolic links resolved
	log      *slog.Logger
	mux      *http.ServeMux
	pages    *template.Template
	instance string // tells this process's event IDs from another's

	ctx    context.Context // done on Close: ends the event streams
	cancel context.CancelFunc

	mu      sync.Mutex
	runs    map[string]*run
	scanned time.Time
	scanErr error
}

// New returns a Server for cfg.Dir, which must be a readable directory.
func New(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("dashboard: Config.Dir is empty")
	}
	root, err := filepath.Abs(cfg.Dir)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return nil, fmt.Errorf("dashboard: run directory: %w", err)
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("dashboard: run directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("dashboard: run directory %s is not a directory", cfg.Dir)
	}
	if cfg.Title == "" {
		cfg.Title = filepath.Base(root)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.MaxPoints <= 0 {
		cfg.MaxPoints = DefaultMaxPoints
	}
	pages, err := template.New("").Funcs(template.FuncMap{
		"pathEscape": url.PathEscape,
		"clock":      func(t time.Time) string { return t.UTC().Format("Jan 2 15:04:05 UTC") },
		"float":      func(x float64) string { return strconv.FormatFloat(x, 'g', 4, 64) },
		"deref":      func(p *float64) float64 { return *p },
		// lag is how many versions the adapter that sampled an episode
		// trails the one step trained (step − 1, since step is the version
		// after the update).
		"lag": func(step int64, version *int64) int64 { return max(0, step-1-*version) },
	}).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	s := &Server{cfg: cfg, root: root, log: cfg.Logger, pages: pages, runs: make(map[string]*run),
		instance: strconv.FormatInt(time.Now().UnixNano(), 36)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	static, _ := fs.Sub(assets, "static")
	m := http.NewServeMux()
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "favicon.svg")
	})
	m.HandleFunc("GET /{$}", s.index)
	m.HandleFunc("GET /run/{id}/{$}", s.runPage)
	m.HandleFunc("GET /run/{id}/charts", s.chartsFragment)
	m.HandleFunc("GET /run/{id}/agent/{agent}/step/{step}", s.stepFragment)
	m.HandleFunc("GET /api/runs", s.apiRuns)
	m.HandleFunc("GET /api/servers", s.apiServers)
	m.HandleFunc("GET /api/run/{id}/steps", s.apiSteps)
	m.HandleFunc("GET /api/run/{id}/agent/{agent}/step/{step}", s.apiStep)
	m.HandleFunc("GET /api/run/{id}/events", s.events)
	s.mux = m
	return s, nil
}

// ServeHTTP serves the dashboard: pages, JSON and the event stream, to
// GET and HEAD requests only, each with a Content-Security-Policy that
// admits only the dashboard's own files.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Close ends the open event streams, so that an http.Server serving s can
// shut down. s must not be used afterwards.
func (s *Server) Close() error {
	s.cancel()
	return nil
}

// scan looks for new runs and agents, at most once per PollInterval.
func (s *Server) scan() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.scanned) < s.cfg.PollInterval {
		return
	}
	s.scanned = time.Now()
	found, err := discover(s.root)
	if err != nil {
		if s.scanErr == nil || s.scanErr.Error() != err.Error() {
			s.log.Warn("dashboard: scanning the run directory failed", "dir", s.root, "err", err)
		}
		s.scanErr = err
		return
	}
	s.scanErr = nil
	for dir, agents := range found {
		id := runID(s.root, dir)
		r, ok := s.runs[id]
		if !ok {
			r = &run{id: id, dir: dir}
			s.runs[id] = r
		}
		r.mu.Lock()
		r.setAgents(agents)
		r.mu.Unlock()
	}
}

// runList is the runs found so far, by ID.
func (s *Server) runList() []*run {
	s.scan()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*run, 0, len(s.runs))
	for _, r := range s.runs {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *run) int { return cmp.Compare(a.id, b.id) })
	return out
}

// lookup returns the run named by the request's {id}, read up to now, or
// writes 404. IDs are only ever looked up among the runs found, never
// joined into a path.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *run {
	s.scan()
	s.mu.Lock()
	rn := s.runs[r.PathValue("id")]
	s.mu.Unlock()
	if rn == nil {
		http.Error(w, "no such run", http.StatusNotFound)
		return nil
	}
	s.refresh(rn, 0)
	return rn
}

// refresh reads what rn's files gained, unless that was done less than
// within ago.
func (s *Server) refresh(rn *run, within time.Duration) {
	rn.mu.Lock()
	fresh := within > 0 && time.Since(rn.refreshed) < within
	before := rn.err
	rn.mu.Unlock()
	if fresh {
		return
	}
	rn.refresh()
	rn.mu.Lock()
	if err := rn.err; err != nil && (before == nil || before.Error() != err.Error()) {
		s.log.Warn("dashboard: reading a run failed", "run", rn.id, "err", err)
	}
	rn.mu.Unlock()
}

// AgentInfo describes one agent of a run in the JSON API.
type AgentInfo struct {
	// Key names the agent in URLs; Name is its model name.
	Key  string `json:"key"`
	Name string `json:"name"`
	// Dir is the agent's directory below the served directory.
	Dir string `json:"dir"`
	// Step is the latest step (-1 before the first); Rows counts the
	// steps kept.
	Step int64 `json:"step"`
	Rows int   `json:"rows"`
	// LastTime is when the latest step finished.
	LastTime time.Time `json:"last_time,omitzero"`
	// BadLines counts the lines of train_metrics.jsonl skipped as
	// unreadable, BadDropped those of dropped.jsonl.
	BadLines   int `json:"bad_lines"`
	BadDropped int `json:"bad_dropped"`
	// Dropped counts the episodes of dropped.jsonl per reason.
	Dropped map[string]int64 `json:"dropped,omitempty"`
	// Steps are the step rows (in /api/run/{id}/steps and events only).
	Steps []Step `json:"steps,omitempty"`
}

// RunInfo describes one run in the JSON API.
type RunInfo struct {
	// ID names the run in URLs (RootID for the served directory itself).
	ID string `json:"id"`
	// Dir is the run's directory below the served directory.
	Dir string `json:"dir"`
	// Step is the latest step of any agent (-1 before the first).
	Step int64 `json:"step"`
	// Rev is the run's revision: it grows whenever a file gains rows.
	Rev    uint64      `json:"rev"`
	Agents []AgentInfo `json:"agents"`
	// Error is the last error reading the run's files, if any.
	Error string `json:"error,omitempty"`
}

// info describes rn; with steps it includes the rows stored after
// revision since. Called with rn.mu held.
func (s *Server) info(rn *run, steps bool, since uint64) RunInfo {
	ri := RunInfo{ID: rn.id, Dir: s.rel(rn.dir), Step: -1, Rev: rn.rev, Agents: []AgentInfo{}}
	if rn.err != nil {
		ri.Error = rn.err.Error()
	}
	for _, a := range rn.agents {
		ai := AgentInfo{Key: a.key, Name: a.name, Dir: s.rel(a.dir), Step: a.lastStep(), Rows: len(a.steps),
			BadLines: a.badLines, BadDropped: a.badDrops}
		if len(a.dropCounts) > 0 {
			ai.Dropped = maps.Clone(a.dropCounts)
		}
		if n := len(a.steps); n > 0 {
			ai.LastTime = a.steps[n-1].Time
		}
		if steps {
			ai.Steps = []Step{}
			for _, st := range a.steps {
				if st.seq > since {
					ai.Steps = append(ai.Steps, st)
				}
			}
		}
		ri.Step = max(ri.Step, ai.Step)
		ri.Agents = append(ri.Agents, ai)
	}
	return ri
}

// rel is dir below the served directory, with slashes ("." for itself).
func (s *Server) rel(dir string) string {
	r, err := filepath.Rel(s.root, dir)
	if err != nil {
		return "?"
	}
	return filepath.ToSlash(r)
}

func (s *Server) apiRuns(w http.ResponseWriter, r *http.Request) {
	var out struct {
		Dir  string    `json:"dir"`
		Runs []RunInfo `json:"runs"`
	}
	out.Dir, out.Runs = s.root, []RunInfo{}
	for _, rn := range s.runList() {
		s.refresh(rn, s.cfg.PollInterval)
		rn.mu.Lock()
		out.Runs = append(out.Runs, s.info(rn, false, 0))
		rn.mu.Unlock()
	}
	writeJSON(w, out)
}

func (s *Server) apiSteps(w http.ResponseWriter, r *http.Request) {
	rn := s.lookup(w, r)
	if rn == nil {
		return
	}
	rn.mu.Lock()
	info := s.info(rn, true, 0)
	rn.mu.Unlock()
	writeJSON(w, info)
}

// stepDetail reads the drill-down of the request's agent and step, or
// writes the error.
func (s *Server) stepDetail(w http.ResponseWriter, r *http.Request) (*StepDetail, bool) {
	rn := s.lookup(w, r)
	if rn == nil {
		return nil, false
	}
	step, err := strconv.ParseInt(r.PathValue("step"), 10, 64)
	if err != nil || step < 0 {
		http.Error(w, "bad step: want a non-negative integer", http.StatusBadRequest)
		return nil, false
	}
	rn.mu.Lock()
	a := rn.agent(r.PathValue("agent"))
	var dir string
	d := &StepDetail{Run: rn.id, Step: step, Groups: []Group{}}
	if a != nil {
		dir, d.Agent = a.dir, a.key
		if i, ok := slices.BinarySearchFunc(a.steps, step, func(x Step, t int64) int { return cmp.Compare(x.Step, t) }); ok {
			row := a.steps[i]
			d.Row = &row
		}
	}
	rn.mu.Unlock()
	if a == nil {
		http.Error(w, "no such agent", http.StatusNotFound)
		return nil, false
	}
	groups, recorded, bad, truncated, err := readSamples(s.root, dir, step)
	if err != nil {
		s.log.Warn("dashboard: reading samples failed", "run", rn.id, "agent", d.Agent, "step", step, "err", err)
		http.Error(w, "reading the step's samples failed", http.StatusInternalServerError)
		return nil, false
	}
	if groups != nil {
		d.Groups = groups
	}
	d.Recorded, d.BadLines, d.Truncated = recorded, bad, truncated
	return d, true
}

func (s *Server) apiStep(w http.ResponseWriter, r *http.Request) {
	if d, ok := s.stepDetail(w, r); ok {
		writeJSON(w, d)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	// An error here is the client's going away: the header is sent.
	_ = json.NewEncoder(w).Encode(v)
}

// eventID is the ID of the event that brings a client up to rev.
func (s *Server) eventID(rev uint64) string { return s.instance + "-" + strconv.FormatUint(rev, 10) }

// since is the revision a client of the event stream is up to: from
// Last-Event-ID when it reconnects, else from ?since=. An ID from another
// process (the dashboard was restarted) counts as nothing seen.
func (s *Server) since(r *http.Request) uint64 {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		inst, rev, ok := strings.Cut(id, "-")
		if n, err := strconv.ParseUint(rev, 10, 64); ok && inst == s.instance && err == nil {
			return n
		}
		return 0
	}
	n, _ := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
	return n
}

// heartbeat is how often an idle event stream sends a comment, so that
// proxies and the browser keep it open.
const heartbeat = 15 * time.Second

// events streams a run's new rows as server-sent events: an event "steps"
// whose data is a RunInfo holding only the rows stored since the client's
// revision, and whose ID the browser sends back when it reconnects.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	rn := s.lookup(w, r)
	if rn == nil {
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's WriteTimeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	since := s.since(r)
	tick := time.NewTicker(s.cfg.PollInterval)
	defer tick.Stop()
	quiet := time.Now()
	for {
		s.scan()
		s.refresh(rn, s.cfg.PollInterval/2)
		rn.mu.Lock()
		if since > rn.rev {
			since = 0 // a revision this process never had
		}
		var info RunInfo
		changed := rn.rev > since
		if changed {
			info = s.info(rn, true, since)
		}
		rn.mu.Unlock()
		var err error
		switch {
		case changed:
			b, _ := json.Marshal(info)
			_, err = fmt.Fprintf(w, "id: %s\nevent: steps\ndata: %s\n\n", s.eventID(info.Rev), b)
			since, quiet = info.Rev, time.Now()
		case time.Since(quiet) >= heartbeat:
			_, err = fmt.Fprint(w, ": ping\n\n")
			quiet = time.Now()
		}
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
	}
}
