package swarm

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/troupe-ml/troupe/rl"
)

// Engine statuses, spelled as AgentJet's swarm server spells them.
const (
	StatusOffline       = "ENGINE.OFFLINE"
	StatusBooting       = "ENGINE.BOOTING"
	StatusRolling       = "ENGINE.ROLLING"
	StatusRollingPost   = "ENGINE.ROLLING_POST"
	StatusWeightSyncing = "ENGINE.WEIGHT_SYNCING"
)

// Episode types.
const (
	EpisodeTrain = "train"
	EpisodeEval  = "eval"
)

// CheckpointFile is the name of the checkpoint inside ServerConfig.CheckpointDir.
const CheckpointFile = "checkpoint.safetensors"

// ServerConfig configures a Server. Only Model is required.
type ServerConfig struct {
	// Model is the trainable model the server hosts.
	Model Model
	// Train is the training policy until a client syncs another one;
	// DefaultTrainConfig() when zero.
	Train TrainConfig
	// PublicURL, when set, is the base of the openai_base_url handed to
	// clients (e.g. "http://10.0.0.7:10086"); otherwise the request's Host.
	PublicURL string
	// AdminToken, when set, is required by the admin endpoints
	// (sync_train_config, sync_train_code, start_engine, stop_engine) and
	// unlocks the episode and client ids of the pool-information endpoints.
	// It is accepted as "Authorization: Bearer <token>", as X-Admin-Token,
	// and as the URL path prefix /t/<token>/ (so that a client that can only
	// be given a base URL, such as AgentJet's, carries it). Without it the
	// admin endpoints are open to every caller: serve beyond loopback only
	// with a token (CheckListen refuses otherwise).
	AdminToken string
	// CheckpointDir holds CheckpointFile and is the run directory: the
	// per-step training metrics (TrainMetricsFile, TrainCurvesFile) are
	// written there, and /get_server_experiment_dir reports it. Empty
	// disables checkpoints and metric files.
	CheckpointDir string
	// MaxOpenPerClient bounds the episodes one client_uuid may hold open
	// (256 when zero); a claim beyond it gets 429 with Retry-After, so that
	// one client cannot take every slot of TrainConfig.MaxOpenEpisodes.
	MaxOpenPerClient int
	// MaxOpenPerAddress bounds the episodes all clients at one remote IP
	// address may hold open (1024 when zero; loopback and admin requests
	// are exempt): client_uuid is the client's own choice, so without it
	// one host could take every slot under many ids.
	MaxOpenPerAddress int
	// MaxDiscardTimeout bounds the discard_episode_timeout a claim may ask
	// for (1 h when zero): an abandoned episode holds its slot at most this
	// long. Larger values get 400.
	MaxDiscardTimeout time.Duration
	// MaxAbsReward bounds |reward| of end_episode (1e6 when zero); larger
	// rewards get 400, so that group statistics stay far from overflow.
	MaxAbsReward float64
	// MinAgreeSync is the shortest WEIGHT_SYNCING under the
	// agree-sync-weight collection methods (6 s when zero): AgentJet's
	// client checks the engine status every 5 s after agreeing and waits
	// until it sees the sync. Negative: no minimum.
	MinAgreeSync time.Duration
	// ClientActiveTimeout is how long a client stays on the active list of
	// the agree-sync-weight collection methods without claiming an
	// episode, chatting or ending one (10 min when zero, AgentJet's
	// CLIENT_ACTIVE_TIMEOUT).
	ClientActiveTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are the
	// timeouts of the http.Server that HTTPServer returns (10 s, 30 s, 60 s
	// and 120 s when zero). ReadTimeout bounds the whole request, body
	// included, so a body trickled byte by byte is cut. WriteTimeout is
	// renewed for every streamed chunk and once sampling is done: it bounds
	// each write, not the generation, and a client that stops reading a
	// stream is cut after it (its completion is not recorded and its
	// episode becomes idle, then reclaimed).
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// OnTrainStep, when set, is called after every training step with its
	// statistics, from the training goroutine (a slow hook delays the
	// return to ENGINE.ROLLING).
	OnTrainStep func(TrainStep)
	// MaxBodyBytes bounds request bodies (1 MiB when zero); larger ones get 413.
	MaxBodyBytes int64
	// ReapInterval is how often idle episodes are looked for (1 s when zero).
	ReapInterval time.Duration
	// ClosedMemory is how many closed episode ids are remembered to tell a
	// late or duplicate end_episode from an unknown one (65536 when zero).
	ClosedMemory int
	// MaxN bounds the n of a chat completion (16 when zero).
	MaxN int
	// MaxRequestTokens bounds n × max_tokens of one chat completion, the
	// sampling work one request can ask for (16384 when zero). A request
	// that sets max_tokens beyond it gets 400; one that leaves max_tokens
	// out gets at most MaxRequestTokens/n tokens per choice.
	MaxRequestTokens int
	// MaxEpisodeTokens bounds the tokens one episode may record (prompt
	// tokens once per completion plus all sampled tokens, the memory an
	// episode holds until it ends; 1<<20 when zero). A completion that
	// could exceed it gets 429 before anything is generated.
	MaxEpisodeTokens int
	// JetStream, when set, journals finished train episodes in a stream of
	// the model (EpisodeStream) before end_episode answers 200, and the
	// trainer consumes them from there: with a CheckpointDir, a process
	// killed at any moment loses no acknowledged episode (see JournalFile).
	// bus.Open gives one, embedded or external. Nil keeps finished
	// episodes in memory only.
	JetStream jetstream.JetStream
	// Role is RoleBoth (the default), RoleRollout or RoleTrain; the
	// latter two need JetStream (see the roles' documentation).
	Role string
	// RegistryURL is the URL this server announces in RegistryBucket
	// (PublicURL when empty; no announcement when both are empty).
	RegistryURL string
	// JournalName names the episode stream (EpisodeStream); the model's
	// name when empty. Servers sharing one NATS need distinct names.
	JournalName string
	// JournalReplicas is the episode stream's number of copies (1 when
	// zero; a clustered bus gives bus.Bus.Replicas).
	JournalReplicas int
	// JournalTimeout bounds one journal publish (5 s when zero); past it
	// end_episode answers 503 and the episode stays open for a retry.
	JournalTimeout time.Duration
	// Logger receives the server's log; slog.Default() when nil.
	Logger *slog.Logger
	// Registry receives the server's Prometheus metrics; a fresh registry
	// when nil (so several servers can live in one process).
	Registry *prometheus.Registry
}

// Server is one swarm server: it hosts one Model, hands out episodes and
// trains the model on their rewards. Create it with NewServer, serve
// Handler(), and Close it when done.
type Server struct {
	cfg     ServerConfig
	model   Model
	log     *slog.Logger
	reg     *prometheus.Registry
	m       *metrics
	handler http.Handler
	mux     *http.ServeMux

	// modelMu: Generate holds it for reading; Train, Save and Load for writing.
	modelMu sync.RWMutex

	mu         sync.Mutex
	status     string
	detail     string
	epoch      int64 // incremented by every stop_engine
	train      TrainConfig
	syncedYAML string
	episodes   map[string]*episode
	openTrain  int
	perClient  map[string]int           // open episodes by client_uuid
	perAddr    map[string]int           // open episodes by remote IP (loopback and admins not counted)
	active     map[string]*activeClient // agree-sync-weight voters, by client_uuid
	vlog       []VerboseLogEntry        // ring of recent engine events
	vlogPos    int
	closed     map[string]closedInfo
	closedRing []string
	closedPos  int
	finished   []*finishedEpisode
	bootStart  time.Time
	lastStats  rl.Stats
	training   bool
	acct       Accounting
	booted     atomic.Bool // true once the model was loaded (or found fresh) by a boot
	step       atomic.Int64

	curves trainCurves // touched by the training goroutine only

	kv         jetstream.KeyValue       // the registry; nil without JetStream or a URL to announce
	ws         *weightStore             // the weights bucket; nil in RoleBoth
	jr         *journal                 // nil without ServerConfig.JetStream
	jseq       map[uint64]*jentry       // journaled episodes not acknowledged yet, by stream sequence
	jtrained   map[uint64]bool          // sequences the loaded checkpoint already trained (JournalFile)
	publishing map[string]bool          // episode ids whose end_episode is publishing
	early      map[string]jetstream.Msg // delivered while their end_episode was publishing

	trainReq chan struct{}
	stopCh   chan struct{}
	wg       sync.WaitGroup
	closeMu  sync.Once
}

type episode struct {
	id, client, kind, key, taskHint string
	lastActive                      time.Time
	timeout                         time.Duration
	inflight                        int
	ending                          bool   // end_episode is journaling it
	addr                            string // remote IP counted in perAddr; empty when exempt
	calls                           int
	tokens                          int // prompt + sampled tokens recorded
	reserved                        int // tokens reserved by completions in flight
	samples                         []rl.Sample
}

// activeClient is a client on the agree-sync-weight active list: it ended a
// rewarded train episode since the last weight sync (AgentJet's
// ActiveSwarmClient).
type activeClient struct {
	lastActivity time.Time
	agreed       bool
}

type closedInfo struct {
	reason string // ended, aborted, reclaimed, stopped
	client string
}

type finishedEpisode struct {
	id, taskID, client string
	reward             float64
	samples            []rl.Sample
	minVersion         int64  // oldest parameter version among its completions; -1 when none
	seq                uint64 // its sequence in the episode journal; 0 when not journaled
}

// NewServer returns a server in ENGINE.OFFLINE. Call Start (or POST
// /start_engine) to begin rolling.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Model == nil {
		return nil, errors.New("swarm: ServerConfig.Model is nil")
	}
	if cfg.Train == (TrainConfig{}) {
		cfg.Train = DefaultTrainConfig()
	}
	if err := cfg.Train.Validate(); err != nil {
		return nil, fmt.Errorf("swarm: train config: %w", err)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = time.Second
	}
	if cfg.ClosedMemory <= 0 {
		cfg.ClosedMemory = 1 << 16
	}
	if cfg.MaxN <= 0 {
		cfg.MaxN = 16
	}
	if cfg.MaxRequestTokens <= 0 {
		cfg.MaxRequestTokens = 16384
	}
	if cfg.MaxEpisodeTokens <= 0 {
		cfg.MaxEpisodeTokens = 1 << 20
	}
	if cfg.MaxOpenPerClient <= 0 {
		cfg.MaxOpenPerClient = 256
	}
	if cfg.MaxOpenPerAddress <= 0 {
		cfg.MaxOpenPerAddress = 1024
	}
	if cfg.MaxDiscardTimeout <= 0 {
		cfg.MaxDiscardTimeout = time.Hour
	}
	if !(cfg.MaxAbsReward > 0) || math.IsInf(cfg.MaxAbsReward, 0) {
		cfg.MaxAbsReward = 1e6
	}
	if cfg.MinAgreeSync == 0 {
		cfg.MinAgreeSync = 6 * time.Second
	}
	if cfg.ClientActiveTimeout <= 0 {
		cfg.ClientActiveTimeout = 10 * time.Minute
	}
	cfg.ReadHeaderTimeout = cmp.Or(cfg.ReadHeaderTimeout, 10*time.Second)
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, 30*time.Second)
	cfg.WriteTimeout = cmp.Or(cfg.WriteTimeout, 60*time.Second)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, 120*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{
		cfg: cfg, model: cfg.Model, log: cfg.Logger.With("model", cfg.Model.Name()), reg: cfg.Registry,
		status: StatusOffline, train: cfg.Train,
		episodes: map[string]*episode{}, closed: map[string]closedInfo{},
		perClient: map[string]int{}, perAddr: map[string]int{}, active: map[string]*activeClient{},
		closedRing: make([]string, cfg.ClosedMemory),
		trainReq:   make(chan struct{}, 1), stopCh: make(chan struct{}),
		jseq: map[uint64]*jentry{}, jtrained: map[uint64]bool{},
		publishing: map[string]bool{}, early: map[string]jetstream.Msg{},
	}
	if err := s.loadTrainConfig(); err != nil {
		return nil, err
	}
	switch cfg.Role {
	case RoleBoth:
	case RoleRollout, RoleTrain:
		if cfg.JetStream == nil {
			return nil, fmt.Errorf("swarm: role %q needs ServerConfig.JetStream (the episode journal and the weights bucket)", cfg.Role)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.journalTimeout())
		ws, err := openWeights(ctx, cfg.JetStream, s.journalName(), cfg.JournalReplicas)
		cancel()
		if err != nil {
			return nil, err
		}
		s.ws = ws
	default:
		return nil, fmt.Errorf("swarm: unknown role %q (want %q, %q or empty)", cfg.Role, RoleRollout, RoleTrain)
	}
	if cfg.JetStream != nil && s.registryURL() != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.journalTimeout())
		kv, err := openRegistry(ctx, cfg.JetStream, cfg.JournalReplicas)
		cancel()
		if err != nil {
			return nil, err
		}
		s.kv = kv
	}
	if cfg.JetStream != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.journalTimeout())
		jr, err := openJournal(ctx, cfg.JetStream, s.journalName(), cfg.JournalReplicas, cfg.journalTimeout())
		cancel()
		if err != nil {
			return nil, err
		}
		s.jr = jr
	}
	s.step.Store(cfg.Model.Version())
	s.m = newMetrics(s.reg, s)
	s.mux = s.routes()
	s.handler = s.recoverMiddleware(s.tokenPrefix(s.mux))
	s.wg.Add(2)
	go s.trainLoop()
	go s.reapLoop()
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// HTTPServer returns an http.Server that serves Handler with the
// configured timeouts (ServerConfig.ReadHeaderTimeout and the others); the
// caller sets Addr or calls Serve with its listener.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
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

// Model returns the hosted model. Callers must not use it concurrently with
// the server's training (read its parameters only while the server is idle).
func (s *Server) Model() Model { return s.model }

// Registry returns the server's Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

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
			ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.journalTimeout())
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
	s.modelMu.Lock()
	defer s.modelMu.Unlock()
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
func (s *Server) Checkpoint() error {
	if s.cfg.CheckpointDir == "" {
		return nil
	}
	// Holding modelMu for reading keeps training out, so the version, the
	// journal record and the weights describe the same step.
	s.modelMu.RLock()
	defer s.modelMu.RUnlock()
	step := s.model.Version()
	if s.jr != nil {
		s.mu.Lock()
		rec := journalRecord{Step: step, Seqs: s.trainedSeqsLocked(step)}
		s.mu.Unlock()
		b, _ := json.Marshal(rec)
		if err := writeFileAtomic(s.cfg.CheckpointDir, JournalFile, bytesWriter(b)); err != nil {
			return fmt.Errorf("swarm: checkpoint: %w", err)
		}
	}
	final := filepath.Join(s.cfg.CheckpointDir, CheckpointFile)
	if err := writeFileAtomic(s.cfg.CheckpointDir, CheckpointFile, s.model.Save); err != nil {
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
	s.stopLocked()
}

func (s *Server) stopLocked() {
	n := len(s.episodes)
	for id, ep := range s.episodes {
		s.closeLocked(id, ep, "stopped")
	}
	clear(s.active)
	s.epoch++
	s.status, s.detail = StatusOffline, "stopped"
	s.m.setStatus(s.status)
	s.log.Info("engine stopped", "open_episodes_closed", n, "buffered_episodes_kept", len(s.finished))
	s.vlogLocked("engine", fmt.Sprintf("stopped: %d open episodes closed, %d finished episodes kept for the next start", n, len(s.finished)))
}

// dropLocked counts and logs a finished train episode that will never be
// trained on.
func (s *Server) dropLocked(fe *finishedEpisode, reason string) {
	s.m.dropped.WithLabelValues(reason).Inc()
	s.markDoneLocked(fe, -1)
	s.acct.Dropped++
	s.acct.DroppedRewardSum += fe.reward
	s.log.Warn("finished episode dropped", "reason", reason, "task_id", fe.taskID, "reward", fe.reward, "min_version", fe.minVersion)
}

// Close stops the background goroutines and, with a CheckpointDir, writes a
// final checkpoint (what the binary does on SIGTERM) — but only if the engine
// ever booted, so that a server whose boot failed never overwrites the last
// good checkpoint with untrained weights. The handler must not be used
// afterwards.
func (s *Server) Close() error {
	var err error
	s.closeMu.Do(func() {
		close(s.stopCh)
		s.wg.Wait()
		s.mu.Lock()
		if s.jr == nil {
			// Nothing keeps them across processes: say so.
			for _, fe := range s.finished {
				s.dropLocked(fe, "shutdown")
			}
			s.finished = nil
		} else if len(s.finished) > 0 {
			s.log.Info("buffered episodes stay in the journal for the next start", "n", len(s.finished))
		}
		s.mu.Unlock()
		s.plotCurves()
		if s.booted.Load() && s.cfg.Role != RoleRollout {
			err = s.Checkpoint()
		}
		if s.ws != nil && s.ws.w != nil {
			s.ws.w.Stop()
		}
		if s.jr != nil && s.jr.consume != nil {
			s.jr.consume.Stop()
		}
	})
	return err
}

// ---- episodes -------------------------------------------------------------

func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("swarm: crypto/rand failed: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

const keyPrefix = "sk-troupe-"

// newKey returns an episode API key: the episode id (public, used to find
// the episode) and 256 random bits, which are compared in constant time.
func newKey(id string) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("swarm: crypto/rand failed: " + err.Error())
	}
	return keyPrefix + id + "." + base64.RawURLEncoding.EncodeToString(b[:])
}

// episodeForKey returns the open episode whose key is key, or nil.
// Caller holds s.mu.
func (s *Server) episodeForKeyLocked(key string) *episode {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return nil
	}
	id, _, ok := strings.Cut(rest, ".")
	if !ok {
		return nil
	}
	ep := s.episodes[id]
	if ep == nil {
		return nil
	}
	if subtle.ConstantTimeCompare([]byte(key), []byte(ep.key)) != 1 {
		return nil
	}
	return ep
}

// closeLocked removes an open episode and remembers why.
func (s *Server) closeLocked(id string, ep *episode, reason string) {
	delete(s.episodes, id)
	if ep.kind == EpisodeTrain {
		s.openTrain--
	}
	if s.perClient[ep.client]--; s.perClient[ep.client] <= 0 {
		delete(s.perClient, ep.client)
	}
	if ep.addr != "" {
		if s.perAddr[ep.addr]--; s.perAddr[ep.addr] <= 0 {
			delete(s.perAddr, ep.addr)
		}
	}
	if old := s.closedRing[s.closedPos]; old != "" {
		delete(s.closed, old)
	}
	s.closedRing[s.closedPos] = id
	s.closedPos = (s.closedPos + 1) % len(s.closedRing)
	s.closed[id] = closedInfo{reason: reason, client: ep.client}
	switch reason {
	case "reclaimed":
		s.acct.Reclaimed++
	case "aborted":
		s.acct.Aborted++
	}
	s.m.open.Set(float64(len(s.episodes)))
	s.m.episodes.WithLabelValues(reason).Inc()
}

// rememberClosedLocked records the reason an already closed episode ended
// with (an episode the engine's stop closed while its end was journaled).
func (s *Server) rememberClosedLocked(id, client, reason string) {
	if _, ok := s.closed[id]; ok {
		s.closed[id] = closedInfo{reason: reason, client: client}
	}
}

// OpenEpisodes reports the number of open episodes (tests use it to check
// that nothing leaks).
func (s *Server) OpenEpisodes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.episodes)
}

// BufferedEpisodes reports finished train episodes waiting for training.
func (s *Server) BufferedEpisodes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.finished)
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
			if s.kv != nil && now.Sub(registered) >= RegistryTTL/3 {
				s.register()
				registered = now
			}
		}
	}
}

// reap reclaims episodes idle longer than their discard timeout: their
// records are dropped and their slot freed.
func (s *Server) reap(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, ep := range s.episodes {
		if ep.inflight == 0 && now.Sub(ep.lastActive) > ep.timeout {
			s.closeLocked(id, ep, "reclaimed")
			n++
		}
	}
	if n > 0 {
		s.log.Info("reclaimed idle episodes", "n", n)
	}
	expired := 0
	for c, ac := range s.active {
		if now.Sub(ac.lastActivity) > s.cfg.ClientActiveTimeout {
			delete(s.active, c)
			expired++
		}
	}
	if expired > 0 {
		s.log.Info("inactive clients left the active list", "n", expired)
		s.maybeTriggerLocked() // the remaining clients may all have agreed
	}
	return n
}

// ---- training ---------------------------------------------------------------

// ruleMetLocked reports whether the finished episodes satisfy the collection
// rule.
func (s *Server) ruleMetLocked() bool {
	_, ok := s.selectBatchLocked(false)
	return ok
}

// selectBatchLocked picks the episodes of the next training batch according
// to the collection method. With take, the chosen episodes (and stale or
// dummy ones) are removed from the buffer.
func (s *Server) selectBatchLocked(take bool) ([]*finishedEpisode, bool) {
	tc := s.train
	if take {
		// drop stale episodes and enforce the buffer bound
		cur := s.step.Load()
		kept := s.finished[:0]
		for _, fe := range s.finished {
			if fe.minVersion >= 0 && cur-fe.minVersion > tc.MaxStaleness {
				s.dropLocked(fe, "stale")
				continue
			}
			kept = append(kept, fe)
		}
		clear(s.finished[len(kept):])
		s.finished = kept
	}
	switch tc.CollectionMethod {
	case CollectAnyAgree, CollectAllAgree:
		// AgentJet's trainer stops rolling when any (all) of the active
		// clients agreed, and trains on what was collected: batch_size
		// does not apply.
		if len(s.finished) == 0 || len(s.active) == 0 {
			return nil, false
		}
		agreed := 0
		for _, ac := range s.active {
			if ac.agreed {
				agreed++
			}
		}
		if agreed == 0 || tc.CollectionMethod == CollectAllAgree && agreed < len(s.active) {
			return nil, false
		}
		if !take {
			return nil, true
		}
		batch := s.finished
		s.finished = nil
		return batch, true
	case CollectEpisodes:
		need := tc.BatchSize * tc.NumRepeat
		if len(s.finished) < need {
			return nil, false
		}
		if !take {
			return nil, true
		}
		batch := append([]*finishedEpisode(nil), s.finished[:need]...)
		s.finished = append(s.finished[:0:0], s.finished[need:]...)
		return batch, true
	default:
		order := []string{}
		byTask := map[string][]*finishedEpisode{}
		for _, fe := range s.finished {
			if _, ok := byTask[fe.taskID]; !ok {
				order = append(order, fe.taskID)
			}
			byTask[fe.taskID] = append(byTask[fe.taskID], fe)
		}
		chosen := map[string]bool{}
		dummy := map[string]bool{}
		for _, t := range order {
			eps := byTask[t]
			if len(eps) < tc.NumRepeat {
				continue
			}
			if tc.CollectionMethod == CollectNonDummyTasks {
				same := true
				for _, fe := range eps[1:] {
					if fe.reward != eps[0].reward {
						same = false
						break
					}
				}
				if same {
					dummy[t] = true
					continue
				}
			}
			if len(chosen) < tc.BatchSize {
				chosen[t] = true
			}
		}
		if len(chosen) < tc.BatchSize {
			return nil, false
		}
		if !take {
			return nil, true
		}
		var batch []*finishedEpisode
		rest := s.finished[:0:0]
		for _, fe := range s.finished {
			switch {
			case chosen[fe.taskID]:
				batch = append(batch, fe)
			case dummy[fe.taskID]:
				s.dropLocked(fe, "dummy")
			default:
				rest = append(rest, fe)
			}
		}
		s.finished = rest
		return batch, true
	}
}

// maybeTriggerLocked moves ROLLING to ROLLING_POST when the rule is met.
func (s *Server) maybeTriggerLocked() {
	if s.status != StatusRolling || s.training || !s.ruleMetLocked() {
		return
	}
	s.status, s.detail = StatusRollingPost, "batch collected; draining open train episodes"
	s.m.setStatus(s.status)
	select {
	case s.trainReq <- struct{}{}:
	default:
	}
}

func (s *Server) trainLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stopCh:
			return
		case <-s.trainReq:
			s.trainOnce()
		}
	}
}

// trainOnce drains ROLLING_POST, runs one training step in WEIGHT_SYNCING
// and returns to ROLLING.
func (s *Server) trainOnce() {
	s.mu.Lock()
	epoch := s.epoch
	if s.status != StatusRollingPost {
		s.mu.Unlock()
		return
	}
	deadline := time.Now().Add(s.train.DrainTimeout)
	s.mu.Unlock()
	for {
		s.mu.Lock()
		if s.epoch != epoch || s.status != StatusRollingPost {
			s.mu.Unlock()
			return
		}
		if s.openTrain == 0 || !time.Now().Before(deadline) {
			break // s.mu held
		}
		s.mu.Unlock()
		select {
		case <-s.stopCh:
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
	s.status, s.detail = StatusWeightSyncing, "training"
	s.m.setStatus(s.status)
	s.training = true
	syncStart := time.Now()
	agreeMode := s.train.CollectionMethod == CollectAnyAgree || s.train.CollectionMethod == CollectAllAgree
	batch, ok := s.selectBatchLocked(true)
	// Leaving ROLLING: every vote is spent (AgentJet resets its active
	// client list here).
	clear(s.active)
	s.mu.Unlock()

	var stats rl.Stats
	var err error
	step := s.step.Load()
	if ok {
		var samples []rl.Sample
		var rs welford
		var rsum float64
		tasks := map[string]bool{}
		sortBatch(batch)
		for _, fe := range batch {
			samples = append(samples, fe.samples...)
			rs.add(fe.reward)
			rsum += fe.reward
			tasks[fe.taskID] = true
		}
		s.m.batchReward.Set(rs.mean)
		s.mu.Lock()
		s.acct.TrainedEpisodes += int64(len(batch))
		s.acct.TrainedRewardSum += rsum
		s.mu.Unlock()
		start := time.Now()
		s.modelMu.Lock()
		if len(samples) > 0 {
			stats, err = s.model.Train(samples)
		}
		step = s.model.Version()
		s.step.Store(step)
		s.mu.Lock()
		for _, fe := range batch {
			// A failed step trained nothing it will retry: the episodes
			// are spent either way, acknowledged with the next checkpoint.
			s.markDoneLocked(fe, step)
		}
		s.mu.Unlock()
		s.modelMu.Unlock()
		dur := time.Since(start)
		s.m.trainSeconds.Observe(dur.Seconds())
		if err == nil && len(samples) > 0 {
			s.m.trainSteps.Inc()
			ts := TrainStep{Step: step, Episodes: len(batch), Tasks: len(tasks), Samples: len(samples),
				RewardMean: rs.mean, RewardStd: rs.std(), Duration: dur, Time: time.Now(), Stats: stats}
			for _, fe := range batch {
				ts.EpisodeIDs = append(ts.EpisodeIDs, fe.id)
			}
			s.log.Info("training step", "global_step", step, "episodes", len(batch), "samples", len(samples),
				"loss", stats.Loss, "grad_norm", stats.GradNorm, "reward_mean", rs.mean, "reward_std", ts.RewardStd,
				"skipped_groups", stats.SkippedGroups, "duration", dur)
			s.mu.Lock()
			s.vlogLocked("train", fmt.Sprintf("step %d: %d episodes, reward mean %.4g, loss %.4g", step, len(batch), rs.mean, stats.Loss))
			s.mu.Unlock()
			s.recordStep(ts)
		}
	}

	if agreeMode {
		// AgentJet's client, having agreed, waits to see the sync it
		// agreed to, checking a cached status every 5 s: a step shorter
		// than that would leave it waiting forever.
		if wait := s.cfg.MinAgreeSync - time.Since(syncStart); wait > 0 {
			select {
			case <-s.stopCh:
			case <-time.After(wait):
			}
		}
	}
	s.mu.Lock()
	s.training = false
	if err != nil {
		s.log.Error("training step failed", "err", err)
	}
	if s.epoch == epoch && s.status == StatusWeightSyncing {
		s.status, s.detail = StatusRolling, "collecting episodes"
		if err != nil {
			s.detail = "last training step failed: " + err.Error()
		}
		if ok && err == nil {
			s.lastStats = stats
		}
		s.m.setStatus(s.status)
		s.maybeTriggerLocked()
	}
	every := s.train.CheckpointEvery
	s.mu.Unlock()
	s.m.globalStep.Set(float64(step))
	if ok && err == nil && every > 0 && step > 0 && step%int64(every) == 0 {
		if err := s.Checkpoint(); err != nil {
			s.log.Error("checkpoint failed", "err", err)
		}
	}
	if ok && err == nil && s.cfg.Role == RoleTrain {
		s.modelMu.RLock()
		err := s.publishWeightsLocked(step)
		s.modelMu.RUnlock()
		if err != nil {
			s.log.Error("weights not published; front-ends keep the previous step", "err", err)
		}
	}
}

// sortBatch puts a training batch in an order fixed by its content (task,
// reward, then the samples' tokens and log-probabilities), not by when its
// episodes finished. Concurrent clients finish episodes in an order that
// changes from run to run, and a model's gradient is a float sum over the
// batch whose rounding depends on the order: unsorted, a seeded run trained
// on bitwise different weights whenever its episodes interleaved
// differently, and once in a while a sampled token flipped and the run
// diverged (examples/translation; docs/experiments/2026-12-05-translation.md).
func sortBatch(batch []*finishedEpisode) {
	slices.SortStableFunc(batch, func(a, b *finishedEpisode) int {
		c := cmp.Or(strings.Compare(a.taskID, b.taskID), cmp.Compare(a.reward, b.reward), cmp.Compare(len(a.samples), len(b.samples)))
		for i := 0; c == 0 && i < len(a.samples); i++ {
			x, y := &a.samples[i], &b.samples[i]
			c = cmp.Or(slices.Compare(x.Prompt, y.Prompt), slices.Compare(x.Actions, y.Actions), slices.Compare(x.LogProbs, y.LogProbs),
				slices.Compare(x.Obs, y.Obs), slices.Compare(x.StepRewards, y.StepRewards), cmp.Compare(x.Reward, y.Reward))
		}
		return c
	})
}

// Accounting tracks where finished train episodes went.
type Accounting struct {
	Ended                       int64   // train episodes ended with a reward
	EndedRewardSum              float64 // sum of their rewards
	TrainedEpisodes             int64   // episodes handed to a training step
	TrainedRewardSum            float64
	Dropped                     int64 // stale, dummy or overflow episodes never trained on
	DroppedRewardSum            float64
	Buffered                    int64 // waiting for the next batch
	BufferedRewardSum           float64
	Recovered                   int64 // replayed from the journal at boot (ended before a restart) or published by another front-end
	RecoveredRewardSum          float64
	Reclaimed, Aborted, Claimed int64
}

// Accounting returns the episode accounting (tests use it to show that no
// finished episode's reward is lost).
func (s *Server) Accounting() Accounting {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.acct
	for _, fe := range s.finished {
		a.Buffered++
		a.BufferedRewardSum += fe.reward
	}
	return a
}

// WithModel calls f with the model while no training step can run.
func (s *Server) WithModel(f func(Model)) {
	s.modelMu.RLock()
	defer s.modelMu.RUnlock()
	f(s.model)
}

// LastTrainStats returns the statistics of the last training step.
func (s *Server) LastTrainStats() rl.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastStats
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
