package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/examples/translation/corpus"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
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

// warmExample draws one supervised example for a model role.
//   - "small": agent 1 (translate) or agent 3 (final from rough+corrections),
//     half each; the rough translation carries an injected known error.
//   - "large": agent 2 (detector) on a rough translation with an injected
//     known error (or none) and its JSON.
func warmExample(role string, t task, tok *tokenizer.Tokenizer, g *corpus.Glossary, r *rand.Rand, mix warmMix) (nn.SeqExample, error) {
	switch {
	case role == "large":
		rough, errs := injectError(t, g, r, 0.35)
		return roleExample(tok, msgsDetect(t.En, rough), errorsJSON(errs))
	case r.Float64() >= mix.FinalFrac:
		return roleExample(tok, msgsTranslate(t.En), t.Ref)
	default:
		rough, errs := injectError(t, g, r, 0.3)
		if r.Float64() < mix.RoughNoise {
			rough = corrupt(rough, r)
		}
		return roleExample(tok, msgsFinal(t.En, rough, errorsJSON(errs)), finalAnswer(t.Ref))
	}
}

// warmMix sets the small model's warm-start mixture.
type warmMix struct {
	// FinalFrac is the fraction of agent-3 examples (the rest are agent 1's).
	FinalFrac float64
	// RoughNoise is the fraction of agent-3 examples whose rough translation
	// is also corrupted (characters dropped or duplicated), so that agent 3
	// learns to repair from the English rather than only copy.
	RoughNoise float64
}

// corrupt drops or duplicates about 15% of the characters of s.
func corrupt(s string, r *rand.Rand) string {
	var b strings.Builder
	for _, c := range s {
		switch x := r.Float64(); {
		case x < 0.08:
		case x < 0.15:
			b.WriteRune(c)
			b.WriteRune(c)
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

type modelSpec struct {
	Dim, Layers, Heads, MaxLen int
}

func (s modelSpec) config(vocab int) nn.LMConfig {
	return nn.LMConfig{Vocab: vocab, Dim: s.Dim, Layers: s.Layers, Heads: s.Heads, MaxLen: s.MaxLen, Positions: nn.Learned}
}

// warmStart trains (or loads from the cache) one model on the train split.
// It returns the LM and the mean loss of the last 20 steps (NaN when loaded).
func warmStart(role string, spec modelSpec, mix warmMix, steps, batch int, lr float64, seed uint64, tasks []task,
	tok *tokenizer.Tokenizer, g *corpus.Glossary, cacheDir string, logf func(string, ...any)) (*nn.LM, float64, error) {
	tj, _ := tok.MarshalJSON()
	h := sha256.New()
	fmt.Fprintf(h, "v2|%s|%+v|%+v|%d|%d|%g|%d|%d|", role, spec, mix, steps, batch, lr, seed, len(tasks))
	h.Write(tj)
	key := hex.EncodeToString(h.Sum(nil))[:16]
	path := filepath.Join(cacheDir, fmt.Sprintf("warm-%s-%s.safetensors", role, key))

	store := nn.NewStore(seed)
	lm := nn.NewLM(store, spec.config(tok.VocabSize()))
	if meta, err := nn.LoadCheckpoint(path, store, nil); err == nil {
		if meta["tokenizer"] != string(tj) {
			return nil, 0, fmt.Errorf("translation: cached checkpoint %s has another tokenizer", path)
		}
		logf("warm start %s: loaded cached checkpoint %s", role, path)
		return lm, -1, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		logf("warm start %s: ignoring unreadable cache %s: %v", role, path, err)
	}
	opt := nn.NewAdamW(nn.WarmupCosine(lr, steps/10+1, steps, lr/10), 0.01)
	tr := nn.NewLMTrainer(lm, opt, nn.TrainConfig{ClipNorm: 1, LenBucket: 32})
	r := rand.New(rand.NewPCG(seed, 99))
	start := time.Now()
	var recent []float64
	for s := 0; s < steps; s++ {
		b := make([]nn.SeqExample, 0, batch)
		for len(b) < batch {
			ex, err := warmExample(role, tasks[r.IntN(len(tasks))], tok, g, r, mix)
			if err != nil {
				return nil, 0, err
			}
			if len(ex.Prompt)+len(ex.Target) > spec.MaxLen {
				continue
			}
			b = append(b, ex)
		}
		loss, err := tr.SupervisedStep(b)
		if err != nil {
			return nil, 0, fmt.Errorf("warm start %s step %d: %w", role, s, err)
		}
		recent = append(recent, loss)
		if len(recent) > 20 {
			recent = recent[1:]
		}
		if (s+1)%max(1, steps/10) == 0 || s == steps-1 {
			logf("warm start %s: step %d/%d loss %.3f (%.1fs)", role, s+1, steps, loss, time.Since(start).Seconds())
		}
	}
	mean := 0.0
	for _, l := range recent {
		mean += l / float64(len(recent))
	}
	if err := os.MkdirAll(cacheDir, 0o755); err == nil {
		if err := nn.SaveCheckpoint(path, store, nil, map[string]string{"tokenizer": string(tj), "role": role}); err != nil {
			logf("warm start %s: could not cache: %v", role, err)
		}
	}
	return lm, mean, nil
}

func trimEnd(s string) string { return strings.TrimSpace(s) }
