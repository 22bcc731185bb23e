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
	"github.com/troupe-ml/troupe/textgen"
)

// metrics of one system on the evaluated sentences.
type metrics struct {
	N                                    int
	ChrF                                 float64 // mean sentence chrF
	PlaceholderAcc                       float64 // sentences with placeholders, fraction preserved
	TermAcc                              float64 // glossary terms (that the reference uses) present
	RuleViolations                       float64 // pronoun + abbreviation issues per sentence
	Quality                              float64 // TranslationQualityGrader, normalised (small model's reward)
	DetP, DetR, DetF1                    float64 // detector precision/recall/F1 over all items
	JSONValid                            float64 // fraction of detector outputs that are valid JSON
	Detection                            float64 // ProperNounDetectionGrader, normalised (larger model's reward)
	FinalTagRate                         float64 // fraction of agent-3 outputs with <final_result>
	Agent3ChrF, Agent3TermAcc            float64 // agent 3's answers as written, before guardFinal
	CheckerP, CheckerR, CheckerDetection float64 // checkerErrors in agent 2's place
	placeholderSentence                  int
	seen                                 []string    // what agent 2 was given (workflow rows; detectOn)
	Examples                             [][5]string // source, reference, rough, detection, final output
	// Per sentence, for the bootstrap intervals (the last two: workflow rows).
	chrf, quality, agent3ChrF, detection []float64
}

// generate decodes chat prompts greedily in chunks of similar length, each
// with min(maxTok, MaxLen − its length) tokens as in a rollout; a prompt
// that leaves fewer than two keeps its end, the open assistant turn.
func generate(lm *nn.LM, tok *tokenizer.Tokenizer, msgs [][]tokenizer.Message, maxTok int) ([]string, error) {
	end := tok.MustSpecialID(tokenizer.End)
	out := make([]string, len(msgs))
	all := make([][]int, len(msgs))
	order := make([]int, len(msgs))
	for i := range msgs {
		p, err := tok.ApplyChat(msgs[i], true)
		if err != nil {
			return nil, err
		}
		if len(p) >= lm.Config.MaxLen-1 {
			p = p[len(p)-(lm.Config.MaxLen-2):]
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
		gens, err := lm.Generate(prompts, textgen.GenerateOptions{MaxTokens: maxTok, StopTokens: []int{end}})
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		for j, g := range gens {
			// A token ending inside a character gives U+FFFD, as in the swarm's JSON.
			out[idx[j]] = strings.ToValidUTF8(tok.DecodeSkipSpecial(g.Tokens), "\uFFFD")
		}
	}
	return out, nil
}

// evaluate runs agent 1 alone and the full workflow greedily on tasks.
func (e *env) evaluate(small, large decoder, tasks []task) (alone, flow metrics, err error) {
	var m2, m3 [][]tokenizer.Message
	rough, err := small(translateAll(tasks), e.maxTok)
	if err != nil {
		return
	}
	seen := make([]string, len(rough))    // what agents 2 and 3 see of each rough translation
	checker := make([]string, len(rough)) // the string-matching checker's answers in agent 2's place
	for i, t := range tasks {
		seen[i] = clip(rough[i], e.maxRough)
		m2 = append(m2, msgsDetect(e.qg.Glossary, t.En, seen[i]))
		checker[i] = errorsJSON(checkerErrors(e.qg.Glossary, t.En, seen[i]))
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
	ds, cs := gradeDetections(tasks, seen, det), gradeDetections(tasks, seen, checker)
	var asWritten metrics
	for i, t := range tasks {
		if i < 6 {
			flow.Examples = append(flow.Examples, [5]string{t.En, t.Ref, rough[i], det[i], fin[i]})
		}
		e.scoreText(&alone, t, rough[i])
		final, ok := grader.ExtractFinal(fin[i])
		if ok {
			flow.FinalTagRate++
		}
		// What the workflow delivers, after the client's guard.
		e.scoreText(&flow, t, guardFinal(rough[i], seen[i], final, ok, validCorrections(t.En, seen[i], det[i])))
		flow.agent3ChrF = append(flow.agent3ChrF, e.scoreText(&asWritten, t, final))
		// Agent 3's reward is its output as written (no tag scores 0).
		q := e.qg.Grade(t.En, t.Ref, fin[i]).Normalised
		flow.Quality += q - flow.quality[i]
		flow.quality[i] = q
	}
	n, terms := float64(len(tasks)), 0
	for _, t := range tasks {
		terms += len(t.Terms)
	}
	for _, m := range []*metrics{&alone, &flow, &asWritten} {
		m.N = len(tasks)
		m.ChrF /= n
		m.TermAcc /= max(1, float64(terms))
		if m.placeholderSentence > 0 {
			m.PlaceholderAcc /= float64(m.placeholderSentence)
		}
		m.RuleViolations /= n
		m.Quality /= n
		m.FinalTagRate /= n
	}
	flow.seen, flow.detection = seen, ds.sent
	flow.Agent3ChrF, flow.Agent3TermAcc = asWritten.ChrF, asWritten.TermAcc
	flow.Detection, flow.JSONValid, flow.DetP, flow.DetR = ds.Detection, ds.JSONValid, ds.P, ds.R
	flow.CheckerDetection, flow.CheckerP, flow.CheckerR = cs.Detection, cs.P, cs.R
	if flow.DetP+flow.DetR > 0 {
		flow.DetF1 = 2 * flow.DetP * flow.DetR / (flow.DetP + flow.DetR)
	}
	return
}

// detectOn scores the larger model as agent 2 on the rough translations
// seen of another evaluation (metrics.seen): after RL, on the warm-start
// row's, it measures the detector alone, without the change of agent 1's
// translations that the small model's RL brings.
func (e *env) detectOn(large decoder, tasks []task, seen []string) (detScore, error) {
	if len(seen) != len(tasks) {
		return detScore{}, fmt.Errorf("translation: detectOn: %d inputs for %d tasks", len(seen), len(tasks))
	}
	msgs := make([][]tokenizer.Message, len(tasks))
	for i, t := range tasks {
		msgs[i] = msgsDetect(e.qg.Glossary, t.En, seen[i])
	}
	out, err := large(msgs, e.maxDetTok)
	if err != nil {
		return detScore{}, err
	}
	return gradeDetections(tasks, seen, out), nil
}

// detScore is a detector's mean reward, valid-JSON rate, precision and
// recall over all items, and its reward on each sentence.
type detScore struct {
	Detection, JSONValid, P, R float64
	sent                       []float64
}

// gradeDetections grades agent 2's answers out against the errors of the
// rough translations seen it was given, as in the RL rollouts.
func gradeDetections(tasks []task, seen, out []string) (det detScore) {
	var tp, fp, fn float64
	for i, t := range tasks {
		d := grader.ProperNounDetectionGrader{}.Grade(out[i], truthErrors(t, seen[i]))
		det.Detection += d.Normalised
		det.JSONValid += d.Parts["json_valid"]
		det.sent = append(det.sent, d.Normalised)
		tp, fp, fn = tp+d.Parts["tp"], fp+d.Parts["fp"], fn+d.Parts["fn"]
	}
	det.Detection /= float64(len(tasks))
	det.JSONValid /= float64(len(tasks))
	if tp+fp > 0 {
		det.P = tp / (tp + fp)
	}
	if tp+fn > 0 {
		det.R = tp / (tp + fn)
	}
	return det
}

// scoreText adds a bare translation's figures to m and returns its chrF.
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
	m.chrf, m.quality = append(m.chrf, chrf), append(m.quality, r.Normalised)
	return chrf
}

// guardFinal keeps agent 3's answer final (tagged: in <final_result>) to
// seen with corrections corr where there were some, it has their renderings
// and its edit distance to seen is at most twice the runes of the renderings
// and wrong spans (moving a rendering costs twice its length; 2 chosen on
// the validation split); else rough: conservative post-editing's "do no harm".
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
