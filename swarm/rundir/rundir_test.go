package rundir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
)

// TestHasStep: the row of a step is found among the newest rows, a
// missing file holds none, and a torn last line does not hide the others.
func TestHasStep(t *testing.T) {
	dir := t.TempDir()
	if ok, err := HasStep(dir, 1); ok || err != nil {
		t.Fatalf("no file: %v %v", ok, err)
	}
	for i := range 3 {
		if err := AppendJSONL(filepath.Join(dir, MetricsFile), map[string]any{"step": i + 1}); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := os.OpenFile(filepath.Join(dir, MetricsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"step": 4, "time`)
	f.Close()
	for step, want := range map[int64]bool{1: true, 3: true, 4: false, 5: false} {
		if ok, err := HasStep(dir, step); ok != want || err != nil {
			t.Errorf("step %d: %v %v, want %v", step, ok, err, want)
		}
	}
}

// TestDrops: counts by reason, the latest RecentDrops newest last, and a
// queue that Flush writes once and that stops growing at MaxDropQueue.
func TestDrops(t *testing.T) {
	dir := t.TempDir()
	var d Drops
	for i := range MaxDropQueue + 10 {
		d.Add(api.DroppedEpisode{Time: time.Unix(int64(i), 0).UTC(), EpisodeID: fmt.Sprintf("e-%d", i), Reason: []string{"stale", "forged"}[i%2]})
	}
	if c := d.Counts(); c["stale"]+c["forged"] != MaxDropQueue+10 {
		t.Fatalf("counts %v", c)
	}
	if r := d.Recent(); len(r) != RecentDrops || r[len(r)-1].EpisodeID != fmt.Sprintf("e-%d", MaxDropQueue+9) {
		t.Fatalf("recent: %d, last %+v", len(r), r[len(r)-1])
	}
	if err := d.Flush(dir); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, DroppedFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != MaxDropQueue || !strings.Contains(lines[0], `"episode_id":"e-0"`) || !strings.Contains(lines[0], `"time":"1970-01-01T00:00:00Z"`) {
		t.Fatalf("%s: %d lines, first %s", DroppedFile, len(lines), lines[0])
	}
}

// TestWriteSamplesReplaces: a step trained again after a crash replaces
// its sample file.
func TestWriteSamplesReplaces(t *testing.T) {
	dir := t.TempDir()
	v := int64(3)
	for _, id := range []string{"first", "second"} {
		if err := WriteSamples(dir, 12, []Sample{{EpisodeID: id, TaskID: "t", Version: &v, RewardComponents: map[string]float64{}}}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "samples", "step-00000012.jsonl"))
	if err != nil || strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), `"episode_id":"second"`) || !strings.Contains(string(b), `"team_id":""`) {
		t.Fatalf("sample file: %s %v", b, err)
	}
}
