package hf

import (
	"context"

	"github.com/troupe-ml/troupe/tensor"
	"github.com/troupe-ml/troupe/textgen"
)

// Generate samples a continuation of every prompt under the model with
// adapter ad (nil: the base) with textgen's loop: the prompts are prefilled
// in one pass, then every decoding step runs the still-active requests
// together, each with its own key/value cache. Request i samples from
// PCG(opts.Seed, i); untruncated sampling takes one pass over the
// vocabulary (textgen.SampleTokenOnePass). LogProbs are the model's
// temperature-1 log-probabilities of the sampled tokens, which
// TokenLogProbs returns for the same tokens up to float32 rounding. emit,
// when not nil, receives every token as it is sampled. ctx is checked
// between steps. To generate for many concurrent requests and adapters at
// once, run a textgen.Engine over Decoder().
func (m *Model) Generate(ctx context.Context, ad *LoRA, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	return textgen.Generate(ctx, adapterDecoder{m.Decoder(), ad}, prompts, opts, emit)
}

// Decoder returns the model as a textgen.Decoder. An Input's Adapter is a
// *LoRA of this model, or nil for the base; a batch may mix adapters, and
// the base projections run once over all its rows. The model is not
// written, so several decoders and training steps may use it at once.
func (m *Model) Decoder() textgen.Decoder { return decoder{m} }

type decoder struct{ m *Model }

// Vocab implements textgen.Decoder.
func (d decoder) Vocab() int { return d.m.Config.Vocab }

// MaxLen implements textgen.Decoder.
func (d decoder) MaxLen() int { return d.m.Config.MaxPos }

// KVBytes implements textgen.Decoder: keys and values of every layer in
// float32.
func (d decoder) KVBytes() int64 { return int64(2 * d.m.Config.Layers * d.m.Config.KVDim() * 4) }

// NewCache implements textgen.Decoder.
func (d decoder) NewCache(capacity int) textgen.Cache { return newKVCache(d.m.Config, capacity) }

// Step implements textgen.Decoder.
func (d decoder) Step(batch []textgen.Input, logp []float32) error {
	var toks []int
	// keep: the rows that give logits, the only ones that go through the
	// last layer's end (empty, not nil, when none does).
	keep := make([]int, 0, len(batch))
	var ads []*LoRA // each kept row's adapter
	spans := make([]span, len(batch))
	for i, in := range batch {
		kc := in.Cache.(*kvCache)
		ad, _ := in.Adapter.(*LoRA)
		spans[i] = span{off: len(toks), n: len(in.Tokens), pos0: kc.Len(), cache: kc, ad: ad}
		toks = append(toks, in.Tokens...)
		if in.Logits {
			keep = append(keep, len(toks)-1)
			ads = append(ads, ad)
		}
	}
	hf := d.m.forward(toks, spans, nil, keep)
	d.m.lastLogProbs(logp, hf, ads)
	return nil
}

// adapterDecoder runs every input with one adapter.
type adapterDecoder struct {
	textgen.Decoder
	ad *LoRA
}

func (d adapterDecoder) Step(batch []textgen.Input, logp []float32) error {
	for i := range batch {
		batch[i].Adapter = d.ad
	}
	return d.Decoder.Step(batch, logp)
}

// lastLogProbs writes the log-softmax over the vocabulary of hf's rows
// (len(ads)×Hidden) into out (len(ads)×Vocab), each row projected by its
// adapter's (ads[i]) output projection: the rows of one adapter are
// contiguous, so each projection runs once over its run of rows.
func (m *Model) lastLogProbs(out, hf []float32, ads []*LoRA) {
	c := m.Config
	H, V := c.Hidden, c.Vocab
	for lo := 0; lo < len(ads); {
		hi := lo + 1
		for hi < len(ads) && ads[hi].headParam() == ads[lo].headParam() {
			hi++
		}
		m.headMatrix(ads[lo]).MulT(out[lo*V:hi*V], hf[lo*H:hi*H], hi-lo, 0)
		lo = hi
	}
	tensor.LogSoftmaxRows(out, out, len(ads), V)
}
