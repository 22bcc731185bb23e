package eval

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPairedBootstrap(t *testing.T) {
	// A constant difference has a zero-width interval at that constant.
	a := []float64{0.3, 0.5, 0.9, 0.1}
	b := []float64{0.2, 0.4, 0.8, 0.0}
	got := PairedBootstrap(a, b, 500, 1)
	if !cmp.Equal(got, Interval{0.1, 0.1, 0.1}, cmpopts.EquateApprox(0, 1e-12)) {
		t.Errorf("constant difference: %v", got)
	}
	// Differences of ±1 (half each) on n items: the resampled mean has
	// sd 1/√n, so the 95 % interval is about ±1.96/√n around 0.
	const n = 400
	alt := make([]float64, n)
	for i := range alt {
		alt[i] = float64(2*(i%2) - 1)
	}
	d := PairedBootstrap(alt, make([]float64, n), 4000, 1)
	half := 1.96 / math.Sqrt(n)
	if d.Mean != 0 || math.Abs(d.Lo+half) > 0.015 || math.Abs(d.Hi-half) > 0.015 {
		t.Errorf("±1 differences: %v, want about ±%.3f", d, half)
	}
	if again := PairedBootstrap(alt, make([]float64, n), 4000, 1); again != d {
		t.Errorf("same seed, different interval: %v and %v", d, again)
	}
	if z := PairedBootstrap(nil, nil, 10, 1); z != (Interval{}) {
		t.Errorf("empty input: %v", z)
	}
	if z := PairedBootstrap([]float64{1, 3}, []float64{0, 0}, 0, 1); z != (Interval{2, 2, 2}) {
		t.Errorf("no resamples: %v", z)
	}
}

func TestPairedBootstrapLengthMismatchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for mismatched lengths")
		}
	}()
	PairedBootstrap([]float64{1, 2}, []float64{1}, 10, 1)
}

func TestTwoLevelBootstrap(t *testing.T) {
	// Identical runs: the run level adds nothing, and the interval is the
	// paired bootstrap's width (same items, other random stream): within a
	// few per cent of ±1.96/√n for ±1 differences.
	const n = 400
	run := make([]float64, n)
	for i := range run {
		run[i] = float64(2*(i%2) - 1)
	}
	got := TwoLevelBootstrap([][]float64{run, run, run}, 4000, 1)
	half := 1.96 / math.Sqrt(n)
	if got.Mean != 0 || math.Abs(got.Lo+half) > 0.015 || math.Abs(got.Hi-half) > 0.015 {
		t.Errorf("identical runs: %v, want about ±%.3f", got, half)
	}
	// Runs offset by ±c with constant items: only the run level varies.
	// With two runs at 0 and 1, a resample's mean is k/2, k drawn
	// Binomial(2, 1/2): the interval is [0, 1] around the mean 0.5.
	runs := [][]float64{make([]float64, 50), make([]float64, 50)}
	for i := range runs[1] {
		runs[1][i] = 1
	}
	if got := TwoLevelBootstrap(runs, 2000, 3); got != (Interval{0.5, 0, 1}) {
		t.Errorf("two constant runs: %v, want {0.5 0 1}", got)
	}
	// The run level widens the interval when runs differ.
	r := rand.New(rand.NewPCG(1, 2))
	var spread [][]float64
	for k := range 5 {
		x := make([]float64, n)
		for i := range x {
			x[i] = run[i] + 0.2*float64(k-2) + 0.01*r.NormFloat64()
		}
		spread = append(spread, x)
	}
	if w, w0 := TwoLevelBootstrap(spread, 2000, 1), got; w.Hi-w.Lo <= w0.Hi-w0.Lo {
		t.Errorf("differing runs %v not wider than identical ones %v", w, w0)
	}
	if z := TwoLevelBootstrap(nil, 10, 1); z != (Interval{}) {
		t.Errorf("no runs: %v", z)
	}
}

func TestTwoLevelBootstrapRaggedPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for runs of different lengths")
		}
	}()
	TwoLevelBootstrap([][]float64{{1, 2}, {1}}, 10, 1)
}

func TestMeanSD(t *testing.T) {
	for _, tc := range []struct {
		xs       []float64
		mean, sd float64
	}{
		// Deviations −2, 0, 2: sum of squares 8 over n−1 = 2: sd 2.
		{[]float64{1, 3, 5}, 3, 2},
		{[]float64{7}, 7, 0},
		// Deviations ±0.5 four times: 1/3 → sd √(1/3).
		{[]float64{1, 2, 1, 2}, 1.5, math.Sqrt(1.0 / 3)},
	} {
		m, sd := MeanSD(tc.xs)
		if !cmp.Equal([]float64{m, sd}, []float64{tc.mean, tc.sd}, cmpopts.EquateApprox(0, 1e-12)) {
			t.Errorf("MeanSD(%v) = %v ± %v, want %v ± %v", tc.xs, m, sd, tc.mean, tc.sd)
		}
	}
	if m, sd := MeanSD(nil); !math.IsNaN(m) || sd != 0 {
		t.Errorf("MeanSD(nil) = %v, %v; want NaN, 0", m, sd)
	}
}

func ExamplePairedBootstrap() {
	// Two systems scored on the same six sentences.
	workflow := []float64{0.31, 0.25, 0.40, 0.22, 0.35, 0.28}
	alone := []float64{0.30, 0.20, 0.38, 0.22, 0.30, 0.27}
	iv := PairedBootstrap(workflow, alone, 2000, 1)
	fmt.Printf("mean difference %+.4f, interval excludes 0: %v\n", iv.Mean, iv.Excludes0())
	// Output:
	// mean difference +0.0233, interval excludes 0: true
}

func ExampleTwoLevelBootstrap() {
	// The same difference measured on four sentences in three training
	// runs (seeds): the interval covers both sentences and seeds.
	runs := [][]float64{
		{0.02, 0.01, 0.03, 0.00},
		{0.01, 0.00, 0.02, 0.01},
		{0.03, 0.02, 0.02, 0.01},
	}
	iv := TwoLevelBootstrap(runs, 2000, 1)
	fmt.Printf("%+.4f, lower bound above 0: %v\n", iv.Mean, iv.Lo > 0)
	// Output:
	// +0.0150, lower bound above 0: true
}

func ExampleMeanSD() {
	m, sd := MeanSD([]float64{0.70, 0.74, 0.78}) // AUC of three folds
	fmt.Printf("%.2f ± %.2f\n", m, sd)
	// Output: 0.74 ± 0.04
}
