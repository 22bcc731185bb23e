package main

import (
	"encoding/json"
	"math/rand/v2"
	"strings"

	"examples/translation/corpus"
	"examples/translation/grader"
	"github.com/troupe-ml/troupe/nn/tokenizer"
)

// System prompts of the three agents (short: the models are small).
const (
	sysTranslate = "Translate into Chinese."
	sysDetect    = "List terminology errors as JSON."
	sysFinal     = "Write the final translation."
)

// task is one sentence of the workflow with what the graders need.
type task struct {
	ID  string
	En  string
	Ref string
	// Terms are the glossary terms of En that Ref uses (the terminology the
	// translation must get right).
	Terms []corpus.Term
}

func makeTasks(pairs []corpus.Pair, g *corpus.Glossary, maxEnBytes, maxZhRunes int) []task {
	var out []task
	for _, p := range pairs {
		if len(p.En) > maxEnBytes || len([]rune(p.Zh)) > maxZhRunes || strings.ContainsAny(p.En, "\n\t") {
			continue
		}
		t := task{ID: p.Domain + ":" + p.En, En: p.En, Ref: p.Zh}
		for _, term := range g.TermsIn(p.En) {
			if strings.Contains(p.Zh, term.Zh) {
				t.Terms = append(t.Terms, term)
			}
		}
		out = append(out, t)
	}
	return out
}

func msgsTranslate(en string) []tokenizer.Message {
	return []tokenizer.Message{{Role: "system", Content: sysTranslate}, {Role: "user", Content: en}}
}

// glossaryHinter writes agent 2's glossary hint: the glossary entries of
// the English's terms (at most three, longest first: hintTerms), each with
// a string-matching checker's verdict on the rough translation:
//
//	Glossary: "degrees of freedom"=自由度 (missing); "matrix"=矩阵 (found)
//
// With the entries in its prompt agent 2 copies a correction with its
// pointer head instead of recalling hundreds of renderings, and starts from
// the checker's verdicts (checkerErrors): its reward pays for finding where
// the checker is wrong (an entry the translators did not use).
//
// The English is quoted so that it follows a quote as in agent 2's answer
// ("original_word":"degrees of freedom"). Unquoted it would follow a
// space, which the GPT-2-style pre-tokenizer keeps in the word's chunk, and
// the pointer head could not copy the term's first token into the answer.
type glossaryHinter struct {
	G *corpus.Glossary
}

// msgs is agent 2's prompt: the English, the hint and the rough translation.
func (h glossaryHinter) msgs(en, rough string) []tokenizer.Message {
	return []tokenizer.Message{{Role: "system", Content: sysDetect}, {Role: "user", Content: en + "\n" + h.hint(en, rough) + "\n" + rough}}
}

func (h glossaryHinter) hint(en, rough string) string {
	terms := hintTerms(h.G, en)
	if len(terms) == 0 {
		return "Glossary: none"
	}
	parts := make([]string, 0, 3)
	for _, t := range terms {
		verdict := " (missing)"
		if strings.Contains(rough, t.Zh) {
			verdict = " (found)"
		}
		parts = append(parts, `"`+t.En+`"=`+t.Zh+verdict)
	}
	return "Glossary: " + strings.Join(parts, "; ")
}

// hintTerms are the glossary entries the hint shows agent 2.
func hintTerms(g *corpus.Glossary, en string) []corpus.Term {
	terms := g.TermsIn(en)
	return terms[:min(3, len(terms))]
}

// checkerErrors is a string-matching glossary checker, evaluate's baseline
// for agent 2: every entry of the hint whose rendering the rough
// translation lacks is an error. It cannot know which entries the
// reference uses, which agent 2 has to learn.
func checkerErrors(g *corpus.Glossary, en, rough string) []grader.TermError {
	return missingTerms(hintTerms(g, en), rough)
}

// truthErrors lists the true terminology errors of a rough translation: the
// task's terms whose rendering is missing from it.
func truthErrors(t task, rough string) []grader.TermError { return missingTerms(t.Terms, rough) }

func missingTerms(terms []corpus.Term, rough string) []grader.TermError {
	var out []grader.TermError
	for _, term := range terms {
		if !strings.Contains(rough, term.Zh) {
			out = append(out, termError(term, ""))
		}
	}
	return out
}

// msgsFinal is agent 3's prompt: the English, the rough translation and
// agent 2's answer as correctionsText.
func msgsFinal(en, rough, detection string) []tokenizer.Message {
	return []tokenizer.Message{{Role: "system", Content: sysFinal}, {Role: "user", Content: en + "\n" + rough + "\n" + correctionsText(detection)}}
}

// maxCorrections bounds (in runes) the corrections in agent 3's prompt.
const maxCorrections = 120

// correctionsText is how agent 3's prompt carries agent 2's answer: a valid
// JSON list (grader.ParseDetections) compactly, items separated by "; ",
// "object=对象" (the hint's form) without a wrong span and "object: 属性→对象"
// with one ("[]" stays "[]"); anything else verbatim; both clipped to
// maxCorrections runes. The JSON itself takes about 90 runes an item and
// leaves too little of the 128-token context for the final translation,
// whose closing tag is then cut off (and the output scores 0).
func correctionsText(detection string) string {
	errs, err := grader.ParseDetections(detection)
	if err != nil {
		return clip(strings.TrimSpace(detection), maxCorrections)
	}
	if len(errs) == 0 {
		return "[]"
	}
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.OriginalWord + "=" + e.CorrectTranslation
		if e.WrongTranslation != "" {
			parts[i] = e.OriginalWord + ": " + e.WrongTranslation + "→" + e.CorrectTranslation
		}
	}
	return clip(strings.Join(parts, "; "), maxCorrections)
}

// clientCorrections is what the client passes on to agent 3 of agent 2's
// answer, as a workflow validates a tool's structured output before acting
// on it: an answer that is not a valid JSON list becomes "[]", and of a
// valid list only the items that ask for something are kept: the original
// word occurs in the English (case-insensitively), and the correct
// rendering is not empty and not already in the rough translation. Agent 2
// is still graded on its answer as written. Invalid answers passed on
// verbatim make agent 3 lose its closing tag; with both rules the
// workflow's chrF at the warm start is above agent 1 alone's on the
// validation split.
func clientCorrections(en, rough, detection string) string {
	return errorsJSON(validCorrections(en, rough, detection))
}

// validCorrections are the items of agent 2's answer detection that
// clientCorrections passes on (none when it is not a valid JSON list).
func validCorrections(en, rough, detection string) []grader.TermError {
	errs, err := grader.ParseDetections(detection)
	if err != nil {
		return nil
	}
	lowerEn := strings.ToLower(en)
	var keep []grader.TermError
	for _, e := range errs {
		w := strings.ToLower(strings.TrimSpace(e.OriginalWord))
		if w != "" && strings.Contains(lowerEn, w) && e.CorrectTranslation != "" && !strings.Contains(rough, e.CorrectTranslation) {
			keep = append(keep, e)
		}
	}
	return keep
}

func finalAnswer(zh string) string { return "<final_result>" + zh + "</final_result>" }

// termError is the terminology error of term rendered as wrong ("": the
// rendering is missing).
func termError(term corpus.Term, wrong string) grader.TermError {
	return grader.TermError{OriginalWord: term.En, WrongTranslation: wrong, WrongReason: "glossary", CorrectTranslation: term.Zh}
}

// errorsJSON is errs as agent 2 writes them.
func errorsJSON(errs []grader.TermError) string {
	if len(errs) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(errs)
	return string(b)
}

// injectError makes a rough translation with one known terminology error:
// one of the task's terms is replaced by another glossary rendering. It
// returns the reference unchanged and no error when the task has no term or
// the coin says clean (probability pClean).
func injectError(t task, g *corpus.Glossary, r *rand.Rand, pClean float64) (string, []grader.TermError) {
	if len(t.Terms) == 0 || r.Float64() < pClean {
		return t.Ref, nil
	}
	term := t.Terms[r.IntN(len(t.Terms))]
	w := wrongRendering(term.Zh, g, r)
	if w == "" {
		return t.Ref, nil
	}
	return strings.Replace(t.Ref, term.Zh, w, 1), []grader.TermError{termError(term, w)}
}
