package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
)

// Item is one sampled entry.
type Item[T any] struct {
	// ID identifies the entry for Update; it grows by one per Add and is
	// never reused, so updating an evicted entry is a no-op.
	ID uint64
	// Value is what was added.
	Value T
	// Priority is the raw priority p (before the exponent α).
	Priority float64
	// Prob is the sampling probability P(i) at sampling time.
	Prob float64
	// Weight is the normalised importance-sampling weight.
	Weight float64
}

// Buffer is a capacity-bounded prioritized replay buffer.
type Buffer[T any] struct {
	mu    sync.Mutex
	alpha float64
	cap   int
	sum   []float64 // sum-tree over p^α, leaves at [cap-1+... ] in a 2·size−1 array
	min   []float64 // min-tree over p^α
	size  int       // leaves in the trees (power of two ≥ cap)
	vals  []T
	ids   []uint64
	prio  []float64
	next  uint64 // ID of the next Add
	n     int    // items held
	maxP  float64
}

// New returns an empty buffer of the given capacity and priority exponent α
// (0: uniform sampling; 1: fully proportional). It panics on a
// non-positive capacity or negative α.
func New[T any](capacity int, alpha float64) *Buffer[T] {
	if capacity <= 0 || alpha < 0 {
		panic(fmt.Sprintf("replay: New: capacity %d, alpha %g", capacity, alpha))
	}
	size := 1
	for size < capacity {
		size <<= 1
	}
	b := &Buffer[T]{alpha: alpha, cap: capacity, size: size, maxP: 1}
	b.sum = make([]float64, 2*size)
	b.min = make([]float64, 2*size)
	for i := range b.min {
		b.min[i] = math.Inf(1)
	}
	b.vals = make([]T, capacity)
	b.ids = make([]uint64, capacity)
	b.prio = make([]float64, capacity)
	return b
}

// set stores p^α at slot i and updates both trees (root at index 1).
func (b *Buffer[T]) set(i int, pa float64) {
	j := i + b.size
	b.sum[j] = pa
	b.min[j] = pa
	for j >>= 1; j >= 1; j >>= 1 {
		b.sum[j] = b.sum[2*j] + b.sum[2*j+1]
		b.min[j] = math.Min(b.min[2*j], b.min[2*j+1])
	}
}

// find returns the slot whose cumulative sum range contains u ∈ [0, total).
func (b *Buffer[T]) find(u float64) int {
	j := 1
	for j < b.size {
		if u < b.sum[2*j] || b.sum[2*j+1] == 0 {
			j = 2 * j
		} else {
			u -= b.sum[2*j]
			j = 2*j + 1
		}
	}
	return j - b.size
}

// Add inserts v with priority p (p ≤ 0 uses the largest priority seen so
// far), evicting the oldest item when full, and returns its ID.
func (b *Buffer[T]) Add(v T, p float64) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.add(v, p)
}

func (b *Buffer[T]) add(v T, p float64) uint64 {
	if p <= 0 || math.IsNaN(p) {
		p = b.maxP
	}
	if p > b.maxP {
		b.maxP = p
	}
	id := b.next
	b.next++
	slot := int(id % uint64(b.cap))
	b.vals[slot] = v
	b.ids[slot] = id
	b.prio[slot] = p
	b.set(slot, math.Pow(p, b.alpha))
	if b.n < b.cap {
		b.n++
	}
	return id
}

// AddBatch inserts vs[k] with priority ps[k] (as Add) under one lock, so
// the batch gets consecutive IDs first, first+1, …, and returns first. It
// panics when the slices differ in length.
func (b *Buffer[T]) AddBatch(vs []T, ps []float64) (first uint64) {
	if len(vs) != len(ps) {
		panic(fmt.Sprintf("replay: AddBatch: %d values, %d priorities", len(vs), len(ps)))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	first = b.next
	for k, v := range vs {
		b.add(v, ps[k])
	}
	return first
}

// Len is the number of items held.
func (b *Buffer[T]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// Sample draws n items with replacement, proportionally to p^α, using
// stratified sampling (one draw in each of n equal slices of the total
// mass), with IS weights for exponent beta. It returns nil when the buffer
// is empty.
func (b *Buffer[T]) Sample(n int, beta float64, rng *rand.Rand) []Item[T] {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == 0 || n <= 0 {
		return nil
	}
	total := b.sum[1]
	minP := b.min[1] / total
	maxW := math.Pow(float64(b.n)*minP, -beta)
	out := make([]Item[T], n)
	seg := total / float64(n)
	for k := 0; k < n; k++ {
		u := (float64(k) + rng.Float64()) * seg
		if u >= total {
			u = math.Nextafter(total, 0)
		}
		i := b.find(u)
		pa := b.sum[i+b.size]
		P := pa / total
		out[k] = Item[T]{
			ID: b.ids[i], Value: b.vals[i], Priority: b.prio[i], Prob: P,
			Weight: math.Pow(float64(b.n)*P, -beta) / maxW,
		}
	}
	return out
}

// Update sets the priorities of the items with the given IDs (for example
// |TD error| + ε or |advantage|). IDs that were evicted since sampling are
// ignored. It panics when the slices differ in length.
func (b *Buffer[T]) Update(ids []uint64, priorities []float64) {
	if len(ids) != len(priorities) {
		panic(fmt.Sprintf("replay: Update: %d ids, %d priorities", len(ids), len(priorities)))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, id := range ids {
		slot := int(id % uint64(b.cap))
		if b.ids[slot] != id || id >= b.next {
			continue
		}
		p := priorities[k]
		if p <= 0 || math.IsNaN(p) {
			p = 1e-6
		}
		if p > b.maxP {
			b.maxP = p
		}
		b.prio[slot] = p
		b.set(slot, math.Pow(p, b.alpha))
	}
}

// Stats describes a buffer's state.
type Stats struct {
	Len      int     `json:"len"`      // items held
	Capacity int     `json:"capacity"` // most items held
	Alpha    float64 `json:"alpha"`    // priority exponent
	// Added counts every Add since New (the next ID), evicted items included.
	Added uint64 `json:"added"`
	// MaxPriority is the largest priority seen, the one Add gives new items.
	MaxPriority float64 `json:"max_priority"`
	// Mass is Σ p_i^α over the items held, the sampling normaliser.
	Mass float64 `json:"mass"`
}

// Stats returns the buffer's state.
func (b *Buffer[T]) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Len: b.n, Capacity: b.cap, Alpha: b.alpha, Added: b.next, MaxPriority: b.maxP, Mass: b.sum[1]}
}

// Items returns a snapshot of the items held, oldest first (Prob and Weight
// are zero).
func (b *Buffer[T]) Items() []Item[T] {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Item[T], 0, b.n)
	start := b.next - uint64(b.n)
	for id := start; id < b.next; id++ {
		s := int(id % uint64(b.cap))
		out = append(out, Item[T]{ID: b.ids[s], Value: b.vals[s], Priority: b.prio[s]})
	}
	return out
}

// Anneal returns β linearly annealed from beta0 at step 0 to 1 at step
// total (and 1 afterwards), as in Schaul et al.
func Anneal(beta0 float64, step, total int) float64 {
	if total <= 0 || step >= total {
		return 1
	}
	return beta0 + (1-beta0)*float64(step)/float64(total)
}
