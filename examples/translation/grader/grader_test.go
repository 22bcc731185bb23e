package grader

import (
	"math"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"examples/translation/corpus"
	"github.com/troupe-ml/troupe/eval"
)

func rules(issues []Issue) []string {
	seen := map[string]bool{}
	var out []string
	for _, i := range issues {
		if !seen[i.Rule] {
			seen[i.Rule] = true
			out = append(out, i.Rule)
		}
	}
	sort.Strings(out)
	return out
}

func testQualityGrader() *TranslationQualityGrader {
	return &TranslationQualityGrader{
		Glossary: corpus.NewGlossary([]corpus.Term{
			{En: "degrees of freedom", Zh: "自由度"},
			{En: "argument", Zh: "参数"},
			{En: "principal component analysis", Zh: "主成分分析"},
		}),
		Acronyms: map[string]bool{"PCA": true, "GW": true},
	}
}

func TestTranslationQualityGrader(t *testing.T) {
	g := testQualityGrader()
	for _, tc := range []struct {
		name              string
		src, ref, out     string
		wantScore         float64 // <0: only check the range
		wantRules         []string
		wantLessThanFinal bool
	}{
		{"perfect", "invalid '%s' argument", "'%s'参数无效", "<final_result>'%s'参数无效</final_result>", 2, nil, false},
		{"missing tag", "invalid '%s' argument", "'%s'参数无效", "'%s'参数无效", 0, []string{RuleFormat}, false},
		{"empty", "invalid '%s' argument", "'%s'参数无效", "<final_result> </final_result>", 0, []string{RulePlaceholder, RuleSubject, RuleTerminology}, false},
		{"placeholder changed", "%d degrees of freedom", "%d个自由度", "<final_result>%s个自由度</final_result>", -1, []string{RulePlaceholder}, true},
		{"terminology", "%d degrees of freedom", "%d个自由度", "<final_result>%d个自由程度</final_result>", -1, []string{RuleTerminology}, true},
		{"abbreviation dropped", "PCA failed for GWs", "GWs的PCA失败", "<final_result>引力波的主成分分析失败</final_result>", -1, []string{RuleAbbreviation}, true},
		{"first person", "This paper studies the argument", "本文研究该参数", "<final_result>我们研究该参数</final_result>", -1, []string{RulePronoun}, true},
		{"first person allowed", "We study the argument", "我们研究该参数", "<final_result>我们研究该参数</final_result>", 2, nil, false},
		{"subject missing", "'x' must be numeric", "'x'必需为数值", "<final_result>必需为数值</final_result>", -1, []string{RuleSubject}, true},
	} {
		res := g.Grade(tc.src, tc.ref, tc.out)
		if diff := cmp.Diff(tc.wantRules, rules(res.Issues)); diff != "" {
			t.Errorf("%s: issue rules (-want +got):\n%s\nissues: %v", tc.name, diff, res.Issues)
		}
		if tc.wantScore >= 0 && math.Abs(res.Score-tc.wantScore) > 1e-12 {
			t.Errorf("%s: score %v, want %v", tc.name, res.Score, tc.wantScore)
		}
		if res.Score < 0 || res.Score > 2 || math.Abs(res.Normalised-res.Score/2) > 1e-15 {
			t.Errorf("%s: score %v normalised %v out of range", tc.name, res.Score, res.Normalised)
		}
		if tc.wantLessThanFinal {
			perfect := g.Grade(tc.src, tc.ref, "<final_result>"+tc.ref+"</final_result>")
			if perfect.Score != 2 || res.Score >= perfect.Score {
				t.Errorf("%s: score %v, reference scores %v", tc.name, res.Score, perfect.Score)
			}
		}
	}
	// Exact composition: placeholder case. chrF("%s个自由度", "%d个自由度")
	// plus rules = mean(placeholder 0, terminology 1, pronoun 1, subject 1).
	res := g.Grade("%d degrees of freedom", "%d个自由度", "<final_result>%s个自由度</final_result>")
	want := eval.ChrF("%s个自由度", "%d个自由度") + 3.0/4
	if math.Abs(res.Score-want) > 1e-12 {
		t.Errorf("composed score %v, want %v (parts %v)", res.Score, want, res.Parts)
	}
}

func TestPlaceholders(t *testing.T) {
	got := Placeholders("%d of %s: %.2f%% (%1$s, %5.1f, %ld)")
	want := []string{"%.2f", "%1$s", "%5.1f", "%d", "%ld", "%s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Placeholders (-want +got):\n%s", diff)
	}
}

func TestProperNounDetectionGrader(t *testing.T) {
	truth := []TermError{{OriginalWord: "degrees of freedom", WrongTranslation: "自由程度", CorrectTranslation: "自由度"}}
	for _, tc := range []struct {
		name      string
		out       string
		truth     []TermError
		want      float64
		wantRules []string
	}{
		{"invalid json", `[{"original_word": "x"`, truth, 0, []string{RuleInvalidJSON}},
		{"prose around json", `Errors: []`, nil, 0, []string{RuleInvalidJSON}},
		{"missing field", `[{"original_word":"degrees of freedom"}]`, truth, 0, []string{RuleInvalidJSON}},
		{"wrong type", `[{"original_word":"a","correct_translation":3}]`, truth, 0, []string{RuleInvalidJSON}},
		{"object not array", `{"original_word":"a","correct_translation":"b"}`, truth, 0, []string{RuleInvalidJSON}},
		{"empty and correct", " [] ", nil, 2, nil},
		{"empty but missed", "[]", truth, 0, []string{RuleMissed}},
		{"exact", `[{"original_word":"Degrees of Freedom","wrong_translation":"自由程度","wrong_reason":"glossary","correct_translation":"自由度"}]`, truth, 2, nil},
		{"wrong correction", `[{"original_word":"degrees of freedom","wrong_translation":"自由程度","wrong_reason":"","correct_translation":"自由"}]`, truth, 1, []string{RuleWrongFix}},
		// tp=1, fp=1: F1 = 2/3; corrections 1/max(2,1) = 1/2.
		{"one false positive", `[{"original_word":"degrees of freedom","correct_translation":"自由度"},{"original_word":"matrix","correct_translation":"矩阵"}]`, truth, 2.0/3 + 0.5, []string{RuleFalsePositive}},
		{"false positive only", `[{"original_word":"matrix","correct_translation":"矩阵"}]`, nil, 0, []string{RuleFalsePositive}},
	} {
		res := ProperNounDetectionGrader{}.Grade(tc.out, tc.truth)
		if math.Abs(res.Score-tc.want) > 1e-12 || math.Abs(res.Normalised-tc.want/2) > 1e-12 {
			t.Errorf("%s: score %v (normalised %v), want %v; issues %v", tc.name, res.Score, res.Normalised, tc.want, res.Issues)
		}
		if diff := cmp.Diff(tc.wantRules, rules(res.Issues)); diff != "" {
			t.Errorf("%s: issue rules (-want +got):\n%s", tc.name, diff)
		}
	}
}

func FuzzGraders(f *testing.F) {
	f.Add("invalid '%s' argument", "<final_result>x</final_result>", `[{"original_word":"a","correct_translation":"b"}]`)
	g := testQualityGrader()
	f.Fuzz(func(t *testing.T, src, out, det string) {
		r := g.Grade(src, "参考%s", out)
		d := ProperNounDetectionGrader{}.Grade(det, []TermError{{OriginalWord: "a", CorrectTranslation: "b"}})
		for _, s := range []float64{r.Score, d.Score} {
			if s < 0 || s > 2 || math.IsNaN(s) {
				t.Fatalf("score %v out of [0,2]", s)
			}
		}
	})
}
