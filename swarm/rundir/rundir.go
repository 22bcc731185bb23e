// Package rundir writes the files of a swarm server's run directory
// (ServerConfig.CheckpointDir), the contract docs/design/dashboard.md
// describes and package dashboard reads: one metrics row per training
// step, the episodes never trained, each step's trained episodes with
// their conversations, and a PNG of the reward and loss curves.
package rundir

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/troupe-ml/troupe/api"
	rlmetrics "github.com/troupe-ml/troupe/rl/metrics"
)

// Files of a run directory.
const (
	// MetricsFile holds one JSON object per training step, appended.
	MetricsFile = "train_metrics.jsonl"
	// DroppedFile holds one api.DroppedEpisode per line, appended.
	DroppedFile = "dropped.jsonl"
	// SamplesDir holds SampleFile(step) for every step.
	SamplesDir = "samples"
	// CurvesFile is a PNG of the reward and loss curves.
	CurvesFile = "train_curves.png"
)

// SampleFile is the path of a step's sample file below the run directory.
func SampleFile(step int64) string {
	return filepath.Join(SamplesDir, fmt.Sprintf("step-%08d.jsonl", step))
}

// Sample is one line of a step's sample file: an episode the step
// trained on.
type Sample struct {
	EpisodeID        string             `json:"episode_id"`
	TaskID           string             `json:"task_id"`
	TeamID           string             `json:"team_id"`
	Reward           float64            `json:"reward"`
	RewardComponents map[string]float64 `json:"reward_components"`
	// Version is the oldest parameter version the episode was sampled
	// under; nil when it made no completion.
	Version     *int64                 `json:"version"`
	Completions []api.CompletionRecord `json:"completions"`
}

// Number is x for a row, or nil for NaN and ±Inf, which JSON cannot
// carry (the dashboard reads null as "no data").
func Number(x float64) any {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return x
}

// AddFields puts each number field of the struct v into row under prefix
// and its Go name ("stats.Loss" for rl.Stats), non-finite values as nil.
func AddFields(row map[string]any, prefix string, v any) {
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		name := prefix + rv.Type().Field(i).Name
		switch f := rv.Field(i); f.Kind() {
		case reflect.Float64, reflect.Float32:
			row[name] = Number(f.Float())
		case reflect.Int, reflect.Int64, reflect.Int32:
			row[name] = f.Int()
		}
	}
}

// AppendJSONL appends v as one JSON line to path, creating the file and
// its directory when needed.
func AppendJSONL(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("rundir: encode %s: %w", path, err)
	}
	return appendBytes(path, append(b, '\n'))
}

func appendBytes(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("rundir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("rundir: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rundir: append %s: %w", path, err)
	}
	return nil
}

// AppendDrops appends dropped episodes to dir's DroppedFile in one write.
func AppendDrops(dir string, drops []api.DroppedEpisode) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, d := range drops {
		if err := enc.Encode(d); err != nil {
			return fmt.Errorf("rundir: encode a dropped episode: %w", err)
		}
	}
	return appendBytes(filepath.Join(dir, DroppedFile), buf.Bytes())
}

// WriteSamples writes a step's sample file, replacing the one an earlier
// run of the same step left (a step trained again after a crash).
func WriteSamples(dir string, step int64, samples []Sample) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range samples {
		if err := enc.Encode(&samples[i]); err != nil {
			return fmt.Errorf("rundir: encode the samples of step %d: %w", step, err)
		}
	}
	path := filepath.Join(dir, SampleFile(step))
	if err := WriteFileAtomic(filepath.Dir(path), filepath.Base(path), func(w io.Writer) error {
		_, err := w.Write(buf.Bytes())
		return err
	}); err != nil {
		return fmt.Errorf("rundir: %w", err)
	}
	return nil
}

// WriteFileAtomic writes name in dir by write, fsync, rename, so that a
// crash leaves the old file or the new one, never a part.
func WriteFileAtomic(dir, name string, write func(io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	return err
}

// metricsTail is how much of the end of MetricsFile HasStep reads: the
// rows of the newest steps.
const metricsTail = 1 << 20

// HasStep reports whether the last part of dir's MetricsFile holds a row
// of step (a missing file holds none).
func HasStep(dir string, step int64) (bool, error) {
	f, err := os.Open(filepath.Join(dir, MetricsFile))
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("rundir: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("rundir: %w", err)
	}
	off := max(0, fi.Size()-metricsTail)
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return false, fmt.Errorf("rundir: %w", err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var row struct {
			Step *int64 `json:"step"`
		}
		if json.Unmarshal(line, &row) == nil && row.Step != nil && *row.Step == step {
			return true, nil
		}
	}
	return false, nil
}

// maxCurvePoints bounds the curves' memory; older points are thinned out.
const maxCurvePoints = 1 << 16

// Curves keeps the reward and loss series of CurvesFile.
type Curves struct {
	steps, reward, loss []float64
	drawn               time.Time
	dirty               bool
}

// Add appends one step's point, thinning the older points by half once
// there are maxCurvePoints.
func (c *Curves) Add(step int64, reward, loss float64) {
	if len(c.steps) >= maxCurvePoints {
		// keep every other point: the curve keeps its shape at half the memory
		for i := range len(c.steps) / 2 {
			c.steps[i], c.reward[i], c.loss[i] = c.steps[2*i], c.reward[2*i], c.loss[2*i]
		}
		c.steps, c.reward, c.loss = c.steps[:len(c.steps)/2], c.reward[:len(c.reward)/2], c.loss[:len(c.loss)/2]
	}
	c.steps = append(c.steps, float64(step))
	c.reward = append(c.reward, reward)
	c.loss = append(c.loss, loss)
	c.dirty = true
}

// Draw writes dir's CurvesFile when there are new points and the last
// drawing is at least every old.
func (c *Curves) Draw(dir, title string, every time.Duration) error {
	if !c.dirty || time.Since(c.drawn) < every {
		return nil
	}
	c.drawn, c.dirty = time.Now(), false
	return rlmetrics.PlotPNG(filepath.Join(dir, CurvesFile), title, "global step", "",
		rlmetrics.Series{Name: "reward mean", X: c.steps, Y: c.reward},
		rlmetrics.Series{Name: "loss", X: c.steps, Y: c.loss})
}

// MaxDropQueue bounds the dropped episodes waiting for DroppedFile; beyond
// it they are counted only.
const MaxDropQueue = 1 << 14

// RecentDrops is how many of the latest dropped episodes Drops keeps.
const RecentDrops = 50

// Drops counts dropped episodes by reason, keeps the latest RecentDrops,
// and queues them for DroppedFile, which Flush writes off the request
// path. It is safe for concurrent use; the zero value is ready.
type Drops struct {
	mu     sync.Mutex
	by     map[string]int64
	queue  []api.DroppedEpisode
	recent []api.DroppedEpisode
}

// Add counts and queues one dropped episode.
func (d *Drops) Add(e api.DroppedEpisode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.by == nil {
		d.by = map[string]int64{}
	}
	d.by[e.Reason]++
	if len(d.queue) < MaxDropQueue {
		d.queue = append(d.queue, e)
	}
	if d.recent = append(d.recent, e); len(d.recent) > RecentDrops {
		d.recent = slices.Delete(d.recent, 0, len(d.recent)-RecentDrops)
	}
}

// Flush appends the queued episodes to dir's DroppedFile (without a dir,
// it forgets them).
func (d *Drops) Flush(dir string) error {
	d.mu.Lock()
	q := d.queue
	d.queue = nil
	d.mu.Unlock()
	if len(q) == 0 || dir == "" {
		return nil
	}
	return AppendDrops(dir, q)
}

// Counts returns the number of dropped episodes by reason.
func (d *Drops) Counts() map[string]int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.by)
}

// Recent returns the latest dropped episodes, newest last.
func (d *Drops) Recent() []api.DroppedEpisode {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]api.DroppedEpisode{}, d.recent...)
}
