package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"examples/translation/corpus"
	"examples/translation/grader"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/swarm"
)

// trainTokenizer learns the BPE vocabulary on the train split (both
// languages) plus the agents' fixed strings.
func trainTokenizer(train []task, g *corpus.Glossary, vocab int) (*tokenizer.Tokenizer, error) {
	var texts []string
	r := rand.New(rand.NewPCG(7, 7))
	for _, t := range train {
		texts = append(texts, t.En, t.Ref)
		_, errs := injectError(t, g, r, 0.3)
		texts = append(texts, errorsJSON(errs), finalAnswer(""))
	}
	for i := 0; i < 50; i++ {
		texts = append(texts, sysTranslate, sysDetect, sysFinal)
	}
	return tokenizer.Train(texts, tokenizer.TrainOptions{VocabSize: vocab})
}

// roleExample builds one supervised example: the chat prompt and the
// assistant reply followed by <|end|>.
func roleExample(tok *tokenizer.Tokenizer, msgs []tokenizer.Message, reply string) (nn.SeqExample, error) {
	p, err := tok.ApplyChat(msgs, true)
	if err != nil {
		return nn.SeqExample{}, err
	}
	tgt := append(tok.Encode(reply), tok.MustSpecialID(tokenizer.End))
	return nn.SeqExample{Prompt: p, Target: tgt}, nil
}

// roughEx is one of agent 1's real outputs on a train task: the warm start
// of agents 2 and 3 learns from what agent 1 actually writes, not from
// references with injected errors, which agent 1 never produces.
type roughEx struct {
	T     task
	Rough string
}

// warmMix sets the small model's warm-start mixture.
type warmMix struct {
	// FinalFrac is the fraction of agent-3 examples in the second phase of
	// the small model's warm start (the rest are agent 1's).
	FinalFrac float64
	// RoughTasks is how many train tasks agent 1 translates (greedily,
	// after the first phase) to make the agents' 2 and 3 warm-start data
	// (0: all).
	RoughTasks int
	// Pseudo is the fraction of agent-3 examples made on pseudo-rough
	// texts (pseudoFinalExample) rather than on agent 1's real outputs. In
	// the first phase every agent-3 example is a pseudo one, and agent 3
	// has the share FinalFrac of that phase too.
	Pseudo float64
	// CopySteps are warm-start steps, before the two phases, in which the
	// small model learns only agent 3's job on pseudo-rough texts, so that
	// copying is learnt before it becomes a share of a mixture.
	CopySteps int
}

// key is the mixture's part of a warm-start cache key.
func (m warmMix) key() string { return fmt.Sprintf("%+v", m) }

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
	return strings.Replace(rough, term.Zh, w, 1), grader.TermError{OriginalWord: term.En, WrongTranslation: w, WrongReason: "glossary", CorrectTranslation: term.Zh}, true
}

// pseudoRough makes a text that agent 3 cannot predict from the English
// source: one to three random pieces of train references spliced together,
// some repeated (agent 1's outputs repeat themselves). Copying it is the only
// way to lower the loss, so agent 3 learns to copy instead of memorising the
// train translations (with real rough translations of train sentences, which
// agent 1 renders well because it was trained on them, "copy" and
// "translate from memory" give the same target).
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
			bad := string(rr[:at]) + w + string(rr[at:])
			if len([]rune(bad)) <= maxRough {
				e := grader.TermError{OriginalWord: term.En, WrongTranslation: w, WrongReason: "glossary", CorrectTranslation: term.Zh}
				return bad, errorsJSON([]grader.TermError{e}), finalAnswer(string(rr[:at]) + term.Zh + string(rr[at:]))
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
//     a term the English does not contain: the rough translation unchanged;
//   - otherwise (no error, or a missed one, corrections "[]"): the rough
//     translation copied unchanged.
//
// So agent 3 keeps agent 1's translation unless a correction asks for a
// change, instead of re-translating everything (too hard for a small model).
func finalExample(rx roughEx, g *corpus.Glossary, r *rand.Rand, maxRough int) (rough, corr, target string) {
	rough = clip(rx.Rough, maxRough)
	if r.Float64() < 0.3 {
		if bad, e, ok := injectIntoRough(rx.T, rough, g, r); ok {
			errs := append([]grader.TermError{e}, truthErrors(rx.T, rough)...)
			if len(errs) == 1 {
				return bad, errorsJSON(errs), finalAnswer(rough)
			}
		}
	}
	if pt := presentTerms(rx.T, rough); len(pt) > 0 && r.Float64() < 0.15 {
		// A false alarm: the rendering the correction asks for is already
		// there, so agent 3 keeps the rough translation (agent 2's false
		// positives, most of its answers at the warm start, must not cost
		// the final translation).
		term := pt[r.IntN(len(pt))]
		e := grader.TermError{OriginalWord: term.En, WrongReason: "glossary", CorrectTranslation: term.Zh}
		return rough, errorsJSON([]grader.TermError{e}), finalAnswer(rough)
	}
	if r.Float64() < 0.1 && len(g.Terms) > 0 {
		// Another false alarm: a glossary term the English does not have.
		if term := g.Terms[r.IntN(len(g.Terms))]; !strings.Contains(rx.T.En, term.En) && !strings.Contains(rough, term.Zh) {
			e := grader.TermError{OriginalWord: term.En, WrongReason: "glossary", CorrectTranslation: term.Zh}
			return rough, errorsJSON([]grader.TermError{e}), finalAnswer(rough)
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
// (swapTerm), which also returns the English the example uses.
//
// Sentences without glossary terms always have the label "[]".
func detectExample(rx roughEx, g *corpus.Glossary, r *rand.Rand, maxRough int) (en, rough, label string) {
	var errs []grader.TermError
	u := r.Float64()
	if u >= 0.4 && r.IntN(2) == 0 {
		// Half the reference-based examples swap a term (swapTerm).
		if t, ok := swapTerm(rx.T, g, r); ok {
			rx = roughEx{T: t}
		}
	}
	en = rx.T.En
	switch {
	case u < 0.4 || len(rx.T.Terms) == 0:
		rough = clip(rx.Rough, maxRough)
		if r.Float64() < 0.3 {
			if bad, e, ok := injectIntoRough(rx.T, rough, g, r); ok {
				rough, errs = bad, []grader.TermError{e}
			}
		}
	case u < 0.6:
		rough = clip(rx.T.Ref, maxRough)
	case u < 0.85:
		rough = clip(rx.T.Ref, maxRough)
		if bad, e, ok := injectIntoRough(rx.T, rough, g, r); ok {
			rough, errs = bad, []grader.TermError{e}
		}
	default:
		term := rx.T.Terms[r.IntN(len(rx.T.Terms))]
		rough = clip(strings.Replace(rx.T.Ref, term.Zh, "", 1), maxRough)
	}
	for _, te := range truthErrors(rx.T, rough) {
		if len(errs) == 0 || te.OriginalWord != errs[0].OriginalWord {
			errs = append(errs, te)
		}
	}
	return en, rough, errorsJSON(errs)
}

type modelSpec struct {
	Dim, Layers, Heads, MaxLen int
	// CopyDim is the width of the pointer (copy) head (nn.LMConfig.CopyDim;
	// 0: none): agents 3 and 2 reproduce spans of their prompt (the rough
	// translation, the English words), which a pointer does exactly.
	CopyDim int
}

// config is the model's nn.LMConfig. Positions are rotary (Su et al. 2021):
// relative positions make copying a span, agent 3's job, easier to learn
// than learned absolute ones.
func (s modelSpec) config(vocab int) nn.LMConfig {
	return nn.LMConfig{Vocab: vocab, Dim: s.Dim, Layers: s.Layers, Heads: s.Heads, MaxLen: s.MaxLen, Positions: nn.Rotary, CopyDim: s.CopyDim}
}

// warmCfg is one warm start's hyper-parameters.
type warmCfg struct {
	Spec     modelSpec
	Mix      warmMix
	Steps    int
	Batch    int
	LR       float64
	Seed     uint64
	MaxRough int
	MaxTok   int
	CacheDir string
}

// cacheVersion is bumped whenever a role's warm-start data or training
// changes, so stale checkpoints are not reused.
var cacheVersion = map[string]int{"small": 12, "large": 11}

func (c warmCfg) cachePath(role string, tok *tokenizer.Tokenizer, extra string) string {
	tj, _ := tok.MarshalJSON()
	h := sha256.New()
	fmt.Fprintf(h, "v%d|%s|", cacheVersion[role], role)
	fmt.Fprintf(h, "%+v|%s|%d|%d|%g|%d|%d|%d|%s|", c.Spec, c.Mix.key(), c.Steps, c.Batch, c.LR, c.Seed, c.MaxRough, c.MaxTok, extra)
	h.Write(tj)
	key := hex.EncodeToString(h.Sum(nil))[:16]
	return filepath.Join(c.CacheDir, fmt.Sprintf("warm-%s-%s", role, key))
}

// supervise runs steps supervised steps of tr on examples drawn by draw
// (those longer than the context are redrawn) and returns the mean loss of
// the last 20 steps.
func supervise(role string, tr *nn.LMTrainer, from, to, total, batch, maxLen int, draw func() (nn.SeqExample, error), logf func(string, ...any)) (float64, error) {
	start := time.Now()
	var recent []float64
	for s := from; s < to; s++ {
		b, err := drawBatch(draw, batch, maxLen)
		if err != nil {
			return 0, fmt.Errorf("warm start %s: %w", role, err)
		}
		loss, err := tr.SupervisedStep(b)
		if err != nil {
			return 0, fmt.Errorf("warm start %s step %d: %w", role, s, err)
		}
		recent = append(recent, loss)
		if len(recent) > 20 {
			recent = recent[1:]
		}
		if (s+1)%max(1, total/10) == 0 || s == to-1 {
			logf("warm start %s: step %d/%d loss %.3f (%.1fs)", role, s+1, total, loss, time.Since(start).Seconds())
		}
	}
	mean := 0.0
	for _, l := range recent {
		mean += l / float64(len(recent))
	}
	return mean, nil
}

// drawBatch draws n examples that fit a context of maxLen tokens: an
// over-long prompt keeps its end (the open assistant turn), as generation
// does at inference; an example whose reply alone takes over half the
// context is drawn again.
func drawBatch(draw func() (nn.SeqExample, error), n, maxLen int) ([]nn.SeqExample, error) {
	b := make([]nn.SeqExample, 0, n)
	for tries := 0; len(b) < n; tries++ {
		ex, err := draw()
		if err != nil {
			return nil, err
		}
		if len(ex.Prompt)+len(ex.Target) > maxLen {
			if len(ex.Target) > maxLen/2 {
				if tries > 100*n {
					return nil, fmt.Errorf("replies do not fit the context (%d)", maxLen)
				}
				continue
			}
			ex.Prompt = ex.Prompt[len(ex.Prompt)-(maxLen-len(ex.Target)):]
		}
		b = append(b, ex)
	}
	return b, nil
}

// pickRoughTasks chooses the train tasks agent 1 translates for the warm
// start data: n of them in a seeded order (all when n <= 0).
func pickRoughTasks(tasks []task, n int, seed uint64) []task {
	if n <= 0 || n > len(tasks) {
		n = len(tasks)
	}
	r := rand.New(rand.NewPCG(seed, 31))
	out := make([]task, n)
	for i, j := range r.Perm(len(tasks))[:n] {
		out[i] = tasks[j]
	}
	return out
}

// warmStartSmall trains (or loads from the cache) the small model, which
// plays agents 1 and 3, on the train split: cfg.Mix.CopySteps steps of agent
// 3 alone on pseudo-rough texts, then two phases: first agent 1 on
// sentence pairs mixed with agent 3 copying (and correcting) pseudo-rough
// texts (half the steps); then agent 1 translates cfg.Mix.RoughTasks train
// sentences greedily, and the second half mixes agent-1 pairs with agent-3
// examples built on those real rough translations (finalExample) and on
// pseudo-roughs. It returns the LM, the mean loss of the last
// 20 steps (-1 when loaded) and the rough translations (for agent 2).
func warmStartSmall(cfg warmCfg, tasks []task, tok *tokenizer.Tokenizer, g *corpus.Glossary, logf func(string, ...any)) (*nn.LM, float64, []roughEx, error) {
	base := cfg.cachePath("small", tok, "")
	tj, _ := tok.MarshalJSON()
	store := nn.NewStore(cfg.Seed)
	lm := nn.NewLM(store, cfg.Spec.config(tok.VocabSize()))
	if meta, err := nn.LoadCheckpoint(base+".safetensors", store, nil); err == nil {
		if meta["tokenizer"] != string(tj) {
			return nil, 0, nil, fmt.Errorf("translation: cached checkpoint %s has another tokenizer", base)
		}
		var rx []roughEx
		if b, err := os.ReadFile(base + "-rough.json"); err == nil && json.Unmarshal(b, &rx) == nil {
			logf("warm start small: loaded cached checkpoint %s", base)
			return lm, -1, rx, nil
		}
		store = nn.NewStore(cfg.Seed)
		lm = nn.NewLM(store, cfg.Spec.config(tok.VocabSize()))
	} else if !errors.Is(err, fs.ErrNotExist) {
		logf("warm start small: ignoring unreadable cache %s: %v", base, err)
	}
	opt := nn.NewAdamW(nn.WarmupCosine(cfg.LR, cfg.Steps/10+1, cfg.Steps, cfg.LR/10), 0.01)
	tr := nn.NewLMTrainer(lm, opt, nn.TrainConfig{ClipNorm: 1, LenBucket: 32})
	r := rand.New(rand.NewPCG(cfg.Seed, 99))
	translate := func() (nn.SeqExample, error) {
		t := tasks[r.IntN(len(tasks))]
		return roleExample(tok, msgsTranslate(t.En), t.Ref)
	}
	// Phase 1 also teaches agent 3's copy mechanism on pseudo-rough texts
	// that cannot be translated from memory (pseudoFinalExample).
	pseudo := func() (nn.SeqExample, error) {
		t := tasks[r.IntN(len(tasks))]
		rough, corr, target := pseudoFinalExample(tasks, g, r, cfg.MaxRough)
		return roleExample(tok, msgsFinal(t.En, rough, corr), target)
	}
	phase1 := func() (nn.SeqExample, error) {
		if r.Float64() < cfg.Mix.FinalFrac {
			return pseudo()
		}
		return translate()
	}
	c0 := min(cfg.Mix.CopySteps, cfg.Steps)
	if _, err := supervise("small (agent 3 copy)", tr, 0, c0, cfg.Steps, cfg.Batch, cfg.Spec.MaxLen, pseudo, logf); err != nil {
		return nil, 0, nil, err
	}
	half := c0 + (cfg.Steps-c0)/2
	if _, err := supervise("small (agents 1+3, pseudo)", tr, c0, half, cfg.Steps, cfg.Batch, cfg.Spec.MaxLen, phase1, logf); err != nil {
		return nil, 0, nil, err
	}
	// Agent 1's real outputs on train sentences.
	st := time.Now()
	rx, err := roughTranslations(lm, tok, pickRoughTasks(tasks, cfg.Mix.RoughTasks, cfg.Seed), cfg.MaxTok)
	if err != nil {
		return nil, 0, nil, err
	}
	logf("warm start small: agent 1 translated %d train sentences (%.1fs)", len(rx), time.Since(st).Seconds())
	mixed := smallExamples(tasks, rx, tok, g, cfg.Mix, cfg.MaxRough, r)
	loss, err := supervise("small (agents 1+3)", tr, half, cfg.Steps, cfg.Steps, cfg.Batch, cfg.Spec.MaxLen, mixed, logf)
	if err != nil {
		return nil, 0, nil, err
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err == nil {
		b, _ := json.Marshal(rx)
		err = os.WriteFile(base+"-rough.json", b, 0o644)
		if err == nil {
			err = nn.SaveCheckpoint(base+".safetensors", store, nil, map[string]string{"tokenizer": string(tj), "role": "small"})
		}
		if err != nil {
			logf("warm start small: could not cache: %v", err)
		}
	}
	return lm, loss, rx, nil
}

// roughTranslations is agent 1's greedy translation of each task by lm, at
// most maxTok tokens each.
func roughTranslations(lm *nn.LM, tok *tokenizer.Tokenizer, tasks []task, maxTok int) ([]roughEx, error) {
	msgs := make([][]tokenizer.Message, len(tasks))
	for i, t := range tasks {
		msgs[i] = msgsTranslate(t.En)
	}
	outs, err := generate(lm, tok, msgs, maxTok)
	if err != nil {
		return nil, err
	}
	rx := make([]roughEx, len(tasks))
	for i, t := range tasks {
		rx[i] = roughEx{T: t, Rough: outs[i]}
	}
	return rx, nil
}

// smallExamples draws the small model's second-phase warm-start examples
// from r: agent 1 on sentence pairs, and with probability mix.FinalFrac
// agent 3, on a pseudo-rough text (probability mix.Pseudo) or on one of
// agent 1's real rough translations rx (finalExample).
func smallExamples(tasks []task, rx []roughEx, tok *tokenizer.Tokenizer, g *corpus.Glossary, mix warmMix, maxRough int, r *rand.Rand) func() (nn.SeqExample, error) {
	return func() (nn.SeqExample, error) {
		if len(rx) == 0 || r.Float64() >= mix.FinalFrac {
			t := tasks[r.IntN(len(tasks))]
			return roleExample(tok, msgsTranslate(t.En), t.Ref)
		}
		if r.Float64() < mix.Pseudo {
			t := tasks[r.IntN(len(tasks))]
			rough, corr, target := pseudoFinalExample(tasks, g, r, maxRough)
			return roleExample(tok, msgsFinal(t.En, rough, corr), target)
		}
		x := rx[r.IntN(len(rx))]
		rough, corr, target := finalExample(x, g, r, maxRough)
		return roleExample(tok, msgsFinal(x.T.En, rough, corr), target)
	}
}

// largeExamples draws the detector's warm-start examples from r: agent 1's
// rough translations rx, half of them of sentences with glossary terms,
// labelled with their true terminology errors (detectExample).
func largeExamples(rx []roughEx, tok *tokenizer.Tokenizer, h glossaryHinter, maxRough int, r *rand.Rand) func() (nn.SeqExample, error) {
	var withTerms []roughEx
	for _, x := range rx {
		if len(x.T.Terms) > 0 {
			withTerms = append(withTerms, x)
		}
	}
	return func() (nn.SeqExample, error) {
		x := rx[r.IntN(len(rx))]
		if len(withTerms) > 0 && r.IntN(2) == 0 {
			x = withTerms[r.IntN(len(withTerms))]
		}
		en, rough, label := detectExample(x, h.G, r, maxRough)
		return roleExample(tok, h.msgs(en, rough), label)
	}
}

// warmStartLarge trains (or loads from the cache) the detector (agent 2) on
// agent 1's real rough translations labelled with their true terminology
// errors (detectExample).
func warmStartLarge(cfg warmCfg, rx []roughEx, tok *tokenizer.Tokenizer, h glossaryHinter, logf func(string, ...any)) (*nn.LM, float64, error) {
	rb, _ := json.Marshal(rx)
	rh := sha256.Sum256(rb)
	extra := hex.EncodeToString(rh[:8])
	base := cfg.cachePath("large", tok, extra)
	tj, _ := tok.MarshalJSON()
	store := nn.NewStore(cfg.Seed)
	lm := nn.NewLM(store, cfg.Spec.config(tok.VocabSize()))
	if meta, err := nn.LoadCheckpoint(base+".safetensors", store, nil); err == nil {
		if meta["tokenizer"] != string(tj) {
			return nil, 0, fmt.Errorf("translation: cached checkpoint %s has another tokenizer", base)
		}
		logf("warm start large: loaded cached checkpoint %s", base)
		return lm, -1, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		logf("warm start large: ignoring unreadable cache %s: %v", base, err)
	}
	if len(rx) == 0 {
		return nil, 0, errors.New("warm start large: no rough translations")
	}
	opt := nn.NewAdamW(nn.WarmupCosine(cfg.LR, cfg.Steps/10+1, cfg.Steps, cfg.LR/10), 0.01)
	tr := nn.NewLMTrainer(lm, opt, nn.TrainConfig{ClipNorm: 1, LenBucket: 32})
	r := rand.New(rand.NewPCG(cfg.Seed, 99))
	// Half the examples come from sentences with glossary terms (where
	// errors can occur), half from all sentences.
	draw := largeExamples(rx, tok, h, cfg.MaxRough, r)
	loss, err := supervise("large (agent 2)", tr, 0, cfg.Steps, cfg.Steps, cfg.Batch, cfg.Spec.MaxLen, draw, logf)
	if err != nil {
		return nil, 0, err
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err == nil {
		if err := nn.SaveCheckpoint(base+".safetensors", store, nil, map[string]string{"tokenizer": string(tj), "role": "large"}); err != nil {
			logf("warm start large: could not cache: %v", err)
		}
	}
	return lm, loss, nil
}

// warmed is what the warm starts leave for the RL phase: both models,
// their final supervised losses (-1 when loaded from the cache), agent 1's
// rough translations made for agents 2 and 3's warm start (roughs; their
// error-prone sentences are RL's hard tasks) and RL's task pool (train).
type warmed struct {
	small, large *nn.LM // warm-started miniatures (nil with pretrained models)
	// dec decodes for the evaluation: the small model's, the larger one's.
	dec [2]decoder
	// models are the pretrained models' swarm models (nil for the
	// miniatures, which startServers builds).
	models               [2]swarm.Model
	lossSmall, lossLarge float64
	roughs               []roughEx
	train                []task
}

// warmStarts trains (or loads) both models on the train split.
func (o *options) warmStarts(e *env, d *corpus.Dataset, train []task) (*warmed, error) {
	cache := o.cacheDir
	if cache == "" {
		cache = filepath.Join(o.out, "cache")
	}
	wc := warmCfg{Spec: modelSpec{o.SmallDim, o.SmallLayers, 4, o.MaxLen, o.SmallCopy},
		Mix:   warmMix{FinalFrac: o.FinalFrac, RoughTasks: o.RoughTasks, Pseudo: o.Pseudo, CopySteps: o.CopySteps},
		Steps: o.WarmSteps, Batch: o.WarmBatch, LR: o.WarmLR, Seed: o.Seed, MaxRough: e.maxRough, MaxTok: e.maxTok, CacheDir: cache}
	small, lossS, roughs, err := warmStartSmall(wc, train, e.tok, d.Glossary, logf)
	if err != nil {
		return nil, err
	}
	wc.Spec, wc.Seed, wc.Mix, wc.Steps = modelSpec{o.LargeDim, o.LargeLayers, 4, o.MaxLen, o.LargeCopy}, o.Seed+1, warmMix{}, o.LargeWarmSteps
	large, lossL, err := warmStartLarge(wc, roughs, e.tok, e.hint, logf)
	if err != nil {
		return nil, err
	}
	return &warmed{small: small, large: large, dec: [2]decoder{lmDecoder(small, e.tok), lmDecoder(large, e.tok)},
		lossSmall: lossS, lossLarge: lossL, roughs: roughs, train: train}, nil
}
