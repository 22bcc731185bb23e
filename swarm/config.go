package swarm

import (
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/internal/yamlkv"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/swarm/team"
)

// Collection methods: when the server considers a batch complete (the values
// of AgentJet's ajet.swarm_mode_sample_collection_method).
const (
	CollectEpisodes      = "rollout_until_finish_enough_episodes"
	CollectTasks         = "rollout_until_finish_enough_tasks"
	CollectNonDummyTasks = "rollout_until_finish_enough_non_dummy_tasks"
	// CollectAnyAgree trains once any active client has agreed
	// (POST /agree_sync_weight), on every finished episode; a client is
	// active once it ended a rewarded train episode since the last weight
	// sync. BatchSize does not apply.
	CollectAnyAgree = "rollout_until_any_client_agree_sync_weight"
	// CollectAllAgree trains once every active client has agreed.
	CollectAllAgree = "rollout_until_all_clients_agree_sync_weight"
)

// TrainConfig is the training policy of a server.
type TrainConfig struct {
	// BatchSize is the number of tasks per training batch
	// (ajet.data.train_batch_size).
	BatchSize int
	// NumRepeat is the number of episodes expected per task, the GRPO group
	// size (ajet.rollout.num_repeat).
	NumRepeat int
	// CollectionMethod is one of CollectEpisodes, CollectTasks (default),
	// CollectNonDummyTasks, CollectAnyAgree and CollectAllAgree.
	CollectionMethod string
	// Algorithm is the advantage estimator; only "grpo" is supported
	// (ajet.trainer_common.algorithm.adv_estimator).
	Algorithm string
	// MaxStaleness is the staleness policy: a finished episode whose oldest
	// completion was sampled at most MaxStaleness versions before the step
	// that trains it is trained, off-policy, from its recorded behaviour
	// log-probabilities (GRPO's clipped importance ratio; the models' GRPO
	// also caps the ratio of negative advantages, rl.GRPOConfig's
	// MaxImportanceWeight); one staler is dropped with reason "stale" (0:
	// on-policy episodes only). DefaultMaxStaleness keeps the episodes
	// front-ends collect while their trainer is down for a few steps.
	MaxStaleness int64
	// GroupTimeout is how long a task short of its NumRepeat episodes waits
	// for its partners (CollectTasks, CollectNonDummyTasks): past it, the
	// task's group trains as it is, with whatever complete tasks are
	// buffered, even short of BatchSize (a partial batch). A group of one
	// has zero GRPO advantage: it is trained (counted, in the step's
	// episode_ids) and teaches nothing. 0 waits for ever.
	GroupTimeout time.Duration
	// MaxOpenEpisodes bounds the episodes open at once (0: unbounded;
	// ajet.rollout.max_env_worker; 4096 by default so that claims cannot
	// exhaust memory).
	MaxOpenEpisodes int
	// MaxPromptTokens and MaxResponseTokens bound a completion
	// (ajet.data.max_prompt_length, ajet.data.max_response_length).
	MaxPromptTokens, MaxResponseTokens int
	// DrainTimeout bounds ROLLING_POST: how long the server waits for open
	// train episodes to finish before it trains anyway.
	DrainTimeout time.Duration
	// CheckpointEvery saves a checkpoint every N training steps (0: never,
	// except on Shutdown).
	CheckpointEvery int
	// NormalizeRewardComponents trains on decoupled per-component
	// advantages: in a group whose episodes all ended with
	// reward_components, each component is normalized within the group and
	// the weighted sum is the reward GRPO trains on (rl.ComponentRewards),
	// so that a component's scale does not decide the advantage. Groups
	// with an episode without components train on the reward as given.
	NormalizeRewardComponents bool
	// RewardComponentWeights weighs the components by name (a component
	// not named weighs 1) when NormalizeRewardComponents is set.
	RewardComponentWeights map[string]float64
}

// ParseComponentWeights reads "name=weight,name=weight" (empty: none).
func ParseComponentWeights(s string) (map[string]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	w := map[string]float64{}
	for _, f := range strings.Split(s, ",") {
		name, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil || name == "" || math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("reward component weights: %q is not name=weight", f)
		}
		w[strings.TrimSpace(name)] = x
	}
	return w, nil
}

// DefaultTrainConfig is the configuration used when none is synced.
func DefaultTrainConfig() TrainConfig {
	return TrainConfig{
		BatchSize: 4, NumRepeat: 4, CollectionMethod: CollectTasks, Algorithm: "grpo",
		MaxStaleness: DefaultMaxStaleness, MaxOpenEpisodes: 4096, MaxPromptTokens: 8192, MaxResponseTokens: 1024,
		DrainTimeout: 10 * time.Second, GroupTimeout: DefaultGroupTimeout,
	}
}

// Defaults of the staleness policy (TrainConfig).
const (
	DefaultMaxStaleness = 16
	DefaultGroupTimeout = 2 * time.Minute
)

// Validate checks the configuration.
func (c TrainConfig) Validate() error {
	switch {
	case c.BatchSize < 1:
		return fmt.Errorf("train_batch_size must be >= 1, got %d", c.BatchSize)
	case c.NumRepeat < 1:
		return fmt.Errorf("num_repeat must be >= 1, got %d", c.NumRepeat)
	case c.MaxStaleness < 0:
		return fmt.Errorf("max_staleness must be >= 0, got %d", c.MaxStaleness)
	case c.MaxOpenEpisodes < 0:
		return fmt.Errorf("max_env_worker must be >= 0, got %d", c.MaxOpenEpisodes)
	case c.MaxPromptTokens < 1 || c.MaxResponseTokens < 1:
		return fmt.Errorf("max_prompt_length and max_response_length must be >= 1")
	case c.DrainTimeout < 0 || c.GroupTimeout < 0:
		return fmt.Errorf("drain and group timeouts must be >= 0")
	}
	switch c.CollectionMethod {
	case CollectEpisodes, CollectTasks, CollectNonDummyTasks, CollectAnyAgree, CollectAllAgree:
	default:
		return fmt.Errorf("swarm_mode_sample_collection_method %q is not supported (want %s, %s, %s, %s or %s)",
			c.CollectionMethod, CollectEpisodes, CollectTasks, CollectNonDummyTasks, CollectAnyAgree, CollectAllAgree)
	}
	if strings.ToLower(c.Algorithm) != "grpo" {
		return fmt.Errorf("adv_estimator %q is not supported (only grpo)", c.Algorithm)
	}
	return nil
}

// ApplyYAML updates c from an AgentJet training YAML (what
// /sync_train_config carries). It understands the block-mapping subset of
// YAML that AgentJet's yaml.safe_dump writes and reads these keys, ignoring
// all others:
//
//	ajet.data.train_batch_size, ajet.rollout.num_repeat,
//	ajet.swarm_mode_sample_collection_method,
//	ajet.trainer_common.algorithm.adv_estimator, ajet.rollout.max_env_worker,
//	ajet.data.max_prompt_length, ajet.data.max_response_length,
//	troupe.max_staleness, troupe.drain_timeout_s, troupe.group_timeout_s,
//	troupe.checkpoint_every, troupe.normalize_reward_components,
//	troupe.reward_component_weights ("team=1,own=0.5").
func (c *TrainConfig) ApplyYAML(src string) error {
	kv, err := YAMLScalars(src)
	if err != nil {
		return err
	}
	ints := map[string]*int{
		"ajet.data.train_batch_size":    &c.BatchSize,
		"ajet.rollout.num_repeat":       &c.NumRepeat,
		"ajet.rollout.max_env_worker":   &c.MaxOpenEpisodes,
		"ajet.data.max_prompt_length":   &c.MaxPromptTokens,
		"ajet.data.max_response_length": &c.MaxResponseTokens,
		"troupe.checkpoint_every":       &c.CheckpointEvery,
	}
	for k, dst := range ints {
		if v, ok := kv[k]; ok && v != "null" && v != "~" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s: %q is not an integer", k, v)
			}
			*dst = n
		}
	}
	if v, ok := kv["troupe.max_staleness"]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("troupe.max_staleness: %q is not an integer", v)
		}
		c.MaxStaleness = n
	}
	if v, ok := kv["troupe.normalize_reward_components"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("troupe.normalize_reward_components: %q is not true or false", v)
		}
		c.NormalizeRewardComponents = b
	}
	if v, ok := kv["troupe.reward_component_weights"]; ok {
		w, err := ParseComponentWeights(v)
		if err != nil {
			return fmt.Errorf("troupe.reward_component_weights: %w", err)
		}
		c.RewardComponentWeights = w
	}
	for k, dst := range map[string]*time.Duration{"troupe.drain_timeout_s": &c.DrainTimeout, "troupe.group_timeout_s": &c.GroupTimeout} {
		if v, ok := kv[k]; ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1e6 {
				return fmt.Errorf("%s: %q is not a duration in seconds", k, v)
			}
			*dst = time.Duration(f * float64(time.Second))
		}
	}
	if v, ok := kv["ajet.swarm_mode_sample_collection_method"]; ok && v != "null" {
		c.CollectionMethod = v
	}
	if v, ok := kv["ajet.trainer_common.algorithm.adv_estimator"]; ok && v != "null" {
		c.Algorithm = v
	}
	return c.Validate()
}

// trainKeys are the keys ApplyYAML reads.
var trainKeys = []string{
	"ajet.data.train_batch_size", "ajet.rollout.num_repeat", "ajet.swarm_mode_sample_collection_method",
	"ajet.trainer_common.algorithm.adv_estimator", "ajet.rollout.max_env_worker",
	"ajet.data.max_prompt_length", "ajet.data.max_response_length",
	"troupe.max_staleness", "troupe.drain_timeout_s", "troupe.group_timeout_s", "troupe.checkpoint_every",
	"troupe.normalize_reward_components", "troupe.reward_component_weights",
}

// TrainKeys lists the keys of a training YAML that TrainConfig.ApplyYAML
// reads.
func TrainKeys() []string { return slices.Clone(trainKeys) }

// IsTrainKey reports whether ApplyYAML reads key.
func IsTrainKey(key string) bool { return slices.Contains(trainKeys, key) }

// YAMLScalars flattens the block mappings of a YAML document into dotted
// keys with unquoted scalar values (the subset of YAML that AgentJet's
// yaml.safe_dump writes; see yamlkv.Scalars).
func YAMLScalars(src string) (map[string]string, error) { return yamlkv.Scalars(src) }

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
	// RegistryURL is the URL this server announces in RegistryBucket when
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
