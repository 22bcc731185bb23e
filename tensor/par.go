package tensor

import "sync"

// Work sizes (in elements) below which a row-wise kernel stays on the calling
// goroutine. Starting a goroutine costs about a microsecond; these keep each
// worker busy for tens of microseconds, so splitting only happens when it
// pays (see benchmarks/kernels_test.go, the Parallel/Serial pairs).
const (
	kParMinTranscendental = 1 << 15 // exp/tanh per element (softmax, GELU)
	kParMinStreaming      = 1 << 17 // a few flops per element (layer norm)
)

// kParallelRows splits rows into contiguous chunks and runs fn on each chunk,
// one goroutine per chunk, using at most Threads() workers and only as many
// as keep minWork elements (rows·cols) per worker. fn receives the worker
// index and its half-open row range.
func kParallelRows(rows, cols, minWork int, fn func(w, lo, hi int)) {
	w := kWorkers(rows, cols, minWork)
	if w <= 1 {
		fn(0, 0, rows)
		return
	}
	chunk := (rows + w - 1) / w
	var wg sync.WaitGroup
	for i := 1; i < w; i++ {
		lo, hi := i*chunk, min((i+1)*chunk, rows)
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i, lo, hi)
		}()
	}
	fn(0, 0, min(chunk, rows))
	wg.Wait()
}

// ParallelRows runs fn over rows split into contiguous chunks, one goroutine
// per chunk, with at most Threads() workers and only as many as keep
// minWork elements (rows·cols) per worker; fn receives the worker index
// (below Threads()) and its half-open row range. It is how this package's
// row-wise kernels parallelise, exported for ops built on them.
func ParallelRows(rows, cols, minWork int, fn func(w, lo, hi int)) {
	kParallelRows(rows, cols, max(minWork, 1), fn)
}

// kWorkers is the number of workers kParallelRows uses: at most Threads()
// (GOMAXPROCS unless SetThreads says otherwise, shared with Gemm).
func kWorkers(rows, cols, minWork int) int {
	w := Threads()
	if cols <= 0 {
		return 1
	}
	w = min(w, rows*cols/minWork, rows)
	return max(w, 1)
}
