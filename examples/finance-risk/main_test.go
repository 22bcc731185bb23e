package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"examples/finance-risk/finrisk"
	"examples/finance-risk/pipeline"
)

// TestQuickEndToEnd runs the example's -quick path on the real data and
// checks the report and its invariants (not the bar: -quick trains too
// briefly for that; the full run's figures are in docs/experiments/2026-12-02-finance.md).
func TestQuickEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run (about 15 s of CPU) skipped in -short mode")
	}
	if _, err := finrisk.Fetch(""); errors.Is(err, finrisk.ErrFetch) {
		t.Skipf("data fetch failed for lack of network: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := Run(Options{Quick: true, Seed: 1, Out: out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.md", "reward.png", "attention.png", "calibration.png"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Size() == 0 {
			t.Fatalf("%s missing or empty: %v", f, err)
		}
	}
	if len(res.Folds) != 3 || len(res.PoolY) != 1000 {
		t.Fatalf("%d folds, %d pooled test applicants", len(res.Folds), len(res.PoolY))
	}
	for m, name := range modelNames {
		e := res.Mean[m]
		if m != mMarket && (e.AUC < 0.6 || e.AUC > 0.95) {
			t.Errorf("%s: AUC %.4f implausible", name, e.AUC)
		}
		if e.Cost <= 0 || e.Cost > 1.6 || e.Misjudgment <= 0 || e.Misjudgment >= 1 {
			t.Errorf("%s: %+v", name, e)
		}
	}
	// Missing market history: the market member has exactly zero attention.
	M := pipeline.NumMembers
	missing := 0
	for i, ok := range res.MarketOK {
		var s float32
		for m := 0; m < M; m++ {
			s += res.Attention[i*M+m]
		}
		if s < 0.999 || s > 1.001 {
			t.Fatalf("attention of applicant %d sums to %g", i, s)
		}
		if !ok {
			missing++
			if w := res.Attention[i*M+pipeline.Market]; w != 0 {
				t.Fatalf("applicant %d has no market history but market weight %g", i, w)
			}
		}
	}
	if missing == 0 {
		t.Log("no applicant without market history in this draw")
	}
	if len(res.Rounds) == 0 || res.History == 0 {
		t.Fatalf("%d rounds, %d role changes", len(res.Rounds), res.History)
	}
	for _, d := range res.Distill {
		if d.SpeedUp() <= 1 || d.StudentParams >= d.TeacherParams {
			t.Fatalf("distillation report %+v", d)
		}
	}
}
