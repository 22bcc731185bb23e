package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportSmoke runs every schedule for a few steps and checks the report
// and plots are written.
func TestReportSmoke(t *testing.T) {
	dir := t.TempDir()
	var rs []*result
	for _, s := range schedules() {
		r, err := run(s, 12, 1, dir)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
		// The figures are means of per-step rates and payoffs: they lie in
		// their ranges, and the last step's weights are the schedule's at
		// progress 1.
		for name, v := range map[string]float64{"task": r.task, "violations": r.safety, "novelty": r.novelty, "auc": r.auc} {
			if !(v >= 0 && v <= 1) {
				t.Errorf("%s: %s = %g, outside [0, 1]", s.name, name, v)
			}
		}
		want := s.make().Weights(1)
		if s.name == "adaptive" {
			// Adaptive only moves weight from novelty to safety.
			if r.finalW[0] != 1 || math.Abs(r.finalW[1]+r.finalW[2]-1.2) > 1e-12 || r.finalW[1] < 0.1-1e-12 {
				t.Errorf("adaptive: final weights %v", r.finalW)
			}
			continue
		}
		for k := range want {
			if math.Abs(r.finalW[k]-want[k]) > 1e-12 {
				t.Errorf("%s: final weights %v, want %v", s.name, r.finalW, want)
				break
			}
		}
	}
	if err := report(dir, 12, 1, rs); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range schedules() {
		if !strings.Contains(string(md), "| "+s.name+" |") {
			t.Errorf("report lacks a row for %s", s.name)
		}
	}
	for _, f := range []string{"task.png", "violations.png", "novelty.png", "entropy.png", "adaptive/weights.png", "adaptive/metrics.csv", "linear/metrics.jsonl"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}
