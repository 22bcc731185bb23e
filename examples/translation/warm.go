package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"examples/translation/corpus"
	"examples/translation/grader"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/swarm"
)

// trainTokenizer learns the BPE vocabulary on the train split (both
// languages) plus the agents' fixed strings and, for 70% of the sentences
// with terms, agent 2's answer naming one term's wrong rendering.
func trainTokenizer(train []task, g *corpus.Glossary, vocab int) (*tokenizer.Tokenizer, error) {
	var texts []string
	r := rand.New(rand.NewPCG(7, 7))
	for _, t := range train {
		errs := "[]"
		if len(t.Terms) > 0 && r.Float64() >= 0.3 {
			term := t.Terms[r.IntN(len(t.Terms))]
			if w := wrongRendering(term.Zh, g, r); w != "" {
				errs = errorsJSON([]grader.TermError{termError(term, w)})
			}
		}
		texts = append(texts, t.En, t.Ref, errs, finalAnswer(""))
	}
	for i := 0; i < 50; i++ {
		texts = append(texts, sysTranslate, sysDetect, sysFinal)
	}
	return tokenizer.Train(texts, tokenizer.TrainOptions{VocabSize: vocab})
}

// roleExample is the supervised example of msgs answered by reply and <|end|>.
func roleExample(tok *tokenizer.Tokenizer, msgs []tokenizer.Message, reply string) (nn.SeqExample, error) {
	p, err := tok.ApplyChat(msgs, true)
	if err != nil {
		return nn.SeqExample{}, err
	}
	return nn.SeqExample{Prompt: p, Target: append(tok.Encode(reply), tok.MustSpecialID(tokenizer.End))}, nil
}

// lmEncoder encodes examples for troupe's own models (roleExample).
func lmEncoder(tok *tokenizer.Tokenizer) encoder {
	return func(msgs []tokenizer.Message, reply string) (nn.SeqExample, error) {
		return roleExample(tok, msgs, reply)
	}
}

// warmMix is the small model's warm-start mixture (Config's fields of the
// same names; the larger model's is zero).
type warmMix struct {
	FinalFrac  float64
	RoughTasks int
	Pseudo     float64
	CopySteps  int
}

// modelSpec is a model's shape. CopyDim is the pointer (copy) head's width:
// agents 3 and 2 reproduce spans of their prompt, as a pointer does exactly.
type modelSpec struct{ Dim, Layers, Heads, MaxLen, CopyDim int }

// warmCfg is one warm start's hyper-parameters and cache folder.
type warmCfg struct {
	Spec             modelSpec
	Mix              warmMix
	Steps, Batch     int
	LR               float64
	Seed             uint64
	MaxRough, MaxTok int
	CacheDir         string
}

// newLM is a freshly initialised model of the spec. Positions are rotary
// (Su et al. 2021): relative positions make copying a span, agent 3's job,
// easier to learn than learned absolute ones.
func (c warmCfg) newLM(vocab int) *nn.LM {
	s := c.Spec
	return nn.NewLM(nn.NewStore(c.Seed), nn.LMConfig{Vocab: vocab, Dim: s.Dim, Layers: s.Layers, Heads: s.Heads, MaxLen: s.MaxLen, Positions: nn.Rotary, CopyDim: s.CopyDim})
}

// cacheVersion changes with a role's warm-start data or training, so stale checkpoints go unused.
var cacheVersion = map[string]int{"small": 12, "large": 11}

// cachePath is role's cache file prefix, a hash of all its warm start depends on.
func (c warmCfg) cachePath(role string, tj []byte, extra string) string {
	h := sha256.New()
	fmt.Fprintf(h, "v%d|%s|", cacheVersion[role], role)
	fmt.Fprintf(h, "%+v|%+v|%d|%d|%g|%d|%d|%d|%s|", c.Spec, c.Mix, c.Steps, c.Batch, c.LR, c.Seed, c.MaxRough, c.MaxTok, extra)
	h.Write(tj)
	return filepath.Join(c.CacheDir, fmt.Sprintf("warm-%s-%s", role, hex.EncodeToString(h.Sum(nil))[:16]))
}

// loadLM makes role's model and loads the cached checkpoint base when there
// is one (loaded true); a checkpoint of another tokenizer (tj) is an error.
func (c warmCfg) loadLM(role, base string, vocab int, tj []byte) (lm *nn.LM, loaded bool, err error) {
	lm = c.newLM(vocab)
	meta, err := nn.LoadCheckpoint(base+".safetensors", lm.Store, nil)
	switch {
	case err == nil && meta["tokenizer"] != string(tj):
		return nil, false, fmt.Errorf("translation: cached checkpoint %s has another tokenizer", base)
	case err == nil:
		return lm, true, nil
	case !errors.Is(err, fs.ErrNotExist):
		logf("warm start %s: ignoring unreadable cache %s: %v", role, base, err)
	}
	return lm, false, nil
}

// save caches role's trained model as base (and the small model's rough
// translations rx beside it); a failure costs only the next run's time.
func (c warmCfg) save(role, base string, lm *nn.LM, tj []byte, rx []roughEx) {
	err := os.MkdirAll(c.CacheDir, 0o755)
	if err == nil && rx != nil {
		b, _ := json.Marshal(rx)
		err = os.WriteFile(base+"-rough.json", b, 0o644)
	}
	if err == nil {
		err = nn.SaveCheckpoint(base+".safetensors", lm.Store, nil, map[string]string{"tokenizer": string(tj), "role": role})
	}
	if err != nil {
		logf("warm start %s: could not cache: %v", role, err)
	}
}

// trainer is the warm start's AdamW: warm-up over a tenth of the steps, cosine decay.
func (c warmCfg) trainer(lm *nn.LM) *nn.LMTrainer {
	opt := nn.NewAdamW(nn.WarmupCosine(c.LR, c.Steps/10+1, c.Steps, c.LR/10), 0.01)
	return nn.NewLMTrainer(lm, opt, nn.TrainConfig{ClipNorm: 1, LenBucket: 32})
}

// stepper takes one supervised step on a batch and returns its mean
// per-token loss: an nn.LMTrainer, or hfStepper for an nn/hf model's
// adapter.
type stepper interface {
	SupervisedStep(batch []nn.SeqExample) (float64, error)
}

// encoder makes the supervised example of msgs answered by reply (and the
// end of the turn): roleExample with troupe's tokenizer, hfEncoder with a
// Hugging Face one.
type encoder func(msgs []tokenizer.Message, reply string) (nn.SeqExample, error)

// supervise runs steps [from, to) on draw's examples: the mean loss of the last 20.
func (c warmCfg) supervise(role string, tr stepper, from, to int, draw func() (nn.SeqExample, error)) (float64, error) {
	start := time.Now()
	mean := 0.0
	for s := from; s < to; s++ {
		b, err := drawBatch(draw, c.Batch, c.Spec.MaxLen)
		if err != nil {
			return 0, fmt.Errorf("warm start %s: %w", role, err)
		}
		loss, err := tr.SupervisedStep(b)
		if err != nil {
			return 0, fmt.Errorf("warm start %s step %d: %w", role, s, err)
		}
		if s >= to-20 {
			mean += loss / float64(min(20, to-from))
		}
		if (s+1)%max(1, c.Steps/10) == 0 || s == to-1 {
			logf("warm start %s: step %d/%d loss %.3f (%.1fs)", role, s+1, c.Steps, loss, time.Since(start).Seconds())
		}
	}
	return mean, nil
}

// drawBatch draws n examples that fit maxLen tokens: an over-long prompt
// keeps its end (the open assistant turn), as at inference; a reply of over
// half the context is drawn again.
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

// pickRoughTasks draws the n train tasks (all when n <= 0) agent 1 translates.
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

// warmStartSmall trains (or loads) the small model, agents 1 and 3:
// CopySteps of agent 3 alone on pseudo-rough texts, learning to copy before
// it is a share of a mixture; half the rest mixing in agent 1; the rest on
// agent 1's rough translations too. It returns the LM, the last 20 steps'
// mean loss (-1 when loaded) and the rough translations.
func warmStartSmall(cfg warmCfg, tasks []task, tok *tokenizer.Tokenizer, g *corpus.Glossary) (*nn.LM, float64, []roughEx, error) {
	tj, _ := tok.MarshalJSON()
	base := cfg.cachePath("small", tj, "")
	lm, loaded, err := cfg.loadLM("small", base, tok.VocabSize(), tj)
	if err != nil {
		return nil, 0, nil, err
	}
	if loaded {
		var rx []roughEx
		if b, err := os.ReadFile(base + "-rough.json"); err == nil && json.Unmarshal(b, &rx) == nil {
			logf("warm start small: loaded cached checkpoint %s", base)
			return lm, -1, rx, nil
		}
		lm = cfg.newLM(tok.VocabSize())
	}
	loss, rx, err := trainSmall(cfg, cfg.trainer(lm), lmEncoder(tok), lmDecoder(lm, tok), tasks, g)
	if err != nil {
		return nil, 0, nil, err
	}
	cfg.save("small", base, lm, tj, rx)
	return lm, loss, rx, nil
}

// trainSmall runs the small model's warm-start phases on tr: CopySteps of
// agent 3 alone on pseudo-rough texts, learning to copy before it is a
// share of a mixture; half the rest mixing in agent 1; then agent 1
// (dec) translates train sentences, and the rest trains on those rough
// translations too. It returns the last 20 steps' mean loss and the rough
// translations.
func trainSmall(cfg warmCfg, tr stepper, enc encoder, dec decoder, tasks []task, g *corpus.Glossary) (float64, []roughEx, error) {
	var rx []roughEx // agent 1's rough translations, made after the first phase
	r := rand.New(rand.NewPCG(cfg.Seed, 99))
	pseudo := func() (nn.SeqExample, error) {
		t := tasks[r.IntN(len(tasks))]
		rough, corr, target := pseudoFinalExample(tasks, g, r, cfg.MaxRough)
		return enc(msgsFinal(t.En, rough, corr), target)
	}
	// Agent 1 with probability 1 − FinalFrac, else agent 3: on a pseudo-rough
	// text (first phase; then with probability Pseudo) or a rough translation.
	mixed := func() (nn.SeqExample, error) {
		if r.Float64() >= cfg.Mix.FinalFrac {
			t := tasks[r.IntN(len(tasks))]
			return enc(msgsTranslate(t.En), t.Ref)
		}
		if len(rx) == 0 || r.Float64() < cfg.Mix.Pseudo {
			return pseudo()
		}
		x := rx[r.IntN(len(rx))]
		rough, corr, target := finalExample(x, g, r, cfg.MaxRough)
		return enc(msgsFinal(x.T.En, rough, corr), target)
	}
	c0 := min(cfg.Mix.CopySteps, cfg.Steps)
	half := c0 + (cfg.Steps-c0)/2
	if _, err := cfg.supervise("small (agent 3 copy)", tr, 0, c0, pseudo); err != nil {
		return 0, nil, err
	}
	if _, err := cfg.supervise("small (agents 1+3, pseudo)", tr, c0, half, mixed); err != nil {
		return 0, nil, err
	}
	st := time.Now()
	picked := pickRoughTasks(tasks, cfg.Mix.RoughTasks, cfg.Seed)
	outs, err := dec(translateAll(picked), cfg.MaxTok) // agent 1's greedy translations
	if err != nil {
		return 0, nil, err
	}
	for i, t := range picked {
		rx = append(rx, roughEx{T: t, Rough: outs[i]})
	}
	logf("warm start small: agent 1 translated %d train sentences (%.1fs)", len(rx), time.Since(st).Seconds())
	loss, err := cfg.supervise("small (agents 1+3)", tr, half, cfg.Steps, mixed)
	if err != nil {
		return 0, nil, err
	}
	return loss, rx, nil
}

// warmStartLarge trains (or loads from the cache) the detector, agent 2, on
// agent 1's rough translations rx (detectExample), half of them of
// sentences with glossary terms, where errors can occur.
func warmStartLarge(cfg warmCfg, rx []roughEx, tok *tokenizer.Tokenizer, g *corpus.Glossary) (*nn.LM, float64, error) {
	rb, _ := json.Marshal(rx)
	rh := sha256.Sum256(rb)
	tj, _ := tok.MarshalJSON()
	base := cfg.cachePath("large", tj, hex.EncodeToString(rh[:8]))
	lm, loaded, err := cfg.loadLM("large", base, tok.VocabSize(), tj)
	if err != nil {
		return nil, 0, err
	}
	if loaded {
		logf("warm start large: loaded cached checkpoint %s", base)
		return lm, -1, nil
	}
	if len(rx) == 0 {
		return nil, 0, errors.New("warm start large: no rough translations")
	}
	loss, err := trainLarge(cfg, cfg.trainer(lm), lmEncoder(tok), rx, g)
	if err != nil {
		return nil, 0, err
	}
	cfg.save("large", base, lm, tj, nil)
	return lm, loss, nil
}

// trainLarge runs the detector's warm start on tr: agent 1's rough
// translations rx (detectExample), half of them of sentences with glossary
// terms, where errors can occur. It returns the last 20 steps' mean loss.
func trainLarge(cfg warmCfg, tr stepper, enc encoder, rx []roughEx, g *corpus.Glossary) (float64, error) {
	withTerms := slices.DeleteFunc(slices.Clone(rx), func(x roughEx) bool { return len(x.T.Terms) == 0 })
	r := rand.New(rand.NewPCG(cfg.Seed, 99))
	draw := func() (nn.SeqExample, error) {
		x := rx[r.IntN(len(rx))]
		if len(withTerms) > 0 && r.IntN(2) == 0 {
			x = withTerms[r.IntN(len(withTerms))]
		}
		en, rough, label := detectExample(x, g, r, cfg.MaxRough)
		return enc(msgsDetect(g, en, rough), label)
	}
	return cfg.supervise("large (agent 2)", tr, 0, cfg.Steps, draw)
}

// warmed is what the warm starts leave for the RL phase, with agent 1's
// rough translations (their error-prone sentences are RL's hard tasks).
type warmed struct {
	small, large         *nn.LM         // warm-started miniatures (nil with pretrained models)
	dec                  [2]decoder     // the evaluation's decoders of the small and the larger model
	models               [2]swarm.Model // pretrained models' (nil: startServers builds the miniatures')
	lossSmall, lossLarge float64
	roughs               []roughEx
	train                []task
}

// warmStarts trains (or loads) both models on the train split.
func (o *options) warmStarts(e *env, d *corpus.Dataset, train []task) (*warmed, error) {
	cache := cmp.Or(o.cacheDir, filepath.Join(o.out, "cache"))
	wc := warmCfg{Spec: modelSpec{o.SmallDim, o.SmallLayers, 4, o.MaxLen, o.SmallCopy},
		Mix:   warmMix{FinalFrac: o.FinalFrac, RoughTasks: o.RoughTasks, Pseudo: o.Pseudo, CopySteps: o.CopySteps},
		Steps: o.WarmSteps, Batch: o.WarmBatch, LR: o.WarmLR, Seed: o.Seed, MaxRough: e.maxRough, MaxTok: e.maxTok, CacheDir: cache}
	small, lossS, roughs, err := warmStartSmall(wc, train, e.tok, d.Glossary)
	if err != nil {
		return nil, err
	}
	wc.Spec, wc.Seed, wc.Mix, wc.Steps = modelSpec{o.LargeDim, o.LargeLayers, 4, o.MaxLen, o.LargeCopy}, o.Seed+1, warmMix{}, o.LargeWarmSteps
	large, lossL, err := warmStartLarge(wc, roughs, e.tok, d.Glossary)
	if err != nil {
		return nil, err
	}
	return &warmed{small: small, large: large, dec: [2]decoder{lmDecoder(small, e.tok), lmDecoder(large, e.tok)},
		lossSmall: lossS, lossLarge: lossL, roughs: roughs, train: train}, nil
}
