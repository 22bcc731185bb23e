package cuda

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"sync"
)

// RawAllocator is the uncached allocator under a CachingAllocator: on the GPU
// it is cuMemAlloc/cuMemFree; in tests it is a fake. Addresses are opaque
// uintptrs that are never dereferenced by Go code.
type RawAllocator interface {
	Alloc(bytes int64) (uintptr, error)
	Free(ptr uintptr) error
}

// ErrUnknownPointer is returned by CachingAllocator.Free for an address that
// the allocator did not hand out or that was already freed.
var ErrUnknownPointer = errors.New("cuda: free of a pointer not allocated by this allocator (or freed twice)")

// MinBlock is the smallest block a CachingAllocator hands out (and its
// alignment granule): 512 bytes, as in PyTorch's caching allocator.
const MinBlock = 512

// SizeClass returns the block size a request of n bytes is served with: at
// least MinBlock, otherwise n rounded up to a multiple of a quarter of the
// largest power of two not above n. Waste is therefore under 25% (under 12.5%
// on average), and there are only four classes per octave, so freed blocks
// are reused by requests of nearby sizes, which is what a training loop with
// fixed shapes makes.
func SizeClass(n int64) int64 {
	if n <= MinBlock {
		return MinBlock
	}
	p := 63 - bits.LeadingZeros64(uint64(n)) // 2^p <= n < 2^(p+1)
	q := int64(1) << (p - 2)
	return (n + q - 1) / q * q
}

// AllocStats are a CachingAllocator's counters.
type AllocStats struct {
	InUse     int64 // bytes in blocks handed out and not freed
	Cached    int64 // bytes in free blocks kept for reuse
	Hits      int64 // requests served from the cache
	Misses    int64 // requests that went to the raw allocator
	RawAllocs int64 // successful raw allocations
	RawFrees  int64 // raw frees (cache trims and releases)
	Retries   int64 // raw allocations retried after releasing the cache
}

// CachingAllocator keeps freed device blocks in per-size-class free lists and
// hands them out again instead of calling cuMemAlloc/cuMemFree, which are
// slow and synchronise the device. A request is rounded to its SizeClass; a
// free list hit is O(1). When the raw allocator fails (out of memory) the
// cache is released and the allocation retried once. MaxCached (0: no limit)
// bounds the bytes kept in free lists; blocks beyond it are returned to the
// raw allocator at once.
//
// Blocks are reused in the order frees arrive, which is safe when all work
// that touches them is ordered on one stream (the Engine's). A caller that
// frees a block still in use on another stream must synchronise first.
//
// CachingAllocator is safe for concurrent use.
type CachingAllocator struct {
	Raw       RawAllocator
	MaxCached int64

	mu    sync.Mutex
	free  map[int64][]uintptr
	live  map[uintptr]int64
	stats AllocStats
}

// NewCachingAllocator returns a CachingAllocator over raw.
func NewCachingAllocator(raw RawAllocator) *CachingAllocator {
	return &CachingAllocator{Raw: raw}
}

func (a *CachingAllocator) init() {
	if a.free == nil {
		a.free = make(map[int64][]uintptr)
		a.live = make(map[uintptr]int64)
	}
}

// Alloc returns a block of at least n bytes (n > 0) and its actual size.
func (a *CachingAllocator) Alloc(n int64) (ptr uintptr, size int64, err error) {
	if n <= 0 {
		return 0, 0, fmt.Errorf("cuda: alloc of %d bytes", n)
	}
	size = SizeClass(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.init()
	if l := a.free[size]; len(l) > 0 {
		ptr = l[len(l)-1]
		a.free[size] = l[:len(l)-1]
		a.live[ptr] = size
		a.stats.Cached -= size
		a.stats.InUse += size
		a.stats.Hits++
		return ptr, size, nil
	}
	a.stats.Misses++
	ptr, err = a.Raw.Alloc(size)
	if err != nil && a.stats.Cached > 0 {
		a.stats.Retries++
		if rerr := a.releaseLocked(); rerr != nil {
			return 0, 0, fmt.Errorf("cuda: alloc %d bytes: %w (and releasing the cache: %v)", size, err, rerr)
		}
		ptr, err = a.Raw.Alloc(size)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("cuda: alloc %d bytes: %w", size, err)
	}
	if _, dup := a.live[ptr]; dup {
		return 0, 0, fmt.Errorf("cuda: raw allocator returned live address %#x twice", ptr)
	}
	a.stats.RawAllocs++
	a.live[ptr] = size
	a.stats.InUse += size
	return ptr, size, nil
}

// Free returns the block at ptr to its free list (or to the raw allocator
// when the cache is full).
func (a *CachingAllocator) Free(ptr uintptr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.init()
	size, ok := a.live[ptr]
	if !ok {
		return fmt.Errorf("%w: %#x", ErrUnknownPointer, ptr)
	}
	delete(a.live, ptr)
	a.stats.InUse -= size
	if a.MaxCached > 0 && a.stats.Cached+size > a.MaxCached {
		a.stats.RawFrees++
		if err := a.Raw.Free(ptr); err != nil {
			return fmt.Errorf("cuda: free %#x: %w", ptr, err)
		}
		return nil
	}
	a.free[size] = append(a.free[size], ptr)
	a.stats.Cached += size
	return nil
}

// SizeOf returns the block size of a live allocation, or 0 if ptr is not live.
func (a *CachingAllocator) SizeOf(ptr uintptr) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.live[ptr]
}

// Release returns every cached (free) block to the raw allocator. Live blocks
// are untouched.
func (a *CachingAllocator) Release() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.init()
	return a.releaseLocked()
}

func (a *CachingAllocator) releaseLocked() error {
	classes := make([]int64, 0, len(a.free))
	for c := range a.free {
		classes = append(classes, c)
	}
	sort.Slice(classes, func(i, j int) bool { return classes[i] < classes[j] })
	var first error
	for _, c := range classes {
		for _, p := range a.free[c] {
			a.stats.RawFrees++
			a.stats.Cached -= c
			if err := a.Raw.Free(p); err != nil && first == nil {
				first = fmt.Errorf("cuda: free %#x: %w", p, err)
			}
		}
		delete(a.free, c)
	}
	return first
}

// Stats returns a snapshot of the counters.
func (a *CachingAllocator) Stats() AllocStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}
