package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/troupe-ml/troupe/eval"
	rlmetrics "github.com/troupe-ml/troupe/rl/metrics"
)

// stepRow is one GRPO round: each model's mean reward and server step.
type stepRow struct {
	Step                     int
	RewardSmall, RewardLarge float64
	GlobalSmall, GlobalLarge int64
	Seconds                  float64
}

// report is what a run writes: report.md, rewards.png, config.yaml, differences.json.
type report struct {
	opts                 options
	lossSmall, lossLarge float64
	nTrain, nTest        int
	// Each local server's episodes trained on, and dropped or left over.
	trained, untrained      [2]int64
	aloneBefore, flowBefore metrics
	aloneAfter, flowAfter   metrics
	steps                   []stepRow
	seconds                 float64
	detFixed                detScore // the detector after RL on the warm-start row's inputs
	sentences               []string // the evaluated English, in the metrics' order
}

// plot draws each model's mean GRPO reward per step.
func (r *report) plot(path string) error {
	s := rlmetrics.Series{Name: "small model (translation quality)"}
	l := rlmetrics.Series{Name: "larger model (term detection)"}
	for _, row := range r.steps {
		s.X, s.Y = append(s.X, float64(row.Step)), append(s.Y, row.RewardSmall)
		l.X, l.Y = append(l.X, float64(row.Step)), append(l.Y, row.RewardLarge)
	}
	return rlmetrics.PlotPNG(path, "GRPO training reward per step (each model's own grader)", "step", "mean normalised reward", s, l)
}

// row is a system's row of the report's table (flow: the workflow's).
func row(name string, m metrics, flow bool) string {
	s := fmt.Sprintf("| %s | %.4f | %.3f | %.3f | %.3f | %.4f |", name, m.ChrF, m.PlaceholderAcc, m.TermAcc, m.RuleViolations, m.Quality)
	if !flow {
		return s + " – | – | – | – | – | – |"
	}
	return s + fmt.Sprintf(" %.3f | %.3f | %.3f | %.3f | %.4f | %.3f |", m.DetP, m.DetR, m.DetF1, m.JSONValid, m.Detection, m.FinalTagRate)
}

// write writes the report, its plot, config.yaml and differences.json to dir.
func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if len(r.steps) > 0 {
		if err := r.plot(filepath.Join(dir, "rewards.png")); err != nil {
			return err
		}
	}
	o := r.opts
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(o.Config.String()), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Translation workflow report\n\n")
	if o.quick {
		fmt.Fprintf(&b, "**Smoke test (-quick)**: tiny models and a few GRPO steps; the figures check that the pipeline runs, not the workflow.\n\n")
	}
	fmt.Fprintf(&b, "Settings (`config.yaml` beside this report; `-config %s` repeats the run):\n\n```yaml\n%s```\n\n", filepath.Join(dir, "config.yaml"), o.Config.String())
	split := map[string]string{"val": "validation", "test": "test"}[o.EvalSplit]
	fmt.Fprintf(&b, "Tasks: %d train, %d %s (never trained on). Wall time %.1f s.\n\n", r.nTrain, r.nTest, split, r.seconds)
	if r.trained != [2]int64{} {
		fmt.Fprintf(&b, "GRPO trained on %d episodes of the small model and %d of the larger one; %d and %d finished episodes were dropped or left untrained.\n\n", r.trained[0], r.trained[1], r.untrained[0], r.untrained[1])
	}
	fmt.Fprintf(&b, "Warm-start final loss (mean of last 20 steps; -1 = loaded from cache): small %.3f, large %.3f\n\n", r.lossSmall, r.lossLarge)
	fmt.Fprintf(&b, "## %s split (greedy decoding)\n\n", strings.ToUpper(split[:1])+split[1:])
	fmt.Fprintf(&b, "| system | chrF | placeholder acc | term acc | rule violations/sent | quality reward | det P | det R | det F1 | JSON valid | detection reward | <final_result> rate |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintln(&b, row("agent 1 alone (warm start)", r.aloneBefore, false))
	fmt.Fprintln(&b, row("workflow, no RL (warm start)", r.flowBefore, true))
	fmt.Fprintln(&b, row("agent 1 alone (after RL)", r.aloneAfter, false))
	fmt.Fprintln(&b, row("workflow after RL", r.flowAfter, true))
	verdict := func(a, b float64) string { return map[bool]string{true: "beats", false: "does not beat"}[a > b] }
	fmt.Fprintf(&b, "\nAfter RL the workflow's final translations %s agent 1 alone on chrF (%.4f vs %.4f) and %s it on terminology accuracy (%.3f vs %.3f).\n",
		verdict(r.flowAfter.ChrF, r.aloneAfter.ChrF), r.flowAfter.ChrF, r.aloneAfter.ChrF, verdict(r.flowAfter.TermAcc, r.aloneAfter.TermAcc), r.flowAfter.TermAcc, r.aloneAfter.TermAcc)
	fmt.Fprintf(&b, "\nEach model's own reward, warm start → after RL: small model, agent 3's final translation (quality grader) %.4f → %.4f; larger model (detection grader) %.4f → %.4f. ",
		r.flowBefore.Quality, r.flowAfter.Quality, r.flowBefore.Detection, r.flowAfter.Detection)
	fmt.Fprintf(&b, "On the warm-start row's inputs, so that only the detector differs (agent 1's rough translations move with the small model's RL), the detector's reward is %.4f → %.4f (precision %.3f → %.3f, recall %.3f → %.3f).\n\n",
		r.flowBefore.Detection, r.detFixed.Detection, r.flowBefore.DetP, r.detFixed.P, r.flowBefore.DetR, r.detFixed.R)
	fmt.Fprintf(&b, "A string-matching glossary checker in agent 2's place (every glossary entry of agent 2's prompt whose rendering the rough translation lacks) scores %.4f at the warm start (P / R %.3f / %.3f). Agent 3's answers as written, without the client's guard: workflow chrF %.4f → %.4f, term acc %.3f → %.3f.\n\n",
		r.flowBefore.CheckerDetection, r.flowBefore.CheckerP, r.flowBefore.CheckerR, r.flowBefore.Agent3ChrF, r.flowAfter.Agent3ChrF, r.flowBefore.Agent3TermAcc, r.flowAfter.Agent3TermAcc)
	if len(r.flowBefore.chrf) == len(r.flowAfter.chrf) && len(r.flowAfter.chrf) > 0 {
		fmt.Fprintf(&b, "Paired bootstrap over the %d sentences (%d resamples, 95 %% intervals; they cover which sentences were drawn, not the RL phase's own randomness: pool runs of several rl-seed for that, -pool):\n\n| difference (mean over sentences) | estimate [95 %% interval] |\n|---|---|\n", len(r.flowAfter.chrf), bootstrapResamples)
		for _, x := range r.differences() {
			fmt.Fprintf(&b, "| %s | %s |\n", x.name, eval.PairedBootstrap(x.a, x.b, bootstrapResamples, o.Seed))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "## Examples (after RL)\n\n| source | reference | agent 1 | agent 2 | agent 3 |\n|---|---|---|---|---|\n")
	esc := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }
	for _, ex := range r.flowAfter.Examples {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", esc(ex[0]), esc(ex[1]), esc(ex[2]), esc(ex[3]), esc(ex[4]))
	}
	fmt.Fprintf(&b, "\n## GRPO steps (each model's own grader score on its sampled rollouts)\n\n![rewards](rewards.png)\n\n| step | reward small | server step | reward large | server step | seconds |\n|---|---|---|---|---|---|\n")
	for _, s := range r.steps {
		fmt.Fprintf(&b, "| %d | %.4f | %d | %.4f | %d | %.1f |\n", s.Step, s.RewardSmall, s.GlobalSmall, s.RewardLarge, s.GlobalLarge, s.Seconds)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if len(r.sentences) == len(r.flowAfter.chrf) && len(r.sentences) > 0 {
		return writeDifferences(filepath.Join(dir, differencesFile), r.sentences, r.differences())
	}
	return nil
}

// bootstrapResamples is the number of resamples behind every interval.
const bootstrapResamples = 2000

// diffRow is one headline difference, a[i] − b[i] per sentence (key: its JSON column).
type diffRow struct {
	key, name string
	a, b      []float64
}

// differences are the report's headline differences, in its and differences.json's order.
func (r *report) differences() []diffRow {
	b, a := r.flowBefore, r.flowAfter
	rows := []diffRow{
		{"chrf_margin", "chrF: workflow after RL − agent 1 alone after RL", a.chrf, r.aloneAfter.chrf},
		{"chrf_margin_warm", "chrF: workflow − agent 1 alone, both at the warm start", b.chrf, r.aloneBefore.chrf},
		{"chrf_margin_agent3", "chrF: workflow after RL with agent 3's output as written (no guard) − agent 1 alone after RL", a.agent3ChrF, r.aloneAfter.chrf},
		{"agent3_reward", "agent 3's own reward: after RL − warm start", a.quality, b.quality},
		{"detector_reward", "detector's own reward: after RL − warm start", a.detection, b.detection},
	}
	if len(r.detFixed.sent) == len(a.chrf) {
		rows = append(rows, diffRow{"detector_reward_fixed", "detector's own reward on the warm start's inputs: after RL − warm start", r.detFixed.sent, b.detection})
	}
	return rows
}
