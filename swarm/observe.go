package swarm

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/troupe-ml/troupe/rl"
	rlmetrics "github.com/troupe-ml/troupe/rl/metrics"
)

// Files of the run directory (ServerConfig.CheckpointDir).
const (
	// TrainMetricsFile receives one JSON object per training step (a
	// TrainStep, its rl.Stats fields flattened; non-finite values as null),
	// appended so that a restarted server continues the same file.
	TrainMetricsFile = "train_metrics.jsonl"
	// TrainCurvesFile is a PNG of the reward and loss curves of the steps
	// this process ran, redrawn at most every curvesEvery and on Close.
	TrainCurvesFile = "train_curves.png"
)

// curvesEvery bounds how often the curves are redrawn: a tabular model
// trains hundreds of steps a second, and drawing a PNG costs milliseconds.
const curvesEvery = 30 * time.Second

// TrainStep is what the server reports of one training step
// (ServerConfig.OnTrainStep, TrainMetricsFile).
type TrainStep struct {
	// Step is the global step (the model version) after the update.
	Step int64
	// Episodes, Tasks and Samples count the batch.
	Episodes, Tasks, Samples int
	// RewardMean and RewardStd are the mean and population standard
	// deviation of the batch's episode rewards.
	RewardMean, RewardStd float64
	// Duration is the time Model.Train took.
	Duration time.Duration
	// Time is when the step finished.
	Time time.Time
	// Stats is what Model.Train returned.
	Stats rl.Stats
	// EpisodeIDs are the episodes the step trained on, in batch order.
	// After a crash a step is trained again from the last checkpoint: in
	// TrainMetricsFile the last row of a step number is the one that holds.
	EpisodeIDs []string
}

// record flattens the step into the JSON object of TrainMetricsFile.
func (t TrainStep) record() map[string]any {
	m := map[string]any{
		"step": t.Step, "episodes": t.Episodes, "tasks": t.Tasks, "samples": t.Samples,
		"reward_mean": jsonFloat(t.RewardMean), "reward_std": jsonFloat(t.RewardStd),
		"duration_s": t.Duration.Seconds(), "time": t.Time.UTC().Format(time.RFC3339Nano),
		"episode_ids": t.EpisodeIDs,
	}
	v := reflect.ValueOf(t.Stats)
	for i := range v.NumField() {
		name := "stats." + v.Type().Field(i).Name
		switch f := v.Field(i); f.Kind() {
		case reflect.Float64, reflect.Float32:
			m[name] = jsonFloat(f.Float())
		case reflect.Int, reflect.Int64, reflect.Int32:
			m[name] = f.Int()
		}
	}
	return m
}

// jsonFloat is x, or nil for NaN and ±Inf, which JSON cannot carry.
func jsonFloat(x float64) any {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return x
}

// welford accumulates a mean and variance without summing raw values, so
// that neither overflows while the values are finite (Welford 1962).
type welford struct {
	n        int
	mean, m2 float64
}

func (w *welford) add(x float64) {
	w.n++
	d := x - w.mean
	w.mean += d / float64(w.n)
	w.m2 += d * (x - w.mean)
}

// std is the population standard deviation.
func (w *welford) std() float64 {
	if w.n == 0 {
		return 0
	}
	return math.Sqrt(max(w.m2, 0) / float64(w.n))
}

// trainCurves keeps the series that TrainCurvesFile draws.
type trainCurves struct {
	steps, reward, loss []float64
	drawn               time.Time
	dirty               bool
}

// maxCurvePoints bounds the curves' memory; older points are thinned out.
const maxCurvePoints = 1 << 16

// recordStep reports a finished step: TrainMetricsFile, the curves, then
// the hook (so that a hook may read the file up to its step). Called from
// the training goroutine only.
func (s *Server) recordStep(t TrainStep) {
	if s.cfg.OnTrainStep != nil {
		defer s.cfg.OnTrainStep(t)
	}
	c := &s.curves
	if len(c.steps) >= maxCurvePoints {
		// keep every other point: the curve keeps its shape at half the memory
		for i := range len(c.steps) / 2 {
			c.steps[i], c.reward[i], c.loss[i] = c.steps[2*i], c.reward[2*i], c.loss[2*i]
		}
		c.steps, c.reward, c.loss = c.steps[:len(c.steps)/2], c.reward[:len(c.reward)/2], c.loss[:len(c.loss)/2]
	}
	c.steps = append(c.steps, float64(t.Step))
	c.reward = append(c.reward, t.RewardMean)
	c.loss = append(c.loss, t.Stats.Loss)
	c.dirty = true
	if s.cfg.CheckpointDir == "" {
		return
	}
	if err := appendJSONL(filepath.Join(s.cfg.CheckpointDir, TrainMetricsFile), t.record()); err != nil {
		s.log.Error("writing training metrics failed", "err", err)
	}
	if time.Since(c.drawn) >= curvesEvery {
		s.plotCurves()
	}
}

// plotCurves draws TrainCurvesFile when there are new points.
func (s *Server) plotCurves() {
	c := &s.curves
	if s.cfg.CheckpointDir == "" || !c.dirty {
		return
	}
	c.drawn, c.dirty = time.Now(), false
	path := filepath.Join(s.cfg.CheckpointDir, TrainCurvesFile)
	err := rlmetrics.PlotPNG(path, s.model.Name()+" training", "global step", "",
		rlmetrics.Series{Name: "reward mean", X: c.steps, Y: c.reward},
		rlmetrics.Series{Name: "loss", X: c.steps, Y: c.loss})
	if err != nil {
		s.log.Error("drawing training curves failed", "err", err)
	}
}

func appendJSONL(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("swarm: encode %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("swarm: %w", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("swarm: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("swarm: append %s: %w", path, err)
	}
	return nil
}

// VerboseLogEntry is one entry of GET /get_verbose_logs (AgentJet's
// VerboseLogEntry): a short line about the engine for overwatch displays.
type VerboseLogEntry struct {
	Timestamp float64 `json:"timestamp"`
	Tag       string  `json:"tag"`
	Message   string  `json:"message"`
}

// verboseLogSize is how many recent entries /get_verbose_logs keeps.
const verboseLogSize = 256

// vlogLocked appends an entry to the verbose log ring. Entries name no
// episode or client, since the endpoint needs no credentials.
func (s *Server) vlogLocked(tag, msg string) {
	e := VerboseLogEntry{Timestamp: float64(time.Now().UnixNano()) / 1e9, Tag: tag, Message: msg}
	if len(s.vlog) < verboseLogSize {
		s.vlog = append(s.vlog, e)
		return
	}
	s.vlog[s.vlogPos] = e
	s.vlogPos = (s.vlogPos + 1) % verboseLogSize
}

// verboseLogs returns the ring's entries, oldest first.
func (s *Server) verboseLogs() []VerboseLogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]VerboseLogEntry, 0, len(s.vlog))
	out = append(out, s.vlog[s.vlogPos:]...)
	return append(out, s.vlog[:s.vlogPos]...)
}
