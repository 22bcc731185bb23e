package cuda

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// fakeRaw hands out increasing fake addresses and fails past capacity bytes.
type fakeRaw struct {
	mu       sync.Mutex
	next     uintptr
	capacity int64
	used     int64
	live     map[uintptr]int64
	allocs   int
	frees    int
}

var errOOM = errors.New("out of memory")

func newFakeRaw(capacity int64) *fakeRaw {
	return &fakeRaw{next: 1 << 20, capacity: capacity, live: map[uintptr]int64{}}
}

func (f *fakeRaw) Alloc(n int64) (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.capacity > 0 && f.used+n > f.capacity {
		return 0, errOOM
	}
	p := f.next
	f.next += uintptr(n)
	f.used += n
	f.live[p] = n
	f.allocs++
	return p, nil
}

func (f *fakeRaw) Free(p uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.live[p]
	if !ok {
		return fmt.Errorf("fake: bad free %#x", p)
	}
	delete(f.live, p)
	f.used -= n
	f.frees++
	return nil
}

func TestSizeClass(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{
		{1, 512}, {512, 512}, {513, 640}, {640, 640}, {641, 768}, {1000, 1024},
		{1024, 1024}, {1025, 1280}, {4096, 4096}, {5000, 5120}, {1 << 20, 1 << 20},
		{(1 << 20) + 1, (1 << 20) + (1 << 18)}, {3 << 30, 3 << 30},
	} {
		if got := SizeClass(tc.n); got != tc.want {
			t.Errorf("SizeClass(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	// Invariants over a range: covers n, wastes < 25%, idempotent.
	for n := int64(1); n < 1<<16; n += 7 {
		c := SizeClass(n)
		if c < n || (n > MinBlock && float64(c-n) >= 0.25*float64(n)) || SizeClass(c) != c {
			t.Fatalf("SizeClass(%d) = %d breaks an invariant", n, c)
		}
	}
}

func TestCachingAllocatorReuse(t *testing.T) {
	raw := newFakeRaw(0)
	a := NewCachingAllocator(raw)
	p1, s1, err := a.Alloc(1000)
	if err != nil || s1 != 1024 {
		t.Fatalf("Alloc(1000) = %#x, %d, %v", p1, s1, err)
	}
	p2, _, _ := a.Alloc(1000)
	if p1 == p2 {
		t.Fatal("two live blocks share an address")
	}
	if err := a.Free(p1); err != nil {
		t.Fatal(err)
	}
	// Same class (1001..1024 → 1024) is served from the cache.
	p3, _, _ := a.Alloc(1010)
	if p3 != p1 {
		t.Errorf("cache miss: got %#x, want reused %#x", p3, p1)
	}
	// A different class is not.
	if err := a.Free(p3); err != nil {
		t.Fatal(err)
	}
	p4, s4, _ := a.Alloc(2000)
	if p4 == p1 || s4 != 2048 {
		t.Errorf("Alloc(2000) = %#x (%d bytes); must not reuse the 1024-byte block", p4, s4)
	}
	st := a.Stats()
	want := AllocStats{InUse: 1024 + 2048, Cached: 1024, Hits: 1, Misses: 3, RawAllocs: 3}
	if st != want {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
	if raw.allocs != 3 {
		t.Errorf("raw allocs = %d, want 3", raw.allocs)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Cached != 0 || raw.frees != 1 {
		t.Errorf("after Release: cached %d, raw frees %d", st.Cached, raw.frees)
	}
}

func TestCachingAllocatorErrors(t *testing.T) {
	a := NewCachingAllocator(newFakeRaw(0))
	if _, _, err := a.Alloc(0); err == nil {
		t.Error("Alloc(0) succeeded")
	}
	if err := a.Free(12345); !errors.Is(err, ErrUnknownPointer) {
		t.Errorf("Free(unknown) = %v, want ErrUnknownPointer", err)
	}
	p, _, _ := a.Alloc(10)
	if err := a.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(p); !errors.Is(err, ErrUnknownPointer) {
		t.Errorf("double Free = %v, want ErrUnknownPointer", err)
	}
}

func TestCachingAllocatorOOMRetry(t *testing.T) {
	raw := newFakeRaw(4096)
	a := NewCachingAllocator(raw)
	p, _, err := a.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(p); err != nil { // cached: the device is "full"
		t.Fatal(err)
	}
	// A different class does not fit until the cache is released.
	if _, _, err := a.Alloc(2048); err != nil {
		t.Fatalf("Alloc after cache release: %v", err)
	}
	if st := a.Stats(); st.Retries != 1 || st.Cached != 0 || raw.frees != 1 {
		t.Errorf("stats %+v, raw frees %d; want one retry that freed the cached block", st, raw.frees)
	}
	// A real OOM is still reported, wrapped.
	if _, _, err := a.Alloc(8192); !errors.Is(err, errOOM) {
		t.Errorf("Alloc beyond capacity = %v, want wrapped errOOM", err)
	}
}

func TestCachingAllocatorMaxCached(t *testing.T) {
	raw := newFakeRaw(0)
	a := NewCachingAllocator(raw)
	a.MaxCached = 1024
	p1, _, _ := a.Alloc(1024)
	p2, _, _ := a.Alloc(1024)
	a.Free(p1)
	a.Free(p2) // over the limit: goes back to the raw allocator
	if st := a.Stats(); st.Cached != 1024 || raw.frees != 1 || st.InUse != 0 {
		t.Errorf("stats %+v, raw frees %d", st, raw.frees)
	}
}

func TestCachingAllocatorConcurrent(t *testing.T) {
	raw := newFakeRaw(0)
	a := NewCachingAllocator(raw)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				p, _, err := a.Alloc(int64(512 * (1 + (i+g)%5)))
				if err != nil {
					t.Error(err)
					return
				}
				if err := a.Free(p); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	st := a.Stats()
	if st.InUse != 0 || st.Hits+st.Misses != 1600 || int64(raw.allocs) != st.Misses {
		t.Errorf("stats %+v, raw allocs %d", st, raw.allocs)
	}
	if st.Misses > 8*5 {
		t.Errorf("%d misses: the cache is not reusing blocks (at most 40 distinct live blocks)", st.Misses)
	}
}

// ExampleCachingAllocator shows a block being reused after Free.
func ExampleCachingAllocator() {
	a := NewCachingAllocator(newFakeRaw(0))
	p, size, _ := a.Alloc(3000)
	a.Free(p)
	q, _, _ := a.Alloc(3050) // same size class (3072)
	fmt.Println(size, p == q, a.Stats().Hits)
	// Output: 3072 true 1
}
