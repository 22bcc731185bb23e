package main

import (
	"math/rand/v2"
	"strings"

	"examples/translation/corpus"
	"examples/translation/grader"
)

// roughEx is one of agent 1's real outputs on a train task: the warm start
// of agents 2 and 3 learns from what agent 1 actually writes, not from
// references with injected errors, which agent 1 never produces.
type roughEx struct {
	T     task
	Rough string
}

// presentTerms are the task's terms whose rendering the rough translation
// already has.
func presentTerms(t task, rough string) []corpus.Term {
	var out []corpus.Term
	for _, term := range t.Terms {
		if strings.Contains(rough, term.Zh) {
			out = append(out, term)
		}
	}
	return out
}

// wrongRendering draws a glossary rendering unrelated to zh ("" if none found).
func wrongRendering(zh string, g *corpus.Glossary, r *rand.Rand) string {
	for tries := 0; tries < 20; tries++ {
		w := g.Terms[r.IntN(len(g.Terms))].Zh
		if w != zh && !strings.Contains(zh, w) && !strings.Contains(w, zh) {
			return w
		}
	}
	return ""
}

// injectIntoRough replaces one correct term of a real rough translation by a
// wrong rendering; it returns the new rough and the known error (ok false if
// the rough has no correct term).
func injectIntoRough(t task, rough string, g *corpus.Glossary, r *rand.Rand) (string, grader.TermError, bool) {
	pt := presentTerms(t, rough)
	if len(pt) == 0 {
		return rough, grader.TermError{}, false
	}
	term := pt[r.IntN(len(pt))]
	w := wrongRendering(term.Zh, g, r)
	if w == "" || strings.Contains(rough, w) {
		// A rendering already in the text would make the wrong span
		// ambiguous ("对象或对象": which one is wrong?).
		return rough, grader.TermError{}, false
	}
	return strings.Replace(rough, term.Zh, w, 1), termError(term, w), true
}

// pseudoRough makes a text that agent 3 cannot predict from the English
// source: one to three random pieces of train references spliced together,
// some repeated (agent 1's outputs repeat themselves). Copying it is the only
// way to lower the loss, so agent 3 learns to copy instead of memorising the
// train translations, which agent 1 renders well because it was trained on
// them: on their rough translations "copy" and "translate from memory" give
// the same target.
func pseudoRough(tasks []task, r *rand.Rand, maxRunes int) string {
	var out []rune
	for n := 1 + r.IntN(3); n > 0; n-- {
		ref := []rune(tasks[r.IntN(len(tasks))].Ref)
		a := r.IntN(len(ref))
		piece := ref[a : a+1+r.IntN(len(ref)-a)]
		if r.IntN(4) == 0 {
			piece = append(append([]rune{}, piece...), piece...)
		}
		out = append(out, piece...)
	}
	return string(out[:min(len(out), maxRunes)])
}

// pseudoFinalExample is agent 3's warm-start pair on a pseudo-rough text:
// with probability 0.3 a glossary term's wrong rendering is spliced in and
// the corrections name it (target: the text with the correct rendering),
// otherwise corrections "[]" and the target is the text copied unchanged.
func pseudoFinalExample(tasks []task, g *corpus.Glossary, r *rand.Rand, maxRough int) (rough, corr, target string) {
	rough = pseudoRough(tasks, r, maxRough)
	if r.Float64() < 0.3 && len(g.Terms) > 0 {
		term := g.Terms[r.IntN(len(g.Terms))]
		if w := wrongRendering(term.Zh, g, r); w != "" && !strings.Contains(rough, w) {
			rr := []rune(rough)
			at := r.IntN(len(rr) + 1)
			if bad := string(rr[:at]) + w + string(rr[at:]); len([]rune(bad)) <= maxRough {
				return bad, errorsJSON([]grader.TermError{termError(term, w)}), finalAnswer(string(rr[:at]) + term.Zh + string(rr[at:]))
			}
		}
	}
	return rough, "[]", finalAnswer(rough)
}

// localEdit puts the missing rendering zh into rough where the reference
// has it: it finds the (up to two) characters before zh in ref in rough and
// overwrites as many characters after them with zh ("'x'必需是属性" with
// ref "'x'必需是对象" and zh "对象" gives "'x'必需是对象"); when zh starts
// ref, it replaces rough's first characters. It returns "" when the anchor
// is not in rough. Agent 3 learns such local edits, close to the copying it
// does anyway, instead of re-translating the sentence.
func localEdit(rough, ref, zh string) string {
	i := strings.Index(ref, zh)
	if i < 0 {
		return ""
	}
	before := []rune(ref[:i])
	anchor := string(before[max(0, len(before)-2):])
	j := 0
	if anchor != "" {
		k := strings.Index(rough, anchor)
		if k < 0 {
			return ""
		}
		j = k + len(anchor)
	}
	rest := []rune(rough[j:])
	n := min(len(rest), len([]rune(zh)))
	return rough[:j] + zh + string(rest[n:])
}

// insertTerm inserts the rendering zh into rough at the relative position
// (in characters) that zh has in ref, keeping every character of rough: the
// fallback of localEdit when the reference's context is not in rough. The
// target stays a copy of agent 1's translation plus one term, an edit a
// small model can learn, and it is where chrF's recall is won: on the 1,270
// warm-start rough translations with a true error, chrF against the
// reference goes from 0.168 (rough) to 0.277 (localEdit, else insertTerm).
func insertTerm(rough, ref, zh string) string {
	rr, zr := []rune(rough), []rune(zh)
	pos := 0.0
	if i := strings.Index(ref, zh); i >= 0 {
		pos = float64(len([]rune(ref[:i]))) / float64(max(1, len([]rune(ref))-len(zr)))
	}
	at := min(max(int(pos*float64(len(rr))+0.5), 0), len(rr))
	return string(rr[:at]) + zh + string(rr[at:])
}

// finalExample is agent 3's warm-start pair on a real rough translation:
//   - with a known wrong span (an injected error): the rough translation with
//     the correction applied (copy + substitute);
//   - with true errors whose wrong span is unknown (a glossary term missing
//     from agent 1's output), passed on with probability 0.6 (a detector
//     that finds them): the rough translation with the term written where
//     the reference has it (localEdit), or, when the reference's context is
//     not in the rough translation (two times in three), inserted at the
//     same relative position (insertTerm). Never the reference itself: a
//     post-edit target teaches agent 3 to re-translate whenever it is
//     given a correction;
//   - with probability 0.15, a false alarm (a correction whose rendering the
//     rough translation already has), and with probability 0.1 one naming
//     a term the English does not contain: the rough translation unchanged,
//     so that agent 2's false positives, most of its answers at the warm
//     start, do not cost the final translation;
//   - otherwise (no error, or a missed one, corrections "[]"): the rough
//     translation copied unchanged.
//
// So agent 3 keeps agent 1's translation unless a correction asks for a
// change, instead of re-translating everything (too hard for a small model).
func finalExample(rx roughEx, g *corpus.Glossary, r *rand.Rand, maxRough int) (rough, corr, target string) {
	rough = clip(rx.Rough, maxRough)
	falseAlarm := func(term corpus.Term) (string, string, string) {
		return rough, errorsJSON([]grader.TermError{termError(term, "")}), finalAnswer(rough)
	}
	if r.Float64() < 0.3 {
		if bad, e, ok := injectIntoRough(rx.T, rough, g, r); ok && len(truthErrors(rx.T, rough)) == 0 {
			return bad, errorsJSON([]grader.TermError{e}), finalAnswer(rough)
		}
	}
	if pt := presentTerms(rx.T, rough); len(pt) > 0 && r.Float64() < 0.15 {
		return falseAlarm(pt[r.IntN(len(pt))])
	}
	if r.Float64() < 0.1 && len(g.Terms) > 0 {
		if term := g.Terms[r.IntN(len(g.Terms))]; !strings.Contains(rx.T.En, term.En) && !strings.Contains(rough, term.Zh) {
			return falseAlarm(term)
		}
	}
	if truth := truthErrors(rx.T, rough); len(truth) > 0 && r.Float64() < 0.6 {
		fixed := rough
		for _, e := range truth {
			if f := localEdit(fixed, rx.T.Ref, e.CorrectTranslation); f != "" {
				fixed = f
			} else {
				fixed = insertTerm(fixed, rx.T.Ref, e.CorrectTranslation)
			}
		}
		return rough, errorsJSON(truth), finalAnswer(fixed)
	}
	return rough, "[]", finalAnswer(rough)
}

// swapTerm makes a new train pair from t by swapping one of its glossary
// terms for another term of the glossary in both languages ("'x' must be a
// date-time object" / "…对象" becomes "'x' must be a date-time matrix" /
// "…矩阵"), so the detector sees each term in many sentences and learns to
// read the terms off the English instead of memorising sentences. ok is
// false when t has no term that appears verbatim in both languages.
func swapTerm(t task, g *corpus.Glossary, r *rand.Rand) (task, bool) {
	if len(t.Terms) == 0 {
		return t, false
	}
	old := t.Terms[r.IntN(len(t.Terms))]
	nw := g.Terms[r.IntN(len(g.Terms))]
	if nw.En == old.En || !strings.Contains(t.En, old.En) || strings.Contains(t.Ref, nw.Zh) {
		return t, false
	}
	en := strings.Replace(t.En, old.En, nw.En, 1)
	ref := strings.Replace(t.Ref, old.Zh, nw.Zh, 1)
	out := task{ID: t.ID + "|" + nw.En, En: en, Ref: ref}
	for _, term := range g.TermsIn(en) {
		if strings.Contains(ref, term.Zh) {
			out.Terms = append(out.Terms, term)
		}
	}
	return out, len(out.Terms) > 0
}

// detectExample is agent 2's warm-start pair: a rough translation and its
// true errors as JSON. The rough translation varies for one source, so that
// the label cannot be memorised from the English alone (agent 1 renders the
// train sentences it was trained on almost perfectly, so a detector trained
// only on those outputs can answer by sentence):
//   - 40%: agent 1's real output (with a correct term's rendering replaced
//     by a wrong one 30% of the time, so wrong spans are seen too);
//   - 20%: the reference (no error);
//   - 25%: the reference with one term's rendering replaced by a wrong one
//     (the error names the wrong span);
//   - 15%: the reference with one term's rendering deleted.
//
// In half the reference-based examples a term is first swapped for another
// (swapTerm), which also returns the English the example uses. Sentences
// without glossary terms always have the label "[]".
func detectExample(rx roughEx, g *corpus.Glossary, r *rand.Rand, maxRough int) (en, rough, label string) {
	var errs []grader.TermError
	u := r.Float64()
	if u >= 0.4 && r.IntN(2) == 0 {
		if t, ok := swapTerm(rx.T, g, r); ok {
			rx = roughEx{T: t}
		}
	}
	inject := func() {
		if bad, e, ok := injectIntoRough(rx.T, rough, g, r); ok {
			rough, errs = bad, []grader.TermError{e}
		}
	}
	switch {
	case u < 0.4 || len(rx.T.Terms) == 0:
		rough = clip(rx.Rough, maxRough)
		if r.Float64() < 0.3 {
			inject()
		}
	case u < 0.6:
		rough = clip(rx.T.Ref, maxRough)
	case u < 0.85:
		rough = clip(rx.T.Ref, maxRough)
		inject()
	default:
		term := rx.T.Terms[r.IntN(len(rx.T.Terms))]
		rough = clip(strings.Replace(rx.T.Ref, term.Zh, "", 1), maxRough)
	}
	for _, te := range truthErrors(rx.T, rough) {
		if len(errs) == 0 || te.OriginalWord != errs[0].OriginalWord {
			errs = append(errs, te)
		}
	}
	return rx.T.En, rough, errorsJSON(errs)
}
