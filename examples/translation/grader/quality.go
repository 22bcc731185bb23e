package grader

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
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

// TranslationQualityGrader scores a final translation on a 0–2 scale:
//
//   - 1 point for closeness to the reference: chrF (eval.ChrF: n ≤ 6, β = 2);
//   - 1 point for the rules, split equally among the rule categories that
//     apply to the sentence (each category scores the fraction of its items
//     that pass):
//     placeholders — the multiset of printf placeholders (%d, %s, %.2f, %1$s,
//     …) equals the source's (or the reference's, when the translator
//     reordered them);
//     abbreviations — every acronym of the source that Chinese convention
//     keeps (a V.E.R.A. acronym or all-capitals token, PCA, GWs, NA, that the
//     reference also keeps) appears verbatim;
//     terminology — every glossary term of the source that the reference
//     uses appears in its glossary rendering;
//     pronoun — no first-person 我/我们 unless the source has I/we/our (and
//     "this study"/"this paper" become 本研究/本文);
//     subject — the output is non-empty and keeps the quoted identifiers of
//     the source ('x', "file", `fun`) that the reference keeps (in R's
//     messages the subject is usually such an argument name).
//
// The subject category always applies, so the rule point is never free. An
// output without <final_result>…</final_result> scores 0. The normalised
// score is Score/2.
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
	var out []string
	for _, p := range PlaceholderRE.FindAllString(s, -1) {
		if p != "%%" {
			out = append(out, p)
		}
	}
	sort.Strings(out)
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
		if seen[a] {
			continue
		}
		if g.Acronyms[a] || g.Acronyms[base] || strings.ToUpper(base) == base {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// Grade scores output (the agent's full reply) for the English source and the
// reference translation.
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
	// cat closes a rule category (when it applied) with the fraction of its
	// items that passed.
	cat := func(name string) {
		if total > 0 {
			f := float64(pass) / float64(total)
			res.Parts[name] = f
			cats = append(cats, f)
		}
		pass, total = 0, 0
	}
	// kept checks one item of the source: when the reference keeps s, hyp
	// must too.
	kept := func(rule, s, format string, args ...any) {
		if !strings.Contains(reference, s) {
			return
		}
		total++
		if strings.Contains(hyp, s) {
			pass++
		} else {
			res.issue(rule, format, args...)
		}
	}

	src, ref, got := Placeholders(source), Placeholders(reference), Placeholders(hyp)
	if len(src) > 0 || len(ref) > 0 {
		total++
		if slices.Equal(got, src) || slices.Equal(got, ref) {
			pass++
		} else {
			res.issue(RulePlaceholder, "placeholders %v, want %v", got, src)
		}
	}
	cat(RulePlaceholder)

	for _, a := range g.acronyms(source) {
		kept(RuleAbbreviation, a, "abbreviation %s not kept", a)
	}
	cat(RuleAbbreviation)

	if g.Glossary != nil {
		for _, t := range g.Glossary.TermsIn(source) {
			kept(RuleTerminology, t.Zh, "term %q should be %s", t.En, t.Zh)
		}
	}
	cat(RuleTerminology)

	firstPersonOK := firstRE.MatchString(source)
	if !firstPersonOK || strings.Contains(hyp, "我") {
		total++
		if !firstPersonOK && strings.Contains(hyp, "我") && !strings.Contains(reference, "我") {
			res.issue(RulePronoun, "first-person pronoun in the translation; use 本研究/本文 or an impersonal construction")
		} else {
			pass++
		}
	}
	for _, w := range [][2]string{{"this study", "本研究"}, {"this paper", "本文"}} {
		if strings.Contains(strings.ToLower(source), w[0]) {
			total++
			if strings.Contains(hyp, w[1]) {
				pass++
			} else {
				res.issue(RulePronoun, "%q should be %s", w[0], w[1])
			}
		}
	}
	cat(RulePronoun)

	total++
	if strings.TrimSpace(hyp) != "" {
		pass++
	} else {
		res.issue(RuleSubject, "empty translation")
	}
	for _, m := range quotedRE.FindAllStringSubmatch(source, -1) {
		id := m[1] + m[2] + m[3]
		kept(RuleSubject, id, "subject %q missing", id)
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
