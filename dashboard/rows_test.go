package dashboard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/swarm/rundir"
)

func ptr(x float64) *float64 { return &x }

func TestParseStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		want Step
		bad  bool
	}{
		{name: "minimal", line: `{"step": 3}`, want: Step{Step: 3}},
		{name: "today's fields", line: `{"step": 2, "episodes": 8, "tasks": 2, "samples": 8, "reward_mean": 0.5, "reward_std": null,
			"duration_s": 1.5, "time": "2025-06-02T09:30:37.5Z", "episode_ids": ["a"], "stats.KL": 0.01, "stats.GradNorm": null, "stats.Steps": 1}`,
			want: Step{Step: 2, Episodes: ptr(8), Tasks: ptr(2), Samples: ptr(8), RewardMean: ptr(0.5), DurationS: ptr(1.5),
				Time: time.Date(2025, 6, 2, 9, 30, 37, 5e8, time.UTC), Stats: map[string]float64{"KL": 0.01, "Steps": 1}}},
		{name: "new fields", line: `{"step": 5, "model": "planner", "completion_tokens_mean": 120, "zero_spread_groups": 0.25,
			"phase_s": {"rollout": 10, "train": 4, "sync": null}, "tokens_per_s": 2000, "staleness_mean": 0.5, "staleness_max": 2,
			"reward_components": {"correct": 1}, "team_ids": ["t1", "t2"], "credit": {"shared": 0.6, "own": 0.4},
			"episodes_by_state": {"claimed": 9, "open": 1, "ended": 8, "aborted": 0, "expired": 0, "dropped": {"stale": 2}}}`,
			want: Step{Step: 5, Model: "planner", CompletionTokensMean: ptr(120), ZeroSpreadGroups: ptr(0.25),
				PhaseS: map[string]float64{"rollout": 10, "train": 4}, TokensPerS: ptr(2000), StalenessMean: ptr(0.5), StalenessMax: ptr(2),
				RewardComponents: map[string]float64{"correct": 1}, TeamIDs: []string{"t1", "t2"}, Credit: map[string]float64{"shared": 0.6, "own": 0.4},
				EpisodesByState: &EpisodeStates{Claimed: 9, Open: 1, Ended: 8, Dropped: map[string]int64{"stale": 2}}}},
		{name: "odd fields are left out", line: `{"step": 1, "reward_mean": "high", "phase_s": [1, 2], "credit": {"own": "x"},
			"time": "yesterday", "team_ids": "t1", "episodes_by_state": {"claimed": "many"}, "model": 7, "stats.": 1}`,
			want: Step{Step: 1}},
		{name: "step as float", line: `{"step": 4.0}`, want: Step{Step: 4}},
		{name: "no step", line: `{"reward_mean": 0.5}`, bad: true},
		{name: "null step", line: `{"step": null}`, bad: true},
		{name: "fractional step", line: `{"step": 1.5}`, bad: true},
		{name: "negative step", line: `{"step": -1}`, bad: true},
		{name: "string step", line: `{"step": "1"}`, bad: true},
		{name: "huge step", line: `{"step": 1e300}`, bad: true},
		{name: "torn line", line: `{"step": 4, "reward_mean": 0.3`, bad: true},
		{name: "array", line: `[1, 2]`, bad: true},
		{name: "garbage", line: "\x00\xff garbage", bad: true},
		{name: "empty object", line: `{}`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStep([]byte(tc.line))
			if tc.bad {
				if err == nil {
					t.Fatalf("parseStep(%s) = %+v, want an error", tc.line, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseStep:\n got %s\nwant %s", asJSON(got), asJSON(tc.want))
			}
		})
	}
}

// FuzzParseStep checks that no line makes the reader panic, and that a row
// it accepts has a step.
func FuzzParseStep(f *testing.F) {
	rows, err := os.ReadFile(filepath.Join(fixtureDir, "planner-8001", rundir.MetricsFile))
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range strings.SplitN(string(rows), "\n", 3)[:2] {
		f.Add([]byte(line))
	}
	f.Add([]byte(`{"step": 4, "reward_mean": 0.3`))
	f.Add([]byte(`{"step": 1, "episodes_by_state": {"dropped": {"x": "y"}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		s, err := parseStep(line)
		if err == nil && s.Step < 0 {
			t.Errorf("accepted a negative step %d", s.Step)
		}
		_, _ = parseDropped(line)
	})
}

func TestParseDropped(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Dropped
		bad  bool
	}{
		{line: `{"time": "2025-06-02T09:30:32Z", "episode_id": "e1", "task_id": "t1", "reason": "stale"}`,
			want: Dropped{Time: time.Date(2025, 6, 2, 9, 30, 32, 0, time.UTC), EpisodeID: "e1", TaskID: "t1", Reason: "stale"}},
		{line: `{"episode_id": "e2"}`, want: Dropped{EpisodeID: "e2", Reason: "unknown"}},
		{line: `{"time": "x", "reason": "expired"}`, want: Dropped{Reason: "expired"}},
		{line: `{}`, bad: true},
		{line: `{"reason": 3}`, bad: true},
		{line: `not json`, bad: true},
	} {
		got, err := parseDropped([]byte(tc.line))
		if (err != nil) != tc.bad {
			t.Errorf("parseDropped(%s): err %v, want bad=%v", tc.line, err, tc.bad)
			continue
		}
		if !tc.bad && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseDropped(%s):\n got %s\nwant %s", tc.line, asJSON(got), asJSON(tc.want))
		}
	}
}

// asJSON shows v in a test failure, pointers followed.
func asJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
