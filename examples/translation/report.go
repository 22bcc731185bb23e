package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

type stepRow struct {
	Step                     int
	RewardSmall, RewardLarge float64
	GlobalSmall, GlobalLarge int64
	Seconds                  float64
}

type report struct {
	opts                 options
	lossSmall, lossLarge float64
	nTrain, nTest        int
	nHeldOut             int   // RL tasks held out of agent 2's warm start (-rl-holdout), of every warm start (-rl-split) or of -rl-crossfit's second small model
	crossGroups          int64 // GRPO groups given -rl-crossfit's inputs
	// branchGroups counts -branch-large's GRPO groups whose greedy answer
	// had a branch position; branchBetter those where another token there
	// beat the greedy one.
	branchGroups, branchBetter int64
	// trained and untrained count each local server's finished training
	// episodes that a GRPO step used, and those it dropped or still held
	// when the RL phase ended (0 unless its group size is wrong).
	trained, untrained      [2]int64
	aloneBefore, flowBefore metrics
	aloneAfter, flowAfter   metrics
	steps                   []stepRow
	seconds                 float64
	selection               *selector // nil without -select-every
	// detFixed is the detector after RL on the warm-start row's inputs.
	detFixed detScore
	// sentences are the English sources of the evaluated sentences, in
	// the order of the metrics' per-sentence figures (differences.tsv).
	sentences []string
	// calBefore and calAfter are agent 2's first decision measured at the
	// warm start and after RL on the warm start's inputs (-calibration).
	calBefore, calAfter *calibration
}

func (r *report) plot(path string) error {
	p := plot.New()
	p.Title.Text = "GRPO training reward per step (each model's own grader)"
	p.X.Label.Text = "step"
	p.Y.Label.Text = "mean normalised reward"
	var s, l plotter.XYs
	for _, row := range r.steps {
		s = append(s, plotter.XY{X: float64(row.Step), Y: row.RewardSmall})
		l = append(l, plotter.XY{X: float64(row.Step), Y: row.RewardLarge})
	}
	ls, err := plotter.NewLine(s)
	if err != nil {
		return err
	}
	ll, err := plotter.NewLine(l)
	if err != nil {
		return err
	}
	ll.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	p.Add(ls, ll)
	p.Legend.Add("small model (translation quality)", ls)
	p.Legend.Add("larger model (term detection)", ll)
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

func row(name string, m metrics, flow bool) string {
	s := fmt.Sprintf("| %s | %.4f | %.3f | %.3f | %.3f | %.4f |", name, m.ChrF, m.PlaceholderAcc, m.TermAcc, m.RuleViolations, m.Quality)
	if flow {
		s += fmt.Sprintf(" %.3f | %.3f | %.3f | %.3f | %.4f | %.3f |", m.DetP, m.DetR, m.DetF1, m.JSONValid, m.Detection, m.FinalTagRate)
	} else {
		s += " – | – | – | – | – | – |"
	}
	return s
}

func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	png := filepath.Join(dir, "rewards.png")
	if len(r.steps) > 0 {
		if err := r.plot(png); err != nil {
			return err
		}
	}
	var b strings.Builder
	o := r.opts
	fmt.Fprintf(&b, "# Translation workflow report\n\n")
	fmt.Fprintf(&b, "Settings (every flag as given; -quick overrides sizes and steps, -sweep sets -shared-reward per arm): `%s`\n\n", o.settings)
	det := "its own detection grader"
	if o.sharedReward {
		det = "the final translation's quality (shared reward)"
	}
	var scst []string
	if o.scstLarge {
		scst = append(scst, "agent 2")
	}
	if o.scstSmall {
		scst = append(scst, "agent 3")
	}
	baselines := ""
	if len(scst) > 0 {
		baselines = fmt.Sprintf(" (self-critical for %s: minus the greedy answer's score, not group-centred)", strings.Join(scst, " and "))
	}
	fmt.Fprintf(&b, "RL phase: %d GRPO steps of %d tasks × %d repeats per server; small model %s lr %g, KL β %g; larger model %s lr %g%s, KL β %g, %d tasks per step, %d pass(es) per batch, %s-level loss%s; rollout temperature %g (agent 2: %g)%s; agent 2 rewarded by %s; difference rewards %v%s; agent 1's turns trained %v.\n\n",
		o.steps, o.batch, o.repeats, o.rlOpt, o.rlLR, o.klSmall, o.rlOptLarge, o.rlLRLarge, map[bool]string{true: " (cosine to 0)"}[o.cosineLarge], o.klLarge, o.batchLarge, o.epochsLarge, o.aggLarge, map[bool]string{true: " on above-mean answers only"}[o.positiveLarge], o.rlTemp, o.rlTempLarge, map[bool]string{true: ", samples scored at their sampling temperature (-tempered)"}[o.tempered], det+vineDesc(o.rolloutOptions)+r.branchDesc(), o.counterfactual, baselines, o.jointSmall || !o.noTrainRough)
	split := map[string]string{"val": "validation", "train": "train"}[r.opts.evalSplit]
	if split == "" {
		split = "test"
	}
	held := ""
	switch {
	case r.nHeldOut > 0 && r.opts.rlSplit > 0:
		held = fmt.Sprintf(" (RL draws from the %d of them held out of every warm start (-rl-split %g))", r.nHeldOut, r.opts.rlSplit)
	case r.nHeldOut > 0 && r.opts.rlCrossfit > 0:
		held = fmt.Sprintf(" (RL draws from %d of them, which agents 2 and 3 see translated by a small model trained without them (-rl-crossfit %g; %d GRPO groups had those inputs))", r.nHeldOut, r.opts.rlCrossfit, r.crossGroups)
	case r.nHeldOut > 0:
		held = fmt.Sprintf(" (RL draws from the %d of them held out of agent 2's warm start (-rl-holdout %g))", r.nHeldOut, r.opts.rlHoldout)
	}
	seen := "never trained on"
	if split == "train" {
		seen = "every 8th, sentences the warm starts learned from: a diagnostic, not held out"
	}
	fmt.Fprintf(&b, "Tasks: %d train%s, %d %s (%s split, %s). Wall time %.1f s.\n\n", r.nTrain, held, r.nTest, split, split, seen, r.seconds)
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
	verdict := func(a, b float64) string {
		if a > b {
			return "beats"
		}
		return "does not beat"
	}
	fmt.Fprintf(&b, "\nAfter RL the workflow's final translations %s agent 1 alone on chrF (%.4f vs %.4f) and %s it on terminology accuracy (%.3f vs %.3f); agent 1 alone at the warm start: chrF %.4f, term acc %.3f.\n",
		verdict(r.flowAfter.ChrF, r.aloneAfter.ChrF), r.flowAfter.ChrF, r.aloneAfter.ChrF, verdict(r.flowAfter.TermAcc, r.aloneAfter.TermAcc), r.flowAfter.TermAcc, r.aloneAfter.TermAcc, r.aloneBefore.ChrF, r.aloneBefore.TermAcc)
	fmt.Fprintf(&b, "\nEach model's own reward on the %s split, warm start → after RL: small model, agent 3's final translation (quality grader) %.4f → %.4f and agent 1's rough translation (the same grader; its reward unless -joint-small) %.4f → %.4f; larger model (detection grader) %.4f → %.4f.\n\n",
		split, r.flowBefore.Quality, r.flowAfter.Quality, r.aloneBefore.Quality, r.aloneAfter.Quality, r.flowBefore.Detection, r.flowAfter.Detection)
	if r.flowAfter.N > 0 {
		fmt.Fprintf(&b, "The larger model's figure after RL mixes two changes: the detector's own and its inputs' (agent 1's rough translations move with the small model's RL). On the warm-start row's inputs, so that only the detector differs, its reward is %.4f → %.4f (precision %.3f → %.3f, recall %.3f → %.3f).\n\n",
			r.flowBefore.Detection, r.detFixed.Detection, r.flowBefore.DetP, r.detFixed.P, r.flowBefore.DetR, r.detFixed.R)
	}
	if r.flowAfter.N > 0 && len(r.flowBefore.sent) == len(r.flowAfter.sent) {
		r.writeIntervals(&b, split)
	}
	if sel := r.selection; sel != nil {
		fmt.Fprintf(&b, "### Checkpoint selection (validation split, %d sentences)\n\nEach model keeps the RL checkpoint with its best own reward on validation sentences (step 0: the warm start); the figures above evaluate the kept checkpoints. Small model: step %d; larger model: step %d.\n\n| step | agent 1 quality | agent 3 quality | small model (mean) | detection |\n|---|---|---|---|---|\n",
			len(sel.tasks), sel.best[0].step, sel.best[1].step)
		for _, t := range sel.trace {
			fmt.Fprintf(&b, "| %d | %.4f | %.4f | %.4f | %.4f |\n", t.Step, t.Agent1, t.Agent3, t.Small, t.Det)
		}
		if r.opts.evalSplit == "val" {
			fmt.Fprintf(&b, "\nThe report evaluates the validation split too: its first %d sentences chose the checkpoints, so the after-RL rows above are optimistic.\n", len(sel.tasks))
		}
		b.WriteString("\n")
	}
	rows := []struct {
		name string
		m    metrics
	}{{"warm start", r.flowBefore}, {"after RL", r.flowAfter}}
	fmt.Fprintf(&b, "### Agent 3 diagnostics\n\n| workflow | detector says [] | final = rough when [] | chrF(final, rough) | chrF with true corrections | term acc with true corrections | sentences with a true error | their chrF: rough → final with true corrections |\n|---|---|---|---|---|---|---|---|\n")
	for _, x := range rows {
		fmt.Fprintf(&b, "| %s | %.3f | %.3f | %.4f | %.4f | %.3f | %d | %.4f → %.4f |\n", x.name, x.m.DetEmpty, x.m.CopyEmpty, x.m.Fidelity, x.m.OracleChrF, x.m.OracleTermAcc, x.m.OracleErrN, x.m.OracleErrRough, x.m.OracleErrFinal)
	}
	if o.rawCorrections {
		fmt.Fprintf(&b, "\nAgent 3 is given agent 2's answer as written (-raw-corrections).\n")
	} else {
		fmt.Fprintf(&b, "\nThe client validates agent 2's answer before agent 3 sees it (invalid JSON becomes [], items whose word is not in the English or whose rendering the rough translation already has are dropped). With agent 2's answer as written instead, the workflow's chrF would be %.4f at the warm start and %.4f after RL (<final_result> rate %.3f and %.3f).\n",
			r.flowBefore.RawChrF, r.flowAfter.RawChrF, r.flowBefore.RawTagRate, r.flowAfter.RawTagRate)
	}
	fmt.Fprintf(&b, "\nThe last two columns give agent 3 the true corrections (the terms the rough translation lacks) instead of agent 2's: what a perfect detector would give.\n\n")
	guard := "on: the workflow rows deliver the guarded translations"
	if !o.guardFinal {
		guard = "off (-guard-final=false): the workflow rows deliver agent 3's translations as written"
	}
	fmt.Fprintf(&b, "The client's guard on agent 3 (guardFinal) keeps its final translation only where agent 2's validated answer asked for corrections, the translation contains every correction's rendering and its edit distance to the rough translation it was given is at most twice the corrections' size, and otherwise falls back to agent 1's rough translation; it is %s. Agent 3's own reward (the quality column) is its output as written either way. With agent 3's output as written the workflow's chrF is %.4f at the warm start and %.4f after RL (term acc %.3f and %.3f); with the guard %.4f and %.4f (term acc %.3f and %.3f).\n\n",
		guard, r.flowBefore.Agent3ChrF, r.flowAfter.Agent3ChrF, r.flowBefore.Agent3TermAcc, r.flowAfter.Agent3TermAcc,
		r.flowBefore.GuardChrF, r.flowAfter.GuardChrF, r.flowBefore.GuardTermAcc, r.flowAfter.GuardTermAcc)
	fmt.Fprintf(&b, "Agent 2 against a string-matching glossary checker in its place (it reports every glossary entry of agent 2's prompt whose rendering the rough translation lacks; it cannot tell which entries the reference uses):\n\n| workflow | agent 2 P / R | agent 2's detection reward | checker P / R | checker's detection reward | chrF: agent 3 with agent 2's / the checker's corrections | term acc: with agent 2's / the checker's |\n|---|---|---|---|---|---|---|\n")
	for _, x := range rows {
		fmt.Fprintf(&b, "| %s | %.3f / %.3f | %.4f | %.3f / %.3f | %.4f | %.4f / %.4f | %.3f / %.3f |\n", x.name, x.m.DetP, x.m.DetR, x.m.Detection, x.m.CheckerP, x.m.CheckerR, x.m.CheckerDetection, x.m.ChrF, x.m.CheckerChrF, x.m.TermAcc, x.m.CheckerTermAcc)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "Where the workflow's chrF differs from agent 1 alone's (mean over all sentences of chrF(final) − chrF(rough), split by what agent 2 said):\n\n| workflow | agent 2 said [] | corrections, no false alarm | a false alarm or invalid JSON | total |\n|---|---|---|---|---|\n")
	for _, x := range rows {
		fmt.Fprintf(&b, "| %s | %+.4f | %+.4f | %+.4f | %+.4f |\n", x.name, x.m.GainEmpty, x.m.GainTrue, x.m.GainFalse, x.m.GainEmpty+x.m.GainTrue+x.m.GainFalse)
	}
	b.WriteString("\n")
	if r.calBefore != nil {
		if err := r.writeCalibration(&b, dir, split); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b, "## Examples (%s split, after RL)\n\n| source | reference | agent 1 | agent 2 | agent 3 |\n|---|---|---|---|---|\n", split)
	esc := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }
	for _, ex := range r.flowAfter.Examples {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", esc(ex[0]), esc(ex[1]), esc(ex[2]), esc(ex[3]), esc(ex[4]))
	}
	fmt.Fprintf(&b, "\n## GRPO steps (training reward of the sampled rollouts)\n\n![rewards](rewards.png)\n\n| step | reward small | server step | reward large | server step | seconds |\n|---|---|---|---|---|---|\n")
	for _, s := range r.steps {
		fmt.Fprintf(&b, "| %d | %.4f | %d | %.4f | %d | %.1f |\n", s.Step, s.RewardSmall, s.GlobalSmall, s.RewardLarge, s.GlobalLarge, s.Seconds)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if len(r.sentences) == len(r.flowAfter.sent) && len(r.sentences) > 0 {
		return writeDifferences(filepath.Join(dir, differencesFile), r.sentences, r.differences())
	}
	return nil
}

// writeIntervals writes the report's paired bootstrap intervals
// (pairedBootstrap): how far the evaluated sentences let each headline
// difference be told from zero. They cover the choice of sentences only,
// not the RL phase's own randomness (-rl-seed), which moves the after-RL
// figures too.
func (r *report) writeIntervals(b *strings.Builder, split string) {
	n := len(r.flowAfter.sent)
	fmt.Fprintf(b, "Paired bootstrap over the %d %s sentences (%d resamples, 95 %% percentile intervals; they cover which sentences were drawn, not the RL phase's own randomness, see -rl-seed):\n\n| difference (mean over sentences) | estimate [95 %% interval] |\n|---|---|\n",
		n, split, bootstrapResamples)
	for _, x := range r.differences() {
		fmt.Fprintf(b, "| %s | %s |\n", x.name, pairedBootstrap(x.a, x.b, bootstrapResamples, r.opts.seed))
	}
	b.WriteString("\n")
}

// diffRow is one headline difference of the report, a[i] − b[i] per
// evaluated sentence; key names its column in differences.tsv.
type diffRow struct {
	key, name string
	a, b      []float64
}

// differences are the report's headline differences, in the order of its
// interval table (writeIntervals) and of differences.tsv's columns.
func (r *report) differences() []diffRow {
	chrf := func(m metrics) []float64 { return field(m.sent, chrfOf) }
	rows := []diffRow{
		{"chrf_margin", "chrF: workflow after RL − agent 1 alone after RL", chrf(r.flowAfter), chrf(r.aloneAfter)},
		{"chrf_vs_warm_alone", "chrF: workflow after RL − agent 1 alone at the warm start", chrf(r.flowAfter), chrf(r.aloneBefore)},
		{"chrf_margin_warm", "chrF: workflow − agent 1 alone, both at the warm start", chrf(r.flowBefore), chrf(r.aloneBefore)},
		{"chrf_margin_agent3", "chrF: workflow after RL with agent 3's output as written (no guard) − agent 1 alone after RL", field(r.flowAfter.sent, agent3Of), chrf(r.aloneAfter)},
		{"chrf_margin_guarded", "chrF: workflow after RL with the client's guard on agent 3 − agent 1 alone after RL", field(r.flowAfter.sent, guardOf), chrf(r.aloneAfter)},
		{"agent3_reward", "agent 3's own reward: after RL − warm start", field(r.flowAfter.sent, qualityOf), field(r.flowBefore.sent, qualityOf)},
		{"detector_reward", "detector's own reward: after RL − warm start", field(r.flowAfter.sent, detOf), field(r.flowBefore.sent, detOf)},
	}
	if len(r.detFixed.sent) == len(r.flowAfter.sent) {
		rows = append(rows, diffRow{"detector_reward_fixed", "detector's own reward on the warm start's inputs: after RL − warm start", r.detFixed.sent, field(r.flowBefore.sent, detOf)})
	}
	return rows
}

// writeCalibration writes the -calibration section and calibration.png.
func (r *report) writeCalibration(b *strings.Builder, dir, split string) error {
	cals, names := []*calibration{r.calBefore}, []string{"warm start"}
	if r.calAfter != nil {
		cals, names = append(cals, r.calAfter), append(names, "after RL")
	}
	if err := plotCalibration(filepath.Join(dir, "calibration.png"), cals, names); err != nil {
		return err
	}
	fmt.Fprintf(b, "## Agent 2's first decision (-calibration)\n\n")
	fmt.Fprintf(b, "On the warm start's inputs (%d %s sentences). Agent 2's first answer token is either \"[]\" or opens a list. A bias b is added to log p(\"[]\") at that position only; the greedy reward is that of the answers greedy decoding then gives (decoded exactly), the sampled reward at τ the expected reward of sampling at temperature τ with the bias (%d samples per prompt and τ; see calibrate). Bias 0 is the model as it is. RL on samples drawn at τ (agent 2's: -rl-temp-large %g) climbs the sampled curve at that τ; the report's detection reward is the greedy curve at 0.\n\n![calibration](calibration.png)\n\n", r.calBefore.N, split, calSamples, r.opts.rlTempLarge)
	for i, c := range cals {
		c.markdown(b, names[i])
	}
	return nil
}

// branchDesc describes -branch-large's rollouts for the report's RL line
// ("" without it).
func (r *report) branchDesc() string {
	if r.opts.branchLarge == 0 {
		return ""
	}
	sc := ""
	if r.opts.branchScale != 1 {
		sc = fmt.Sprintf(", scaled by %g", r.opts.branchScale)
	}
	return fmt.Sprintf(", and the term its first item names credited by %d branch rollouts per task (-branch-large%s: %d groups had a list to branch, in %d of them another token beat the greedy one)", r.opts.branchLarge, sc, r.branchGroups, r.branchBetter)
}

// vineDesc describes -vine-large and its options, or -vine-mask alone, for
// the report's RL line ("" without either).
func vineDesc(o rolloutOptions) string {
	if !o.vineLarge {
		if o.vineMask {
			return "; its sampled answers do not train their first token, so RL leaves the first decision to the warm start (-vine-mask)"
		}
		return ""
	}
	w := "unweighted"
	switch {
	case o.vineTemp > 0 && o.vineLogistic:
		w = fmt.Sprintf("weighted by 2(1-q) of the better branch at τ %g (logistic)", o.vineTemp)
	case o.vineTemp > 0:
		w = fmt.Sprintf("weighted by 4q(1-q) at τ %g", o.vineTemp)
	}
	if o.vineScale != 1 {
		w += fmt.Sprintf(", scaled by %g", o.vineScale)
	}
	if !o.vineHard {
		w += ", error-prone tasks' pairs without weight"
	}
	mask := ""
	if o.vineMask {
		mask = "; the sampled answers do not train that first token (-vine-mask)"
	}
	return fmt.Sprintf(", its first decision also credited by two branch rollouts per task (-vine-large: %s)%s", w, mask)
}
