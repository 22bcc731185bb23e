package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/api"
)

// Step is one row of train_metrics.jsonl: one training step of one agent.
// Every field but Step is optional; a missing or null value is nil (or
// empty), so that a panel can tell "no data" from zero.
type Step struct {
	// Step is the global step (the model version after the update).
	Step int64 `json:"step"`
	// Time is when the step finished.
	Time time.Time `json:"time,omitzero"`
	// Model is the agent's name.
	Model string `json:"model,omitempty"`

	// Episodes, Tasks and Samples count the step's batch.
	Episodes *float64 `json:"episodes,omitempty"`
	Tasks    *float64 `json:"tasks,omitempty"`
	Samples  *float64 `json:"samples,omitempty"`
	// RewardMean and RewardStd are the mean and population standard
	// deviation of the batch's episode rewards.
	RewardMean *float64 `json:"reward_mean,omitempty"`
	RewardStd  *float64 `json:"reward_std,omitempty"`
	// DurationS is the seconds the update took.
	DurationS *float64 `json:"duration_s,omitempty"`

	// Stats holds the rl.Stats fields, keyed by their Go names
	// ("KL", "Entropy", ...) as the row's "stats.<Name>" keys carry them.
	Stats map[string]float64 `json:"stats,omitempty"`

	// CompletionTokensMean is the mean completion length in tokens.
	CompletionTokensMean *float64 `json:"completion_tokens_mean,omitempty"`
	// ZeroSpreadGroups is the fraction of GRPO groups whose rewards were
	// all equal (no learning signal).
	ZeroSpreadGroups *float64 `json:"zero_spread_groups,omitempty"`
	// PhaseS is the seconds spent per phase ("rollout", "train", "sync").
	PhaseS map[string]float64 `json:"phase_s,omitempty"`
	// TokensPerS is the inference engine's throughput.
	TokensPerS *float64 `json:"tokens_per_s,omitempty"`
	// StalenessMean and StalenessMax are the adapter-version lag of the
	// step's samples.
	StalenessMean *float64 `json:"staleness_mean,omitempty"`
	StalenessMax  *float64 `json:"staleness_max,omitempty"`
	// RewardComponents is the mean of each named reward component.
	RewardComponents map[string]float64 `json:"reward_components,omitempty"`
	// TeamIDs are the team episodes the step's samples belong to.
	TeamIDs []string `json:"team_ids,omitempty"`
	// Credit is the agent's share of the team reward ("shared", "own").
	Credit map[string]float64 `json:"credit,omitempty"`
	// EpisodesByState counts the agent's episodes per state, cumulatively.
	EpisodesByState *EpisodeStates `json:"episodes_by_state,omitempty"`

	seq uint64 // the run revision at which this row was stored
}

// EpisodeStates counts episodes per lifecycle state up to a step: the
// type the swarm server writes (api.EpisodeStates).
type EpisodeStates = api.EpisodeStates

var errNoStep = errors.New("no integer \"step\"")

// parseStep decodes one line of train_metrics.jsonl. A line that is not a
// JSON object or has no integer step is an error; a field of the wrong
// type is left out, so one odd field does not hide the rest of the row.
func parseStep(line []byte) (Step, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return Step{}, err
	}
	var s Step
	var step float64
	if !decode(raw["step"], &step) || step != math.Trunc(step) || step < 0 || step > 1<<53 {
		return Step{}, errNoStep
	}
	s.Step = int64(step)
	var ts string
	if decode(raw["time"], &ts) {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			s.Time = t
		}
	}
	decode(raw["model"], &s.Model)
	for key, dst := range map[string]**float64{
		"episodes": &s.Episodes, "tasks": &s.Tasks, "samples": &s.Samples,
		"reward_mean": &s.RewardMean, "reward_std": &s.RewardStd, "duration_s": &s.DurationS,
		"completion_tokens_mean": &s.CompletionTokensMean, "zero_spread_groups": &s.ZeroSpreadGroups,
		"tokens_per_s": &s.TokensPerS, "staleness_mean": &s.StalenessMean, "staleness_max": &s.StalenessMax,
	} {
		*dst = number(raw[key])
	}
	for key, v := range raw {
		if name, ok := strings.CutPrefix(key, "stats."); ok && name != "" {
			if x := number(v); x != nil {
				if s.Stats == nil {
					s.Stats = make(map[string]float64)
				}
				s.Stats[name] = *x
			}
		}
	}
	s.PhaseS = numbers(raw["phase_s"])
	s.RewardComponents = numbers(raw["reward_components"])
	s.Credit = numbers(raw["credit"])
	decode(raw["team_ids"], &s.TeamIDs)
	var es EpisodeStates
	if decode(raw["episodes_by_state"], &es) {
		s.EpisodesByState = &es
	}
	return s, nil
}

// decode unmarshals v into dst and reports whether it held a value.
func decode(v json.RawMessage, dst any) bool {
	if len(v) == 0 || bytes.Equal(v, []byte("null")) {
		return false
	}
	return json.Unmarshal(v, dst) == nil
}

// number is v as a finite number, or nil.
func number(v json.RawMessage) *float64 {
	var x float64
	if !decode(v, &x) || math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// numbers is v as an object of numbers; null and non-numeric members are
// left out, and an empty result is nil.
func numbers(v json.RawMessage) map[string]float64 {
	var raw map[string]json.RawMessage
	if !decode(v, &raw) {
		return nil
	}
	var m map[string]float64
	for k, x := range raw {
		if p := number(x); p != nil {
			if m == nil {
				m = make(map[string]float64, len(raw))
			}
			m[k] = *p
		}
	}
	return m
}

// Dropped is one line of dropped.jsonl: an episode that was never trained.
type Dropped struct {
	Time      time.Time `json:"time,omitzero"`
	EpisodeID string    `json:"episode_id"`
	TaskID    string    `json:"task_id,omitempty"`
	Reason    string    `json:"reason"`
}

// parseDropped decodes one line of dropped.jsonl; a line without a reason
// or episode is an error.
func parseDropped(line []byte) (Dropped, error) {
	var d struct {
		Time      string `json:"time"`
		EpisodeID string `json:"episode_id"`
		TaskID    string `json:"task_id"`
		Reason    string `json:"reason"`
	}
	if err := json.Unmarshal(line, &d); err != nil {
		return Dropped{}, err
	}
	if d.Reason == "" && d.EpisodeID == "" {
		return Dropped{}, errors.New("neither \"reason\" nor \"episode_id\"")
	}
	out := Dropped{EpisodeID: d.EpisodeID, TaskID: d.TaskID, Reason: d.Reason}
	if out.Reason == "" {
		out.Reason = "unknown"
	}
	if t, err := time.Parse(time.RFC3339Nano, d.Time); err == nil {
		out.Time = t
	}
	return out, nil
}
