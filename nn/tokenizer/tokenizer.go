package tokenizer

import (
	"container/heap"
	"fmt"
	"sort"
	"strings"
)

// Default special tokens, in id order starting at 256.
const (
	BOS       = "<|bos|>"
	EOS       = "<|eos|>"
	PAD       = "<|pad|>"
	System    = "<|system|>"
	User      = "<|user|>"
	Assistant = "<|assistant|>"
	End       = "<|end|>"
)

// DefaultSpecials are the special tokens Train uses when TrainOptions.Specials
// is nil. The chat template needs BOS, System, User, Assistant and End.
var DefaultSpecials = []string{BOS, EOS, PAD, System, User, Assistant, End}

// NumBytes is the number of base tokens: ids 0..255 are the byte values.
const NumBytes = 256

// Tokenizer is a trained byte-level BPE tokenizer. It is safe for concurrent
// use by multiple goroutines. The zero value is not usable; get one from
// Train, Load or UnmarshalJSON.
type Tokenizer struct {
	specials  []string
	merges    [][2]int // merges[i] creates id firstMerge()+i
	vocab     [][]byte // id -> bytes (specials: their text)
	specialID map[string]int
	// splitHan: every Han character is its own pre-tokenization chunk
	// (TrainOptions.SplitHan).
	splitHan bool
	core     *bpeCore
}

// build constructs a Tokenizer from specials and merges, validating them.
func build(specials []string, merges [][2]int) (*Tokenizer, error) {
	t := &Tokenizer{
		specials:  append([]string(nil), specials...),
		merges:    append([][2]int(nil), merges...),
		specialID: make(map[string]int, len(specials)),
		core:      &bpeCore{ranks: make(map[uint64]mergeRule, len(merges)), alphabet: identityAlphabet()},
	}
	t.vocab = make([][]byte, 0, NumBytes+len(specials)+len(merges))
	for b := 0; b < NumBytes; b++ {
		t.vocab = append(t.vocab, []byte{byte(b)})
	}
	for i, s := range specials {
		if s == "" {
			return nil, fmt.Errorf("tokenizer: special token %d is empty", i)
		}
		if _, dup := t.specialID[s]; dup {
			return nil, fmt.Errorf("tokenizer: special token %q listed twice", s)
		}
		t.specialID[s] = len(t.vocab)
		t.vocab = append(t.vocab, []byte(s))
	}
	first := t.firstMerge()
	for i, m := range merges {
		id := first + i
		for _, part := range m {
			if part < 0 || part >= id || (part >= NumBytes && part < first) {
				return nil, fmt.Errorf("tokenizer: merge %d (%d, %d) refers to id %d, which is not a byte or an earlier merge", i, m[0], m[1], part)
			}
		}
		k := pairKey(int32(m[0]), int32(m[1]))
		if _, dup := t.core.ranks[k]; dup {
			return nil, fmt.Errorf("tokenizer: merge %d (%d, %d) is a duplicate", i, m[0], m[1])
		}
		t.core.ranks[k] = mergeRule{rank: int32(id), id: int32(id)}
		tok := make([]byte, 0, len(t.vocab[m[0]])+len(t.vocab[m[1]]))
		tok = append(tok, t.vocab[m[0]]...)
		tok = append(tok, t.vocab[m[1]]...)
		t.vocab = append(t.vocab, tok)
	}
	return t, nil
}

func (t *Tokenizer) firstMerge() int { return NumBytes + len(t.specials) }

// VocabSize is the number of token ids: 256 bytes, the special tokens and the
// merges. Every id Encode or ApplyChat returns is below VocabSize.
func (t *Tokenizer) VocabSize() int { return len(t.vocab) }

// SplitHan reports whether every Han character is its own pre-tokenization
// chunk (TrainOptions.SplitHan).
func (t *Tokenizer) SplitHan() bool { return t.splitHan }

// NumMerges is the number of learned merges.
func (t *Tokenizer) NumMerges() int { return len(t.merges) }

// Specials returns the special tokens in id order (a copy).
func (t *Tokenizer) Specials() []string { return append([]string(nil), t.specials...) }

// SpecialID returns the id of a special token such as End, and whether the
// tokenizer has it.
func (t *Tokenizer) SpecialID(s string) (int, bool) {
	id, ok := t.specialID[s]
	return id, ok
}

// MustSpecialID is SpecialID that panics when the special token is missing;
// for code that constructed the tokenizer with known specials.
func (t *Tokenizer) MustSpecialID(s string) int {
	id, ok := t.specialID[s]
	if !ok {
		panic(fmt.Sprintf("tokenizer: no special token %q (have %q)", s, t.specials))
	}
	return id
}

// IsSpecial reports whether id is a special token.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= NumBytes && id < t.firstMerge()
}

// TokenBytes returns the bytes of one token (for special tokens, their text).
// It panics if id is out of range. The returned slice must not be modified.
func (t *Tokenizer) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.vocab) {
		panic(fmt.Sprintf("tokenizer: token id %d out of range [0, %d)", id, len(t.vocab)))
	}
	return t.vocab[id]
}

// Encode converts text into token ids. Special-token text inside s is encoded
// as ordinary bytes, never as the special token. Decode(Encode(s)) == s for
// every string s.
func (t *Tokenizer) Encode(s string) []int {
	return t.AppendEncode(nil, s)
}

// AppendEncode appends the ids of s to dst and returns the extended slice.
func (t *Tokenizer) AppendEncode(dst []int, s string) []int {
	splitChunks(s, t.splitHan, func(chunk string) {
		for _, id := range t.core.encodeChunk(chunk) {
			dst = append(dst, int(id))
		}
	})
	return dst
}

// EncodeWithSpecials is Encode except that occurrences of the special tokens'
// text become the special tokens (longest match first). Use it only for
// trusted text such as templates, never for user input.
func (t *Tokenizer) EncodeWithSpecials(s string) []int {
	var dst []int
	for len(s) > 0 {
		best, bestLen, at := -1, 0, len(s)
		for sp, id := range t.specialID {
			if j := strings.Index(s, sp); j >= 0 && (j < at || (j == at && len(sp) > bestLen)) {
				best, bestLen, at = id, len(sp), j
			}
		}
		dst = t.AppendEncode(dst, s[:at])
		if best < 0 {
			break
		}
		dst = append(dst, best)
		s = s[at+bestLen:]
	}
	return dst
}

// Decode converts ids back to text; special tokens become their text. It
// panics on an id outside [0, VocabSize()); use DecodeChecked for ids that
// come from outside the program.
func (t *Tokenizer) Decode(ids []int) string {
	s, err := t.DecodeChecked(ids)
	if err != nil {
		panic(err.Error())
	}
	return s
}

// DecodeChecked is Decode that returns an error for out-of-range ids.
func (t *Tokenizer) DecodeChecked(ids []int) (string, error) {
	var sb strings.Builder
	for i, id := range ids {
		if id < 0 || id >= len(t.vocab) {
			return "", fmt.Errorf("tokenizer: token %d (position %d) out of range [0, %d)", id, i, len(t.vocab))
		}
		sb.Write(t.vocab[id])
	}
	return sb.String(), nil
}

// DecodeSkipSpecial is Decode that drops special tokens (and panics likewise).
func (t *Tokenizer) DecodeSkipSpecial(ids []int) string {
	var sb strings.Builder
	for _, id := range ids {
		if t.IsSpecial(id) {
			continue
		}
		sb.Write(t.TokenBytes(id))
	}
	return sb.String()
}

// TrainOptions configures Train.
type TrainOptions struct {
	// VocabSize is the target vocabulary size including the 256 bytes and the
	// special tokens. Training stops earlier when no pair occurs at least
	// MinFrequency times.
	VocabSize int
	// MinFrequency is the minimum count of a pair to be merged (default 2).
	MinFrequency int
	// Specials are the special tokens; nil means DefaultSpecials. Use an empty
	// non-nil slice for none.
	Specials []string
	// SplitHan makes every Han character a pre-tokenization chunk of its
	// own, so that merges stay within one character (see splitChunks). The
	// tokenizer keeps the choice (and its JSON records it): Encode splits
	// the same way.
	SplitHan bool
}

// Train learns a byte-level BPE tokenizer from texts (Sennrich et al. 2016).
// It is deterministic: ties between equally frequent pairs are broken by the
// smaller (left, right) id pair.
func Train(texts []string, opt TrainOptions) (*Tokenizer, error) {
	specials := opt.Specials
	if specials == nil {
		specials = DefaultSpecials
	}
	minFreq := opt.MinFrequency
	if minFreq <= 0 {
		minFreq = 2
	}
	base := NumBytes + len(specials)
	if opt.VocabSize < base {
		return nil, fmt.Errorf("tokenizer: VocabSize %d is smaller than the %d bytes and %d special tokens", opt.VocabSize, NumBytes, len(specials))
	}
	if _, err := build(specials, nil); err != nil {
		return nil, err
	}

	// Unique chunks with counts, in first-seen order (deterministic).
	index := map[string]int{}
	var words [][]int32
	var counts []int64
	for _, text := range texts {
		splitChunks(text, opt.SplitHan, func(c string) {
			if i, ok := index[c]; ok {
				counts[i]++
				return
			}
			index[c] = len(words)
			w := make([]int32, len(c))
			for k := 0; k < len(c); k++ {
				w[k] = int32(c[k])
			}
			words = append(words, w)
			counts = append(counts, 1)
		})
	}

	pairCount := map[uint64]int64{}
	where := map[uint64][]int32{} // word indices (may contain stale or repeated entries)
	for wi, w := range words {
		for k := 0; k+1 < len(w); k++ {
			key := pairKey(w[k], w[k+1])
			pairCount[key] += counts[wi]
			ws := where[key]
			if len(ws) == 0 || ws[len(ws)-1] != int32(wi) {
				where[key] = append(ws, int32(wi))
			}
		}
	}
	h := &pairHeap{}
	for key, c := range pairCount {
		h.items = append(h.items, pairItem{count: c, key: key})
	}
	heap.Init(h)

	var merges [][2]int
	newID := int32(base)
	touched := map[uint64]struct{}{}
	for int(newID) < opt.VocabSize {
		var best pairItem
		found := false
		for h.Len() > 0 {
			it := heap.Pop(h).(pairItem)
			if pairCount[it.key] == it.count && it.count > 0 {
				best, found = it, true
				break
			}
		}
		if !found || best.count < int64(minFreq) {
			break
		}
		a, b := int32(best.key>>32), int32(uint32(best.key))
		merges = append(merges, [2]int{int(a), int(b)})
		clear(touched)
		ws := where[best.key]
		delete(where, best.key)
		for _, wi := range ws {
			w := words[wi]
			has := false
			for k := 0; k+1 < len(w); k++ {
				if w[k] == a && w[k+1] == b {
					has = true
					break
				}
			}
			if !has {
				continue
			}
			c := counts[wi]
			for k := 0; k+1 < len(w); k++ {
				key := pairKey(w[k], w[k+1])
				pairCount[key] -= c
				touched[key] = struct{}{}
			}
			nw := make([]int32, 0, len(w))
			for k := 0; k < len(w); k++ {
				if k+1 < len(w) && w[k] == a && w[k+1] == b {
					nw = append(nw, newID)
					k++
				} else {
					nw = append(nw, w[k])
				}
			}
			words[wi] = nw
			for k := 0; k+1 < len(nw); k++ {
				key := pairKey(nw[k], nw[k+1])
				pairCount[key] += c
				touched[key] = struct{}{}
				if nw[k] == newID || nw[k+1] == newID {
					l := where[key]
					if len(l) == 0 || l[len(l)-1] != wi {
						where[key] = append(l, wi)
					}
				}
			}
		}
		// Push the new counts of every touched pair, in a fixed order.
		keys := make([]uint64, 0, len(touched))
		for k := range touched {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		for _, k := range keys {
			if c := pairCount[k]; c > 0 {
				heap.Push(h, pairItem{count: c, key: k})
			} else {
				delete(pairCount, k)
			}
		}
		newID++
	}
	tok, err := build(specials, merges)
	if err != nil {
		return nil, err
	}
	tok.splitHan = opt.SplitHan
	return tok, nil
}

type pairItem struct {
	count int64
	key   uint64
}

// pairHeap orders pairs by count (descending), then key (ascending), which
// makes training deterministic.
type pairHeap struct{ items []pairItem }

func (h *pairHeap) Len() int { return len(h.items) }
func (h *pairHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.count != b.count {
		return a.count > b.count
	}
	return a.key < b.key
}
func (h *pairHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *pairHeap) Push(x any)    { h.items = append(h.items, x.(pairItem)) }
func (h *pairHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}
