package textgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"

	"github.com/troupe-ml/troupe/tensor"
)

// GenerateOptions controls sampling. The zero value is greedy decoding
// (temperature 0) of DefaultMaxTokens tokens.
type GenerateOptions struct {
	// Temperature divides the logits before sampling; 0 means greedy
	// (argmax) decoding. Set 1 for plain sampling.
	Temperature float64
	// TopK keeps only the K most likely tokens (0 = all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP (nucleus sampling, Holtzman et al. 2020; 0 or 1 = all).
	TopP float64
	// StopTokens end a generation when sampled (the token is included).
	StopTokens []int
	// StopSequences end a generation when its tokens end with one of them
	// (the sequence is included).
	StopSequences [][]int
	// Stop, when not nil, is called after every sampled token with the
	// index of the prompt and its tokens so far; returning true ends that
	// generation with finish reason "stop" (the token is included). It is
	// how text-level stop strings are applied. It is called from the
	// generating goroutine and must be quick.
	Stop func(prompt int, tokens []int) bool
	// MaxTokens bounds the number of generated tokens (DefaultMaxTokens
	// when zero). The model's context length also bounds prompt plus
	// generation.
	MaxTokens int
	// Seed seeds prompt i's generator as PCG(Seed, i), so that a request's
	// tokens depend on its seed, prompt and parameters, never on what else
	// is generated with it or when.
	Seed uint64
	// TopLogProbs, when positive, makes every Generation also return, for
	// each sampled position, the TopLogProbs most likely tokens with their
	// log-probabilities, as OpenAI's top_logprobs. They are the model's
	// log-probabilities at temperature 1 without top-k/top-p truncation,
	// whatever Temperature, TopK and TopP are. Values above
	// MaxTopLogProbs are capped (and at the vocabulary size); negative
	// values are an error.
	TopLogProbs int
}

// DefaultMaxTokens is GenerateOptions.MaxTokens when it is zero.
const DefaultMaxTokens = 16

// MaxTopLogProbs is the largest useful GenerateOptions.TopLogProbs (OpenAI's
// limit for top_logprobs); larger requests are capped.
const MaxTopLogProbs = 20

// Validate checks the options and fills in defaults for a vocabulary of
// vocab tokens: MaxTokens, and TopLogProbs capped.
func (o GenerateOptions) Validate(vocab int) (GenerateOptions, error) {
	if o.MaxTokens < 0 || o.Temperature < 0 || math.IsNaN(o.Temperature) || math.IsInf(o.Temperature, 0) ||
		o.TopK < 0 || !(o.TopP >= 0 && o.TopP <= 1) || o.TopLogProbs < 0 {
		return o, fmt.Errorf("textgen: invalid options: max_tokens %d, temperature %g, top_k %d, top_p %g, top_logprobs %d",
			o.MaxTokens, o.Temperature, o.TopK, o.TopP, o.TopLogProbs)
	}
	if o.MaxTokens == 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	o.TopLogProbs = min(o.TopLogProbs, MaxTopLogProbs, vocab)
	return o, nil
}

// TokenLogProb is one candidate token and its log-probability.
type TokenLogProb struct {
	Token   int
	LogProb float32
}

// Generation is the result of one prompt.
type Generation struct {
	// Tokens are the sampled tokens, including a final stop token when the
	// model chose to stop.
	Tokens []int
	// LogProbs[i] is log p(Tokens[i] | prompt, Tokens[:i]) under the model's
	// own distribution — softmax of the logits at temperature 1 without
	// top-k/top-p truncation — which is what scoring the same tokens
	// computes (the behaviour log-probabilities that policy-gradient
	// methods need), not the log-probability under the tempered or
	// truncated sampling distribution.
	LogProbs []float32
	// TopLogProbs[i] (only when GenerateOptions.TopLogProbs > 0) lists the
	// most likely tokens at position i, most likely first (ties by smaller
	// token id), with log-probabilities under the same distribution as
	// LogProbs. Tokens[i] appears in it exactly when it is among them.
	TopLogProbs [][]TokenLogProb
	// FinishReason is "stop" (a stop token, sequence or Stop) or "length"
	// (MaxTokens or the context length reached).
	FinishReason string
	// Version is the parameter version the tokens were sampled under (the
	// adapter version the engine bound the request to; 0 for models
	// without versions).
	Version int64
}

// TokenEvent reports one sampled token of a streaming generation.
type TokenEvent struct {
	// Prompt is the index of the prompt (the choice) the token continues.
	Prompt int
	// Token and LogProb are what Generation.Tokens and Generation.LogProbs
	// hold at this position.
	Token   int
	LogProb float32
	// TopLogProbs are the alternatives when GenerateOptions.TopLogProbs > 0.
	TopLogProbs []TokenLogProb
	// FinishReason is empty while the prompt's generation goes on and
	// "stop" or "length" on its last token.
	FinishReason string
	// Version is the parameter version the token was sampled under.
	Version int64
}

// TopLogProbs returns the n largest entries of logp, largest first (ties by
// smaller index), by insertion into a sorted list of at most n (n ≤ 20, so
// one pass over the vocabulary with rare insertions).
func TopLogProbs(logp []float32, n int) []TokenLogProb {
	top := make([]TokenLogProb, 0, n)
	for t, v := range logp {
		if len(top) == n && !(v > top[n-1].LogProb) {
			continue
		}
		i := len(top)
		if i < n {
			top = append(top, TokenLogProb{})
		} else {
			i = n - 1
		}
		// Shift smaller entries right; equal ones stay ahead (smaller id).
		for i > 0 && v > top[i-1].LogProb {
			top[i] = top[i-1]
			i--
		}
		top[i] = TokenLogProb{Token: t, LogProb: v}
	}
	return top
}

// StopsAt reports whether a generation whose tokens so far are gen ends
// here: its last token is one of o.StopTokens, or its tokens end with one of
// o.StopSequences.
func StopsAt(gen []int, o GenerateOptions) bool {
	last := gen[len(gen)-1]
	for _, s := range o.StopTokens {
		if s == last {
			return true
		}
	}
	for _, s := range o.StopSequences {
		if len(s) > 0 && len(s) <= len(gen) {
			match := true
			for j := range s {
				if gen[len(gen)-len(s)+j] != s[j] {
					match = false
					break
				}
			}
			if match {
				return true
			}
		}
	}
	return false
}

// SampleToken draws a token from the log-probabilities logp (temperature
// 1) after applying o's temperature, top-k and top-p; temperature 0 takes
// the argmax (the first of equal maxima).
func SampleToken(logp []float32, o GenerateOptions, rng *rand.Rand) int {
	if o.Temperature == 0 {
		best := 0
		for i, v := range logp {
			if v > logp[best] {
				best = i
			}
		}
		return best
	}
	idx := make([]int, len(logp))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return logp[idx[a]] > logp[idx[b]] })
	if o.TopK > 0 && o.TopK < len(idx) {
		idx = idx[:o.TopK]
	}
	p := make([]float64, len(idx))
	mx := float64(logp[idx[0]]) / o.Temperature
	var z float64
	for i, t := range idx {
		p[i] = math.Exp(float64(logp[t])/o.Temperature - mx)
		z += p[i]
	}
	for i := range p {
		p[i] /= z
	}
	if o.TopP > 0 && o.TopP < 1 {
		var c float64
		for i := range p {
			c += p[i]
			if c >= o.TopP {
				p, idx = p[:i+1], idx[:i+1]
				break
			}
		}
		z = 0
		for _, v := range p {
			z += v
		}
		for i := range p {
			p[i] /= z
		}
	}
	u := rng.Float64()
	var c float64
	for i, v := range p {
		c += v
		if u < c {
			return idx[i]
		}
	}
	return idx[len(idx)-1]
}

// SampleTokenOnePass draws from the same distribution as SampleToken
// without sorting when neither top-k nor top-p truncates it, so a
// 150,000-token vocabulary costs one vectorised softmax per sampled token;
// with truncation it is SampleToken. The token a given random number
// selects differs from SampleToken's (the cumulative sum runs in token
// order, not in order of probability).
func SampleTokenOnePass(logp []float32, o GenerateOptions, rng *rand.Rand) int {
	if o.Temperature == 0 || (o.TopK > 0 && o.TopK < len(logp)) || (o.TopP > 0 && o.TopP < 1) {
		return SampleToken(logp, o, rng)
	}
	bp := probPool.Get().(*[]float32)
	defer probPool.Put(bp)
	if cap(*bp) < len(logp) {
		*bp = make([]float32, len(logp))
	}
	p := (*bp)[:len(logp)]
	if o.Temperature == 1 {
		tensor.SoftmaxRows(p, logp, 1, len(p))
	} else {
		tensor.VecMulScalar(p, logp, float32(1/o.Temperature))
		tensor.SoftmaxRows(p, p, 1, len(p))
	}
	var z float64
	for _, v := range p {
		z += float64(v)
	}
	u := rng.Float64() * z
	var c float64
	for i, v := range p {
		c += float64(v)
		if u < c {
			return i
		}
	}
	return len(p) - 1
}

var probPool = sync.Pool{New: func() any { return new([]float32) }}
