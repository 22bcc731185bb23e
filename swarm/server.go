package swarm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/dashboard"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/record"
	"github.com/troupe-ml/troupe/swarm/registry"
	"github.com/troupe-ml/troupe/swarm/rundir"
	"github.com/troupe-ml/troupe/swarm/team"
	"github.com/troupe-ml/troupe/swarm/weightstore"
)

// Engine statuses, spelled as AgentJet's swarm server spells them.
const (
	StatusOffline       = api.StatusOffline
	StatusBooting       = api.StatusBooting
	StatusRolling       = api.StatusRolling
	StatusRollingPost   = api.StatusRollingPost
	StatusWeightSyncing = api.StatusWeightSyncing
)

// CheckpointFile is the name of the checkpoint inside ServerConfig.CheckpointDir.
const CheckpointFile = "checkpoint.safetensors"

// Server is one swarm server: it hosts one Model, hands out episodes and
// trains the model on their rewards. Create it with NewServer, serve
// Handler(), and Close it when done.
//
// Its state is split by concern, each part a small type it composes, all
// guarded by mu: the open episodes (episodes), the finished ones waiting
// for a batch and the agree-sync-weight voters (batcher), the episode
// journal (journal); the engine's status and training configuration are
// its own fields. The OpenAI endpoint is an openai.Handler whose calls the
// server authorises by episode key and records into the episode (chat.go).
type Server struct {
	cfg     ServerConfig
	model   Model
	log     *slog.Logger
	reg     *prometheus.Registry
	m       *metrics
	handler http.Handler
	mux     *http.ServeMux
	chat    *openai.Handler

	// trainMu orders Train, Save and Load: a checkpoint's version, journal
	// record and weights describe the same step.
	trainMu sync.Mutex

	mu         sync.Mutex
	status     string
	detail     string
	epoch      int64 // incremented by every stop_engine
	train      TrainConfig
	syncedYAML string
	bootStart  time.Time
	eps        *episodes
	batch      batcher
	lastStats  rl.Stats
	training   bool
	acct       Accounting
	vlog       []VerboseLogEntry // ring of recent engine events
	vlogPos    int
	booted     atomic.Bool // true once the model was loaded (or found fresh) by a boot
	step       atomic.Int64

	drops          rundir.Drops      // dropped episodes: by reason, the latest, those dropped.jsonl lacks
	droppedSamples int64             // malformed samples dropped from journaled episodes
	dash           *dashboard.Server // the run directory's dashboard; nil without CheckpointDir

	// touched by the training goroutine only
	curves       rundir.Curves
	tokensAtStep int64 // completionTokens at the previous step

	stepEnd atomic.Int64 // when the previous step (or the boot) ended, Unix nanoseconds

	completionTokens atomic.Int64 // sampled by this server

	kv jetstream.KeyValue // the registry; nil without JetStream or a URL to announce
	ws *weightStore       // the weights bucket; nil in RoleBoth
	jr *journal           // nil without ServerConfig.JetStream

	teams *team.Tracker                 // team episodes (teams.go)
	held  map[string][]*finishedEpisode // ended team members held until their team is decided, by team id

	// ctx ends with Close, cutting weights transfers short.
	ctx    context.Context
	cancel context.CancelFunc

	trainReq chan struct{}
	stopCh   chan struct{}
	wg       sync.WaitGroup
	closeMu  sync.Once
}

// NewServer returns a server in ENGINE.OFFLINE. Call Start (or POST
// /start_engine) to begin rolling.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Model == nil {
		return nil, errors.New("swarm: ServerConfig.Model is nil")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Train.Validate(); err != nil {
		return nil, fmt.Errorf("swarm: train config: %w", err)
	}
	s := &Server{
		cfg: cfg, model: cfg.Model, log: cfg.Logger.With("model", cfg.Model.Name()), reg: cfg.Registry,
		status: StatusOffline, train: cfg.Train, batch: batcher{active: map[string]*activeClient{}},
		trainReq: make(chan struct{}, 1), stopCh: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.m = newMetrics(s.reg, s)
	s.eps = newEpisodes(cfg.ClosedMemory, s.m)
	s.chat = openai.NewHandler(openai.Config{MaxN: cfg.MaxN, MaxRequestTokens: cfg.MaxRequestTokens, MaxBodyBytes: cfg.MaxBodyBytes,
		WriteTimeout: cfg.Timeouts.Write, OnTokens: func(prompt, completion int) {
			s.m.tokens.WithLabelValues("prompt").Add(float64(prompt))
			s.m.tokens.WithLabelValues("completion").Add(float64(completion))
			s.completionTokens.Add(int64(completion))
		}})
	if err := s.openBus(); err != nil {
		return nil, err
	}
	s.teams = team.NewTracker(cmp.Or(s.cfg.Teams, team.NewMemory()), s.journalName(), cfg.JournalTimeout, s.log, s.teamDecided)
	s.held = map[string][]*finishedEpisode{}
	if err := s.loadTrainConfig(); err != nil {
		return nil, err
	}
	if cfg.CheckpointDir != "" {
		if err := s.openDashboard(); err != nil {
			return nil, err
		}
	}
	s.step.Store(cfg.Model.Version())
	s.m.globalStep.Set(float64(s.step.Load()))
	s.mux = s.routes()
	guard := httpx.GuardConfig{Hosts: httpx.URLHosts(cfg.PublicURL, cfg.RegistryURL)}
	s.handler = httpx.Recover(s.tokenPrefix(httpx.Guard(s.mux, guard)), s.m.panics, s.log, redactPath)
	s.wg.Add(3)
	go s.trainLoop()
	go s.reapLoop()
	go func() { defer s.wg.Done(); s.teams.Run(s.ctx, s.stopCh) }()
	return s, nil
}

// openBus opens what the server keeps on JetStream: the weights bucket of
// a role, the registry, the episode journal.
func (s *Server) openBus() error {
	cfg := s.cfg
	switch cfg.Role {
	case RoleBoth:
	case RoleRollout, RoleTrain:
		if cfg.JetStream == nil {
			return fmt.Errorf("swarm: role %q needs ServerConfig.JetStream (the episode journal and the weights bucket)", cfg.Role)
		}
	default:
		return fmt.Errorf("swarm: unknown role %q (want %q, %q or empty)", cfg.Role, RoleRollout, RoleTrain)
	}
	if cfg.JetStream == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.JournalTimeout)
	defer cancel()
	if cfg.Role != RoleBoth {
		obs, err := weightstore.Open(ctx, cfg.JetStream, s.journalName(), cfg.JournalReplicas)
		if err != nil {
			return fmt.Errorf("swarm: %w", err)
		}
		s.ws = &weightStore{obs: obs}
	}
	if s.registryURL() != "" {
		kv, err := registry.Open(ctx, cfg.JetStream, cfg.JournalReplicas)
		if err != nil {
			return err
		}
		s.kv = kv
	}
	key, err := s.episodeKey()
	if err != nil {
		return err
	}
	jr, err := openJournal(ctx, cfg.JetStream, s.journalName(), cfg.JournalReplicas, cfg.JournalTimeout, key)
	if err != nil {
		return err
	}
	s.jr = jr
	if cfg.Teams == nil {
		if s.cfg.Teams, err = team.Open(ctx, cfg.JetStream, cfg.JournalReplicas); err != nil {
			return fmt.Errorf("swarm: %w", err)
		}
	}
	return nil
}

// episodeKey is the key that signs and verifies the journal's records:
// ServerConfig.EpisodeKey, or a RoleBoth server's own kept in its
// directory.
func (s *Server) episodeKey() ([]byte, error) {
	if k := s.cfg.EpisodeKey; k != nil {
		if len(k) < record.MinKeyBytes {
			return nil, fmt.Errorf("swarm: the episode key has %d bytes, fewer than %d: %s", len(k), record.MinKeyBytes, record.HowTo)
		}
		return k, nil
	}
	dir := cmp.Or(s.cfg.EpisodeKeyDir, s.cfg.CheckpointDir)
	if s.cfg.Role != RoleBoth || dir == "" {
		return nil, fmt.Errorf("swarm: %s on NATS needs an episode key, so that only real episodes are trained (a leaked NATS password alone must not train the model): %s",
			cmp.Or(s.cfg.Role+" role", "a server without a checkpoint or data directory to keep its own key in"), record.HowTo)
	}
	k, err := record.LoadOrCreateKey(dir)
	if err != nil {
		return nil, fmt.Errorf("swarm: %w", err)
	}
	return k, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// HTTPServer returns an http.Server that serves Handler with the
// configured timeouts (ServerConfig.Timeouts); the caller sets Addr or
// calls Serve with its listener. Its Shutdown ends the dashboard's event
// streams, which would otherwise hold it.
func (s *Server) HTTPServer() *http.Server {
	hs := httpx.NewServer(s.handler, s.cfg.Timeouts, s.log)
	if s.dash != nil {
		hs.RegisterOnShutdown(func() { s.dash.Close() })
	}
	return hs
}

// CheckListen refuses to serve the admin endpoints unauthenticated beyond
// loopback: it returns an error when host (a listen address's host part:
// "", "0.0.0.0", "::", a name or an IP) is not a loopback address and
// adminToken is empty. Names other than "localhost" count as non-loopback.
func CheckListen(host, adminToken string) error {
	if adminToken != "" {
		return nil
	}
	h := strings.Trim(host, "[]")
	if h == "localhost" {
		return nil
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
		return nil
	}
	if h == "" {
		h = "all interfaces"
	}
	return fmt.Errorf("swarm: refusing to listen on %s without an admin token: anyone who can reach it could stop the engine or change its training config (set TROUPE_ADMIN_TOKEN, or listen on 127.0.0.1)", h)
}

// Model returns the hosted model. Callers must not train it concurrently
// with the server.
func (s *Server) Model() Model { return s.model }

// Registry returns the server's Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// TrainConfig returns the training configuration in force.
func (s *Server) TrainConfig() TrainConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.train
}

// Status returns the engine status, its detail and the global step.
func (s *Server) Status() (status, detail string, globalStep int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status, s.detail, s.globalStep()
}

// globalStep is the model version as of the last boot or training step.
func (s *Server) globalStep() int64 { return s.step.Load() }

// Start boots the engine synchronously: it loads the last checkpoint when
// there is one (so a restarted server resumes at the same global step) and
// begins rolling.
func (s *Server) Start() error {
	s.mu.Lock()
	if s.status != StatusOffline {
		st := s.status
		s.mu.Unlock()
		return fmt.Errorf("swarm: cannot start engine in status %s", st)
	}
	s.status, s.detail, s.bootStart = StatusBooting, "loading checkpoint", time.Now()
	s.m.setStatus(s.status)
	s.mu.Unlock()
	return s.boot()
}

func (s *Server) boot() error {
	var err error
	if s.cfg.Role == RoleRollout {
		// A front-end serves the weights its trainer publishes.
		if s.ws.w == nil {
			err = s.watchWeights()
		}
	} else {
		err = s.loadCheckpoint()
	}
	if err == nil && s.jr != nil && s.jr.consume == nil && s.cfg.Role != RoleRollout {
		// The first boot replays the journal: episodes no checkpoint holds
		// come back into the buffer.
		if s.cfg.CheckpointDir != "" {
			err = s.loadJournalRecord(s.step.Load())
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.JournalTimeout)
			err = s.startConsumer(ctx)
			cancel()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != StatusBooting { // stopped while booting
		return fmt.Errorf("swarm: engine left BOOTING while booting (now %s)", s.status)
	}
	if err != nil {
		s.status, s.detail = StatusOffline, "boot failed: "+err.Error()
		s.m.setStatus(s.status)
		return err
	}
	s.status, s.detail = StatusRolling, "collecting episodes"
	s.booted.Store(true)
	s.stepEnd.Store(time.Now().UnixNano())
	s.m.globalStep.Set(float64(s.step.Load()))
	s.m.setStatus(s.status)
	s.log.Info("engine rolling", "global_step", s.step.Load())
	return nil
}

func (s *Server) loadCheckpoint() error {
	if s.cfg.CheckpointDir == "" {
		return nil
	}
	f, err := os.Open(filepath.Join(s.cfg.CheckpointDir, CheckpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("swarm: open checkpoint: %w", err)
	}
	defer f.Close()
	s.trainMu.Lock()
	defer s.trainMu.Unlock()
	if err := s.model.Load(f); err != nil {
		return fmt.Errorf("swarm: load checkpoint %s: %w", f.Name(), err)
	}
	s.step.Store(s.model.Version())
	s.log.Info("resumed from checkpoint", "path", f.Name(), "global_step", s.model.Version())
	return nil
}

// Checkpoint writes the model to CheckpointDir atomically (write, fsync,
// rename). With a journal it first records which journaled episodes the
// checkpoint trained (JournalFile) and acknowledges them afterwards. It is a
// no-op without a CheckpointDir.
func (s *Server) Checkpoint() error { return s.checkpoint(nil) }

// checkpoint is Checkpoint with the metrics row of the step it holds, kept
// in JournalFile until the row is written.
func (s *Server) checkpoint(row map[string]any) error {
	if s.cfg.CheckpointDir == "" {
		return nil
	}
	// Holding trainMu keeps training out, so the version, the journal
	// record and the weights describe the same step.
	s.trainMu.Lock()
	defer s.trainMu.Unlock()
	step := s.model.Version()
	if s.jr != nil {
		s.mu.Lock()
		rec := journalRecord{Step: step, Seqs: s.trainedSeqsLocked(step), Row: row}
		s.mu.Unlock()
		b, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("swarm: checkpoint: %w", err)
		}
		if err := rundir.WriteFileAtomic(s.cfg.CheckpointDir, JournalFile, bytesWriter(b)); err != nil {
			return fmt.Errorf("swarm: checkpoint: %w", err)
		}
	}
	final := filepath.Join(s.cfg.CheckpointDir, CheckpointFile)
	if err := rundir.WriteFileAtomic(s.cfg.CheckpointDir, CheckpointFile, s.model.Save); err != nil {
		return fmt.Errorf("swarm: checkpoint %s: %w", final, err)
	}
	if s.jr != nil {
		s.mu.Lock()
		s.checkpointedLocked(step)
		s.mu.Unlock()
	}
	s.m.checkpoints.Inc()
	s.log.Info("checkpoint saved", "path", final, "global_step", step)
	return nil
}

// Stop brings the engine to ENGINE.OFFLINE: every open episode is closed
// (its key stops working; it had no reward yet). Finished episodes that
// wait for a batch are kept: the next start trains on them (episodes that
// grow stale meanwhile are dropped then, counted and logged).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.eps.open)
	for _, ep := range s.eps.open {
		s.eps.close(ep, "stopped")
		s.loseMemberLocked(ep, "stopped")
	}
	clear(s.batch.active)
	s.epoch++
	s.status, s.detail = StatusOffline, "stopped"
	s.m.setStatus(s.status)
	s.log.Info("engine stopped", "open_episodes_closed", n, "buffered_episodes_kept", len(s.batch.finished))
	s.vlogLocked("engine", fmt.Sprintf("stopped: %d open episodes closed, %d finished episodes kept for the next start", n, len(s.batch.finished)))
}

// Close stops the background goroutines and, with a CheckpointDir, writes a
// final checkpoint (what the binary does on SIGTERM) — but only if the engine
// ever booted, so that a server whose boot failed never overwrites the last
// good checkpoint with untrained weights. It waits at most
// ServerConfig.CloseTimeout for a training step or a weights transfer in
// progress (transfers are cut short); past it there is no final
// checkpoint, and the journal keeps every episode no checkpoint holds. The
// handler must not be used afterwards.
func (s *Server) Close() error {
	var err error
	s.closeMu.Do(func() {
		s.discardOpenTeams()
		close(s.stopCh)
		s.cancel()
		// Watchers and consumers first: the goroutines that read them
		// return once they are stopped.
		s.mu.Lock()
		if s.ws != nil && s.ws.w != nil {
			s.ws.w.Stop()
		}
		if s.jr != nil && s.jr.consume != nil {
			s.jr.consume.Stop()
		}
		s.mu.Unlock()
		if s.dash != nil {
			s.dash.Close()
		}
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(s.cfg.CloseTimeout):
			s.log.Warn("closing while a training step or weights transfer runs: no final checkpoint; the journal keeps the episodes no checkpoint holds",
				"waited", s.cfg.CloseTimeout)
			s.flushDrops()
			return
		}
		s.mu.Lock()
		if s.jr == nil {
			// Nothing keeps them across processes: say so.
			for _, fe := range s.batch.finished {
				s.dropLocked(fe, "shutdown")
			}
			s.batch.finished = nil
			for id, held := range s.held {
				for _, fe := range held {
					s.dropLocked(fe, "shutdown")
				}
				delete(s.held, id)
			}
		} else if len(s.batch.finished) > 0 {
			s.log.Info("buffered episodes stay in the journal for the next start", "n", len(s.batch.finished))
		}
		s.mu.Unlock()
		s.flushDrops()
		s.plotCurves(0)
		if s.booted.Load() && s.cfg.Role != RoleRollout {
			err = s.Checkpoint()
		}
	})
	return err
}

// OpenEpisodes reports the number of open episodes (tests use it to check
// that nothing leaks).
func (s *Server) OpenEpisodes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.eps.open)
}

func (s *Server) reapLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	var registered time.Time
	for {
		select {
		case <-s.stopCh:
			return
		case now := <-t.C:
			s.reap(now)
			s.flushDrops()
			if s.kv != nil && now.Sub(registered) >= registry.TTL/3 {
				s.register()
				registered = now
			}
		}
	}
}

// reap reclaims episodes idle longer than their discard timeout (their
// records are dropped and their slot freed) and takes inactive clients off
// the agree-sync-weight list.
func (s *Server) reap(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	idle := s.eps.idle(now)
	for _, ep := range idle {
		s.eps.close(ep, "reclaimed")
		s.loseMemberLocked(ep, "reclaimed")
		s.acct.Reclaimed++
	}
	if len(idle) > 0 {
		s.log.Info("reclaimed idle episodes", "n", len(idle))
	}
	expired := 0
	for c, ac := range s.batch.active {
		if now.Sub(ac.lastActivity) > s.cfg.ClientActiveTimeout {
			delete(s.batch.active, c)
			expired++
		}
	}
	if expired > 0 || s.train.GroupTimeout > 0 && len(s.batch.finished) > 0 {
		// The remaining clients may all have agreed, or a task may have
		// waited its GroupTimeout.
		s.maybeTriggerLocked()
	}
	if expired > 0 {
		s.log.Info("inactive clients left the active list", "n", expired)
	}
	return len(idle)
}

// WithModel calls f with the model while no training step can run.
func (s *Server) WithModel(f func(Model)) {
	s.trainMu.Lock()
	defer s.trainMu.Unlock()
	f(s.model)
}
