package main

import (
	"encoding/json"
	"math/rand/v2"
	"strings"

	"github.com/troupe-ml/troupe/examples/translation/corpus"
	"github.com/troupe-ml/troupe/examples/translation/grader"
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

// msgsDetect is agent 2's prompt: the English, the glossary entries of its
// terms (glossaryHint) and the rough translation.
func msgsDetect(en, gloss, rough string) []tokenizer.Message {
	return []tokenizer.Message{{Role: "system", Content: sysDetect}, {Role: "user", Content: en + "\n" + gloss + "\n" + rough}}
}

// glossaryHint lists the glossary entries of the terms in en (at most
// three, longest first), as a terminology checker would look them up:
// "Glossary: degrees of freedom=自由度". With them in its prompt, agent 2
// checks each rendering against the rough translation and can copy the
// correction (its pointer head) instead of recalling 241 renderings; it
// still has to judge which entries the translation needs.
func glossaryHint(g *corpus.Glossary, en string) string {
	terms := g.TermsIn(en)
	if len(terms) == 0 {
		return "Glossary: none"
	}
	parts := make([]string, 0, 3)
	for _, t := range terms[:min(3, len(terms))] {
		parts = append(parts, t.En+"="+t.Zh)
	}
	return "Glossary: " + strings.Join(parts, "; ")
}

func msgsFinal(en, rough, corrections string) []tokenizer.Message {
	return []tokenizer.Message{{Role: "system", Content: sysFinal}, {Role: "user", Content: en + "\n" + rough + "\n" + corrections}}
}

func finalAnswer(zh string) string { return "<final_result>" + zh + "</final_result>" }

// truthErrors lists the true terminology errors of a rough translation: the
// task's terms whose Chinese rendering is missing from it.
func truthErrors(t task, rough string) []grader.TermError {
	var out []grader.TermError
	for _, term := range t.Terms {
		if !strings.Contains(rough, term.Zh) {
			out = append(out, grader.TermError{OriginalWord: term.En, CorrectTranslation: term.Zh, WrongReason: "glossary"})
		}
	}
	return out
}

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
	var wrong string
	for tries := 0; tries < 20; tries++ {
		w := g.Terms[r.IntN(len(g.Terms))].Zh
		if w != term.Zh && !strings.Contains(term.Zh, w) && !strings.Contains(w, term.Zh) {
			wrong = w
			break
		}
	}
	if wrong == "" {
		return t.Ref, nil
	}
	rough := strings.Replace(t.Ref, term.Zh, wrong, 1)
	return rough, []grader.TermError{{OriginalWord: term.En, WrongTranslation: wrong, WrongReason: "glossary", CorrectTranslation: term.Zh}}
}

// applyCorrections is what agent 3 should learn: replace each wrong
// rendering by the correct one. It is used only to check the warm-start
// data; agent 3 itself is a model.
func applyCorrections(rough string, errs []grader.TermError) string {
	for _, e := range errs {
		if e.WrongTranslation != "" {
			rough = strings.Replace(rough, e.WrongTranslation, e.CorrectTranslation, 1)
		}
	}
	return rough
}
