package grader

import (
	"encoding/json"
	"fmt"
	"strings"
)

// TermError is one terminology error, as agent 2 reports it and the truth lists it.
type TermError struct {
	OriginalWord       string `json:"original_word"`
	WrongTranslation   string `json:"wrong_translation"`
	WrongReason        string `json:"wrong_reason"`
	CorrectTranslation string `json:"correct_translation"`
}

// ParseDetections parses agent 2's output strictly: after trimming white
// space it must be a JSON array of objects, each with string fields
// original_word and correct_translation non-empty (wrong_translation and
// wrong_reason must be strings when present).
func ParseDetections(output string) ([]TermError, error) {
	s := strings.TrimSpace(output)
	var raw []map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("not a JSON array of objects: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON array")
	}
	out := make([]TermError, 0, len(raw))
	for i, o := range raw {
		var f [4]string // the first two required
		for k, key := range [4]string{"original_word", "correct_translation", "wrong_translation", "wrong_reason"} {
			v, ok := o[key]
			if !ok {
				if k < 2 {
					return nil, fmt.Errorf("item %d: missing %q", i, key)
				}
				continue
			}
			if f[k], ok = v.(string); !ok {
				return nil, fmt.Errorf("item %d: %q is not a string", i, key)
			}
			if k < 2 && strings.TrimSpace(f[k]) == "" {
				return nil, fmt.Errorf("item %d: %q is empty", i, key)
			}
		}
		out = append(out, TermError{OriginalWord: f[0], CorrectTranslation: f[1], WrongTranslation: f[2], WrongReason: f[3]})
	}
	return out, nil
}

// Rule names of ProperNounDetectionGrader.
const (
	RuleInvalidJSON   = "invalid_json"
	RuleMissed        = "missed"
	RuleWrongFix      = "wrong_correction"
	RuleFalsePositive = "false_positive"
)

// ProperNounDetectionGrader scores agent 2's JSON list of terminology errors
// on a 0–2 scale: the F1 of its items against the true errors, matched by
// original word (case-insensitively, each once), plus the matches with the
// true correction over the longer list's length (both 1 for two empty
// lists). Output ParseDetections refuses scores 0. Parts holds tp, fp, fn,
// f1 and correction.
type ProperNounDetectionGrader struct{}

// Grade scores output against the true errors.
func (ProperNounDetectionGrader) Grade(output string, truth []TermError) Result {
	res := Result{Parts: map[string]float64{}}
	pred, err := ParseDetections(output)
	if err != nil {
		res.Parts["json_valid"] = 0
		res.issue(RuleInvalidJSON, "%v", err)
		return res
	}
	res.Parts["json_valid"] = 1
	used := make([]bool, len(truth))
	tp, fixed := 0, 0
	for _, p := range pred {
		hit := -1
		for j, t := range truth {
			if !used[j] && strings.EqualFold(strings.TrimSpace(p.OriginalWord), strings.TrimSpace(t.OriginalWord)) {
				hit = j
				break
			}
		}
		if hit < 0 {
			res.issue(RuleFalsePositive, "%q is not a terminology error here", p.OriginalWord)
			continue
		}
		used[hit] = true
		tp++
		if strings.TrimSpace(p.CorrectTranslation) == truth[hit].CorrectTranslation {
			fixed++
		} else {
			res.issue(RuleWrongFix, "%q: proposed %q, want %q", p.OriginalWord, p.CorrectTranslation, truth[hit].CorrectTranslation)
		}
	}
	for j, t := range truth {
		if !used[j] {
			res.issue(RuleMissed, "missed %q (translated %q, want %q)", t.OriginalWord, t.WrongTranslation, t.CorrectTranslation)
		}
	}
	fp, fn := len(pred)-tp, len(truth)-tp
	f1, corr := 1.0, 1.0
	if len(pred)+len(truth) > 0 {
		f1 = 2 * float64(tp) / float64(len(pred)+len(truth))
		corr = float64(fixed) / float64(max(len(pred), len(truth)))
	}
	res.Parts["tp"], res.Parts["fp"], res.Parts["fn"] = float64(tp), float64(fp), float64(fn)
	res.Parts["f1"], res.Parts["correction"] = f1, corr
	res.Score = f1 + corr
	res.Normalised = res.Score / 2
	return res
}
