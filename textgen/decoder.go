package textgen

// Decoder is an autoregressive language model as the generation loop runs
// it: one batched forward pass at a time over sequences that each keep a
// cache of their past (keys and values). nn.LM and nn/hf's models
// implement it; the loop (Generate, Engine) does the scheduling, sampling
// and stopping, so that every model samples the same way.
type Decoder interface {
	// Vocab is the number of tokens; Step returns a distribution over them.
	Vocab() int
	// MaxLen is the longest sequence (prompt and generation) it can hold.
	MaxLen() int
	// KVBytes is the cache memory one token of one sequence takes, for the
	// engine's budget.
	KVBytes() int64
	// NewCache returns an empty cache for one sequence of at most capacity
	// tokens (capacity ≤ MaxLen).
	NewCache(capacity int) Cache
	// Step feeds every input's Tokens to its sequence (at the positions
	// after the ones its Cache holds, which it appends to) in one batched
	// pass, and writes, for each input with Logits set, in input order, the
	// log-softmax over the vocabulary at its last token into logp
	// (len(logp) = inputs with Logits × Vocab). Inputs with the same
	// Adapter are contiguous. Tokens are within the vocabulary and fit the
	// caches' capacities (the loop checks).
	Step(batch []Input, logp []float32) error
}

// Cache is one sequence's state in a Decoder.
type Cache interface {
	// Len is the number of tokens the cache holds.
	Len() int
	// Fork returns an independent copy (with the same capacity), for
	// another sequence that continues the same tokens.
	Fork() Cache
}

// Input is one sequence's part of a Step.
type Input struct {
	Cache  Cache
	Tokens []int
	// Adapter selects the sequence's parameters on a shared base (a LoRA
	// adapter of nn/hf; nil: the base). It must be comparable (a pointer).
	Adapter any
	// Logits asks for the distribution after the last of Tokens.
	Logits bool
}
