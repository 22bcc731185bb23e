package swarm

import (
	"fmt"
	"strconv"
	"strings"
	"time"
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
	// MaxStaleness drops, at training time, finished episodes whose oldest
	// completion was sampled more than MaxStaleness versions ago.
	MaxStaleness int64
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
}

// DefaultTrainConfig is the configuration used when none is synced.
func DefaultTrainConfig() TrainConfig {
	return TrainConfig{
		BatchSize: 4, NumRepeat: 4, CollectionMethod: CollectTasks, Algorithm: "grpo",
		MaxStaleness: 1, MaxOpenEpisodes: 4096, MaxPromptTokens: 8192, MaxResponseTokens: 1024,
		DrainTimeout: 10 * time.Second,
	}
}

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
	case c.DrainTimeout < 0:
		return fmt.Errorf("drain timeout must be >= 0")
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
//	troupe.max_staleness, troupe.drain_timeout_s, troupe.checkpoint_every.
func (c *TrainConfig) ApplyYAML(src string) error {
	kv, err := parseYAMLScalars(src)
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
	if v, ok := kv["troupe.drain_timeout_s"]; ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1e6 {
			return fmt.Errorf("troupe.drain_timeout_s: %q is not a duration in seconds", v)
		}
		c.DrainTimeout = time.Duration(f * float64(time.Second))
	}
	if v, ok := kv["ajet.swarm_mode_sample_collection_method"]; ok && v != "null" {
		c.CollectionMethod = v
	}
	if v, ok := kv["ajet.trainer_common.algorithm.adv_estimator"]; ok && v != "null" {
		c.Algorithm = v
	}
	return c.Validate()
}

// parseYAMLScalars flattens the block mappings of a YAML document into
// dotted keys with unquoted scalar values. Sequences, flow collections and
// multi-line scalars are skipped.
func parseYAMLScalars(src string) (map[string]string, error) {
	type frame struct {
		indent int
		key    string
	}
	var stack []frame
	out := map[string]string{}
	for ln, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || trimmed == "---" {
			continue
		}
		if strings.HasPrefix(trimmed, "- ") || trimmed == "-" {
			continue // sequence item
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if strings.ContainsRune(line[:indent], '\t') {
			return nil, fmt.Errorf("yaml line %d: tab indentation", ln+1)
		}
		colon := strings.Index(trimmed, ":")
		if colon <= 0 {
			continue // continuation of a multi-line scalar
		}
		key := strings.Trim(trimmed[:colon], `"'`)
		val := strings.TrimSpace(trimmed[colon+1:])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		path := key
		if len(stack) > 0 {
			path = stack[len(stack)-1].key + "." + key
		}
		if val == "" {
			stack = append(stack, frame{indent, path})
			continue
		}
		if len(val) >= 2 && (val[0] == '"' && val[len(val)-1] == '"' || val[0] == '\'' && val[len(val)-1] == '\'') {
			val = val[1 : len(val)-1]
		}
		out[path] = val
	}
	return out, nil
}
