package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/troupe-ml/troupe/eval"
)

// differencesFile keeps a run's headline differences per sentence (-pool).
const differencesFile = "differences.json"

// runDifferences is one run's differences: D[k][i] is difference Keys[k] on sentence i.
type runDifferences struct {
	dir       string
	Keys      []string
	Sentences []string
	D         [][]float64
}

// writeDifferences writes rows' per-sentence differences a[i] − b[i].
func writeDifferences(path string, sentences []string, rows []diffRow) error {
	rd := runDifferences{Sentences: sentences}
	for _, x := range rows {
		if len(x.a) != len(sentences) || len(x.b) != len(sentences) {
			panic(fmt.Sprintf("translation: writeDifferences: %s has %d and %d figures for %d sentences", x.key, len(x.a), len(x.b), len(sentences)))
		}
		d := make([]float64, len(sentences))
		for i := range d {
			d[i] = x.a[i] - x.b[i]
		}
		rd.Keys, rd.D = append(rd.Keys, x.key), append(rd.D, d)
	}
	b, err := json.Marshal(rd)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// readDifferences reads dir's differences (writeDifferences).
func readDifferences(dir string) (runDifferences, error) {
	rd := runDifferences{dir: dir}
	path := filepath.Join(dir, differencesFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return rd, fmt.Errorf("pool: %w (run the workflow with -out %s first)", err, dir)
	}
	if err := json.Unmarshal(b, &rd); err != nil {
		return rd, fmt.Errorf("pool: %s: %w", path, err)
	}
	if len(rd.Sentences) == 0 || len(rd.D) != len(rd.Keys) {
		return rd, fmt.Errorf("pool: %s has %d sentences and %d columns for %d keys", path, len(rd.Sentences), len(rd.D), len(rd.Keys))
	}
	for k, d := range rd.D {
		if len(d) != len(rd.Sentences) {
			return rd, fmt.Errorf("pool: %s: %s has %d values for %d sentences", path, rd.Keys[k], len(d), len(rd.Sentences))
		}
	}
	return rd, nil
}

// pool writes pooled.md to out from the runs dirs (different rl-seed): each
// difference pooled, with the sentences' interval (eval.PairedBootstrap of
// the run-averaged sentences) and the sentences' and runs' (TwoLevelBootstrap).
func pool(dirs []string, out string, seed uint64) error {
	if len(dirs) < 2 {
		return errors.New("pool: -pool wants at least two run directories, comma-separated")
	}
	runs := make([]runDifferences, len(dirs))
	for i, dir := range dirs {
		rd, err := readDifferences(dir)
		if err != nil {
			return err
		}
		if i > 0 && (!slices.Equal(rd.Keys, runs[0].Keys) || !slices.Equal(rd.Sentences, runs[0].Sentences)) {
			return fmt.Errorf("pool: %s and %s have other columns or sentences (another split, eval-n or data?)", dir, runs[0].dir)
		}
		runs[i] = rd
	}
	n := len(runs[0].Sentences)
	var b strings.Builder
	fmt.Fprintf(&b, "# Pooled runs\n\n%d runs of %d sentences each: %s.\n\n", len(runs), n, strings.Join(dirs, ", "))
	fmt.Fprintf(&b, "Pooled over the runs (%d resamples, 95 %% intervals): the sentences' interval averages the runs per sentence and resamples sentences; the sentences' and runs' interval resamples both, so it also covers the RL phase's randomness.\n\n| difference | pooled mean | sentences' interval | sentences' and runs' interval | runs above 0 | per run |\n|---|---|---|---|---|---|\n", bootstrapResamples)
	for k, key := range runs[0].Keys {
		d := make([][]float64, len(runs))
		avg := make([]float64, n)
		var above int
		var per []string
		for i, rd := range runs {
			d[i] = rd.D[k]
			for j, v := range rd.D[k] {
				avg[j] += v / float64(len(runs))
			}
			m := eval.Mean(rd.D[k])
			if m > 0 {
				above++
			}
			per = append(per, fmt.Sprintf("%+.4f", m))
		}
		s := eval.PairedBootstrap(avg, make([]float64, n), bootstrapResamples, seed)
		t := eval.TwoLevelBootstrap(d, bootstrapResamples, seed)
		fmt.Fprintf(&b, "| %s | %+.4f | [%+.4f, %+.4f] | [%+.4f, %+.4f] | %d/%d | %s |\n", key, t.Mean, s.Lo, s.Hi, t.Lo, t.Hi, above, len(runs), strings.Join(per, " "))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	path := filepath.Join(out, "pooled.md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	logf("pooled report: %s", path)
	return nil
}
