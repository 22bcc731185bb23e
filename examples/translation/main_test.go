package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/troupe-ml/troupe/examples/translation/corpus"
	"github.com/troupe-ml/troupe/examples/translation/grader"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm"
)

// quickOptions are the command line's options with -quick, as
// "go run ./examples/translation -quick -ports 0,0 -out <out> <args>" sets
// them.
func quickOptions(t *testing.T, out string, args ...string) options {
	o, err := parseOptions(append([]string{"-quick", "-ports", "0,0", "-out", out}, args...))
	if err != nil {
		t.Fatal(err)
	}
	o.applyQuick()
	return o
}

// TestQuickRun runs the whole -quick workflow: warm start, two swarm servers
// that each train GRPO steps on their own reward, evaluation and report.
func TestQuickRun(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	out := t.TempDir()
	o := quickOptions(t, out)
	rep, err := run(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.steps) != o.steps {
		t.Fatalf("%d RL steps recorded, want %d", len(rep.steps), o.steps)
	}
	last := rep.steps[len(rep.steps)-1]
	if last.GlobalSmall < int64(o.steps) || last.GlobalLarge < int64(o.steps) {
		t.Errorf("servers trained %d and %d steps, want %d each", last.GlobalSmall, last.GlobalLarge, o.steps)
	}
	for _, f := range []string{"report.md", "rewards.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing: %v", f, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(b), "workflow after RL") {
		t.Error("report lacks the after-RL row")
	}
	if !strings.Contains(string(b), "string-matching glossary checker") {
		t.Error("report lacks the glossary checker's table")
	}
	if !strings.Contains(string(b), "On the warm-start row's inputs, so that only the detector differs") {
		t.Error("report lacks the detector's figure on fixed inputs")
	}
	if !strings.Contains(string(b), "Paired bootstrap over the") {
		t.Error("report lacks the bootstrap intervals")
	}
	// The per-sentence figures the intervals resample must average to the
	// report's means.
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for name, m := range map[string]metrics{"alone before": rep.aloneBefore, "flow before": rep.flowBefore, "alone after": rep.aloneAfter, "flow after": rep.flowAfter} {
		if len(m.sent) != m.N {
			t.Fatalf("%s: %d sentence scores for %d sentences", name, len(m.sent), m.N)
		}
		if c, q := mean(field(m.sent, chrfOf)), mean(field(m.sent, qualityOf)); !near(c, m.ChrF) || !near(q, m.Quality) {
			t.Errorf("%s: sentence means chrF %g quality %g, report %g %g", name, c, q, m.ChrF, m.Quality)
		}
	}
	for name, m := range map[string]metrics{"flow before": rep.flowBefore, "flow after": rep.flowAfter} {
		if d := mean(field(m.sent, detOf)); !near(d, m.Detection) {
			t.Errorf("%s: sentence mean detection %g, report %g", name, d, m.Detection)
		}
	}
	if d := mean(rep.detFixed.sent); !near(d, rep.detFixed.Detection) {
		t.Errorf("fixed inputs: sentence mean detection %g, report %g", d, rep.detFixed.Detection)
	}
	if d := rep.detFixed.Detection; d < 0 || d > 1 {
		t.Errorf("detector on fixed inputs %v outside [0, 1]", d)
	}
	// differences.tsv (for -pool) holds the same per-sentence differences.
	rd, err := readDifferences(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rd.sentences) != rep.flowAfter.N || len(rd.keys) != 8 || rd.keys[7] != "detector_reward_fixed" {
		t.Fatalf("differences.tsv: %d sentences, columns %v; want %d and 8", len(rd.sentences), rd.keys, rep.flowAfter.N)
	}
	// The workflow delivers the guarded translations by default.
	for k, want := range map[int]float64{3: rep.flowAfter.Agent3ChrF - rep.aloneAfter.ChrF, 4: rep.flowAfter.GuardChrF - rep.aloneAfter.ChrF, 0: rep.flowAfter.GuardChrF - rep.aloneAfter.ChrF} {
		if d := mean(rd.d[k]); !near(d, want) {
			t.Errorf("differences.tsv %s %g, report %g", rd.keys[k], d, want)
		}
	}
	if d, want := mean(rd.d[0]), rep.flowAfter.ChrF-rep.aloneAfter.ChrF; !near(d, want) {
		t.Errorf("differences.tsv chrF margin %g, report %g", d, want)
	}
	if !strings.Contains(string(b), "With agent 2's answer as written instead") {
		t.Error("report lacks the workflow's figures without the client's validation")
	}
	for _, m := range []metrics{rep.flowBefore, rep.flowAfter} {
		for _, v := range []float64{m.CheckerP, m.CheckerR, m.CheckerDetection, m.CheckerChrF, m.CheckerTermAcc, m.RawChrF, m.RawTagRate} {
			if v < 0 || v > 1 {
				t.Errorf("checker figure %v outside [0, 1]", v)
			}
		}
	}
	// The chrF gain split adds up to the difference of the two rows.
	for _, c := range []struct{ alone, flow metrics }{{rep.aloneBefore, rep.flowBefore}, {rep.aloneAfter, rep.flowAfter}} {
		sum := c.flow.GainEmpty + c.flow.GainTrue + c.flow.GainFalse
		if d := sum - (c.flow.ChrF - c.alone.ChrF); d > 1e-9 || d < -1e-9 {
			t.Errorf("chrF gains sum to %v, rows differ by %v", sum, c.flow.ChrF-c.alone.ChrF)
		}
	}
}

// TestQuickRunZeroLR runs RL with both learning rates 0: every evaluation
// after RL must reproduce the warm start's, and the detector on the
// warm-start inputs (detectOn) must score what the warm-start row scored.
func TestQuickRunZeroLR(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	o := quickOptions(t, t.TempDir())
	o.rlLR, o.rlLRLarge = 0, 0
	rep, err := run(o)
	if err != nil {
		t.Fatal(err)
	}
	b, a := rep.flowBefore, rep.flowAfter
	if a.ChrF != b.ChrF || a.Quality != b.Quality || a.Detection != b.Detection || rep.aloneAfter.ChrF != rep.aloneBefore.ChrF {
		t.Errorf("lr 0 changed the evaluation: chrF %v → %v, quality %v → %v, detection %v → %v", b.ChrF, a.ChrF, b.Quality, a.Quality, b.Detection, a.Detection)
	}
	if f := rep.detFixed; f.Detection != b.Detection || f.P != b.DetP || f.R != b.DetR {
		t.Errorf("detector on the warm-start inputs %+v, warm-start row detection %v P %v R %v", f, b.Detection, b.DetP, b.DetR)
	}
}

// TestQuickRunRLVariants runs -quick with the RL-phase options that differ
// from the defaults: shared group inputs, supervised anchors (the
// self-distilled one on the small model, warm-start data on the larger),
// other sampling temperatures, AdamW on the small model, agent 1's turns
// trained, the graders' own scores as rewards, checkpoint selection, and
// the larger model's extra tasks, second GRPO pass, token-level loss and
// decaying learning rate, and its positive-only loss; samples scored at
// their sampling temperature (-tempered, both models at 0.8).
func TestQuickRunRLVariants(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	out := t.TempDir()
	o := quickOptions(t, out, "-counterfactual=false", "-group-inputs",
		"-anchor-self", "2", "-ptx-large", "2", "-rl-temp", "0.8", "-select-every", "1", "-select-n", "8", "-rl-seed", "7", "-no-train-rough=false",
		"-rl-temp-large", "-1", "-rl-opt", "adamw", "-rl-opt-large", "sgd", "-rl-lr-large", "0.05", "-hint-marks", "-raw-corrections",
		"-batch-large", "3", "-epochs-large", "2", "-agg-large", "token", "-cosine-large", "-positive-large", "-tempered", "-rl-holdout", "0.3")
	rep, err := run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.selection == nil || len(rep.selection.trace) != o.steps+1 {
		t.Fatalf("selection trace %v, want %d evaluations", rep.selection, o.steps+1)
	}
	for i, b := range rep.selection.best {
		if b.step < 0 || b.step > o.steps {
			t.Errorf("model %d: selected step %d", i, b.step)
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.md"))
	for _, want := range []string{"Checkpoint selection", "-group-inputs=true", "small model adamw lr 0.0001", "larger model sgd lr 0.05 (cosine to 0)", "rollout temperature 0.8 (agent 2: 0.8), samples scored at their sampling temperature (-tempered)", "-hint-marks=true", "as written (-raw-corrections)",
		"3 tasks per step, 2 pass(es) per batch, token-level loss", "held out of agent 2's warm start (-rl-holdout 0.3)"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestQuickRunRLSplit runs -rl-split: the small model's warm start is
// trained anew on the other sentences (its cached checkpoint is a second
// one, beside the run without the split), the RL phase draws from exactly
// the held-out train sentences, and the report says so. Then -rl-crossfit
// on the same cache: the plain run's warm starts, the split's small model
// for RL's inputs, the same RL tasks.
func TestQuickRunRLSplit(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	out := t.TempDir()
	cache := filepath.Join(out, "cache")
	if _, err := run(quickOptions(t, filepath.Join(out, "plain"), "-cache", cache, "-steps", "1")); err != nil {
		t.Fatal(err)
	}
	rep, err := run(quickOptions(t, filepath.Join(out, "split"), "-cache", cache, "-rl-split", "0.3"))
	if err != nil {
		t.Fatal(err)
	}
	small, _ := filepath.Glob(filepath.Join(cache, "warm-small-*.safetensors"))
	if len(small) != 2 {
		t.Errorf("cache holds small checkpoints %v, want two: -rl-split's warm start reused the other's", small)
	}
	d, err := corpus.Load()
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, tk := range makeTasks(d.Train, d.Glossary, rep.opts.maxEn, rep.opts.maxZh) {
		if heldOut(tk.En, 0.3) {
			held++
		}
	}
	if held == 0 || rep.nHeldOut != held {
		t.Errorf("RL draws from %d sentences, want the %d held out", rep.nHeldOut, held)
	}
	b, _ := os.ReadFile(filepath.Join(out, "split", "report.md"))
	if want := fmt.Sprintf("RL draws from the %d of them held out of every warm start (-rl-split 0.3)", held); !strings.Contains(string(b), want) {
		t.Errorf("report lacks %q", want)
	}

	// -rl-crossfit 0.3: the workflow's warm starts are the plain run's, its
	// second small model is -rl-split's checkpoint (no third one), and RL
	// draws from the same held-out sentences. Every RL task's group inputs
	// come from the cross-fitted translations (greedyInputs fails on a
	// sentence without one).
	rep, err = run(quickOptions(t, filepath.Join(out, "cross"), "-cache", cache, "-rl-crossfit", "0.3", "-steps", "2"))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := filepath.Glob(filepath.Join(cache, "warm-*.safetensors")); len(again) != 4 {
		t.Errorf("cache holds %v after -rl-crossfit, want the two small and two large checkpoints of the runs before", again)
	}
	if rep.nHeldOut != held {
		t.Errorf("-rl-crossfit: RL draws from %d sentences, want the %d held out", rep.nHeldOut, held)
	}
	if rep.lossSmall != -1 || rep.lossLarge != -1 {
		t.Errorf("-rl-crossfit trained a warm start anew (losses %g, %g): it should use the plain run's", rep.lossSmall, rep.lossLarge)
	}
	b, _ = os.ReadFile(filepath.Join(out, "cross", "report.md"))
	if want := 2 * int64(rep.opts.batchLarge); rep.crossGroups != want {
		t.Errorf("-rl-crossfit: %d GRPO groups had cross-fitted inputs, want all %d", rep.crossGroups, want)
	}
	if want := fmt.Sprintf("RL draws from %d of them, which agents 2 and 3 see translated by a small model trained without them (-rl-crossfit 0.3; %d GRPO groups had those inputs)", held, rep.crossGroups); !strings.Contains(string(b), want) {
		t.Errorf("report lacks %q", want)
	}
}

// TestQuickRunTrainSplit evaluates -eval-split train: every 8th train
// sentence, and the report says they are not held out.
func TestQuickRunTrainSplit(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	out := t.TempDir()
	o := quickOptions(t, out, "-eval-split", "train", "-steps", "0")
	o.evalN = 0
	rep, err := run(o)
	if err != nil {
		t.Fatal(err)
	}
	d, err := corpus.Load()
	if err != nil {
		t.Fatal(err)
	}
	train := makeTasks(d.Train, d.Glossary, o.maxEn, o.maxZh)
	if want := (len(train) - 3 + 7) / 8; rep.nTest != want || len(rep.sentences) != want || rep.sentences[1] != train[11].En {
		t.Errorf("evaluated %d train sentences (second %q), want %d (every 8th from the 4th: %q)", rep.nTest, rep.sentences[1], want, train[11].En)
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(b), "(train split, every 8th, sentences the warm starts learned from: a diagnostic, not held out)") {
		t.Error("report does not say the train split is not held out")
	}
}

// TestQuickRunSelfCritical runs the RL phase with self-critical baselines
// for agents 2 and 3 (-scst-large, -scst-small): each rollout also claims
// evaluation episodes for the greedy answers, the servers train exactly
// their train episodes (the round would stall otherwise), and the report
// names the baselines.
func TestQuickRunSelfCritical(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	out := t.TempDir()
	o := quickOptions(t, out, "-scst-large", "-scst-small", "-batch-large", "3")
	rep, err := run(o)
	if err != nil {
		t.Fatal(err)
	}
	if last := rep.steps[len(rep.steps)-1]; last.GlobalSmall < int64(o.steps) || last.GlobalLarge < int64(o.steps) {
		t.Errorf("server steps %d and %d after %d rounds", last.GlobalSmall, last.GlobalLarge, o.steps)
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if want := "self-critical for agent 2 and agent 3"; !strings.Contains(string(b), want) {
		t.Errorf("report lacks %q", want)
	}
}

// TestRunRejectsBadFlags checks that conflicting or unknown RL-phase options
// are refused with an error naming them, before any data is loaded.
func TestRunRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-large-max-len", "-1"}, "-large-max-len"},
		{[]string{"-large-max-len", "16"}, "-large-max-len"},
		{[]string{"-no-train-final"}, "-no-train-rough=false"},
		{[]string{"-group-inputs", "-joint-small"}, "-joint-small"},
		{[]string{"-rl-opt", "adam"}, `"adam"`},
		{[]string{"-rl-opt-large", "lion"}, `"lion"`},
		{[]string{"-final-rewrite", "1.5"}, "-final-rewrite"},
		{[]string{"-epochs-large", "0"}, "-epochs-large"},
		{[]string{"-agg-large", "sum"}, `"sum"`},
		{[]string{"-batch-large", "1"}, "-batch-large"},
		{[]string{"-batch-large", "3", "-joint-small"}, "-joint-small"},
		{[]string{"-scst-small", "-no-train-rough=false"}, "-scst-small"},
		{[]string{"-scst-small", "-joint-small"}, "-scst-small"},
		{[]string{"-scst-large", "-shared-reward"}, "-shared-reward"},
		{[]string{"-rl-holdout", "1"}, "-rl-holdout"},
		{[]string{"-rl-holdout", "-0.1"}, "-rl-holdout"},
		{[]string{"-eval-split", "dev"}, "-eval-split"},
		{[]string{"-rl-split", "1"}, "-rl-split"},
		{[]string{"-rl-split", "-0.2"}, "-rl-split"},
		{[]string{"-rl-split", "0.2", "-rl-holdout", "0.2"}, "-rl-holdout"},
		{[]string{"-rl-crossfit", "1"}, "-rl-crossfit"},
		{[]string{"-rl-crossfit", "0.2", "-rl-split", "0.2"}, "-rl-crossfit"},
		{[]string{"-rl-crossfit", "0.2", "-joint-small"}, "-joint-small"},
	} {
		o, err := parseOptions(append([]string{"-quick", "-out", t.TempDir()}, tc.args...))
		if err != nil {
			t.Fatalf("%v: parse: %v", tc.args, err)
		}
		o.applyQuick()
		_, err = run(o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

func TestDefaultRLLR(t *testing.T) {
	for _, c := range []struct {
		lr   float64
		opt  string
		want float64
	}{{-1, "sgd", 0.05}, {-1, "adamw", 1e-4}, {0, "sgd", 0}, {3e-5, "adamw", 3e-5}, {0.2, "sgd", 0.2}} {
		if got := defaultRLLR(c.lr, c.opt, 0.05); got != c.want {
			t.Errorf("defaultRLLR(%v, %q) = %v, want %v", c.lr, c.opt, got, c.want)
		}
	}
}

func TestInjectErrorAndTruth(t *testing.T) {
	g := corpus.NewGlossary([]corpus.Term{{En: "degrees of freedom", Zh: "自由度"}, {En: "matrix", Zh: "矩阵"}, {En: "vector", Zh: "向量"}})
	tk := makeTasks([]corpus.Pair{{En: "%d degrees of freedom", Zh: "%d个自由度"}}, g, 100, 100)[0]
	if len(tk.Terms) != 1 {
		t.Fatalf("terms %v", tk.Terms)
	}
	r := rand.New(rand.NewPCG(1, 1))
	rough, errs := injectError(tk, g, r, 0)
	if len(errs) != 1 || strings.Contains(rough, "自由度") {
		t.Fatalf("rough %q errs %v", rough, errs)
	}
	if fixed := applyCorrections(rough, errs); fixed != tk.Ref {
		t.Errorf("corrections give %q, want %q", fixed, tk.Ref)
	}
	truth := truthErrors(tk, rough)
	if len(truth) != 1 || truth[0].CorrectTranslation != "自由度" {
		t.Errorf("truth %v", truth)
	}
	// The injected JSON is what the detector grader scores 2.
	if res := (grader.ProperNounDetectionGrader{}).Grade(errorsJSON(errs), truth); res.Score != 2 {
		t.Errorf("injected JSON scores %v: %v", res.Score, res.Issues)
	}
	if got := truthErrors(tk, tk.Ref); len(got) != 0 {
		t.Errorf("reference has errors %v", got)
	}
}

func TestSwapTermAndDetectExample(t *testing.T) {
	g := corpus.NewGlossary([]corpus.Term{{En: "object", Zh: "对象"}, {En: "matrix", Zh: "矩阵"}, {En: "vector", Zh: "向量"}})
	tk := makeTasks([]corpus.Pair{{En: "'x' must be an object", Zh: "'x'必需是对象"}}, g, 100, 100)[0]
	r := rand.New(rand.NewPCG(3, 3))
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		s, ok := swapTerm(tk, g, r)
		if !ok {
			continue
		}
		seen[s.En] = true
		if len(s.Terms) != 1 || !strings.Contains(s.En, s.Terms[0].En) || !strings.Contains(s.Ref, s.Terms[0].Zh) || strings.Contains(s.Ref, "对象") {
			t.Fatalf("swap gave %+v", s)
		}
	}
	if !seen["'x' must be an matrix"] || !seen["'x' must be an vector"] {
		t.Errorf("swaps seen: %v", seen)
	}
	// Every detector example's label is what the grader calls the truth of
	// its rough translation (plus, for an injected error, the wrong span).
	rx := roughEx{T: tk, Rough: "'x'必需是矩阵"}
	for i := 0; i < 200; i++ {
		en, rough, label := detectExample(rx, g, r, 48)
		x := tk
		if en != tk.En { // a swapped term: the swapped reference uses every term of en
			x = task{En: en, Terms: g.TermsIn(en)}
		}
		res := (grader.ProperNounDetectionGrader{}).Grade(label, truthErrors(x, rough))
		if res.Parts["fn"] != 0 {
			t.Fatalf("example %q / %q labelled %s misses a true error: %v", en, rough, label, res.Issues)
		}
	}
}

func TestLocalEdit(t *testing.T) {
	for _, c := range []struct{ rough, ref, zh, want string }{
		{"'x'必需是属性", "'x'必需是对象", "对象", "'x'必需是对象"},
		{"属性不对", "对象不对", "对象", "对象不对"},
		{"'x'必需是", "'x'必需是对象", "对象", "'x'必需是对象"},
		{"完全不同", "'x'必需是对象", "对象", ""},
		{"abc", "xyz", "对象", ""},
	} {
		if got := localEdit(c.rough, c.ref, c.zh); got != c.want {
			t.Errorf("localEdit(%q, %q, %q) = %q, want %q", c.rough, c.ref, c.zh, got, c.want)
		}
	}
}

func TestCorrectionsText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"[]", "[]"},
		{" [] ", "[]"},
		{`[{"original_word":"object","wrong_translation":"属性","wrong_reason":"glossary","correct_translation":"对象"}]`, "object: 属性→对象"},
		{`[{"original_word":"object","wrong_translation":"","wrong_reason":"glossary","correct_translation":"对象"},{"original_word":"matrix","correct_translation":"矩阵"}]`, "object=对象; matrix=矩阵"},
		{`[{"original_word":"object","wrong_translation":"属`, `[{"original_word":"object","wrong_translation":"属`}, // invalid: verbatim
		{strings.Repeat("无", 200), strings.Repeat("无", maxCorrections)},                                            // clipped
	} {
		if got := correctionsText(c.in); got != c.want {
			t.Errorf("correctionsText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestClientCorrections(t *testing.T) {
	const en = "'x' must be an Object or matrix"
	const rough = "'x'必需是对象或向量"
	item := func(word, wrong, correct string) string {
		return `{"original_word":"` + word + `","wrong_translation":"` + wrong + `","wrong_reason":"glossary","correct_translation":"` + correct + `"}`
	}
	for _, c := range []struct{ name, det, want string }{
		{"empty", "[]", "[]"},
		{"invalid JSON", `[{"original_word":"matrix","wrong_transl`, "[]"},
		{"not JSON", "no errors", "[]"},
		{"kept", "[" + item("matrix", "向量", "矩阵") + "]", "[" + item("matrix", "向量", "矩阵") + "]"},
		{"case-insensitive", "[" + item("object", "", "物体") + "]", "[" + item("object", "", "物体") + "]"},
		{"word not in the English", "[" + item("dmula", "", "公式") + "]", "[]"},
		{"rendering already there", "[" + item("object", "", "对象") + "]", "[]"},
		{"no rendering", "[" + item("matrix", "向量", "") + "]", "[]"},
		{"mixed", "[" + item("ptrol", "", "控制") + "," + item("matrix", "", "矩阵") + "]", "[" + item("matrix", "", "矩阵") + "]"},
	} {
		got := clientCorrections(en, rough, c.det)
		gotErrs, err1 := grader.ParseDetections(got)
		wantErrs, err2 := grader.ParseDetections(c.want)
		if err1 != nil || err2 != nil || !cmp.Equal(gotErrs, wantErrs) {
			t.Errorf("%s: clientCorrections(%q) = %q, want %q", c.name, c.det, got, c.want)
		}
	}
}

func TestCheckerErrors(t *testing.T) {
	g := corpus.NewGlossary([]corpus.Term{{En: "object", Zh: "对象"}, {En: "matrix", Zh: "矩阵"}, {En: "vector", Zh: "向量"}})
	for _, c := range []struct {
		en, rough string
		want      []string // original words flagged
	}{
		{"'x' must be an object or matrix", "'x'必需是对象或向量", []string{"matrix"}},
		{"'x' must be an object or matrix", "'x'必需是对象或矩阵", nil},
		{"'x' must be an object or matrix", "", []string{"matrix", "object"}},
		{"no terms", "", nil},
	} {
		var got []string
		for _, e := range checkerErrors(g, c.en, c.rough) {
			got = append(got, e.OriginalWord)
			if tm, _ := g.Lookup(e.OriginalWord); e.CorrectTranslation != tm.Zh {
				t.Errorf("%q: correction %q, want the glossary's %q", e.OriginalWord, e.CorrectTranslation, tm.Zh)
			}
		}
		if !cmp.Equal(got, c.want) {
			t.Errorf("checkerErrors(%q, %q) flags %v, want %v", c.en, c.rough, got, c.want)
		}
	}
}

func TestInsertTerm(t *testing.T) {
	for _, c := range []struct{ rough, ref, zh, want string }{
		{"完全不同", "对象不对", "对象", "对象完全不同"},     // at the start
		{"完全不同", "'x'必需是对象", "对象", "完全不同对象"}, // at the end
		{"甲乙丙丁", "一二对象三四", "对象", "甲乙对象丙丁"},   // in the middle
		{"", "对象", "对象", "对象"},               // empty rough translation
		{"甲乙", "一二三", "对象", "对象甲乙"},          // not in the reference: at the start
	} {
		if got := insertTerm(c.rough, c.ref, c.zh); got != c.want {
			t.Errorf("insertTerm(%q, %q, %q) = %q, want %q", c.rough, c.ref, c.zh, got, c.want)
		}
	}
}

// TestFinalExampleTargets checks agent 3's warm-start targets against what
// its corrections ask for: with "[]" or a false alarm (the rendering is
// already there) the rough translation unchanged; with a known wrong span,
// the rough translation with it replaced; with a true error, the term put in
// (localEdit, else insertTerm: never the reference), or under -final-rewrite
// 1 the reference.
func TestFinalExampleTargets(t *testing.T) {
	g := corpus.NewGlossary([]corpus.Term{{En: "object", Zh: "对象"}, {En: "matrix", Zh: "矩阵"}, {En: "vector", Zh: "向量"}})
	tk := makeTasks([]corpus.Pair{{En: "'x' must be an object or matrix", Zh: "'x'必需是对象或矩阵"}}, g, 100, 100)[0]
	for _, rewrite := range []float64{0, 1} {
		r := rand.New(rand.NewPCG(4, 4))
		kinds := map[string]int{}
		for _, rough := range []string{"'x'必需是对象或矩阵", "'x'必需是对象或向量", "完全不同"} {
			rx := roughEx{T: tk, Rough: rough}
			for i := 0; i < 400; i++ {
				in, corr, target := finalExample(rx, g, r, 48, rewrite)
				var errs []grader.TermError
				if err := json.Unmarshal([]byte(corr), &errs); err != nil {
					t.Fatalf("corrections %q: %v", corr, err)
				}
				want := in
				kind := "copy"
				for _, e := range errs {
					switch {
					case e.WrongTranslation != "":
						want, kind = applyCorrections(want, []grader.TermError{e}), "substitute"
					case strings.Contains(in, e.CorrectTranslation):
						kind = "false alarm"
					case !strings.Contains(tk.En, e.OriginalWord):
						kind = "term not in the English"
					case rewrite == 1:
						want, kind = tk.Ref, "rewrite"
					default:
						if ed := localEdit(want, tk.Ref, e.CorrectTranslation); ed != "" {
							want, kind = ed, "edit"
						} else {
							want, kind = insertTerm(want, tk.Ref, e.CorrectTranslation), "insert"
						}
					}
				}
				if target != finalAnswer(want) {
					t.Fatalf("rewrite %g, %s: rough %q, corrections %s: target %q, want %q", rewrite, kind, in, corr, target, finalAnswer(want))
				}
				kinds[kind]++
			}
		}
		wantKinds := []string{"copy", "false alarm", "term not in the English", "substitute", "edit", "insert"}
		if rewrite == 1 {
			wantKinds = []string{"copy", "false alarm", "term not in the English", "substitute", "rewrite"}
		}
		for _, k := range wantKinds {
			if kinds[k] == 0 {
				t.Errorf("rewrite %g: no %s example in %v", rewrite, k, kinds)
			}
		}
	}
}

func TestGlossaryHint(t *testing.T) {
	g := corpus.NewGlossary([]corpus.Term{{En: "degrees of freedom", Zh: "自由度"}, {En: "freedom", Zh: "自由"}, {En: "matrix", Zh: "矩阵"}})
	for _, c := range []struct {
		en, rough     string
		marks, quotes bool
		want          string
	}{
		{"%d degrees of freedom in the matrix", "", false, false, "Glossary: degrees of freedom=自由度; matrix=矩阵"},
		{"no terms here", "", false, false, "Glossary: none"},
		{"%d degrees of freedom in the matrix", "矩阵里有%d个自由", true, false, "Glossary: degrees of freedom=自由度 (missing); matrix=矩阵 (found)"},
		{"no terms here", "矩阵", true, false, "Glossary: none"},
		{"%d degrees of freedom in the matrix", "", false, true, `Glossary: "degrees of freedom"=自由度; "matrix"=矩阵`},
		{"%d degrees of freedom in the matrix", "矩阵", true, true, `Glossary: "degrees of freedom"=自由度 (missing); "matrix"=矩阵 (found)`},
	} {
		if got := (glossaryHinter{G: g, Marks: c.marks, Quotes: c.quotes}).hint(c.en, c.rough); got != c.want {
			t.Errorf("hint(%q, %q) with marks %v, quotes %v = %q, want %q", c.en, c.rough, c.marks, c.quotes, got, c.want)
		}
	}
}

// TestHintQuotesTokens checks why -hint-quotes exists: with the English of
// a glossary entry quoted, its tokens in agent 2's prompt are the tokens
// the answer writes in "original_word", so the pointer head can copy them;
// unquoted, the pre-tokenizer keeps the space before the term in its first
// chunk and the first token differs.
func TestHintQuotesTokens(t *testing.T) {
	g := corpus.NewGlossary([]corpus.Term{{En: "already", Zh: "已经"}, {En: "degrees of freedom", Zh: "自由度"}})
	texts := []string{"DLL %s already loaded", "%d degrees of freedom", "already", "degrees of freedom=自由度"}
	for range 20 {
		// Both spellings are frequent, as in the real data: the term
		// inside sentences (after a space) and in the answers' JSON.
		texts = append(texts, "it was already there with %d degrees of freedom")
		texts = append(texts, errorsJSON([]grader.TermError{{OriginalWord: "already", CorrectTranslation: "已经"}, {OriginalWord: "degrees of freedom", CorrectTranslation: "自由度"}}))
	}
	tok, err := tokenizer.Train(texts, tokenizer.TrainOptions{VocabSize: 320})
	if err != nil {
		t.Fatal(err)
	}
	contains := func(hay, needle []int) bool {
		for i := 0; i+len(needle) <= len(hay); i++ {
			if slices.Equal(hay[i:i+len(needle)], needle) {
				return true
			}
		}
		return false
	}
	for _, term := range []string{"already", "degrees of freedom"} {
		answer := tok.Encode(errorsJSON([]grader.TermError{{OriginalWord: term, CorrectTranslation: "x"}}))
		// The term's tokens as the answer writes them: after `"original_word":"`.
		key := tok.Encode(`[{"original_word":"`)
		if !slices.Equal(answer[:len(key)], key) {
			t.Fatalf("the answer %v does not start with the key's tokens %v", answer, key)
		}
		inAnswer := tok.Encode(term)
		if !slices.Equal(answer[len(key):len(key)+len(inAnswer)], inAnswer) {
			t.Fatalf("%q: the answer's tokens %v do not continue with the term's %v", term, answer[len(key):], inAnswer)
		}
		en := "x " + term
		for _, quotes := range []bool{true, false} {
			hint := tok.Encode(glossaryHinter{G: g, Quotes: quotes}.hint(en, ""))
			if got := contains(hint, inAnswer); got != quotes {
				t.Errorf("%q, quotes %v: the hint's tokens %v contain the answer's %v: %v, want %v", term, quotes, hint, inAnswer, got, quotes)
			}
		}
	}
}

// TestTrainRewards checks the rewards agents 2 and 3 train on: the graders'
// scores with -counterfactual=false; with -counterfactual (the default), the gain over doing nothing, so
// that copying the rough translation and answering "[]" earn exactly 0,
// fixing the error earns more and a false alarm less.
func TestTrainRewards(t *testing.T) {
	g := corpus.NewGlossary([]corpus.Term{{En: "degrees of freedom", Zh: "自由度"}, {En: "matrix", Zh: "矩阵"}})
	tk := makeTasks([]corpus.Pair{{En: "%d degrees of freedom", Zh: "%d个自由度"}}, g, 100, 100)[0]
	e := &env{qg: &grader.TranslationQualityGrader{Glossary: g}, maxRough: 100}
	rough := "%d个自由率" // misses the glossary rendering
	fix := `[{"original_word":"degrees of freedom","wrong_translation":"自由率","wrong_reason":"glossary","correct_translation":"自由度"}]`
	alarm := `[{"original_word":"matrix","wrong_translation":"","wrong_reason":"glossary","correct_translation":"矩阵"}]`
	rollout := func(rough, det, final string) workflowRun {
		w := workflowRun{Rough: rough, Given: rough, Detection: det, Final: "<final_result>" + final + "</final_result>"}
		w.Quality = e.qg.Grade(tk.En, tk.Ref, w.Final)
		w.Detect = grader.ProperNounDetectionGrader{}.Grade(det, truthErrors(tk, rough))
		return w
	}
	// On the clean rough translation (the reference) "[]" is right and
	// the alarm wrong.
	copied, fixed, alarmed := rollout(rough, "[]", rough), rollout(rough, fix, tk.Ref), rollout(tk.Ref, alarm, tk.Ref)
	d, f := e.trainRewards(tk, fixed)
	if d != fixed.Detect.Normalised || f != fixed.Quality.Normalised {
		t.Errorf("default rewards %v, %v; want the graders' %v, %v", d, f, fixed.Detect.Normalised, fixed.Quality.Normalised)
	}
	e.counterfactual = true
	if d, f := e.trainRewards(tk, copied); d != 0 || f != 0 {
		t.Errorf(`"[]" and a copy earn %v and %v, want 0 and 0`, d, f)
	}
	if d, f := e.trainRewards(tk, fixed); d <= 0 || f <= 0 {
		t.Errorf("finding and fixing the error earn %v and %v, want > 0", d, f)
	}
	if d, f := e.trainRewards(tk, alarmed); d >= 0 || f != 0 {
		t.Errorf("a false alarm on a clean translation earns the detector %v (want < 0) and a copy %v (want 0)", d, f)
	}
	// Self-critical baselines (-scst-large, -scst-small) replace the
	// counterfactual ones: the score minus the greedy answer's.
	sc := fixed
	sc.GreedyDetect, sc.GreedyQuality = &copied.Detect, &copied.Quality
	if d, f := e.trainRewards(tk, sc); d != fixed.Detect.Normalised-copied.Detect.Normalised || f != fixed.Quality.Normalised-copied.Quality.Normalised {
		t.Errorf("self-critical rewards %v, %v; want %v, %v", d, f, fixed.Detect.Normalised-copied.Detect.Normalised, fixed.Quality.Normalised-copied.Quality.Normalised)
	}
	sc.GreedyDetect, sc.GreedyQuality = &fixed.Detect, &fixed.Quality
	if d, f := e.trainRewards(tk, sc); d != 0 || f != 0 {
		t.Errorf("answers equal to the greedy ones earn %v and %v, want 0 and 0", d, f)
	}
}

// TestQuickSweep runs the research script at -quick size: both arms from one
// warm-start cache, a Markdown report naming both and a plot.
func TestQuickSweep(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	out := t.TempDir()
	o := quickOptions(t, out)
	o.sweep = true
	if err := sweep(o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "sweep.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| independent rewards |", "| shared final-quality reward |", "![sweep](sweep.png)"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("sweep.md lacks %q:\n%s", want, b)
		}
	}
	for _, f := range []string{"sweep.png", "arm0/report.md", "arm1/report.md"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing: %v", f, err)
		}
	}
	b, _ = os.ReadFile(filepath.Join(out, "arm1", "report.md"))
	if !strings.Contains(string(b), "agent 2 rewarded by the final translation's quality") {
		t.Errorf("arm 1's report does not record the shared reward")
	}
	b, _ = os.ReadFile(filepath.Join(out, "arm0", "report.md"))
	if !strings.Contains(string(b), "agent 2 rewarded by its own detection grader") {
		t.Errorf("arm 0's report does not record the independent reward")
	}
}

// TestQuickRunAllGroupsSkipped runs the larger model greedily with
// -skip-equal-large: every repeat of a task gives the same answer, so every
// group is skipped and no update changes the model's version. The client
// must still see each round as trained (it waited for the version until
// stop 19, and gave up after 90 s).
func TestQuickRunAllGroupsSkipped(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	o := quickOptions(t, t.TempDir(), "-skip-equal-large", "-rl-temp-large", "0")
	rep, err := run(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.steps) != o.steps {
		t.Fatalf("%d GRPO steps reported, want %d", len(rep.steps), o.steps)
	}
	for _, s := range rep.steps {
		if s.GlobalLarge != 0 {
			t.Errorf("step %d: the larger model's version is %d, want 0 (every group skipped)", s.Step, s.GlobalLarge)
		}
	}
}

// TestGuardFinal checks the client's guard on agent 3: the final
// translation is kept only when agent 3 was given corrections, answered
// inside <final_result>, applied every correction's rendering and edited
// no more than twice their size; and levenshtein against hand-counted
// distances.
func TestGuardFinal(t *testing.T) {
	c := []grader.TermError{{OriginalWord: "matrix", CorrectTranslation: "矩阵"}, {OriginalWord: "vector", WrongTranslation: "矢量", CorrectTranslation: "向量"}}
	seen := "矩的矢量" // budget 2·(2 + 2 + 2) = 12 runes
	for _, tc := range []struct {
		name, final string
		tagged      bool
		corr        []grader.TermError
		want        string
	}{
		{"no corrections", "矩阵的向量", true, nil, "rough"},
		{"untagged", "矩阵的向量", false, c, "rough"},
		{"one rendering missing", "矩阵的矢量", true, c, "rough"},
		{"all applied", "矩阵的向量", true, c, "矩阵的向量"},
		{"a rewrite beyond the corrections", "矩阵和向量以及其他很多很多很多的字", true, c, "rough"},
	} {
		if got := guardFinal("rough", seen, tc.final, tc.tagged, tc.corr); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"kitten", "sitting", 3}, {"矩的矢量", "矩阵的向量", 2}, {"same", "same", 0}} {
		if got := levenshtein([]rune(tc.a), []rune(tc.b)); got != tc.want {
			t.Errorf("levenshtein(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestQuickRunVine runs the RL phase with agent 2's branch rollouts
// (-vine-large): the larger model's server waits for repeats + 2 episodes
// per task and trains every round (the run would stall otherwise), and the
// report names them; conflicting options are refused.
func TestQuickRunVine(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	// Unweighted pairs with the first token masked; weighted logistic
	// pairs, scaled, the error-prone tasks' pairs without weight.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-vine-large", "-batch-large", "3", "-vine-temp", "0", "-vine-mask"},
			"two branch rollouts per task (-vine-large: unweighted); the sampled answers do not train that first token (-vine-mask)"},
		{[]string{"-vine-large", "-batch-large", "3", "-vine-temp", "1", "-vine-logistic", "-vine-scale", "2", "-vine-hard=false"},
			"(-vine-large: weighted by 2(1-q) of the better branch at τ 1 (logistic), scaled by 2, error-prone tasks' pairs without weight)"},
		// The mask alone, with self-critical advantages.
		{[]string{"-vine-mask", "-scst-large"},
			"its sampled answers do not train their first token, so RL leaves the first decision to the warm start (-vine-mask)"},
	} {
		args := tc.args
		out := t.TempDir()
		o := quickOptions(t, out, args...)
		rep, err := run(o)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if last := rep.steps[len(rep.steps)-1]; last.GlobalLarge < int64(o.steps) {
			t.Errorf("%v: larger model trained %d steps in %d rounds", args, last.GlobalLarge, o.steps)
		}
		b, _ := os.ReadFile(filepath.Join(out, "report.md"))
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("%v: report lacks %q", args, tc.want)
		}
	}
	for _, bad := range [][]string{{"-vine-large", "-shared-reward"}, {"-vine-large", "-scst-large"}, {"-vine-large", "-vine-temp", "-1"}, {"-vine-scale", "2"}, {"-vine-large", "-vine-scale", "0"}, {"-vine-hard=false"}, {"-vine-logistic"}, {"-vine-large", "-vine-logistic", "-vine-temp", "0"}} {
		if _, err := run(quickOptions(t, t.TempDir(), bad...)); err == nil || !strings.Contains(err.Error(), "-vine-") {
			t.Errorf("%v: error %v, want one naming a -vine- flag", bad, err)
		}
	}
}

// TestFirstAsContext checks -vine-mask's sample rewrite: the first action
// joins the prompt, the behaviour log-probabilities and step rewards lose
// their first entry, the input is not modified, and a one-token answer is
// dropped.
func TestFirstAsContext(t *testing.T) {
	in := rl.Sample{TaskID: "t", Prompt: []int{1, 2}, Actions: []int{7, 8, 9}, LogProbs: []float32{-0.1, -0.2, -0.3}, StepRewards: []float64{0, 0, 1}, Reward: 0.5}
	orig := rl.Sample{TaskID: "t", Prompt: []int{1, 2}, Actions: []int{7, 8, 9}, LogProbs: []float32{-0.1, -0.2, -0.3}, StepRewards: []float64{0, 0, 1}, Reward: 0.5}
	got, ok := firstAsContext(in)
	want := rl.Sample{TaskID: "t", Prompt: []int{1, 2, 7}, Actions: []int{8, 9}, LogProbs: []float32{-0.2, -0.3}, StepRewards: []float64{0, 1}, Reward: 0.5}
	if !ok {
		t.Fatal("dropped a three-token answer")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("rewritten sample (-want +got):\n%s", d)
	}
	if d := cmp.Diff(orig, in); d != "" {
		t.Errorf("input modified (-want +got):\n%s", d)
	}
	// The prompt must not share the input's backing array.
	got.Prompt[0] = 99
	if in.Prompt[0] != 1 {
		t.Error("rewritten prompt aliases the input's")
	}
	if _, ok := firstAsContext(rl.Sample{Prompt: []int{1}, Actions: []int{7}, LogProbs: []float32{-0.1}}); ok {
		t.Error("kept a one-token answer with nothing left to train")
	}
}

// TestPairWeight checks the branch pairs' weights against hand-computed
// values: unweighted at τ = 0, 4q(1−q) and the logistic 2(1 − q_b).
func TestPairWeight(t *testing.T) {
	l3 := math.Log(3)
	for _, tc := range []struct {
		name     string
		lp, v    [2]float64
		tau      float64
		logistic bool
		want     float64
	}{
		{"unweighted", [2]float64{-5, -0.01}, [2]float64{1, 0}, 0, false, 1},
		{"boundary", [2]float64{-0.7, -0.7}, [2]float64{1, 0}, 0.1, false, 1},
		{"q=1/4 at τ=0.1", [2]float64{-1 - 0.1*l3, -1}, [2]float64{1, 0}, 0.1, false, 0.75},
		{"logistic, [] better, q=3/4", [2]float64{l3 - 2, -2}, [2]float64{1, 0.5}, 1, true, 0.5},
		{"logistic, list better, q=3/4", [2]float64{l3 - 2, -2}, [2]float64{0.5, 1}, 1, true, 1.5},
		{"logistic tie", [2]float64{l3 - 2, -2}, [2]float64{1, 1}, 1, true, 0},
		{"answer ends at once", [2]float64{math.Inf(-1), math.Inf(1)}, [2]float64{1, 0}, 0.1, false, 0},
		{"answer ends at once, logistic", [2]float64{math.Inf(-1), math.Inf(1)}, [2]float64{1, 0}, 1, true, 0},
	} {
		if got := pairWeight(tc.lp, tc.v, tc.tau, tc.logistic); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: pairWeight = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHeldOut checks -rl-holdout's choice: stable, nested in the fraction
// (a sentence held out at f is held out at every larger f) and close to
// the fraction asked for.
func TestHeldOut(t *testing.T) {
	var en []string
	for i := range 20000 {
		en = append(en, fmt.Sprintf("message %d: %c", i, rune('a'+i%26)))
	}
	for _, f := range []float64{0, 0.15, 0.3} {
		n := 0
		for _, s := range en {
			h := heldOut(s, f)
			if h != heldOut(s, f) {
				t.Fatalf("heldOut(%q, %g) not stable", s, f)
			}
			if h && !heldOut(s, f+0.1) {
				t.Fatalf("heldOut(%q, %g) but not at %g", s, f, f+0.1)
			}
			if h {
				n++
			}
		}
		if got := float64(n) / float64(len(en)); math.Abs(got-f) > 0.01 {
			t.Errorf("fraction held out at %g: %.4f", f, got)
		}
	}
}

// TestBranchPoint checks where -branch-large branches agent 2's greedy
// answer: after the first "original_word":", with the top tokens there
// that are whole text, at most k; nowhere in "[]" or when the key ends the
// answer.
func TestBranchPoint(t *testing.T) {
	top := func(toks ...string) []swarm.ChatTopProb {
		var out []swarm.ChatTopProb
		for _, s := range toks {
			out = append(out, swarm.ChatTopProb{Token: s})
		}
		return out
	}
	list := []swarm.ChatLogProb{{Token: `[{"`}, {Token: "original"}, {Token: `_word":"`}, {Token: "ch", TopLogProbs: top("ch", "", "s", "\uFFFD", "vec", "t")}, {Token: "ar"}, {Token: `","wrong`}}
	for _, tc := range []struct {
		name    string
		content []swarm.ChatLogProb
		k       int
		given   string
		at      int
		alts    []string
	}{
		{"list", list, 3, `[{"original_word":"`, 3, []string{"ch", "s", "vec"}},
		{"list, k above the usable tokens", list, 9, `[{"original_word":"`, 3, []string{"ch", "s", "vec", "t"}},
		{"empty", []swarm.ChatLogProb{{Token: "[]", TopLogProbs: top("[]", `[{"`)}}, 3, "", 0, nil},
		{"key at the end", list[:3], 3, "", 0, nil},
	} {
		given, at, alts := branchPoint(tc.content, tc.k)
		if given != tc.given || at != tc.at || !slices.Equal(alts, tc.alts) {
			t.Errorf("%s: got %q %d %q, want %q %d %q", tc.name, given, at, alts, tc.given, tc.at, tc.alts)
		}
	}
}

// TestBranchRewards checks the branch episodes' rewards: centred values
// around the sampled episodes' mean, scaled, and the mean itself for the
// episodes without a branch.
func TestBranchRewards(t *testing.T) {
	got := branchRewards(0.25, 2, []float64{0, 1, 0.5}, 4)
	want := []float64{0.25 - 1, 0.25 + 1, 0.25, 0.25}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("rewards (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]float64{0.5, 0.5}, branchRewards(0.5, 1, nil, 2)); d != "" {
		t.Errorf("no branches (-want +got):\n%s", d)
	}
}

// TestQuickRunBranch runs -branch-large end to end (the larger model's
// groups grow by the branches) and checks its flag errors.
func TestQuickRunBranch(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	for _, args := range [][]string{{"-branch-large", "2", "-batch-large", "3"}, {"-branch-large", "3", "-branch-scale", "2", "-vine-large", "-group-inputs"}} {
		out := t.TempDir()
		o := quickOptions(t, out, args...)
		rep, err := run(o)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		// One step per round: the server's groups are the task's
		// sampled episodes and its branches together.
		if last := rep.steps[len(rep.steps)-1]; last.GlobalLarge != int64(o.steps) {
			t.Errorf("%v: larger model trained %d steps in %d rounds", args, last.GlobalLarge, o.steps)
		}
		if rep.untrained != [2]int64{} || rep.trained[1] == 0 {
			t.Errorf("%v: servers trained on %v episodes and left %v untrained, want none left", args, rep.trained, rep.untrained)
		}
		b, _ := os.ReadFile(filepath.Join(out, "report.md"))
		if want := fmt.Sprintf("credited by %s branch rollouts per task (-branch-large", args[1]); !strings.Contains(string(b), want) {
			t.Errorf("%v: report lacks %q", args, want)
		}
	}
	for _, bad := range [][]string{{"-branch-large", "-1"}, {"-branch-large", "21"}, {"-branch-large", "2", "-shared-reward"}, {"-branch-large", "2", "-scst-large"}, {"-branch-scale", "2"}} {
		if _, err := run(quickOptions(t, t.TempDir(), bad...)); err == nil || !strings.Contains(err.Error(), "-branch-") {
			t.Errorf("%v: error %v, want one naming a -branch- flag", bad, err)
		}
	}
}
