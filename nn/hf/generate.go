package hf

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/tensor"
)

// Token reports one sampled token of a streaming generation.
type Token struct {
	// Prompt is the index of the prompt the token continues.
	Prompt int
	// Token and LogProb are what the Generation will hold at this position.
	Token   int
	LogProb float32
	// Top are the most likely alternatives (GenerateOptions.TopLogProbs).
	Top []nn.TokenLogProb
	// Finish is empty while the prompt's generation goes on, and "stop" or
	// "length" on its last token.
	Finish string
}

type genState struct {
	idx    int
	tokens []int
	cache  *kvCache
	rng    *rand.Rand
	out    nn.Generation
}

// Generate samples a continuation of every prompt under the model with
// adapter ad (nil: the base), batched: the prompts are prefilled in one
// pass, then every decoding step runs the still-active requests together,
// each with its own key/value cache. Options are nn.LM.Generate's (request
// i samples from PCG(Seed, i); untruncated sampling takes one pass over
// the vocabulary, nn.SampleTokenOnePass); LogProbs are the model's temperature-1
// log-probabilities of the sampled tokens, which TokenLogProbs returns for
// the same tokens up to float32 rounding. emit, when not nil, receives
// every token as it is sampled. ctx is checked between steps.
func (m *Model) Generate(ctx context.Context, ad *LoRA, prompts [][]int, opts nn.GenerateOptions, emit func(Token)) ([]nn.Generation, error) {
	c := m.Config
	if opts.MaxTokens <= 0 {
		opts.MaxTokens = 16
	}
	if opts.Temperature < 0 || opts.TopK < 0 || opts.TopP < 0 || opts.TopP > 1 || opts.TopLogProbs < 0 {
		return nil, fmt.Errorf("hf: Generate: invalid options %+v", opts)
	}
	opts.TopLogProbs = min(opts.TopLogProbs, nn.MaxTopLogProbs, c.Vocab)
	states := make([]*genState, len(prompts))
	var toks []int
	var spans []span
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("hf: Generate: prompt %d is empty", i)
		}
		if len(p) >= c.MaxPos {
			return nil, fmt.Errorf("hf: Generate: prompt %d has %d tokens, max_position_embeddings is %d", i, len(p), c.MaxPos)
		}
		for _, t := range p {
			if t < 0 || t >= c.Vocab {
				return nil, fmt.Errorf("hf: Generate: prompt %d: token %d outside the vocabulary [0,%d)", i, t, c.Vocab)
			}
		}
		st := &genState{idx: i, tokens: append([]int(nil), p...), rng: rand.New(rand.NewPCG(opts.Seed, uint64(i)))}
		st.cache = newKVCache(c, min(len(p)+opts.MaxTokens, c.MaxPos))
		states[i] = st
		spans = append(spans, span{off: len(toks), n: len(p), cache: st.cache})
		toks = append(toks, p...)
	}
	active := states
	for len(active) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hf := m.forward(ad, toks, spans, nil)
		rows := make([]int, len(spans))
		for i, sp := range spans {
			rows[i] = sp.off + sp.n - 1
		}
		logp := m.lastLogProbs(hf, rows)
		var next []*genState
		toks, spans = toks[:0], spans[:0]
		for i, st := range active {
			row := logp[i*c.Vocab : (i+1)*c.Vocab]
			tok := nn.SampleTokenOnePass(row, opts, st.rng)
			ev := Token{Prompt: st.idx, Token: tok, LogProb: row[tok]}
			st.out.Tokens = append(st.out.Tokens, tok)
			st.out.LogProbs = append(st.out.LogProbs, row[tok])
			if opts.TopLogProbs > 0 {
				ev.Top = nn.TopLogProbs(row, opts.TopLogProbs)
				st.out.TopLogProbs = append(st.out.TopLogProbs, ev.Top)
			}
			st.tokens = append(st.tokens, tok)
			switch {
			case nn.StopsAt(st.out.Tokens, opts):
				st.out.FinishReason = "stop"
			case len(st.out.Tokens) >= opts.MaxTokens || len(st.tokens) >= c.MaxPos:
				st.out.FinishReason = "length"
			default:
				spans = append(spans, span{off: len(toks), n: 1, pos0: len(st.tokens) - 1, cache: st.cache})
				toks = append(toks, tok)
				next = append(next, st)
			}
			ev.Finish = st.out.FinishReason
			if emit != nil {
				emit(ev)
			}
		}
		active = next
	}
	out := make([]nn.Generation, len(states))
	for i, st := range states {
		out[i] = st.out
	}
	return out, nil
}

// lastLogProbs returns the log-softmax over the vocabulary of hf's rows
// (len(rows)×Vocab).
func (m *Model) lastLogProbs(hf []float32, rows []int) []float32 {
	c := m.Config
	H, V := c.Hidden, c.Vocab
	x := make([]float32, len(rows)*H)
	for i, r := range rows {
		copy(x[i*H:(i+1)*H], hf[r*H:(r+1)*H])
	}
	out := make([]float32, len(rows)*V)
	m.head.MulT(out, x, len(rows), 0)
	tensor.LogSoftmaxRows(out, out, len(rows), V)
	return out
}
