// Package trainconfig is a swarm server's training policy: when a batch is
// complete (AgentJet's collection methods), the GRPO group size, the
// staleness policy and the bounds of a completion, read from AgentJet's
// training YAML (what /sync_train_config carries) plus troupe's own keys.
package trainconfig

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/internal/yamlkv"
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

// Config is the training policy of a server.
type Config struct {
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

// Default is the configuration used when none is synced.
func Default() Config {
	return Config{
		BatchSize: 4, NumRepeat: 4, CollectionMethod: CollectTasks, Algorithm: "grpo",
		MaxStaleness: DefaultMaxStaleness, MaxOpenEpisodes: 4096, MaxPromptTokens: 8192, MaxResponseTokens: 1024,
		DrainTimeout: 10 * time.Second, GroupTimeout: DefaultGroupTimeout,
	}
}

// Defaults of the staleness policy (Config).
const (
	DefaultMaxStaleness = 16
	DefaultGroupTimeout = 2 * time.Minute
)

// Validate checks the configuration.
func (c Config) Validate() error {
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
func (c *Config) ApplyYAML(src string) error {
	kv, err := yamlkv.Scalars(src)
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

// Keys lists the keys of a training YAML that Config.ApplyYAML reads.
func Keys() []string { return slices.Clone(trainKeys) }

// IsKey reports whether ApplyYAML reads key.
func IsKey(key string) bool { return slices.Contains(trainKeys, key) }
