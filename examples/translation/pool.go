package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-ml/troupe/eval"
)

// differencesFile is where a run's report keeps its headline differences
// per evaluated sentence, for pooling runs (-pool).
const differencesFile = "differences.tsv"

// writeDifferences writes rows' per-sentence differences a[i] − b[i] as a
// tab-separated table: a header ("sentence" and each row's key), then one
// line per sentence, its English source first (tabs and newlines replaced
// by spaces).
func writeDifferences(path string, sentences []string, rows []diffRow) error {
	var b strings.Builder
	b.WriteString("sentence")
	for _, x := range rows {
		if len(x.a) != len(sentences) || len(x.b) != len(sentences) {
			panic(fmt.Sprintf("translation: writeDifferences: %s has %d and %d figures for %d sentences", x.key, len(x.a), len(x.b), len(sentences)))
		}
		b.WriteString("\t" + x.key)
	}
	b.WriteString("\n")
	flat := strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")
	for i, s := range sentences {
		b.WriteString(flat.Replace(s))
		for _, x := range rows {
			b.WriteString("\t" + strconv.FormatFloat(x.a[i]-x.b[i], 'g', -1, 64))
		}
		b.WriteString("\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// runDifferences is one run's differences.tsv: d[k][i] is difference keys[k]
// on sentence i.
type runDifferences struct {
	dir       string
	keys      []string
	sentences []string
	d         [][]float64
}

// readDifferences reads dir's differences.tsv (writeDifferences).
func readDifferences(dir string) (runDifferences, error) {
	rd := runDifferences{dir: dir}
	path := filepath.Join(dir, differencesFile)
	f, err := os.Open(path)
	if err != nil {
		return rd, fmt.Errorf("pool: %w (run the workflow with -out %s first)", err, dir)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for line := 1; sc.Scan(); line++ {
		cols := strings.Split(sc.Text(), "\t")
		if line == 1 {
			if len(cols) < 2 || cols[0] != "sentence" {
				return rd, fmt.Errorf("pool: %s: header %q is not a differences table", path, sc.Text())
			}
			rd.keys = cols[1:]
			rd.d = make([][]float64, len(rd.keys))
			continue
		}
		if len(cols) != len(rd.keys)+1 {
			return rd, fmt.Errorf("pool: %s line %d: %d columns, want %d", path, line, len(cols), len(rd.keys)+1)
		}
		rd.sentences = append(rd.sentences, cols[0])
		for k, c := range cols[1:] {
			v, err := strconv.ParseFloat(c, 64)
			if err != nil {
				return rd, fmt.Errorf("pool: %s line %d column %s: %w", path, line, rd.keys[k], err)
			}
			rd.d[k] = append(rd.d[k], v)
		}
	}
	if err := sc.Err(); err != nil {
		return rd, fmt.Errorf("pool: %s: %w", path, err)
	}
	if len(rd.sentences) == 0 {
		return rd, fmt.Errorf("pool: %s has no sentences", path)
	}
	return rd, nil
}

// pool reads the differences.tsv of each run directory in dirs (runs of one
// configuration with different -rl-seed on the same split) and writes
// pooled.md to out: each run's estimates, then each difference pooled over
// runs and sentences with two intervals, the sentences' alone (the runs
// averaged per sentence: eval.PairedBootstrap) and the sentences' and
// runs' together (eval.TwoLevelBootstrap).
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
		if i > 0 {
			if !slices.Equal(rd.keys, runs[0].keys) {
				return fmt.Errorf("pool: %s has columns %v, %s has %v", dir, rd.keys, runs[0].dir, runs[0].keys)
			}
			if !slices.Equal(rd.sentences, runs[0].sentences) {
				return fmt.Errorf("pool: %s and %s evaluated different sentences (another split, -eval or data?)", dir, runs[0].dir)
			}
		}
		runs[i] = rd
	}
	n := len(runs[0].sentences)
	var b strings.Builder
	fmt.Fprintf(&b, "# Pooled runs\n\n%d runs of %d sentences each: %s.\n\n", len(runs), n, strings.Join(dirs, ", "))
	fmt.Fprintf(&b, "Per run (mean over sentences):\n\n| difference |")
	for _, rd := range runs {
		fmt.Fprintf(&b, " %s |", filepath.Base(rd.dir))
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(runs)) + "\n")
	for k, key := range runs[0].keys {
		fmt.Fprintf(&b, "| %s |", key)
		for _, rd := range runs {
			fmt.Fprintf(&b, " %+.4f |", eval.Mean(rd.d[k]))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\nPooled over the runs (%d resamples, 95 %% percentile intervals): the sentences' interval averages the runs per sentence and resamples sentences (a paired bootstrap); the sentences' and runs' interval resamples both (a two-level bootstrap), so it also covers the RL phase's randomness, with the runs as its sample.\n\n| difference | pooled mean | sentences' interval | sentences' and runs' interval | runs above 0 |\n|---|---|---|---|---|\n", bootstrapResamples)
	for k, key := range runs[0].keys {
		d := make([][]float64, len(runs))
		avg := make([]float64, n)
		above := 0
		for i, rd := range runs {
			d[i] = rd.d[k]
			for j, v := range rd.d[k] {
				avg[j] += v / float64(len(runs))
			}
			if eval.Mean(rd.d[k]) > 0 {
				above++
			}
		}
		s := eval.PairedBootstrap(avg, make([]float64, n), bootstrapResamples, seed)
		t := eval.TwoLevelBootstrap(d, bootstrapResamples, seed)
		fmt.Fprintf(&b, "| %s | %+.4f | [%+.4f, %+.4f] | [%+.4f, %+.4f] | %d/%d |\n", key, t.Mean, s.Lo, s.Hi, t.Lo, t.Hi, above, len(runs))
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
