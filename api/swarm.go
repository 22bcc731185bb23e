package api

import (
	"encoding/json"

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
