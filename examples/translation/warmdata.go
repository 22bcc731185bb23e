package main

import (
	"math/rand/v2"
	"strings"

	"examples/translation/corpus"
	"examples/translation/grader"
)

// roughEx is agent 1's output on a train task, which agents 2 and 3 learn on.
type roughEx struct {
	T     task
	Rough string
}

// wrongRendering draws a glossary rendering unrelated to zh ("" if none found).
func wrongRendering(zh string, g *corpus.Glossary, r *rand.Rand) string {
	for range 20 {
		if w := g.Terms[r.IntN(len(g.Terms))].Zh; w != zh && !strings.Contains(zh, w) && !strings.Contains(w, zh) {
			return w
		}
	}
	return ""
}

// injectIntoRough replaces one correct term of rough by a wrong rendering (ok: it could).
func injectIntoRough(t task, rough string, g *corpus.Glossary, r *rand.Rand) (string, grader.TermError, bool) {
	pt := usedTerms(t.Terms, rough)
	if len(pt) == 0 {
		return rough, grader.TermError{}, false
	}
	term := pt[r.IntN(len(pt))]
	w := wrongRendering(term.Zh, g, r)
	if w == "" || strings.Contains(rough, w) {
		// A rendering already there would make the span ambiguous ("对象或对象").
		return rough, grader.TermError{}, false
	}
	return strings.Replace(rough, term.Zh, w, 1), termError(term, w), true
}

// pseudoRough splices one to three pieces of train references, some twice
// as agent 1 repeats itself: a text agent 3 can copy but not recall.
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

// pseudoFinalExample is agent 3's pair on a pseudo-rough text, 30% of the
// time with a wrong rendering spliced in and named (target: corrected).
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

// localEdit writes zh into rough over the characters after those (up to
// two) before zh in ref ("'x'必需是属性", ref "'x'必需是对象", zh "对象":
// "'x'必需是对象"); "" when that anchor is not in rough.
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

// insertTerm inserts zh into rough at its relative position in ref,
// localEdit's fallback: chrF 0.168 → 0.277 on the warm start's 1,270 rough
// translations with a true error (with localEdit first).
func insertTerm(rough, ref, zh string) string {
	rr, zr := []rune(rough), []rune(zh)
	pos := 0.0
	if i := strings.Index(ref, zh); i >= 0 {
		pos = float64(len([]rune(ref[:i]))) / float64(max(1, len([]rune(ref))-len(zr)))
	}
	at := min(max(int(pos*float64(len(rr))+0.5), 0), len(rr))
	return string(rr[:at]) + zh + string(rr[at:])
}

// finalExample is agent 3's warm-start pair on a real rough translation,
// which agent 3 keeps unless a correction asks for a change (re-translating
// is too hard for a small model): an injected error is corrected; true
// errors, passed on 60% of the time, get their terms written in (localEdit,
// else insertTerm; never the reference); false alarms, a rendering already
// there (15%) or a term the English lacks (10%), and "[]" change nothing.
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
	if pt := usedTerms(rx.T.Terms, rough); len(pt) > 0 && r.Float64() < 0.15 {
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

// swapTerm swaps one of t's terms for another in both languages ("…
// object"/"…对象" → "… matrix"/"…矩阵"), so that the detector reads terms
// off the English rather than memorising sentences (ok: it could).
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
	out := task{ID: t.ID + "|" + nw.En, En: en, Ref: ref, Terms: usedTerms(g.TermsIn(en), ref)}
	return out, len(out.Terms) > 0
}

// detectExample is agent 2's warm-start pair (English, rough translation,
// true errors), the rough translation varied so that the label is not the
// English's: 40% agent 1's output (30% of these with a wrong rendering), 20%
// the reference, 25% with a wrong rendering, 15% with one deleted, half the
// reference-based ones with a term swapped first.
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
