package grader

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"examples/translation/corpus"
	"github.com/troupe-ml/troupe/eval"
)

// Issue is one problem a grader found.
type Issue struct {
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
}

// Result is a grader's verdict.
type Result struct {
	// Score is on the grader's 0–2 scale; Normalised = Score/2 in [0, 1].
	Score, Normalised float64
	// Parts are the components of the score (names depend on the grader).
	Parts  map[string]float64
	Issues []Issue
}

func (r *Result) issue(rule, format string, args ...any) {
	r.Issues = append(r.Issues, Issue{Rule: rule, Detail: fmt.Sprintf(format, args...)})
}

// Rule names of TranslationQualityGrader.
const (
	RuleFormat       = "format"       // missing <final_result>
	RulePlaceholder  = "placeholder"  // format placeholders not preserved
	RuleAbbreviation = "abbreviation" // acronym not kept verbatim
	RuleTerminology  = "terminology"  // glossary term not used
	RulePronoun      = "pronoun"      // first person where 本研究/本文 or impersonal wanted
	RuleSubject      = "subject"      // subject (quoted identifier) or whole text missing
)

// TranslationQualityGrader scores a final translation on a 0–2 scale: chrF
// against the reference (eval.ChrF), plus 1 point split among the rule
// categories that apply, each the fraction of its items that pass:
// placeholders (the source's printf ones, or the reference's order),
// abbreviations and terminology (the acronyms and glossary renderings the
// reference keeps), pronoun (no 我 unless the source has I/we/our; "this
// study"/"this paper" as 本研究/本文) and subject (non-empty, with the quoted
// identifiers the reference keeps), which always applies. An output without
// <final_result>…</final_result> scores 0.
type TranslationQualityGrader struct {
	Glossary *corpus.Glossary
	Acronyms map[string]bool
}

var finalRE = regexp.MustCompile(`(?s)<final_result>(.*?)</final_result>`)

// ExtractFinal returns the text inside the first <final_result>…</final_result>.
func ExtractFinal(output string) (string, bool) {
	m := finalRE.FindStringSubmatch(output)
	if m == nil {
		return "", false
	}
	return strings.TrimSpace(m[1]), true
}

// PlaceholderRE matches C/R printf conversion specifications.
var PlaceholderRE = regexp.MustCompile(`%(?:[0-9]+\$)?[-+ #0']*(?:\*|[0-9]+)?(?:\.(?:\*|[0-9]+))?(?:hh|h|ll|l|L|z|j|t|q)?[diouxXeEfFgGaAcspn%]`)

// Placeholders returns the sorted printf placeholders of s (without %%).
func Placeholders(s string) []string {
	out := slices.DeleteFunc(PlaceholderRE.FindAllString(s, -1), func(p string) bool { return p == "%%" })
	slices.Sort(out)
	return out
}

var (
	acronymRE = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*[A-Z][A-Z0-9]*s?\b|\b[A-Z]{2,}s?\b`)
	quotedRE  = regexp.MustCompile("'([^'\\s]{1,40})'|\"([^\"\\s]{1,40})\"|`([^`\\s]{1,40})`")
	firstRE   = regexp.MustCompile(`(?i)\b(we|our|us|ours|I|my|me)\b`)
)

// acronyms returns the acronyms of s that convention keeps in Chinese text:
// tokens with two or more capitals (PCA, GWs, NaN, UTF8) that are in the
// acronym list or entirely upper case.
func (g *TranslationQualityGrader) acronyms(s string) []string {
	var out []string
	seen := map[string]bool{}
	for _, a := range acronymRE.FindAllString(s, -1) {
		base := strings.TrimSuffix(a, "s")
		if !seen[a] && (g.Acronyms[a] || g.Acronyms[base] || strings.ToUpper(base) == base) {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// Grade scores output, the agent's full reply, for the source and the reference.
func (g *TranslationQualityGrader) Grade(source, reference, output string) Result {
	res := Result{Parts: map[string]float64{}}
	hyp, ok := ExtractFinal(output)
	if !ok {
		res.issue(RuleFormat, "missing <final_result>…</final_result>")
		return res
	}
	return g.GradeText(source, reference, hyp, res)
}

// GradeText scores a bare translation (no <final_result> required), as
// for agent 1 alone, adding to res.
func (g *TranslationQualityGrader) GradeText(source, reference, hyp string, res Result) Result {
	if res.Parts == nil {
		res.Parts = map[string]float64{}
	}
	chrf := eval.ChrF(hyp, reference)
	res.Parts["chrf"] = chrf
	var cats []float64
	var pass, total int
	// check counts one item of a rule category, an issue unless ok.
	check := func(ok bool, rule, format string, args ...any) {
		total++
		if ok {
			pass++
		} else {
			res.issue(rule, format, args...)
		}
	}
	// cat closes a rule category that applied with its items' pass rate.
	cat := func(name string) {
		if total > 0 {
			f := float64(pass) / float64(total)
			res.Parts[name] = f
			cats = append(cats, f)
		}
		pass, total = 0, 0
	}
	// kept checks that hyp keeps s where the reference does.
	kept := func(s, rule, format string, args ...any) {
		if strings.Contains(reference, s) {
			check(strings.Contains(hyp, s), rule, format, args...)
		}
	}
	src, ref, got := Placeholders(source), Placeholders(reference), Placeholders(hyp)
	if len(src) > 0 || len(ref) > 0 {
		check(slices.Equal(got, src) || slices.Equal(got, ref), RulePlaceholder, "placeholders %v, want %v", got, src)
	}
	cat(RulePlaceholder)
	for _, a := range g.acronyms(source) {
		kept(a, RuleAbbreviation, "abbreviation %s not kept", a)
	}
	cat(RuleAbbreviation)
	if g.Glossary != nil {
		for _, t := range g.Glossary.TermsIn(source) {
			kept(t.Zh, RuleTerminology, "term %q should be %s", t.En, t.Zh)
		}
	}
	cat(RuleTerminology)
	firstPersonOK, hasWo := firstRE.MatchString(source), strings.Contains(hyp, "我")
	if !firstPersonOK || hasWo {
		check(firstPersonOK || !hasWo || strings.Contains(reference, "我"), RulePronoun, "first-person pronoun in the translation; use 本研究/本文 or an impersonal construction")
	}
	for _, w := range [][2]string{{"this study", "本研究"}, {"this paper", "本文"}} {
		if strings.Contains(strings.ToLower(source), w[0]) {
			check(strings.Contains(hyp, w[1]), RulePronoun, "%q should be %s", w[0], w[1])
		}
	}
	cat(RulePronoun)
	check(strings.TrimSpace(hyp) != "", RuleSubject, "empty translation")
	for _, m := range quotedRE.FindAllStringSubmatch(source, -1) {
		kept(m[1]+m[2]+m[3], RuleSubject, "subject %q missing", m[1]+m[2]+m[3])
	}
	cat(RuleSubject)
	rules := 0.0
	for _, c := range cats {
		rules += c / float64(len(cats))
	}
	res.Parts["rules"] = rules
	if strings.TrimSpace(hyp) == "" {
		chrf, rules = 0, 0
	}
	res.Score = chrf + rules
	res.Normalised = res.Score / 2
	return res
}
