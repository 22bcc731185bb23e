package grpo

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/rl/metrics"
)

// trainerState is a checkpoint's trainer_state.json.
type trainerState struct {
	Step   int          `json:"step"`
	Seed   uint64       `json:"seed"`
	Agents []agentState `json:"agents"`
}

type agentState struct {
	Name    string `json:"name"`
	Version int64  `json:"version"`
}

// stateFile is the per-agent file of adapter and optimizer state.
const stateFile = "trainer_state.safetensors"

func joinPath(dir, name string) string { return filepath.Join(dir, name) }

func checkpointDir(out string, step int) string {
	return filepath.Join(out, "checkpoint-"+strconv.Itoa(step))
}

// Save writes a checkpoint of every agent to dir: dir/<agent>/ holds the
// adapter in PEFT's layout and trainer_state.safetensors (the adapter and
// its optimizer's state), dir/trainer_state.json the step, the seed and
// each policy's version. The folder is written beside dir and renamed
// into place, so dir is either the whole checkpoint or absent.
func (t *Trainer) Save(dir string) error {
	dir = filepath.Clean(dir)
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("grpo: checkpoint: %w", err)
	}
	st := trainerState{Step: t.step, Seed: t.cfg.Seed}
	for _, m := range t.members {
		ad := filepath.Join(tmp, m.Name)
		if err := m.LoRA.Save(ad, t.cfg.BaseName); err != nil {
			return fmt.Errorf("grpo: checkpoint of agent %q: %w", m.Name, err)
		}
		if err := nn.SaveCheckpoint(filepath.Join(ad, stateFile), m.LoRA.Store, m.opt, nil); err != nil {
			return fmt.Errorf("grpo: checkpoint of agent %q: %w", m.Name, err)
		}
		st.Agents = append(st.Agents, agentState{Name: m.Name, Version: m.pol.Version()})
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("grpo: checkpoint: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "trainer_state.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("grpo: checkpoint: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("grpo: checkpoint: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("grpo: checkpoint: %w", err)
	}
	return nil
}

// Load restores a checkpoint that Save wrote: every agent's adapter,
// optimizer state and version, and the step. The checkpoint must hold the
// same agents, trained with the same Seed.
func (t *Trainer) Load(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "trainer_state.json"))
	if err != nil {
		return fmt.Errorf("grpo: resuming: %w", err)
	}
	var st trainerState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("grpo: resuming: %s: %w", filepath.Join(dir, "trainer_state.json"), err)
	}
	if st.Seed != t.cfg.Seed {
		return fmt.Errorf("grpo: resuming from %s: it was trained with seed %d, this run has seed %d", dir, st.Seed, t.cfg.Seed)
	}
	var have, want []string
	for _, a := range st.Agents {
		have = append(have, a.Name)
	}
	for _, m := range t.members {
		want = append(want, m.Name)
	}
	if !slices.Equal(have, want) {
		return fmt.Errorf("grpo: resuming from %s: it holds agents %v, this run has %v", dir, have, want)
	}
	for i, m := range t.members {
		if _, err := nn.LoadCheckpoint(filepath.Join(dir, m.Name, stateFile), m.LoRA.Store, m.opt); err != nil {
			return fmt.Errorf("grpo: resuming agent %q: %w", m.Name, err)
		}
		m.pol.SetVersion(st.Agents[i].Version)
	}
	t.step = st.Step
	return nil
}

// LatestCheckpoint returns the checkpoint of outDir with the most steps
// (outDir/checkpoint-<step> holding trainer_state.json), or "" when there
// is none.
func LatestCheckpoint(outDir string) (string, error) {
	entries, err := os.ReadDir(outDir)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("grpo: %w", err)
	}
	best, dir := -1, ""
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "checkpoint-"))
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "checkpoint-") || err != nil || n <= best {
			continue
		}
		if _, err := os.Stat(filepath.Join(outDir, e.Name(), "trainer_state.json")); err == nil {
			best, dir = n, filepath.Join(outDir, e.Name())
		}
	}
	return dir, nil
}

// metricsFile is OutDir/metrics.jsonl.
type metricsFile struct {
	f *os.File
	w *bufio.Writer
}

// openMetrics opens dir/metrics.jsonl for a run at step: the rows of
// steps up to step are kept (and returned), later ones (of a run stopped
// after its last checkpoint) dropped.
func openMetrics(dir string, step int) (*metricsFile, []Metrics, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("grpo: %w", err)
	}
	path := filepath.Join(dir, "metrics.jsonl")
	var kept []Metrics
	if step > 0 {
		all, err := ReadMetrics(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, err
		}
		for _, m := range all {
			if m.Step <= step {
				kept = append(kept, m)
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("grpo: %w", err)
	}
	mf := &metricsFile{f: f, w: bufio.NewWriter(f)}
	if err := mf.write(kept); err != nil {
		f.Close()
		return nil, nil, err
	}
	return mf, kept, nil
}

// write appends rows and flushes them.
func (mf *metricsFile) write(rows []Metrics) error {
	enc := json.NewEncoder(mf.w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("grpo: metrics.jsonl: %w", err)
		}
	}
	if err := mf.w.Flush(); err != nil {
		return fmt.Errorf("grpo: metrics.jsonl: %w", err)
	}
	return nil
}

func (mf *metricsFile) Close() error { return mf.f.Close() }

// ReadMetrics reads a run's metrics.jsonl.
func ReadMetrics(path string) ([]Metrics, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("grpo: %w", err)
	}
	var out []Metrics
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var m Metrics
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return nil, fmt.Errorf("grpo: %s line %d: %w", path, i+1, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// plotRewards draws each agent's training reward and evaluation reward
// against the step.
func plotRewards(path string, rows []Metrics) error {
	var series []metrics.Series
	idx := map[string]int{}
	for _, r := range rows {
		key := r.Agent + " (" + r.Kind + ")"
		i, ok := idx[key]
		if !ok {
			i = len(series)
			idx[key] = i
			series = append(series, metrics.Series{Name: key})
		}
		series[i].X = append(series[i].X, float64(r.Step))
		series[i].Y = append(series[i].Y, r.Reward)
	}
	if err := metrics.PlotPNG(path, "GRPO reward per agent (train: sampled; eval: greedy, held out)", "step", "mean reward", series...); err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	return nil
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
