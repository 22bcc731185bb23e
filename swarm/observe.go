package swarm

import (
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/rundir"
)

// Files of the run directory (ServerConfig.CheckpointDir; package
// swarm/rundir writes them, package dashboard reads them).
const (
	// TrainMetricsFile receives one JSON object per training step (a
	// TrainStep, its rl.Stats fields flattened; non-finite values as null),
	// appended so that a restarted server continues the same file.
	TrainMetricsFile = rundir.MetricsFile
	// TrainCurvesFile is a PNG of the reward and loss curves of the steps
	// this process ran, redrawn at most every curvesEvery and on Close.
	TrainCurvesFile = rundir.CurvesFile
	// DroppedFile lists the episodes never trained, one
	// api.DroppedEpisode per line.
	DroppedFile = rundir.DroppedFile
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
	// Model is the model's name.
	Model string
	// CompletionTokensMean is the mean number of sampled tokens per sample.
	CompletionTokensMean float64
	// ZeroSpreadGroups is the fraction of the batch's task groups whose
	// rewards were all equal (no GRPO signal).
	ZeroSpreadGroups float64
	// Phases are the step's seconds per phase: "rollout" from the end of
	// the previous step until the batch was collected, "train" in
	// Model.Train, "sync" writing the checkpoint and publishing the
	// weights.
	Phases map[string]float64
	// TokensPerS is the completion tokens this server sampled per second
	// since the previous step; 0 when it sampled none (a trainer whose
	// front-ends sample).
	TokensPerS float64
	// StalenessMean and StalenessMax are how many versions the batch's
	// samples trail the version the step trained.
	StalenessMean, StalenessMax float64
	// EpisodeStates counts the server's episodes by state up to the step.
	EpisodeStates api.EpisodeStates
	// TeamIDs are the team episodes of EpisodeIDs, one for one (empty for
	// an episode of no team).
	TeamIDs []string
	// RewardComponentsMean is the batch's mean of each reward component
	// (over the episodes that gave it); nil when none did.
	RewardComponentsMean map[string]float64
	// Credit is the agent's share of a team reward split into the
	// components "shared" (the team's) and "own" (the agent's):
	// Σ|shared| and Σ|own| over the batch, each divided by their sum;
	// nil when the batch has neither.
	Credit map[string]float64

	samples []rundir.Sample // the step's sample file
}

// record flattens the step into the JSON object of TrainMetricsFile.
func (t TrainStep) record() map[string]any {
	m := map[string]any{
		"step": t.Step, "episodes": t.Episodes, "tasks": t.Tasks, "samples": t.Samples,
		"reward_mean": rundir.Number(t.RewardMean), "reward_std": rundir.Number(t.RewardStd),
		"duration_s": t.Duration.Seconds(), "time": t.Time.UTC().Format(time.RFC3339Nano),
		"episode_ids": t.EpisodeIDs, "model": t.Model, "completion_tokens_mean": rundir.Number(t.CompletionTokensMean),
		"zero_spread_groups": rundir.Number(t.ZeroSpreadGroups), "staleness_mean": rundir.Number(t.StalenessMean),
		"staleness_max": rundir.Number(t.StalenessMax), "episodes_by_state": t.EpisodeStates,
	}
	if t.Phases != nil {
		m["phase_s"] = t.Phases
	}
	if slices.ContainsFunc(t.TeamIDs, func(id string) bool { return id != "" }) {
		m["team_ids"] = t.TeamIDs
	}
	if t.RewardComponentsMean != nil {
		rc := map[string]any{}
		for n, v := range t.RewardComponentsMean {
			rc[n] = rundir.Number(v)
		}
		m["reward_components"] = rc
	}
	if t.Credit != nil {
		m["credit"] = t.Credit
	}
	if t.TokensPerS > 0 {
		m["tokens_per_s"] = rundir.Number(t.TokensPerS)
	}
	rundir.AddFields(m, "stats.", t.Stats)
	return m
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

// recordStep reports a finished step: TrainMetricsFile, its sample file,
// the curves, then the hook (so that a hook may read the files up to its
// step). Called from the training goroutine only.
func (s *Server) recordStep(t TrainStep) {
	if s.cfg.OnTrainStep != nil {
		defer s.cfg.OnTrainStep(t)
	}
	s.curves.Add(t.Step, t.RewardMean, t.Stats.Loss)
	dir := s.cfg.CheckpointDir
	if dir == "" {
		return
	}
	// The samples first: a reader that sees the row finds its samples.
	if len(t.samples) > 0 {
		if err := rundir.WriteSamples(dir, t.Step, t.samples); err != nil {
			s.log.Error("writing the step's samples failed", "err", err)
		}
	}
	if err := rundir.AppendJSONL(filepath.Join(dir, TrainMetricsFile), t.record()); err != nil {
		s.log.Error("writing training metrics failed", "err", err)
	}
	s.plotCurves(curvesEvery)
}

// plotCurves draws TrainCurvesFile when there are new points drawn no
// sooner than every ago.
func (s *Server) plotCurves(every time.Duration) {
	if s.cfg.CheckpointDir == "" {
		return
	}
	if err := s.curves.Draw(s.cfg.CheckpointDir, s.model.Name()+" training", every); err != nil {
		s.log.Error("drawing training curves failed", "err", err)
	}
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
