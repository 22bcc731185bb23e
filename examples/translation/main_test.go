package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"examples/translation/corpus"
	"examples/translation/grader"

	"github.com/troupe-ml/troupe/eval"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/lmmodel"
)

// quickOptions are the command line's options with -quick, as
// "go run ./examples/translation -quick -ports 0,0 -out <out> <args>" sets
// them.
func quickOptions(t *testing.T, out string, args ...string) options {
	o, err := parseOptions(append([]string{"-quick", "-ports", "0,0", "-out", out}, args...))
	if err != nil {
		t.Fatal(err)
	}
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
	if len(rep.steps) != o.rlSteps() {
		t.Fatalf("%d RL steps recorded, want %d", len(rep.steps), o.rlSteps())
	}
	last := rep.steps[len(rep.steps)-1]
	if last.GlobalSmall < int64(o.Steps) || last.GlobalLarge < int64(o.Steps) {
		t.Errorf("servers trained %d and %d steps, want %d each", last.GlobalSmall, last.GlobalLarge, o.Steps)
	}
	// The smoke test must show a learning signal: rewards that are not
	// all zero.
	var sum float64
	for _, s := range rep.steps {
		sum += s.RewardSmall + s.RewardLarge
	}
	if sum == 0 {
		t.Error("every GRPO step's reward is 0: the quick warm start leaves nothing to learn from")
	}
	for _, f := range []string{"report.md", "rewards.png", "config.yaml"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing: %v", f, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.md"))
	for _, want := range []string{"Smoke test", "workflow after RL", "string-matching glossary checker", "so that only the detector differs", "Paired bootstrap over the"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// config.yaml repeats the run's configuration.
	c := DefaultConfig()
	if err := c.LoadFile(filepath.Join(out, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	if c != o.Config {
		t.Errorf("config.yaml reads back as %+v, want %+v", c, o.Config)
	}
	// The per-sentence figures the intervals resample must average to the
	// report's means.
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for name, m := range map[string]metrics{"alone before": rep.aloneBefore, "flow before": rep.flowBefore, "alone after": rep.aloneAfter, "flow after": rep.flowAfter} {
		if len(m.chrf) != m.N || len(m.quality) != m.N {
			t.Fatalf("%s: %d and %d sentence scores for %d sentences", name, len(m.chrf), len(m.quality), m.N)
		}
		var c, q float64
		for i := range m.N {
			c, q = c+m.chrf[i]/float64(m.N), q+m.quality[i]/float64(m.N)
		}
		if !near(c, m.ChrF) || !near(q, m.Quality) {
			t.Errorf("%s: sentence means chrF %g quality %g, report %g %g", name, c, q, m.ChrF, m.Quality)
		}
	}
	if d := eval.Mean(rep.detFixed.sent); !near(d, rep.detFixed.Detection) {
		t.Errorf("fixed inputs: sentence mean detection %g, report %g", d, rep.detFixed.Detection)
	}
	// differences.json (for -pool) holds the same per-sentence differences.
	rd, err := readDifferences(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rd.Sentences) != rep.flowAfter.N || len(rd.Keys) != 6 || rd.Keys[5] != "detector_reward_fixed" {
		t.Fatalf("differences.json: %d sentences, columns %v; want %d and 6", len(rd.Sentences), rd.Keys, rep.flowAfter.N)
	}
	for k, want := range map[int]float64{0: rep.flowAfter.ChrF - rep.aloneAfter.ChrF, 2: rep.flowAfter.Agent3ChrF - rep.aloneAfter.ChrF, 4: rep.flowAfter.Detection - rep.flowBefore.Detection} {
		if d := eval.Mean(rd.D[k]); !near(d, want) {
			t.Errorf("differences.json %s %g, report %g", rd.Keys[k], d, want)
		}
	}
	// Pooling two copies of the run gives the run's own means.
	pooled := t.TempDir()
	if err := pool([]string{out, out}, pooled, 1); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(pooled, "pooled.md")); err != nil || !strings.Contains(string(b), fmt.Sprintf("| chrf_margin | %+.4f |", rep.flowAfter.ChrF-rep.aloneAfter.ChrF)) {
		t.Errorf("pooled.md lacks the chrF margin %+.4f: %v\n%s", rep.flowAfter.ChrF-rep.aloneAfter.ChrF, err, b)
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
	o.RLLR, o.RLLRLarge = 0, 0
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

func TestInjectIntoRoughAndTruth(t *testing.T) {
	g := corpus.NewGlossary([]corpus.Term{{En: "degrees of freedom", Zh: "自由度"}, {En: "matrix", Zh: "矩阵"}, {En: "vector", Zh: "向量"}})
	tk := makeTasks([]corpus.Pair{{En: "%d degrees of freedom", Zh: "%d个自由度"}}, g, 100, 100)[0]
	if len(tk.Terms) != 1 {
		t.Fatalf("terms %v", tk.Terms)
	}
	r := rand.New(rand.NewPCG(1, 1))
	rough, e, ok := injectIntoRough(tk, tk.Ref, g, r)
	errs := []grader.TermError{e}
	if !ok || strings.Contains(rough, "自由度") || e.WrongTranslation == "" || !strings.Contains(rough, e.WrongTranslation) {
		t.Fatalf("rough %q error %+v", rough, e)
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
// (localEdit, else insertTerm: never the reference).
func TestFinalExampleTargets(t *testing.T) {
	g := corpus.NewGlossary([]corpus.Term{{En: "object", Zh: "对象"}, {En: "matrix", Zh: "矩阵"}, {En: "vector", Zh: "向量"}})
	tk := makeTasks([]corpus.Pair{{En: "'x' must be an object or matrix", Zh: "'x'必需是对象或矩阵"}}, g, 100, 100)[0]
	{
		r := rand.New(rand.NewPCG(4, 4))
		kinds := map[string]int{}
		for _, rough := range []string{"'x'必需是对象或矩阵", "'x'必需是对象或向量", "完全不同"} {
			rx := roughEx{T: tk, Rough: rough}
			for i := 0; i < 400; i++ {
				in, corr, target := finalExample(rx, g, r, 48)
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
					default:
						if ed := localEdit(want, tk.Ref, e.CorrectTranslation); ed != "" {
							want, kind = ed, "edit"
						} else {
							want, kind = insertTerm(want, tk.Ref, e.CorrectTranslation), "insert"
						}
					}
				}
				if target != finalAnswer(want) {
					t.Fatalf("%s: rough %q, corrections %s: target %q, want %q", kind, in, corr, target, finalAnswer(want))
				}
				kinds[kind]++
			}
		}
		for _, k := range []string{"copy", "false alarm", "term not in the English", "substitute", "edit", "insert"} {
			if kinds[k] == 0 {
				t.Errorf("no %s example in %v", k, kinds)
			}
		}
	}
}

func TestGlossaryHint(t *testing.T) {
	g := corpus.NewGlossary([]corpus.Term{{En: "degrees of freedom", Zh: "自由度"}, {En: "freedom", Zh: "自由"}, {En: "matrix", Zh: "矩阵"}})
	for _, c := range []struct {
		en, rough string
		want      string
	}{
		{"no terms here", "矩阵", "Glossary: none"},
		{"%d degrees of freedom in the matrix", "矩阵里有%d个自由", `Glossary: "degrees of freedom"=自由度 (missing); "matrix"=矩阵 (found)`},
		{"%d degrees of freedom in the matrix", "", `Glossary: "degrees of freedom"=自由度 (missing); "matrix"=矩阵 (missing)`},
	} {
		if got := glossaryHint(g, c.en, c.rough); got != c.want {
			t.Errorf("hint(%q, %q) = %q, want %q", c.en, c.rough, got, c.want)
		}
	}
}

// TestHintQuotesTokens checks why the hint quotes its terms: with the English of
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
			h := glossaryHint(g, en, "")
			if !quotes { // the same hint with the term unquoted
				h = strings.ReplaceAll(h, `"`, "")
			}
			hint := tok.Encode(h)
			if got := contains(hint, inAnswer); got != quotes {
				t.Errorf("%q, quotes %v: the hint's tokens %v contain the answer's %v: %v, want %v", term, quotes, hint, inAnswer, got, quotes)
			}
		}
	}
}

// TestTrainRewards checks the rewards agents 2 and 3 train on: the gain
// over doing nothing, so that copying the rough translation and answering
// "[]" earn exactly 0, fixing the error earns more and a false alarm less.
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
	if d, f := e.trainRewards(tk, copied); d != 0 || f != 0 {
		t.Errorf(`"[]" and a copy earn %v and %v, want 0 and 0`, d, f)
	}
	d, f := e.trainRewards(tk, fixed)
	if d != fixed.Detect.Normalised-copied.Detect.Normalised || f != fixed.Quality.Normalised-copied.Quality.Normalised || d <= 0 || f <= 0 {
		t.Errorf("finding and fixing the error earn %v and %v, want the gains over \"[]\" and the copy, %v and %v",
			d, f, fixed.Detect.Normalised-copied.Detect.Normalised, fixed.Quality.Normalised-copied.Quality.Normalised)
	}
	if d, f := e.trainRewards(tk, alarmed); d >= 0 || f != 0 {
		t.Errorf("a false alarm on a clean translation earns the detector %v (want < 0) and a copy %v (want 0)", d, f)
	}
}

// TestGuardFinal checks the client's guard on agent 3: the final
// translation is kept only when agent 3 was given corrections, answered
// inside <final_result>, applied every correction's rendering and edited
// no more than twice their size.
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
}

// TestFirstAsContext checks agent 2's sample rewrite: the first action
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

// applyCorrections is what agent 3 should learn from a correction that
// names its wrong span: replace each wrong rendering by the correct one.
func applyCorrections(rough string, errs []grader.TermError) string {
	for _, e := range errs {
		if e.WrongTranslation != "" {
			rough = strings.Replace(rough, e.WrongTranslation, e.CorrectTranslation, 1)
		}
	}
	return rough
}

// TestConfig checks how a run's configuration is built: defaults, then the
// run file (either format), then -set in order; bad keys and values are
// errors that name them.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	yaml := filepath.Join(dir, "run.yaml")
	os.WriteFile(yaml, []byte("# a run file\nsteps: 7\nrl-lr: 0.02  # comment\neval-split: val\n"), 0o644)
	js := filepath.Join(dir, "run.json")
	os.WriteFile(js, []byte(`{"steps": 9, "eval-split": "val", "seed": 3}`), 0o644)
	for _, c := range []struct {
		args []string
		want func(*Config)
	}{
		{nil, func(*Config) {}},
		{[]string{"-config", yaml}, func(c *Config) { c.Steps, c.RLLR, c.EvalSplit = 7, 0.02, "val" }},
		{[]string{"-config", js, "-set", "steps=11"}, func(c *Config) { c.Steps, c.EvalSplit, c.Seed = 11, "val", 3 }},
		{[]string{"-set", "steps=2", "-set", "steps=3", "-set", "kl-large=0"}, func(c *Config) { c.Steps, c.KLLarge = 3, 0 }},
	} {
		o, err := parseOptions(c.args)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		want := DefaultConfig()
		c.want(&want)
		if d := cmp.Diff(want, o.Config); d != "" {
			t.Errorf("%v: (-want +got)\n%s", c.args, d)
		}
		// String writes what LoadFile reads back.
		p := filepath.Join(dir, "back.yaml")
		os.WriteFile(p, []byte(o.Config.String()), 0o644)
		back := QuickConfig()
		if err := back.LoadFile(p); err != nil || back != o.Config {
			t.Errorf("%v: round trip gives %+v, %v", c.args, back, err)
		}
	}
	o, err := parseOptions([]string{"-quick"})
	if err != nil || o.Config != QuickConfig() || o.out != "out/translation-quick" {
		t.Errorf("-quick: %+v in %q, %v", o.Config, o.out, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("steps 3\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-set", "stepz=3"}, `unknown key "stepz"`},
		{[]string{"-set", "steps"}, "want key=value"},
		{[]string{"-set", "steps=x"}, "key steps"},
		{[]string{"-set", "steps=0"}, "steps must be at least 1"},
		{[]string{"-set", "hard-frac=2"}, "hard-frac is a fraction"},
		{[]string{"-set", "eval-split=train"}, "eval-split wants test or val"},
		{[]string{"-config", bad}, "bad.yaml line 1"},
		{[]string{"-config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
	} {
		if _, err := parseOptions(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}

// TestServersMode runs the workflow against two swarm servers that it does
// not start itself (-servers), as when the models are served on other
// machines: every round's episodes reach both, and both train.
func TestServersMode(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	var addrs []string
	var servers []*swarm.Server
	for _, preset := range []string{"lm-small", "lm-small"} {
		m, err := lmmodel.NewPreset(preset)
		if err != nil {
			t.Fatal(err)
		}
		tc := swarm.DefaultTrainConfig()
		tc.BatchSize, tc.NumRepeat, tc.MaxStaleness = 2, 2, 8
		srv, url, stop, err := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: m, Train: tc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stop() })
		servers = append(servers, srv)
		addrs = append(addrs, strings.TrimPrefix(url, "http://"))
	}
	o := quickOptions(t, t.TempDir(), "-servers", strings.Join(addrs, ","))
	rep, err := run(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.steps) != o.rlSteps() {
		t.Fatalf("%d rounds recorded, want %d", len(rep.steps), o.rlSteps())
	}
	for i, srv := range servers {
		if acc := srv.Accounting(); acc.Ended == 0 || acc.TrainedEpisodes == 0 {
			t.Errorf("server %d: %+v: want episodes ended and trained", i, acc)
		}
	}
}

// TestPortInUse: a port that is taken is an error naming it, after the
// server already started is closed (it was a nil-pointer panic).
func TestPortInUse(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	o := quickOptions(t, t.TempDir(), "-ports", fmt.Sprintf("0,%d", port))
	_, err = run(o)
	if err == nil || !strings.Contains(err.Error(), "server 1") || !strings.Contains(err.Error(), "use -ports") {
		t.Fatalf("run with port %d taken: %v, want an error naming server 1 and -ports", port, err)
	}
}
