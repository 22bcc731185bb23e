package main

import (
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
