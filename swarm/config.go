package swarm

import (
	"log/slog"
	"math"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/swarm/team"
	"github.com/troupe-ml/troupe/swarm/trainconfig"
)

// TrainConfig is a server's training policy (package swarm/trainconfig).
type TrainConfig = trainconfig.Config

// DefaultTrainConfig is the configuration used when none is synced.
func DefaultTrainConfig() TrainConfig { return trainconfig.Default() }

// Collection methods and defaults of the training policy (package
// swarm/trainconfig).
const (
	CollectEpisodes      = trainconfig.CollectEpisodes
	CollectTasks         = trainconfig.CollectTasks
	CollectNonDummyTasks = trainconfig.CollectNonDummyTasks
	CollectAnyAgree      = trainconfig.CollectAnyAgree
	CollectAllAgree      = trainconfig.CollectAllAgree
	DefaultMaxStaleness  = trainconfig.DefaultMaxStaleness
	DefaultGroupTimeout  = trainconfig.DefaultGroupTimeout
)

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
	// (DefaultMaxOpenPerClient when zero); a claim beyond it gets 429 with Retry-After, so that
	// one client cannot take every slot of TrainConfig.MaxOpenEpisodes.
	MaxOpenPerClient int
	// MaxOpenPerAddress bounds the episodes all clients at one remote IP
	// address may hold open (DefaultMaxOpenPerAddress when zero; loopback
	// and admin requests
	// are exempt): client_uuid is the client's own choice, so without it
	// one host could take every slot under many ids.
	MaxOpenPerAddress int
	// MaxDiscardTimeout bounds the discard_episode_timeout a claim may ask
	// for (DefaultMaxDiscardTimeout when zero): an abandoned episode holds its slot at most this
	// long. Larger values get 400.
	MaxDiscardTimeout time.Duration
	// MaxAbsReward bounds |reward| of end_episode (DefaultMaxAbsReward when
	// zero); larger
	// rewards get 400, so that group statistics stay far from overflow.
	MaxAbsReward float64
	// MinAgreeSync is the shortest WEIGHT_SYNCING under the
	// agree-sync-weight collection methods (DefaultMinAgreeSync when zero): AgentJet's
	// client checks the engine status every 5 s after agreeing and waits
	// until it sees the sync. Negative: no minimum.
	MinAgreeSync time.Duration
	// ClientActiveTimeout is how long a client stays on the active list of
	// the agree-sync-weight collection methods without claiming an
	// episode, chatting or ending one (DefaultClientActiveTimeout when
	// zero, AgentJet's CLIENT_ACTIVE_TIMEOUT).
	ClientActiveTimeout time.Duration
	// Timeouts are those of the http.Server that HTTPServer returns (zero
	// fields: httpx.DefaultTimeouts, 10 s to read headers, 30 s to read a
	// request, 60 s per write, 120 s idle). Timeouts.Read bounds the whole
	// request, body included, so a body trickled byte by byte is cut.
	// Timeouts.Write is renewed for every streamed chunk and once sampling
	// is done: it bounds each write, not the generation, and a client that
	// stops reading a stream is cut after it (its completion is not
	// recorded and its episode becomes idle, then reclaimed).
	Timeouts httpx.Timeouts
	// OnTrainStep, when set, is called after every training step with its
	// statistics, from the training goroutine (a slow hook delays the
	// return to ENGINE.ROLLING).
	OnTrainStep func(TrainStep)
	// MaxBodyBytes bounds request bodies (openai.DefaultMaxBodyBytes when
	// zero); larger ones get 413.
	MaxBodyBytes int64
	// ReapInterval is how often idle episodes are looked for
	// (DefaultReapInterval when zero).
	ReapInterval time.Duration
	// ClosedMemory is how many closed episode ids are remembered to tell a
	// late or duplicate end_episode from an unknown one
	// (DefaultClosedMemory when zero).
	ClosedMemory int
	// MaxN bounds the n of a chat completion (openai.DefaultMaxN when zero).
	MaxN int
	// MaxRequestTokens bounds n × max_tokens of one chat completion, the
	// sampling work one request can ask for (openai.DefaultMaxRequestTokens
	// when zero). A request
	// that sets max_tokens beyond it gets 400; one that leaves max_tokens
	// out gets at most MaxRequestTokens/n tokens per choice.
	MaxRequestTokens int
	// MaxEpisodeTokens bounds the tokens one episode may record (prompt
	// tokens once per completion plus all sampled tokens, the memory an
	// episode holds until it ends; DefaultMaxEpisodeTokens when zero). A completion that
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
	// RegistryURL is the URL this server announces in the registry (package swarm/registry) when
	// it has no PublicURL (no announcement when both are empty).
	RegistryURL string
	// JournalName names the episode stream (EpisodeStream); the model's
	// name when empty. Servers sharing one NATS need distinct names.
	JournalName string
	// Teams keeps the state of team episodes (api.ClaimRequest.TeamID);
	// the servers whose agents form teams share it. Nil: with JetStream,
	// the TROUPE_TEAMS bucket (shared by every server on the same NATS);
	// without, a store of this server's own (teams within it only).
	Teams *team.Store
	// JournalReplicas is the number of copies of the episode stream, the
	// weights bucket and the registry (1 when zero; a clustered bus gives
	// bus.Bus.Replicas).
	JournalReplicas int
	// JournalTimeout bounds one journal publish (DefaultJournalTimeout when
	// zero); past it
	// end_episode answers 503 and the episode stays open for a retry.
	JournalTimeout time.Duration
	// EpisodeKey signs the episode records this server journals and
	// verifies the ones its trainer reads (package swarm/record): the
	// trainer and every front-end of a model share it. Nil: a server of
	// RoleBoth keeps a key of its own in EpisodeKeyDir (made on first use,
	// mode 0600), so that a restart verifies what it journaled before; the
	// split roles, and a RoleBoth server without a directory, refuse to
	// start with JetStream and no key.
	EpisodeKey []byte
	// EpisodeKeyDir is where a RoleBoth server keeps its own key
	// (record.KeyFile); CheckpointDir when empty.
	EpisodeKeyDir string
	// CloseTimeout bounds how long Close waits for a training step, a
	// weights transfer or a journal delivery in progress
	// (DefaultCloseTimeout when zero); past it, Close returns without the
	// final checkpoint, and the journal keeps the episodes of the steps
	// no checkpoint holds.
	CloseTimeout time.Duration
	// Logger receives the server's log; slog.Default() when nil.
	Logger *slog.Logger
	// Registry receives the server's Prometheus metrics; a fresh registry
	// when nil (so several servers can live in one process).
	Registry *prometheus.Registry
}

// Defaults of ServerConfig's zero fields; the request bounds of the chat
// endpoint are package openai's (openai.DefaultMaxN and the others) and the
// HTTP timeouts httpx.DefaultTimeouts.
const (
	DefaultMaxOpenPerClient    = 256
	DefaultMaxOpenPerAddress   = 1024
	DefaultMaxDiscardTimeout   = time.Hour
	DefaultMaxAbsReward        = 1e6
	DefaultMinAgreeSync        = 6 * time.Second
	DefaultClientActiveTimeout = 10 * time.Minute
	DefaultReapInterval        = time.Second
	DefaultClosedMemory        = 1 << 16
	DefaultMaxEpisodeTokens    = 1 << 20
	DefaultJournalTimeout      = 5 * time.Second
	DefaultCloseTimeout        = 3 * time.Second
)

// withDefaults fills c's zero fields.
func (c ServerConfig) withDefaults() ServerConfig {
	if reflect.ValueOf(c.Train).IsZero() {
		c.Train = DefaultTrainConfig()
	}
	pos := func(p *int, d int) {
		if *p <= 0 {
			*p = d
		}
	}
	dur := func(p *time.Duration, d time.Duration) {
		if *p <= 0 {
			*p = d
		}
	}
	pos(&c.MaxOpenPerClient, DefaultMaxOpenPerClient)
	pos(&c.MaxOpenPerAddress, DefaultMaxOpenPerAddress)
	pos(&c.ClosedMemory, DefaultClosedMemory)
	pos(&c.MaxN, openai.DefaultMaxN)
	pos(&c.MaxRequestTokens, openai.DefaultMaxRequestTokens)
	pos(&c.MaxEpisodeTokens, DefaultMaxEpisodeTokens)
	pos(&c.JournalReplicas, 1)
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = openai.DefaultMaxBodyBytes
	}
	dur(&c.MaxDiscardTimeout, DefaultMaxDiscardTimeout)
	dur(&c.ClientActiveTimeout, DefaultClientActiveTimeout)
	dur(&c.ReapInterval, DefaultReapInterval)
	dur(&c.JournalTimeout, DefaultJournalTimeout)
	dur(&c.CloseTimeout, DefaultCloseTimeout)
	if c.MinAgreeSync == 0 {
		c.MinAgreeSync = DefaultMinAgreeSync
	}
	if !(c.MaxAbsReward > 0) || math.IsInf(c.MaxAbsReward, 0) {
		c.MaxAbsReward = DefaultMaxAbsReward
	}
	c.Timeouts = c.Timeouts.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	return c
}
