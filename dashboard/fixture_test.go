package dashboard

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/rundir"
)

var update = flag.Bool("update", false, "rewrite testdata/team-run from the fixture generator")

// fixtureDir is a two-agent run as `troupe swarm serve --agents
// planner:8001,executor:8002 --checkpoint-dir D` leaves it, with every
// file the dashboard reads.
const fixtureDir = "testdata/team-run"

// fixtureSteps is how many steps each agent of the fixture trained.
const fixtureSteps = 12

// TestFixtureUpToDate checks that testdata/team-run is what writeFixture
// writes (go test -run TestFixtureUpToDate -update rewrites it).
func TestFixtureUpToDate(t *testing.T) {
	if *update {
		if err := os.RemoveAll(fixtureDir); err != nil {
			t.Fatal(err)
		}
		writeFixture(t, fixtureDir)
		return
	}
	tmp := t.TempDir()
	writeFixture(t, tmp)
	err := filepath.WalkDir(tmp, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(tmp, path)
		want, _ := os.ReadFile(path)
		got, err := os.ReadFile(filepath.Join(fixtureDir, rel))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s differs from the generator's; run go test ./dashboard -run TestFixtureUpToDate -update", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// statsNames are rl.Stats's field names, which the rows carry as
// "stats.<Name>".
func statsNames() []string {
	var names []string
	ty := reflect.TypeFor[rl.Stats]()
	for i := range ty.NumField() {
		names = append(names, ty.Field(i).Name)
	}
	return names
}

// TestPanelsReadRealStats checks that every rl.Stats field a panel draws
// exists, so that a renamed field cannot empty a chart unnoticed.
func TestPanelsReadRealStats(t *testing.T) {
	have := make(map[string]bool)
	for _, n := range statsNames() {
		have[n] = true
	}
	for _, sec := range sections {
		for _, p := range sec.panels {
			for f := range strings.SplitSeq(p.fields, ", ") {
				if name, ok := strings.CutPrefix(f, "stats."); ok && !have[name] {
					t.Errorf("panel %s draws stats.%s, which rl.Stats lacks", p.metric, name)
				}
			}
		}
	}
}

// fixtureAgent is one agent of the fixture.
type fixtureAgent struct {
	name, dir string
	model     bool    // whether rows carry the "model" field
	skill     float64 // how fast its reward rises
	credit    float64 // its share of the team reward
	drops     []string
}

var fixtureAgents = []fixtureAgent{
	{name: "planner", dir: "planner-8001", model: true, skill: 0.05, credit: 0.55, drops: []string{"stale", "stale", "tokens_over_limit"}},
	{name: "executor", dir: "executor-8002", skill: 0.035, credit: 0.45},
}

var fixtureStart = time.Date(2025, 6, 2, 9, 30, 0, 0, time.UTC)

// writeFixture writes the two-agent run into dir, deterministically.
func writeFixture(t testing.TB, dir string) {
	t.Helper()
	for ai, fa := range fixtureAgents {
		rng := rand.New(rand.NewPCG(7, uint64(ai)))
		adir := filepath.Join(dir, fa.dir)
		var metrics []string
		var states struct{ claimed, ended, aborted, expired int64 }
		dropped := map[string]int64{}
		byState := map[int64]any{}
		for step := int64(1); step <= fixtureSteps; step++ {
			samples := fixtureSamples(rng, fa, step)
			row := fixtureRow(rng, fa, step, samples)
			states.claimed += 9
			states.ended += 8
			if step%4 == 0 {
				states.aborted++
			}
			if step%5 == 0 {
				states.expired++
			}
			if int(step) <= len(fa.drops) {
				d := fa.drops[step-1]
				dropped[d]++
				line := jsonLine(t, map[string]any{
					"time":       fixtureStart.Add(time.Duration(step)*37*time.Second - 5*time.Second).Format(time.RFC3339Nano),
					"episode_id": fmt.Sprintf("%s-e%03d-d", fa.name, step), "task_id": fmt.Sprintf("task-%03d", step), "reason": d,
				})
				appendFile(t, filepath.Join(adir, rundir.DroppedFile), line)
			}
			byState[step] = map[string]any{
				"claimed": states.claimed, "open": 1 + step%3, "ended": states.ended,
				"aborted": states.aborted, "expired": states.expired, "dropped": copyCounts(dropped),
			}
			row["episodes_by_state"] = byState[step]
			metrics = append(metrics, jsonLine(t, row))
			var lines []string
			for _, s := range samples {
				lines = append(lines, jsonLine(t, s))
			}
			writeFile(t, filepath.Join(adir, rundir.SampleFile(step)), strings.Join(lines, ""))
		}
		switch fa.name {
		case "planner":
			// A crash after step 7: the restarted server trained steps 6
			// and 7 again from its step-5 checkpoint; their last rows hold.
			var again []string
			for _, step := range []int64{6, 7} {
				samples := fixtureSamples(rng, fa, step)
				var lines []string
				for _, s := range samples {
					lines = append(lines, jsonLine(t, s))
				}
				writeFile(t, filepath.Join(adir, rundir.SampleFile(step)), strings.Join(lines, ""))
				row := fixtureRow(rand.New(rand.NewPCG(99, uint64(step))), fa, step, samples)
				row["episodes_by_state"] = byState[step]
				again = append(again, jsonLine(t, row))
			}
			metrics = append(metrics[:7], append(again, metrics[7:]...)...)
		case "executor":
			// A torn line, as a full disk leaves it.
			metrics = append(metrics[:3], append([]string{`{"step": 4, "reward_mean": 0.3` + "\n"}, metrics[3:]...)...)
		}
		writeFile(t, filepath.Join(adir, rundir.MetricsFile), strings.Join(metrics, ""))
	}
}

// fixtureSamples are an agent's episodes of a step: 2 tasks × 4 samples.
func fixtureSamples(rng *rand.Rand, fa fixtureAgent, step int64) []map[string]any {
	var out []map[string]any
	for task := range 2 {
		a, b := 10+rng.IntN(90), 10+rng.IntN(90)
		taskID := fmt.Sprintf("task-%03d-%d", step, task)
		zeroSpread := step%3 == 0 && task == 1 // every member of the group scores alike
		for k := range 4 {
			p := math.Min(0.95, 0.2+fa.skill*float64(step))
			correct := 0.0
			if rng.Float64() < p {
				correct = 1
			}
			format := math.Round((0.6+0.4*rng.Float64())*100) / 100
			length := -math.Round(0.1*rng.Float64()*100) / 100
			if zeroSpread {
				correct, format, length = 0, 1, 0
			}
			version := step - 1
			if k == 3 && step > 2 {
				version = step - 2 // sampled under the adapter before last
			}
			var call map[string]any
			if fa.name == "planner" {
				call = map[string]any{
					"messages": []map[string]string{
						{"role": "system", "content": "You are the planner of a two-agent team. Write a short numbered plan; the executor carries it out."},
						{"role": "user", "content": fmt.Sprintf("Compute %d × %d and report the result.", a, b)},
					},
					"completion":    fmt.Sprintf("1. Split %d into %d + %d.\n2. Multiply each part by %d.\n3. Add the two products.", b, b/10*10, b%10, a),
					"finish_reason": "stop",
				}
			} else {
				answer := a * b
				if correct == 0 {
					answer += 10 * (1 + rng.IntN(3))
				}
				call = map[string]any{
					"messages": []map[string]string{
						{"role": "system", "content": "You are the executor. Follow the plan exactly and end with 'Answer: <number>'."},
						{"role": "user", "content": fmt.Sprintf("Task: compute %d × %d.\nPlan:\n1. Split %d into %d + %d.\n2. Multiply each part by %d.\n3. Add the two products.", a, b, b, b/10*10, b%10, a)},
					},
					"completion":    fmt.Sprintf("%d × %d = %d\n%d × %d = %d\nAnswer: %d", a, b/10*10, a*(b/10*10), a, b%10, a*(b%10), answer),
					"finish_reason": "stop",
				}
			}
			reward := correct + 0.2*format + length
			out = append(out, map[string]any{
				"episode_id": fmt.Sprintf("%s-e%03d-%d%d", fa.name, step, task, k),
				"task_id":    taskID,
				"team_id":    fmt.Sprintf("team-%03d-%d%d", step, task, k),
				"reward":     math.Round(reward*1000) / 1000,
				"reward_components": map[string]float64{
					"correct": correct, "format": format, "length_penalty": length,
				},
				"version":     version,
				"completions": []map[string]any{call},
			})
		}
	}
	return out
}

// fixtureRow is the train_metrics.jsonl row of a step over its samples.
func fixtureRow(rng *rand.Rand, fa fixtureAgent, step int64, samples []map[string]any) map[string]any {
	var rewards []float64
	comps := map[string]float64{}
	var teams []string
	var stale, staleMax float64
	groups := map[string][]float64{}
	for _, s := range samples {
		r := s["reward"].(float64)
		rewards = append(rewards, r)
		for k, v := range s["reward_components"].(map[string]float64) {
			comps[k] += v / float64(len(samples))
		}
		teams = append(teams, s["team_id"].(string))
		lag := float64(step - 1 - s["version"].(int64))
		stale += lag / float64(len(samples))
		staleMax = math.Max(staleMax, lag)
		groups[s["task_id"].(string)] = append(groups[s["task_id"].(string)], r)
	}
	mean, std := meanStd(rewards)
	zero := 0
	for _, g := range groups {
		if _, sd := meanStd(g); sd == 0 {
			zero++
		}
	}
	for k, v := range comps {
		comps[k] = round4(v)
	}
	x := float64(step)
	rollout := 18 + 4*rng.Float64()
	train := 9 + 2*rng.Float64()
	syncS := 1.5 + rng.Float64()
	row := map[string]any{
		"step": step, "episodes": len(samples), "tasks": len(groups), "samples": len(samples),
		"reward_mean": round4(mean), "reward_std": round4(std), "duration_s": round4(train),
		"time":                   fixtureStart.Add(time.Duration(step) * 37 * time.Second).Format(time.RFC3339Nano),
		"episode_ids":            ids(samples),
		"completion_tokens_mean": round4(180 - 4*x + 10*rng.Float64()),
		"zero_spread_groups":     round4(float64(zero) / float64(len(groups))),
		"phase_s":                map[string]float64{"rollout": round4(rollout), "train": round4(train), "sync": round4(syncS)},
		"tokens_per_s":           round4(2400 + 60*x + 100*rng.Float64()),
		"staleness_mean":         round4(stale),
		"staleness_max":          staleMax,
		"reward_components":      comps,
		"team_ids":               teams,
		"credit":                 map[string]float64{"shared": round4(fa.credit + 0.01*rng.NormFloat64()), "own": round4(1 - fa.credit + 0.01*rng.NormFloat64())},
	}
	if fa.model {
		row["model"] = fa.name
	}
	stats := map[string]float64{
		"Loss": -0.02 + 0.01*rng.NormFloat64(), "PolicyLoss": -0.025 + 0.01*rng.NormFloat64(),
		"KL": 0.002 * x * (1 + 0.2*rng.Float64()), "ClipFrac": 0.04 + 0.02*rng.Float64(),
		"Entropy": 1.2 - 0.04*x + 0.05*rng.Float64(), "Ratio": 1 + 0.01*rng.NormFloat64(),
		"GradNorm": 0.8 + 0.3*rng.Float64(), "RewardMean": mean, "RewardStd": std,
		"AdvStd": 0.9, "Staleness": stale, "Samples": float64(len(samples)),
		"Tokens": float64(len(samples)) * 170, "SkippedGroups": float64(zero), "Steps": 1,
	}
	for _, name := range statsNames() {
		row["stats."+name] = round4(stats[name])
	}
	return row
}

func ids(samples []map[string]any) []string {
	var out []string
	for _, s := range samples {
		out = append(out, s["episode_id"].(string))
	}
	return out
}

func meanStd(x []float64) (mean, std float64) {
	for _, v := range x {
		mean += v / float64(len(x))
	}
	for _, v := range x {
		std += (v - mean) * (v - mean) / float64(len(x))
	}
	return mean, math.Sqrt(std)
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

func copyCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func jsonLine(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func writeFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}
