package dashboard

import (
	"cmp"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troupe-ml/troupe/swarm/rundir"
)

// maxDepth is how many directories below the run directory a metrics file
// may lie.
const maxDepth = 3

// maxRows bounds the rows kept per agent: beyond it every other of the
// older rows is let go, so a long run keeps its shape in bounded memory.
const maxRows = 1 << 14

// maxDropsKept is how many of the latest dropped episodes are kept.
const maxDropsKept = 50

// RootID is the run ID of the directory the dashboard serves, when that
// directory itself holds a run.
const RootID = "_"

// portSuffix matches an agent directory "<name>-<port>".
var portSuffix = regexp.MustCompile(`^(.+)-([0-9]{1,5})$`)

// agentDirName splits an agent directory's name into the agent's name and
// its port (0 when the name has no "-<port>" suffix).
func agentDirName(base string) (name string, port int) {
	m := portSuffix.FindStringSubmatch(base)
	if m == nil {
		return base, 0
	}
	p, _ := strconv.Atoi(m[2])
	if p < 1 || p > 65535 {
		return base, 0
	}
	return m[1], p
}

// agent is one agent of a run: its files and what was read of them.
type agent struct {
	key  string // unique in the run; the URL names the agent by it
	name string // the rows' model field, else key
	dir  string // absolute
	port int

	metrics, dropped tail
	steps            []Step // sorted by Step, one row per step (the last read)
	drops            []Dropped
	dropCounts       map[string]int64
	badLines         int // lines of the metrics file skipped as unreadable
	badDrops         int // lines of the dropped file skipped as unreadable
}

// run is one run: a directory whose agents trained side by side.
type run struct {
	id  string
	dir string // absolute

	mu        sync.Mutex
	agents    []*agent // by port, then key
	rev       uint64   // bumped on every change; rows carry the rev they came with
	refreshed time.Time
	err       error // the last read error, if any
}

// discover walks root for metrics files and groups their directories into
// runs. Symbolic links are not followed, so nothing outside root is read.
func discover(root string) (map[string][]string, error) {
	runs := make(map[string][]string) // run directory → agent directories
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil // an unreadable subdirectory hides only itself
		}
		rel, _ := filepath.Rel(root, path)
		depth := 0
		if rel != "." {
			depth = strings.Count(rel, string(filepath.Separator)) + 1
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (depth > maxDepth || name == rundir.SamplesDir || name == "nats" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != rundir.MetricsFile || !d.Type().IsRegular() {
			return nil
		}
		dir := filepath.Dir(path)
		runDir := dir
		if _, port := agentDirName(filepath.Base(dir)); port != 0 && dir != root {
			runDir = filepath.Dir(dir)
		}
		runs[runDir] = append(runs[runDir], dir)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dashboard: scanning %s: %w", root, err)
	}
	return runs, nil
}

// runID names a run directory in URLs: its path below root with slashes,
// or RootID for root itself.
func runID(root, dir string) string {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." {
		return RootID
	}
	return filepath.ToSlash(rel)
}

// setAgents adds the agents of dirs that r does not have yet and gives
// every agent a key unique in the run. Called with r.mu held.
func (r *run) setAgents(dirs []string) {
	changed := false
	for _, dir := range dirs {
		if slices.ContainsFunc(r.agents, func(a *agent) bool { return a.dir == dir }) {
			continue
		}
		name, port := agentDirName(filepath.Base(dir))
		r.agents = append(r.agents, &agent{
			key: name, name: name, dir: dir, port: port,
			metrics:    tail{path: filepath.Join(dir, rundir.MetricsFile)},
			dropped:    tail{path: filepath.Join(dir, rundir.DroppedFile)},
			dropCounts: make(map[string]int64),
		})
		changed = true
	}
	if !changed {
		return
	}
	slices.SortFunc(r.agents, func(a, b *agent) int {
		return cmp.Or(cmp.Compare(a.port, b.port), cmp.Compare(a.key, b.key), cmp.Compare(a.dir, b.dir))
	})
	seen := make(map[string]int)
	for _, a := range r.agents {
		a.key, _ = agentDirName(filepath.Base(a.dir))
		seen[a.key]++
	}
	for _, a := range r.agents {
		if seen[a.key] > 1 {
			a.key = filepath.Base(a.dir) // two agents of one name on two ports
		}
	}
	r.rev++
}

// refresh reads what the run's files gained since the last call.
func (r *run) refresh() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshed = time.Now()
	r.err = nil
	rev := r.rev + 1
	changed := false
	for _, a := range r.agents {
		long, err := a.metrics.read(func() {
			// Truncated or replaced: what the file says now holds.
			a.steps, a.badLines, changed = nil, 0, true
		}, func(line []byte) {
			s, err := parseStep(line)
			if err != nil {
				a.badLines++
				changed = true
				return
			}
			s.seq = rev
			a.put(s)
			changed = true
		})
		a.badLines += long
		changed = changed || long > 0
		if err != nil {
			r.err = fmt.Errorf("dashboard: reading %s: %w", a.metrics.path, err)
		}
		long, err = a.dropped.read(func() {
			a.drops, a.dropCounts, a.badDrops, changed = nil, make(map[string]int64), 0, true
		}, func(line []byte) {
			d, err := parseDropped(line)
			if err != nil {
				a.badDrops++
				changed = true
				return
			}
			a.drop(d)
			changed = true
		})
		a.badDrops += long
		changed = changed || long > 0
		if err != nil {
			r.err = fmt.Errorf("dashboard: reading %s: %w", a.dropped.path, err)
		}
		for i := len(a.steps) - 1; i >= 0; i-- {
			if a.steps[i].Model != "" {
				a.name = a.steps[i].Model
				break
			}
		}
	}
	if changed {
		r.rev = rev
	}
}

// put stores s, replacing a row of the same step: after a crash a step is
// trained again and its last row holds.
func (a *agent) put(s Step) {
	n := len(a.steps)
	if n == 0 || a.steps[n-1].Step < s.Step {
		a.steps = append(a.steps, s)
	} else if i, found := slices.BinarySearchFunc(a.steps, s.Step, func(x Step, t int64) int { return cmp.Compare(x.Step, t) }); found {
		a.steps[i] = s
	} else {
		a.steps = slices.Insert(a.steps, i, s)
	}
	if len(a.steps) > maxRows {
		a.steps = thinOlder(a.steps)
	}
}

// thinOlder lets go of every other row in the older half of rows.
func thinOlder(rows []Step) []Step {
	half := len(rows) / 2
	out := rows[:0]
	for i, s := range rows {
		if i >= half || i%2 == 0 {
			out = append(out, s)
		}
	}
	clear(rows[len(out):])
	return out
}

// drop records a dropped episode.
func (a *agent) drop(d Dropped) {
	a.dropCounts[d.Reason]++
	a.drops = append(a.drops, d)
	if len(a.drops) > maxDropsKept {
		a.drops = slices.Delete(a.drops, 0, len(a.drops)-maxDropsKept)
	}
}

// lastStep is the agent's latest step, or -1 before its first.
func (a *agent) lastStep() int64 {
	if len(a.steps) == 0 {
		return -1
	}
	return a.steps[len(a.steps)-1].Step
}

// agent returns the agent named key.
func (r *run) agent(key string) *agent {
	for _, a := range r.agents {
		if a.key == key {
			return a
		}
	}
	return nil
}
