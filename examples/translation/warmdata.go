package main

import (
	"math/rand/v2"
	"strings"

	"examples/translation/corpus"
	"examples/translation/grader"
)

// roughEx is agent 1's output on a train task: agents 2 and 3's warm start
// learns from what agent 1 writes, not only from references.
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
		// A rendering already in the text would make the wrong span
		// ambiguous ("对象或对象": which one is wrong?).
		return rough, grader.TermError{}, false
	}
	return strings.Replace(rough, term.Zh, w, 1), termError(term, w), true
}

// pseudoRough splices one to three random pieces of train references, some
// repeated as agent 1's outputs are: a text agent 3 can only copy, not
// recall from the English.
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
// 30% of the time a wrong rendering is spliced in and the corrections name
// it (target: with the correct rendering), else "[]" and an exact copy.
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

// localEdit writes zh into rough where the reference has it: after the (up
// to two) characters before zh in ref, found in rough, over as many
// characters as zh has ("'x'必需是属性", ref "'x'必需是对象", zh "对象":
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

// insertTerm inserts zh into rough at zh's relative position in ref:
// localEdit's fallback, an edit a small model learns that wins chrF's
// recall (0.168 → 0.277 on the 1,270 warm-start rough translations with a
// true error, with localEdit first).
func insertTerm(rough, ref, zh string) string {
	rr, zr := []rune(rough), []rune(zh)
	pos := 0.0
	if i := strings.Index(ref, zh); i >= 0 {
		pos = float64(len([]rune(ref[:i]))) / float64(max(1, len([]rune(ref))-len(zr)))
	}
	at := min(max(int(pos*float64(len(rr))+0.5), 0), len(rr))
	return string(rr[:at]) + zh + string(rr[at:])
}

// finalExample is agent 3's warm-start pair on a real rough translation.
// Agent 3 keeps agent 1's translation unless a correction asks for a change,
// as re-translating is too hard for a small model:
//   - an injected error, its wrong span named: the correction applied;
//   - true errors (terms missing from it), passed on 60% of the time: each
//     term written in (localEdit, else insertTerm), never the reference,
//     which would teach agent 3 to re-translate;
//   - false alarms, like most of agent 2's answers at the warm start: a
//     rendering already there (15%) or a term the English lacks (10%);
//   - otherwise "[]": the rough translation unchanged.
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

// swapTerm swaps one of t's terms for another glossary term in both
// languages ("… object"/"…对象" becomes "… matrix"/"…矩阵"), so that the
// detector reads the terms off the English rather than memorising
// sentences; ok is false when no swap applies.
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

// detectExample is agent 2's warm-start pair: the English, a rough
// translation and its true errors as JSON. The rough translation varies, so
// that the label cannot be read off the English alone: 40% agent 1's output
// (30% of these with a wrong rendering injected), 20% the reference, 25% the
// reference with a wrong rendering, 15% with a rendering deleted. Half the
// reference-based ones first swap a term (swapTerm).
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
