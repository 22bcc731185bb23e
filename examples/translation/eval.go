package main

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"examples/translation/grader"
	"github.com/troupe-ml/troupe/eval"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
)

// metrics of one system on the evaluated sentences.
type metrics struct {
	N                 int
	ChrF              float64 // mean sentence chrF
	PlaceholderAcc    float64 // sentences with placeholders, fraction preserved
	TermAcc           float64 // glossary terms (that the reference uses) present
	RuleViolations    float64 // pronoun + abbreviation issues per sentence
	Quality           float64 // TranslationQualityGrader, normalised (small model's reward)
	DetP, DetR, DetF1 float64 // detector precision/recall/F1 over all items
	JSONValid         float64 // fraction of detector outputs that are valid JSON
	Detection         float64 // ProperNounDetectionGrader, normalised (larger model's reward)
	FinalTagRate      float64 // fraction of agent-3 outputs with <final_result>
	// Agent3ChrF and Agent3TermAcc are the workflow's figures with agent
	// 3's final translation as written, before the client's guard
	// (guardFinal); the row's own figures are the guarded ones.
	Agent3ChrF, Agent3TermAcc float64
	// CheckerP, CheckerR and CheckerDetection are the precision, recall
	// and detection reward of a string-matching glossary checker in agent
	// 2's place (checkerErrors): the baseline a learned detector has to
	// beat.
	CheckerP, CheckerR, CheckerDetection float64
	placeholderSentence                  int
	// sent holds each sentence's figures, in task order, for the report's
	// paired bootstrap intervals.
	sent []sentScore
	// seen is what agent 2 was given of each rough translation (workflow
	// rows only), kept so that a later detector can be scored on the same
	// inputs (detectOn).
	seen []string
	// Examples are the first few sentences through the workflow.
	Examples [][5]string // source, reference, rough, detection, final output
}

// sentScore is one sentence's figures in an evaluation.
type sentScore struct {
	ChrF       float64 // chrF against the reference
	Quality    float64 // TranslationQualityGrader, normalised
	Detection  float64 // ProperNounDetectionGrader, normalised (workflow rows only)
	Agent3ChrF float64 // chrF of agent 3's answer as written (workflow rows only)
}

// evalPrompt is the token prompt of msgs that the evaluation decodes from:
// the chat template with the assistant turn open, cut to its end when it
// leaves the model fewer than two positions.
func evalPrompt(lm *nn.LM, tok *tokenizer.Tokenizer, msgs []tokenizer.Message) ([]int, error) {
	p, err := tok.ApplyChat(msgs, true)
	if err != nil {
		return nil, err
	}
	if len(p) >= lm.Config.MaxLen-1 {
		p = p[len(p)-(lm.Config.MaxLen-2):] // keep the end (the open assistant turn)
	}
	return p, nil
}

// generate runs greedy generation for a batch of chat prompts, in chunks
// of prompts of similar length (a chunk runs as long as its longest
// generation). Each prompt has min(maxTok, MaxLen − its length) tokens,
// nn.LM.Generate stopping every sequence at MaxLen on its own, as the swarm
// server does for an RL rollout.
func generate(lm *nn.LM, tok *tokenizer.Tokenizer, msgs [][]tokenizer.Message, maxTok int) ([]string, error) {
	end := tok.MustSpecialID(tokenizer.End)
	out := make([]string, len(msgs))
	all := make([][]int, len(msgs))
	order := make([]int, len(msgs))
	for i := range msgs {
		p, err := evalPrompt(lm, tok, msgs[i])
		if err != nil {
			return nil, err
		}
		all[i], order[i] = p, i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(all[a]) - len(all[b]) })
	const chunk = 32
	for idx := range slices.Chunk(order, chunk) {
		prompts := make([][]int, len(idx))
		for j, i := range idx {
			prompts[j] = all[i]
		}
		gens, err := lm.Generate(prompts, nn.GenerateOptions{MaxTokens: maxTok, StopTokens: []int{end}})
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		for j, g := range gens {
			// Byte-level tokens can end inside a character. The swarm
			// endpoint's JSON carries such bytes as U+FFFD, and so must
			// the texts here, which are also cached as JSON.
			out[idx[j]] = strings.ToValidUTF8(tok.DecodeSkipSpecial(g.Tokens), "\uFFFD")
		}
	}
	return out, nil
}

// evaluate runs agent 1 alone and the full workflow greedily on tasks.
func (e *env) evaluate(small, large decoder, tasks []task) (alone, flow metrics, err error) {
	var m1, m2, m3 [][]tokenizer.Message
	for _, t := range tasks {
		m1 = append(m1, msgsTranslate(t.En))
	}
	rough, err := small(m1, e.maxTok)
	if err != nil {
		return
	}
	seen := make([]string, len(rough)) // what agents 2 and 3 see of each rough translation
	for i, t := range tasks {
		seen[i] = clip(rough[i], e.maxRough)
		m2 = append(m2, e.hint.msgs(t.En, seen[i]))
	}
	det, err := large(m2, e.maxDetTok)
	if err != nil {
		return
	}
	for i, t := range tasks {
		m3 = append(m3, msgsFinal(t.En, seen[i], clientCorrections(t.En, seen[i], det[i])))
	}
	fin, err := small(m3, e.maxTok+16)
	if err != nil {
		return
	}
	var asWritten metrics
	var dc, cc detCounts
	for i, t := range tasks {
		if i < 6 {
			flow.Examples = append(flow.Examples, [5]string{t.En, t.Ref, rough[i], det[i], fin[i]})
		}
		e.scoreText(&alone, t, rough[i])
		final, ok := grader.ExtractFinal(fin[i])
		if ok {
			flow.FinalTagRate++
		}
		// What the workflow delivers: agent 3's final translation where
		// the client's guard accepts it, else agent 1's rough one.
		e.scoreText(&flow, t, guardFinal(rough[i], seen[i], final, ok, validCorrections(t.En, seen[i], det[i])))
		flow.sent[i].Agent3ChrF = e.scoreText(&asWritten, t, final)
		// The quality grader on agent 3's output as written (a missing
		// <final_result> scores 0), where scoreText graded the bare text.
		q := e.qg.Grade(t.En, t.Ref, fin[i]).Normalised
		flow.Quality += q - flow.sent[i].Quality
		flow.sent[i].Quality = q
		// Graded against the errors of the text agent 2 was given, as in
		// the RL rollouts.
		truth := truthErrors(t, seen[i])
		d := grader.ProperNounDetectionGrader{}.Grade(det[i], truth)
		flow.sent[i].Detection = d.Normalised
		flow.Detection += d.Normalised
		flow.JSONValid += d.Parts["json_valid"]
		dc.add(d)
		cd := grader.ProperNounDetectionGrader{}.Grade(errorsJSON(checkerErrors(e.qg.Glossary, t.En, seen[i])), truth)
		flow.CheckerDetection += cd.Normalised
		cc.add(cd)
	}
	n := float64(len(tasks))
	for _, m := range []*metrics{&alone, &flow, &asWritten} {
		m.N = len(tasks)
		m.ChrF /= n
		m.TermAcc = m.TermAcc / max(1, float64(termCount(tasks)))
		if m.placeholderSentence > 0 {
			m.PlaceholderAcc /= float64(m.placeholderSentence)
		}
		m.RuleViolations /= n
		m.Quality /= n
		m.Detection /= n
		m.JSONValid /= n
		m.FinalTagRate /= n
	}
	flow.seen = seen
	flow.Agent3ChrF, flow.Agent3TermAcc = asWritten.ChrF, asWritten.TermAcc
	flow.CheckerDetection /= n
	flow.CheckerP, flow.CheckerR = cc.precRecall()
	flow.DetP, flow.DetR = dc.precRecall()
	if flow.DetP+flow.DetR > 0 {
		flow.DetF1 = 2 * flow.DetP * flow.DetR / (flow.DetP + flow.DetR)
	}
	return
}

// detectOn scores the larger model as agent 2 on given inputs: seen[i] is
// the rough translation of tasks[i] it is shown (another evaluation's
// metrics.seen). After RL, detectOn(large, test, flowBefore.seen) measures
// the detector alone, on the warm-start row's inputs, so that a change of
// agent 1's rough translations (the small model's RL moves them) does not
// enter.
func (e *env) detectOn(large decoder, tasks []task, seen []string) (det detScore, err error) {
	if len(seen) != len(tasks) {
		return det, fmt.Errorf("translation: detectOn: %d inputs for %d tasks", len(seen), len(tasks))
	}
	msgs := make([][]tokenizer.Message, len(tasks))
	for i, t := range tasks {
		msgs[i] = e.hint.msgs(t.En, seen[i])
	}
	out, err := large(msgs, e.maxDetTok)
	if err != nil {
		return det, err
	}
	var dc detCounts
	for i, t := range tasks {
		d := grader.ProperNounDetectionGrader{}.Grade(out[i], truthErrors(t, seen[i]))
		det.Detection += d.Normalised
		det.sent = append(det.sent, d.Normalised)
		dc.add(d)
	}
	det.Detection /= float64(len(tasks))
	det.P, det.R = dc.precRecall()
	return det, nil
}

// detScore is the detector's reward, precision and recall on one input set,
// and its reward on each sentence.
type detScore struct {
	Detection, P, R float64
	sent            []float64
}

// detCounts are a detector's true positive, false positive and false
// negative items over sentences.
type detCounts struct{ tp, fp, fn float64 }

func (c *detCounts) add(d grader.Result) {
	c.tp, c.fp, c.fn = c.tp+d.Parts["tp"], c.fp+d.Parts["fp"], c.fn+d.Parts["fn"]
}

// precRecall is precision and recall (0 where a denominator is 0).
func (c detCounts) precRecall() (p, r float64) {
	if c.tp+c.fp > 0 {
		p = c.tp / (c.tp + c.fp)
	}
	if c.tp+c.fn > 0 {
		r = c.tp / (c.tp + c.fn)
	}
	return p, r
}

func termCount(tasks []task) int {
	n := 0
	for _, t := range tasks {
		n += len(t.Terms)
	}
	return n
}

// scoreText accumulates the sentence-level metrics of a bare translation
// and returns its chrF.
func (e *env) scoreText(m *metrics, t task, hyp string) (chrf float64) {
	chrf = eval.ChrF(hyp, t.Ref)
	m.ChrF += chrf
	if ph := grader.Placeholders(t.En); len(ph) > 0 {
		m.placeholderSentence++
		if slices.Equal(grader.Placeholders(hyp), ph) {
			m.PlaceholderAcc++
		}
	}
	for _, term := range t.Terms {
		if strings.Contains(hyp, term.Zh) {
			m.TermAcc++
		}
	}
	r := e.qg.GradeText(t.En, t.Ref, hyp, grader.Result{})
	for _, is := range r.Issues {
		if is.Rule == grader.RulePronoun || is.Rule == grader.RuleAbbreviation {
			m.RuleViolations++
		}
	}
	m.Quality += r.Normalised
	m.sent = append(m.sent, sentScore{ChrF: chrf, Quality: r.Normalised})
	return chrf
}

// guardFinal is the client's check of agent 3's answer, as clientCorrections
// is of agent 2's. Agent 3 was given seen (agent 1's rough translation
// rough, clipped) and the corrections corr; final is its answer (tagged: it
// came inside <final_result>). The answer is kept only where agent 3 was
// given corrections, it contains every correction's rendering, and its edit
// is confined to them: its edit distance to seen, in runes, is at most
// twice the runes of the corrections' renderings and wrong spans (replacing
// a wrong span costs at most their sum, moving a rendering elsewhere twice
// its length; the factor 2 was chosen on the validation split against 1 and
// against no bound). Otherwise the workflow delivers rough: there was
// nothing to edit, or the edit is not the one asked for. This is the "do no
// harm" concern of conservative automatic post-editing (Junczys-Dowmunt and
// Grundkiewicz 2016; Chatterjee et al. 2018), where a post-editor's rewrite
// of correct text is a loss. The guard never reads the reference, and agent
// 3's own reward stays its output as written.
func guardFinal(rough, seen, final string, tagged bool, corr []grader.TermError) string {
	if !tagged || len(corr) == 0 {
		return rough
	}
	budget := 0
	for _, c := range corr {
		if !strings.Contains(final, c.CorrectTranslation) {
			return rough
		}
		budget += utf8.RuneCountInString(c.CorrectTranslation) + utf8.RuneCountInString(c.WrongTranslation)
	}
	if eval.EditDistance([]rune(final), []rune(seen)) > 2*budget {
		return rough
	}
	return final
}
