package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/troupe-ml/troupe/swarm/rundir"
)

// maxSampleFile bounds how much of one step's sample file is read.
const maxSampleFile = 64 << 20

// Sample is one line of a step's sample file (rundir.SampleFile): an
// episode the step trained on. It is the reader's side of rundir.Sample,
// which the servers write: a missing reward reads as nil, and message
// content that is not a string is kept as its JSON text, so that a file
// written by hand or by another tool still shows.
type Sample struct {
	EpisodeID string `json:"episode_id"`
	TaskID    string `json:"task_id"`
	TeamID    string `json:"team_id,omitempty"`
	// Reward is the episode's reward (nil when the line has none).
	Reward           *float64           `json:"reward"`
	RewardComponents map[string]float64 `json:"reward_components,omitempty"`
	// Version is the adapter version the episode was sampled under.
	Version     *int64       `json:"version"`
	Completions []Completion `json:"completions"`
}

// Completion is one model call of an episode: the messages it was given and
// what it answered.
type Completion struct {
	Messages     []Message `json:"messages"`
	Completion   string    `json:"completion"`
	FinishReason string    `json:"finish_reason,omitempty"`
}

// Message is one chat message. Content that is not a string (a list of
// content parts) is kept as its JSON text.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// UnmarshalJSON reads a message whose content is a string or any other
// JSON value.
func (m *Message) UnmarshalJSON(b []byte) error {
	var raw struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	m.Role, m.Content = raw.Role, ""
	if len(raw.Content) == 0 || bytes.Equal(raw.Content, []byte("null")) {
		return nil
	}
	if json.Unmarshal(raw.Content, &m.Content) == nil {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw.Content); err != nil {
		return err
	}
	m.Content = buf.String()
	return nil
}

// Group is the samples of one task: one GRPO group.
type Group struct {
	TaskID  string   `json:"task_id"`
	Samples []Sample `json:"samples"`
	// RewardMean and RewardStd are over the samples that have a reward.
	RewardMean float64 `json:"reward_mean"`
	RewardStd  float64 `json:"reward_std"`
	// ZeroSpread is set when all rewards are equal: the group gives no
	// learning signal.
	ZeroSpread bool `json:"zero_spread"`
}

// StepDetail is what the drill-down shows of one agent's step.
type StepDetail struct {
	Run   string `json:"run"`
	Agent string `json:"agent"`
	Step  int64  `json:"step"`
	// Row is the step's row of train_metrics.jsonl, nil when there is none.
	Row *Step `json:"row,omitempty"`
	// Groups are the step's samples by task, in the order the file first
	// names each task; empty when the step has no sample file.
	Groups []Group `json:"groups"`
	// Recorded reports whether the sample file exists.
	Recorded bool `json:"recorded"`
	// BadLines counts lines of the sample file skipped as unreadable;
	// Truncated reports that the file was larger than the dashboard reads.
	BadLines  int  `json:"bad_lines"`
	Truncated bool `json:"truncated,omitempty"`
}

// readSamples reads dir's sample file of step into groups. The file must
// lie inside root once symbolic links are resolved.
func readSamples(root, dir string, step int64) (groups []Group, recorded bool, bad int, truncated bool, err error) {
	path := filepath.Join(dir, rundir.SampleFile(step))
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, 0, false, nil
	}
	if err != nil {
		return nil, false, 0, false, fmt.Errorf("dashboard: %w", err)
	}
	if !strings.HasPrefix(real, root+string(filepath.Separator)) {
		return nil, false, 0, false, fmt.Errorf("dashboard: %s lies outside %s", path, root)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, false, 0, false, fmt.Errorf("dashboard: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, 0, false, fmt.Errorf("dashboard: %s is not a regular file", path)
	}
	var samples []Sample
	t := tail{path: real, limit: maxSampleFile}
	long, err := t.read(func() {}, func(line []byte) {
		var s Sample
		if json.Unmarshal(line, &s) != nil || (s.EpisodeID == "" && s.TaskID == "") {
			bad++
			return
		}
		samples = append(samples, s)
	})
	if err != nil {
		return nil, true, 0, false, fmt.Errorf("dashboard: reading %s: %w", path, err)
	}
	return groupByTask(samples), true, bad + long, fi.Size() > maxSampleFile, nil
}

// groupByTask gathers samples into groups by task, keeping the file's order.
func groupByTask(samples []Sample) []Group {
	var groups []Group
	index := make(map[string]int)
	for _, s := range samples {
		i, ok := index[s.TaskID]
		if !ok {
			i = len(groups)
			index[s.TaskID] = i
			groups = append(groups, Group{TaskID: s.TaskID})
		}
		groups[i].Samples = append(groups[i].Samples, s)
	}
	for i := range groups {
		g := &groups[i]
		var n, mean, m2 float64
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range g.Samples {
			if s.Reward == nil {
				continue
			}
			r := *s.Reward
			n++
			d := r - mean
			mean += d / n
			m2 += d * (r - mean)
			lo, hi = min(lo, r), max(hi, r)
		}
		if n > 0 {
			g.RewardMean, g.RewardStd = mean, math.Sqrt(max(m2, 0)/n)
			g.ZeroSpread = lo == hi
		}
	}
	return groups
}
