package dashboard

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/swarm/rundir"
)

// TestDiscover groups the metrics files of directory layouts into runs.
func TestDiscover(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		want  map[string][]string // run ID → agent keys
	}{
		{name: "one agent", files: []string{"train_metrics.jsonl"}, want: map[string][]string{"_": {"ROOT"}}},
		{name: "agents of one process", files: []string{"planner-8001/train_metrics.jsonl", "executor-8002/train_metrics.jsonl"},
			want: map[string][]string{"_": {"planner", "executor"}}},
		{name: "several runs", files: []string{
			"sweep/lr-1e5/planner-8001/train_metrics.jsonl", "sweep/lr-1e5/executor-8002/train_metrics.jsonl",
			"baseline/train_metrics.jsonl", "exp-70000/train_metrics.jsonl"},
			want: map[string][]string{"sweep/lr-1e5": {"planner", "executor"}, "baseline": {"baseline"}, "exp-70000": {"exp-70000"}}},
		{name: "two agents of one name", files: []string{"a/planner-8001/train_metrics.jsonl", "a/planner-8003/train_metrics.jsonl"},
			want: map[string][]string{"a": {"planner-8001", "planner-8003"}}},
		{name: "too deep, samples, nats and hidden are skipped", files: []string{
			"a/b/c/d/train_metrics.jsonl", "x/samples/train_metrics.jsonl", "nats/train_metrics.jsonl", ".trash/train_metrics.jsonl",
			"a/b/c/train_metrics.jsonl"},
			want: map[string][]string{"a/b/c": {"c"}}},
		{name: "nothing yet", files: []string{"planner-8001/checkpoint.bin"}, want: map[string][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				writeFile(t, filepath.Join(root, f), "")
			}
			found, err := discover(root)
			if err != nil {
				t.Fatal(err)
			}
			got := make(map[string][]string)
			for dir, agents := range found {
				r := &run{id: runID(root, dir), dir: dir}
				r.setAgents(agents)
				for _, a := range r.agents {
					key := a.key
					if a.dir == root {
						key = "ROOT"
					}
					got[r.id] = append(got[r.id], key)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("runs %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDiscoverSkipsLinks checks that a metrics file or directory linked
// from outside the served directory is not read.
func TestDiscoverSkipsLinks(t *testing.T) {
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret-8001", rundir.MetricsFile), `{"step": 1}`+"\n")
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "planner-8001", rundir.MetricsFile), `{"step": 1}`+"\n")
	if err := os.Symlink(filepath.Join(outside, "secret-8001"), filepath.Join(root, "secret-8001")); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "linked-8002"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret-8001", rundir.MetricsFile), filepath.Join(root, "linked-8002", rundir.MetricsFile)); err != nil {
		t.Fatal(err)
	}
	found, err := discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]string{root: {filepath.Join(root, "planner-8001")}}; !reflect.DeepEqual(found, want) {
		t.Errorf("found %v, want %v", found, want)
	}
}

// loadRun reads the run at dir as the server does.
func loadRun(t *testing.T, dir string) *run {
	t.Helper()
	found, err := discover(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := &run{id: RootID, dir: dir}
	r.setAgents(found[dir])
	r.refresh()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r
}

// TestFixtureRows reads the fixture: the last row of a re-trained step
// holds, a torn line is counted, and the agents are named.
func TestFixtureRows(t *testing.T) {
	r := loadRun(t, fixtureDir)
	if len(r.agents) != 2 {
		t.Fatalf("%d agents, want 2", len(r.agents))
	}
	planner, executor := r.agents[0], r.agents[1]
	if planner.name != "planner" || executor.name != "executor" {
		t.Errorf("names %q, %q", planner.name, executor.name)
	}
	for _, a := range r.agents {
		var steps []int64
		for _, s := range a.steps {
			steps = append(steps, s.Step)
		}
		if len(steps) != fixtureSteps || !slices.IsSorted(steps) || steps[0] != 1 {
			t.Errorf("%s: steps %v, want 1..%d", a.key, steps, fixtureSteps)
		}
	}
	if planner.badLines != 0 || executor.badLines != 1 {
		t.Errorf("bad lines %d, %d, want 0, 1", planner.badLines, executor.badLines)
	}
	// The file's last rows of steps 6 and 7 are the re-trained ones.
	raw, err := os.ReadFile(filepath.Join(fixtureDir, "planner-8001", rundir.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	last := map[int64]Step{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
		s, err := parseStep([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		last[s.Step] = s
	}
	for _, s := range planner.steps {
		if *s.RewardMean != *last[s.Step].RewardMean {
			t.Errorf("step %d: reward %v, want the last row's %v", s.Step, *s.RewardMean, *last[s.Step].RewardMean)
		}
	}
	if got := planner.dropCounts; !reflect.DeepEqual(got, map[string]int64{"stale": 2, "tokens_over_limit": 1}) {
		t.Errorf("dropped %v", got)
	}
}

// TestRefreshFollowsTheWriter appends, truncates and rewrites a metrics
// file between refreshes.
func TestRefreshFollowsTheWriter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, rundir.MetricsFile)
	rows := func(steps ...int) string {
		var b strings.Builder
		for _, s := range steps {
			fmt.Fprintf(&b, `{"step": %d, "reward_mean": %d}`+"\n", s, s*10)
		}
		return b.String()
	}
	writeFile(t, path, rows(1, 2, 3))
	r := loadRun(t, dir)
	a := r.agents[0]
	check := func(what string, want ...int64) {
		t.Helper()
		var got []int64
		for _, s := range a.steps {
			got = append(got, s.Step)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: steps %v, want %v", what, got, want)
		}
	}
	check("first read", 1, 2, 3)
	rev := r.rev

	appendFile(t, path, rows(4)+`{"step": 5`)
	r.refresh()
	check("appended", 1, 2, 3, 4)
	if r.rev == rev {
		t.Error("the revision did not grow")
	}
	var fresh []int64
	for _, s := range a.steps {
		if s.seq > rev {
			fresh = append(fresh, s.Step)
		}
	}
	if !reflect.DeepEqual(fresh, []int64{4}) {
		t.Errorf("rows after revision %d: %v, want [4]", rev, fresh)
	}

	appendFile(t, path, `, "reward_mean": 50}`+"\n"+rows(3))
	r.refresh()
	check("a finished line and a re-trained step", 1, 2, 3, 4, 5)

	writeFile(t, path, rows(1))
	r.refresh()
	check("truncated", 1)

	rev = r.rev
	r.refresh()
	if r.rev != rev {
		t.Error("a refresh without news changed the revision")
	}
}

// TestThinOlder keeps the rows bounded, and the latest ones whole.
func TestThinOlder(t *testing.T) {
	a := &agent{}
	n := maxRows + 100
	for i := range n {
		a.put(Step{Step: int64(i)})
	}
	if len(a.steps) > maxRows {
		t.Errorf("%d rows kept, want at most %d", len(a.steps), maxRows)
	}
	if got := a.steps[len(a.steps)-1].Step; got != int64(n-1) {
		t.Errorf("last row %d, want %d", got, n-1)
	}
	if !slices.IsSortedFunc(a.steps, func(x, y Step) int { return int(x.Step - y.Step) }) {
		t.Error("rows out of order")
	}
}
