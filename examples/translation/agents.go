package main

import (
	"encoding/json"
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

// task is one sentence of the workflow; Terms are the glossary terms of En that Ref uses.
type task struct {
	ID, En, Ref string
	Terms       []corpus.Term
}

// makeTasks are the pairs that fit the length bounds, as tasks.
func makeTasks(pairs []corpus.Pair, g *corpus.Glossary, maxEnBytes, maxZhRunes int) []task {
	var out []task
	for _, p := range pairs {
		if len(p.En) <= maxEnBytes && len([]rune(p.Zh)) <= maxZhRunes && !strings.ContainsAny(p.En, "\n\t") {
			out = append(out, task{ID: p.Domain + ":" + p.En, En: p.En, Ref: p.Zh, Terms: usedTerms(g.TermsIn(p.En), p.Zh)})
		}
	}
	return out
}

// usedTerms are the terms whose rendering zh has.
func usedTerms(terms []corpus.Term, zh string) []corpus.Term {
	var out []corpus.Term
	for _, term := range terms {
		if strings.Contains(zh, term.Zh) {
			out = append(out, term)
		}
	}
	return out
}

// msgsTranslate is agent 1's prompt.
func msgsTranslate(en string) []tokenizer.Message {
	return []tokenizer.Message{{Role: "system", Content: sysTranslate}, {Role: "user", Content: en}}
}

// translateAll are agent 1's prompts for the tasks.
func translateAll(tasks []task) [][]tokenizer.Message {
	out := make([][]tokenizer.Message, len(tasks))
	for i, t := range tasks {
		out[i] = msgsTranslate(t.En)
	}
	return out
}

// msgsDetect is agent 2's prompt: the English, the glossary hint and the
// rough translation.
func msgsDetect(g *corpus.Glossary, en, rough string) []tokenizer.Message {
	return []tokenizer.Message{{Role: "system", Content: sysDetect}, {Role: "user", Content: en + "\n" + glossaryHint(g, en, rough) + "\n" + rough}}
}

// glossaryHint lists the English's terms (at most three, longest first)
// marked by a string checker, for agent 2 to copy with its pointer head:
//
//	Glossary: "degrees of freedom"=自由度 (missing); "matrix"=矩阵 (found)
//
// Quoted, as in agent 2's answer, a term has the answer's tokens.
func glossaryHint(g *corpus.Glossary, en, rough string) string {
	terms := hintTerms(g, en)
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

// checkerErrors is a string-matching checker, agent 2's baseline: each hint
// entry the rough translation lacks, whether or not the reference uses it.
func checkerErrors(g *corpus.Glossary, en, rough string) []grader.TermError {
	return missingTerms(hintTerms(g, en), rough)
}

// truthErrors are the true errors of a rough translation: the task's terms it lacks.
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

// msgsFinal is agent 3's prompt: the English, the rough translation and the corrections.
func msgsFinal(en, rough, detection string) []tokenizer.Message {
	return []tokenizer.Message{{Role: "system", Content: sysFinal}, {Role: "user", Content: en + "\n" + rough + "\n" + correctionsText(detection)}}
}

// maxCorrections bounds (in runes) the corrections in agent 3's prompt.
const maxCorrections = 120

// correctionsText is agent 2's answer in agent 3's prompt: a valid list as
// "object=对象; object: 属性→对象" (the JSON's 90 runes an item leave too
// little context for the closing tag), anything else verbatim, clipped.
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
// answer, as a workflow validates a tool's output: its validCorrections.
// Invalid answers passed on verbatim make agent 3 lose its closing tag.
func clientCorrections(en, rough, detection string) string {
	return errorsJSON(validCorrections(en, rough, detection))
}

// validCorrections are the items of agent 2's list whose word is in the
// English (in any case) and whose rendering the rough translation lacks.
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

// termError is the error of term rendered as wrong ("": the rendering is missing).
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
