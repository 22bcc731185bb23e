package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/troupe-ml/troupe/rl"
)

// Episode types of ClaimRequest.EpisodeType.
const (
	EpisodeTrain = "train"
	EpisodeEval  = "eval"
)

// ThrottlePolicy is a claim's throttle_policy (AgentJet): the task the
// client is about to run.
type ThrottlePolicy struct {
	CurrentTaskID string `json:"current_task_id"`
}

// ClaimRequest is the body of POST /claim_episode.
type ClaimRequest struct {
	ClientUUID            *string         `json:"client_uuid"`
	EpisodeType           *string         `json:"episode_type"`
	DiscardEpisodeTimeout *float64        `json:"discard_episode_timeout"`
	ThrottlePolicy        *ThrottlePolicy `json:"throttle_policy,omitempty"`
	// PartitionLimit is older AgentJet clients' name of ThrottlePolicy.
	PartitionLimit *ThrottlePolicy `json:"partition_limit,omitempty"`
	// TeamID and TeamSize (troupe's extension, which AgentJet's client
	// never sends) make the episode a member of a team episode: every
	// member claims on its own agent's server with the same team_id (a
	// client-chosen string; choose it unguessable, a UUID) and team_size
	// (2 to 64). No member of a team is trained until all team_size
	// members have ended; when any is aborted, expires or dies with its
	// server, none is (dropped as "team_incomplete").
	TeamID   *string `json:"team_id,omitempty"`
	TeamSize *int    `json:"team_size,omitempty"`
}

// ClaimResponse is the answer of POST /claim_episode.
type ClaimResponse struct {
	Success       bool   `json:"success"`
	ClientUUID    string `json:"client_uuid"`
	EpisodeUUID   string `json:"episode_uuid"`
	OpenAIBaseURL string `json:"openai_base_url"`
	OpenAIAPIKey  string `json:"openai_api_key"`
	FailCause     string `json:"fail_cause"`
}

// WorkflowOutput is what a workflow reports at the end of an episode.
// Reward is a number or a list of numbers (averaged).
type WorkflowOutput struct {
	Reward     *json.RawMessage           `json:"reward"`
	IsSuccess  *bool                      `json:"is_success"`
	Metadata   map[string]json.RawMessage `json:"metadata"`
	LogMetrics map[string]json.RawMessage `json:"log_metrics"`
	// RewardComponents (troupe's extension) splits the reward into named
	// parts, such as a team's shared reward and the agent's own: each
	// finite, at most MaxRewardComponents of them. Without reward, the
	// reward is their sum. They are recorded per sample, and a server
	// that normalizes components (troupe.reward_components) normalizes
	// each within its GRPO group before summing them.
	RewardComponents map[string]float64 `json:"reward_components,omitempty"`
}

// MaxRewardComponents bounds the components of one reward, and
// MaxComponentName the length of a component's name.
const (
	MaxRewardComponents = 16
	MaxComponentName    = 64
)

// FieldError is a request field a server refuses, and why.
type FieldError struct {
	Field, Msg string
}

// Error is "field: why".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// ParseReward validates a workflow output's reward: a number, or a
// non-empty list of numbers (their mean), each finite with |r| ≤ bound.
//
// Without a reward, the sum of the reward components is the reward.
func ParseReward(wo *WorkflowOutput, bound float64) (float64, *FieldError) {
	const field = "workflow_output.reward"
	if wo == nil {
		return 0, &FieldError{"workflow_output", "missing"}
	}
	if err := CheckComponents(wo.RewardComponents, bound); err != nil {
		return 0, err
	}
	if wo.Reward == nil || string(bytes.TrimSpace(*wo.Reward)) == "null" {
		if len(wo.RewardComponents) > 0 {
			var sum float64
			for _, v := range wo.RewardComponents {
				sum += v
			}
			if math.Abs(sum) > bound {
				return 0, &FieldError{"workflow_output.reward_components", fmt.Sprintf("their sum, the reward, must be at most %g in magnitude, got %g", bound, sum)}
			}
			return sum, nil
		}
		return 0, &FieldError{field, "missing; a finite number (or reward_components) is required"}
	}
	raw := *wo.Reward
	var xs []float64
	var x float64
	if err := json.Unmarshal(raw, &x); err == nil {
		xs = []float64{x}
	} else if err := json.Unmarshal(raw, &xs); err != nil {
		return 0, &FieldError{field, fmt.Sprintf("expected a number or a list of numbers, got %.40s", string(raw))}
	} else if len(xs) == 0 {
		return 0, &FieldError{field, "empty list"}
	}
	var mean float64
	for i, v := range xs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, &FieldError{field, fmt.Sprintf("must be finite, got %v", v)}
		}
		if math.Abs(v) > bound {
			return 0, &FieldError{field, fmt.Sprintf("|reward| must be at most %g, got %g", bound, v)}
		}
		mean += (v - mean) / float64(i+1) // a running mean cannot overflow
	}
	return mean, nil
}

// CheckComponents validates reward components: at most
// MaxRewardComponents, names of 1 to MaxComponentName bytes, values finite
// with |v| ≤ bound.
func CheckComponents(c map[string]float64, bound float64) *FieldError {
	const field = "workflow_output.reward_components"
	if len(c) > MaxRewardComponents {
		return &FieldError{field, fmt.Sprintf("%d components, at most %d", len(c), MaxRewardComponents)}
	}
	for name, v := range c {
		switch {
		case name == "" || len(name) > MaxComponentName:
			return &FieldError{field, fmt.Sprintf("a component's name must have 1 to %d bytes", MaxComponentName)}
		case math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > bound:
			return &FieldError{field, fmt.Sprintf("component %.64q must be finite and at most %g in magnitude, got %v", name, bound, v)}
		}
	}
	return nil
}

// EndRequest is the body of POST /end_episode and /abort_episode.
type EndRequest struct {
	ClientUUID     *string         `json:"client_uuid"`
	EpisodeUUID    *string         `json:"episode_uuid"`
	TaskID         *string         `json:"task_id"`
	WorkflowOutput *WorkflowOutput `json:"workflow_output"`
	// DeclareClientActive (AgentJet's default true) puts the client on the
	// agree-sync-weight active list when a train episode ends.
	DeclareClientActive *bool `json:"declare_client_active,omitempty"`
}

// EpisodeRef names an episode (can_continue_episode, is_episode_claimed).
type EpisodeRef struct {
	ClientUUID  *string `json:"client_uuid"`
	EpisodeUUID *string `json:"episode_uuid"`
}

// EngineStatus is the answer of GET /get_engine_status.
type EngineStatus struct {
	Status     string `json:"engine_status"`
	Detail     string `json:"engine_status_detail"`
	GlobalStep int64  `json:"global_step"`
}

// EpisodeRecord is a finished train episode as the swarm journal stores it.
type EpisodeRecord struct {
	ID         string      `json:"id"`
	TaskID     string      `json:"task_id"`
	Client     string      `json:"client"`
	Reward     float64     `json:"reward"`
	MinVersion int64       `json:"min_version"`
	Samples    []rl.Sample `json:"samples"`
	// TeamID names the team episode the episode belongs to (empty: none);
	// a trainer holds it until the team is decided.
	TeamID string `json:"team_id,omitempty"`
	// RewardComponents are the reward's named parts, when the client
	// gave them.
	RewardComponents map[string]float64 `json:"reward_components,omitempty"`
	// Completions are the episode's conversations for the run directory's
	// sample files (bounded in bytes per episode; empty where the
	// front-end keeps none).
	Completions []CompletionRecord `json:"completions,omitempty"`
}

// CompletionRecord is one completion of an episode as the run directory's
// sample files show it: the request's messages, the sampled text and why
// sampling ended.
type CompletionRecord struct {
	Messages     []Message `json:"messages"`
	Completion   string    `json:"completion"`
	FinishReason string    `json:"finish_reason,omitempty"`
}

// DroppedEpisode is a finished train episode that will never be trained:
// a line of the run directory's dropped.jsonl and an entry of
// TrainingStatus.RecentDrops.
type DroppedEpisode struct {
	Time      time.Time `json:"time"`
	EpisodeID string    `json:"episode_id"`
	TaskID    string    `json:"task_id,omitempty"`
	Reason    string    `json:"reason"`
}

// EpisodeStates counts a server's episodes by state since it started:
// claimed here, open now, ended with a reward (here, or taken from the
// journal by a trainer), aborted, expired (reclaimed idle), and never
// trained, by reason.
type EpisodeStates struct {
	Claimed int64            `json:"claimed"`
	Open    int64            `json:"open"`
	Ended   int64            `json:"ended"`
	Aborted int64            `json:"aborted"`
	Expired int64            `json:"expired"`
	Dropped map[string]int64 `json:"dropped,omitempty"`
}

// DroppedTotal is the number of dropped episodes over all reasons.
func (e *EpisodeStates) DroppedTotal() int64 {
	var n int64
	for _, v := range e.Dropped {
		n += v
	}
	return n
}

// TrainingStatus is the answer of GET /get_training_status, troupe's own
// view of where a server's episodes went (`troupe swarm status`).
type TrainingStatus struct {
	Model        string `json:"model"`
	Role         string `json:"role"`
	EngineStatus string `json:"engine_status"`
	GlobalStep   int64  `json:"global_step"`
	// BufferedEpisodes wait for a batch.
	BufferedEpisodes int `json:"buffered_episodes"`
	// MaxStaleness and GroupTimeoutS are the staleness policy in force.
	MaxStaleness  int64         `json:"max_staleness"`
	GroupTimeoutS float64       `json:"group_timeout_s"`
	Episodes      EpisodeStates `json:"episodes_by_state"`
	// DroppedSamples counts malformed samples dropped from journaled
	// episodes that were otherwise trained.
	DroppedSamples int64 `json:"dropped_samples"`
	// RecentDrops are the latest dropped episodes, newest last; their ids
	// are shown to admins only.
	RecentDrops []DroppedEpisode `json:"recent_drops"`
}

// String returns a pointer to s, for the optional fields of requests.
func String(s string) *string { return &s }

// Float returns a pointer to x.
func Float(x float64) *float64 { return &x }

// Engine statuses of EngineStatus.Status, spelled as AgentJet's swarm
// server spells them.
const (
	StatusOffline       = "ENGINE.OFFLINE"
	StatusBooting       = "ENGINE.BOOTING"
	StatusRolling       = "ENGINE.ROLLING"
	StatusRollingPost   = "ENGINE.ROLLING_POST"
	StatusWeightSyncing = "ENGINE.WEIGHT_SYNCING"
)
