package main

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/examples/translation/corpus"
	"github.com/troupe-ml/troupe/examples/translation/grader"
)

func quickOptions(out string) options {
	o := options{quick: true, ports: "0,0", out: out, seed: 1, warmLR: 3e-3, rlLR: 2e-4, finalFrac: 0.5}
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
	o := quickOptions(out)
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
