package main

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPairedBootstrap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	noise := make([]float64, 400)
	for i := range noise {
		noise[i] = r.NormFloat64()
	}
	shifted := func(c float64) []float64 {
		out := make([]float64, len(noise))
		for i, x := range noise {
			out[i] = x + c
		}
		return out
	}
	// A difference whose sentences disagree in sign: d[i] = ±1 with mean 0.
	alt := make([]float64, 400)
	for i := range alt {
		alt[i] = float64(1 - 2*(i%2))
	}
	for _, tc := range []struct {
		name         string
		a, b         []float64
		mean         float64
		excludesZero bool
		maxWidth     float64
	}{
		{"identical", noise, noise, 0, false, 1e-12},
		// Pairing removes the shared noise: a constant shift is exact.
		{"constant shift", shifted(0.25), noise, 0.25, true, 1e-12},
		// ±1 differences: standard error 1/√400 = 0.05, interval ≈ ±0.098.
		{"sign-mixed", alt, make([]float64, 400), 0, false, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := pairedBootstrap(tc.a, tc.b, bootstrapResamples, 1)
			if math.Abs(d.Mean-tc.mean) > 1e-12 {
				t.Errorf("mean %g, want %g", d.Mean, tc.mean)
			}
			if d.Lo > d.Mean || d.Hi < d.Mean {
				t.Errorf("interval [%g, %g] does not contain the mean %g", d.Lo, d.Hi, d.Mean)
			}
			if got := d.Lo > 0 || d.Hi < 0; got != tc.excludesZero {
				t.Errorf("interval [%g, %g] excludes 0: %v, want %v", d.Lo, d.Hi, got, tc.excludesZero)
			}
			if d.Hi-d.Lo > tc.maxWidth {
				t.Errorf("interval width %g > %g", d.Hi-d.Lo, tc.maxWidth)
			}
		})
	}
	// The ±1 case's interval is the normal one, ±1.96 standard errors,
	// within the bootstrap's own resampling error.
	d := pairedBootstrap(alt, make([]float64, 400), bootstrapResamples, 1)
	if w := (d.Hi - d.Lo) / 2; math.Abs(w-1.96*0.05) > 0.015 {
		t.Errorf("half width %g, want about %g", w, 1.96*0.05)
	}
	// Seeded: the same seed gives the same interval.
	if e := pairedBootstrap(alt, make([]float64, 400), bootstrapResamples, 1); e != d {
		t.Errorf("not reproducible: %v then %v", d, e)
	}
	if z := pairedBootstrap(nil, nil, 10, 1); z != (diffCI{}) {
		t.Errorf("empty input: %v", z)
	}
}

func TestPairedBootstrapLengthMismatchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for scores of different lengths")
		}
	}()
	pairedBootstrap([]float64{1, 2}, []float64{1}, 10, 1)
}

// TestTwoLevelBootstrap checks the interval that resamples runs and
// sentences: constant differences give a point; two runs that disagree
// (all +1 against all −1) average to 0 per sentence, so the sentences'
// interval is a point at 0 while the two-level one spans the runs; mean
// and interval are reproducible from the seed.
func TestTwoLevelBootstrap(t *testing.T) {
	c := [][]float64{{0.5, 0.5, 0.5}, {0.5, 0.5, 0.5}}
	if got := twoLevelBootstrap(c, bootstrapResamples, 1); got != (diffCI{0.5, 0.5, 0.5}) {
		t.Errorf("constant differences: %v, want 0.5 [0.5, 0.5]", got)
	}
	up, down := make([]float64, 50), make([]float64, 50)
	for i := range up {
		up[i], down[i] = 1, -1
	}
	d := [][]float64{up, down}
	got := twoLevelBootstrap(d, bootstrapResamples, 1)
	if got.Mean != 0 || got.Lo > -0.99 || got.Hi < 0.99 {
		t.Errorf("disagreeing runs: %v, want 0 with an interval reaching ±1", got)
	}
	if again := twoLevelBootstrap(d, bootstrapResamples, 1); again != got {
		t.Errorf("same seed, %v then %v", got, again)
	}
	if s := pairedBootstrap(make([]float64, 50), make([]float64, 50), bootstrapResamples, 1); s != (diffCI{}) {
		t.Errorf("averaged runs: %v, want 0 [0, 0]", s)
	}
	if z := twoLevelBootstrap(nil, 10, 1); z != (diffCI{}) {
		t.Errorf("no runs: %v", z)
	}
	defer func() {
		if recover() == nil {
			t.Error("runs of different lengths did not panic")
		}
	}()
	twoLevelBootstrap([][]float64{{1, 2}, {1}}, 10, 1)
}

// TestPool writes two runs' differences.tsv, pools them and checks the
// pooled report's figures, then the errors: one directory, a missing
// table, and runs over different sentences.
func TestPool(t *testing.T) {
	sents := []string{"a\tb", "c", "d"}
	dirs := []string{t.TempDir(), t.TempDir()}
	runs := [][]float64{{0.1, 0.2, 0.3}, {0.3, 0.4, 0.5}}
	for i, dir := range dirs {
		rows := []diffRow{{key: "chrf_margin", a: runs[i], b: make([]float64, 3)}, {key: "zero", a: make([]float64, 3), b: make([]float64, 3)}}
		if err := writeDifferences(filepath.Join(dir, differencesFile), sents, rows); err != nil {
			t.Fatal(err)
		}
	}
	rd, err := readDifferences(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a b", "c", "d"}; !slices.Equal(rd.sentences, want) || !slices.Equal(rd.keys, []string{"chrf_margin", "zero"}) || !slices.Equal(rd.d[0], runs[0]) {
		t.Errorf("read back %+v", rd)
	}
	out := t.TempDir()
	if err := pool(dirs, out, 1); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "pooled.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 runs of 3 sentences", "| chrf_margin | +0.2000 | +0.4000 |", "| chrf_margin | +0.3000 |", "| zero | +0.0000 | [+0.0000, +0.0000] | [+0.0000, +0.0000] | 0/2 |"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("pooled.md lacks %q:\n%s", want, b)
		}
	}
	if err := pool(dirs[:1], out, 1); err == nil {
		t.Error("one run pooled without an error")
	}
	if err := pool([]string{dirs[0], t.TempDir()}, out, 1); err == nil || !strings.Contains(err.Error(), differencesFile) {
		t.Errorf("missing table: error %v", err)
	}
	other := t.TempDir()
	if err := writeDifferences(filepath.Join(other, differencesFile), []string{"x", "c", "d"}, []diffRow{{key: "chrf_margin", a: runs[0], b: make([]float64, 3)}, {key: "zero", a: make([]float64, 3), b: make([]float64, 3)}}); err != nil {
		t.Fatal(err)
	}
	if err := pool([]string{dirs[0], other}, out, 1); err == nil || !strings.Contains(err.Error(), "different sentences") {
		t.Errorf("different sentences: error %v", err)
	}
}
