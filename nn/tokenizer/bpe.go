package tokenizer

import (
	"container/heap"
	"sync"
)

// mergeRule is what one merge of the pair (left, right) makes: the merged
// token's id, and the merge's rank (its priority: lower merges first). In
// troupe's own format merges create ids in order, so rank == id; in a
// Hugging Face tokenizer.json the rank is the merge's position in "merges"
// and the id is the vocabulary entry of the concatenation.
type mergeRule struct{ rank, id int32 }

// bpeCore is the byte-level BPE encoder that Tokenizer and HF share: the
// merge table, the id of each single-byte token, and a memo of chunk
// encodings. Both formats encode a pre-tokenizer chunk the same way — bytes
// become their single-byte tokens, then the lowest-ranked adjacent pair is
// merged until none is left — and only the tables differ.
type bpeCore struct {
	ranks map[uint64]mergeRule // pairKey(left, right) -> merge
	// alphabet[b] is the id of the token of the single byte b; -1 where the
	// vocabulary lacks it (such bytes are dropped, as Hugging Face's BPE
	// drops characters outside its vocabulary when it has no unk token).
	alphabet [NumBytes]int32
	// whole, when not nil, maps a chunk's bytes to the id of the vocabulary
	// entry that is the whole chunk; such chunks skip the merges
	// (Hugging Face's BPE ignore_merges, which Llama 3 sets).
	whole map[string]int32

	mu    sync.RWMutex
	cache map[string][]int32
}

// maxCache bounds the number of chunks whose encoding is memoised, and
// maxCachedChunk the length of a memoised chunk: words recur, long chunks
// (a run of digits, a line of dashes) rarely do, and would hold memory.
const (
	maxCache       = 1 << 16
	maxCachedChunk = 256
)

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// identityAlphabet is troupe's own alphabet: byte b is token id b.
func identityAlphabet() (a [NumBytes]int32) {
	for b := range a {
		a[b] = int32(b)
	}
	return a
}

// encodeChunk returns the BPE encoding of one pre-tokenizer chunk, memoised.
// The returned slice must not be modified.
func (c *bpeCore) encodeChunk(chunk string) []int32 {
	c.mu.RLock()
	ids, ok := c.cache[chunk]
	c.mu.RUnlock()
	if ok {
		return ids
	}
	if id, ok := c.whole[chunk]; ok {
		ids = []int32{id}
	} else {
		ids = c.bpe(chunk)
	}
	if len(chunk) > maxCachedChunk {
		return ids
	}
	c.mu.Lock()
	if c.cache == nil || len(c.cache) >= maxCache {
		c.cache = make(map[string][]int32)
	}
	c.cache[chunk] = ids
	c.mu.Unlock()
	return ids
}

// clearCache drops every memoised chunk encoding.
func (c *bpeCore) clearCache() {
	c.mu.Lock()
	c.cache = make(map[string][]int32)
	c.mu.Unlock()
}

// mergeCand is a candidate merge of the symbol at pos with its right
// neighbour, valid while both still hold left and right.
type mergeCand struct {
	rank, id    int32
	pos         int32 // position of the left symbol
	left, right int32
}

type candHeap []mergeCand

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(mergeCand)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// bpe applies the merges to one chunk: repeatedly the adjacent pair with the
// lowest rank (leftmost on ties) is merged, using a priority queue over a
// linked list of symbols (O(n log n) in the chunk length). This is the order
// in which troupe's training merged, so encodings of the training corpus
// match the training segmentation, and it is the order of Hugging Face's
// BPE (Rust and JS alike: rank first, then the position of the left symbol).
func (c *bpeCore) bpe(chunk string) []int32 {
	sym := make([]int32, 0, len(chunk))
	for i := 0; i < len(chunk); i++ {
		if id := c.alphabet[chunk[i]]; id >= 0 {
			sym = append(sym, id)
		}
	}
	n := len(sym)
	next := make([]int32, n)
	prev := make([]int32, n)
	for i := 0; i < n; i++ {
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
	}
	if n > 0 {
		next[n-1] = -1
	}
	var h candHeap
	push := func(p int32) {
		q := next[p]
		if p < 0 || q < 0 {
			return
		}
		if m, ok := c.ranks[pairKey(sym[p], sym[q])]; ok {
			heap.Push(&h, mergeCand{rank: m.rank, id: m.id, pos: p, left: sym[p], right: sym[q]})
		}
	}
	for i := 0; i+1 < n; i++ {
		push(int32(i))
	}
	dead := make([]bool, n)
	for h.Len() > 0 {
		m := heap.Pop(&h).(mergeCand)
		p := m.pos
		q := next[p]
		if dead[p] || q < 0 || sym[p] != m.left || sym[q] != m.right {
			continue // stale
		}
		sym[p] = m.id
		dead[q] = true
		nq := next[q]
		next[p] = nq
		if nq >= 0 {
			prev[nq] = p
		}
		if pp := prev[p]; pp >= 0 {
			push(pp)
		}
		push(p)
	}
	out := make([]int32, 0, n)
	for p := int32(0); n > 0 && p >= 0; p = next[p] {
		out = append(out, sym[p])
	}
	return out
}
