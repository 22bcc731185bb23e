package tensor

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Work sizes (in elements) below which a row-wise kernel stays on the calling
// goroutine. Handing a part to another thread costs microseconds; these keep
// each worker busy for tens of microseconds, so splitting only happens when
// it pays (see benchmarks/kernels_test.go, the Parallel/Serial pairs).
const (
	kParMinTranscendental = 1 << 15 // exp/tanh per element (softmax, GELU)
	kParMinStreaming      = 1 << 17 // a few flops per element (layer norm)
)

// kParallelRows splits rows into contiguous chunks and runs fn on the chunks
// at once (parallel), using at most Threads() workers and only as many as
// keep minWork elements (rows·cols) per worker. fn receives the worker index
// and its half-open row range.
func kParallelRows(rows, cols, minWork int, fn func(w, lo, hi int)) {
	w := kWorkers(rows, cols, minWork)
	if w <= 1 {
		fn(0, 0, rows)
		return
	}
	chunk := (rows + w - 1) / w
	parallel((rows+chunk-1)/chunk, func(i int) { fn(i, i*chunk, min((i+1)*chunk, rows)) })
}

// ParallelRows runs fn over rows split into contiguous chunks, the chunks at
// once, with at most Threads() workers and only as many as keep minWork
// elements (rows·cols) per worker; fn receives the worker index
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

// parallel runs fn(0), …, fn(n-1) at once and returns when all have
// returned; fn(0) runs on the calling goroutine, the others on the team's
// workers. A worker that finishes waits for the next region spinning (and
// yielding its thread to any other runnable goroutine) for teamSpin before
// it sleeps: waking a sleeping thread took 20–90 µs on a 2-core VM, as much
// as a decoding step's smaller products take on it. A region that finds the
// team busy (nested, or another goroutine's) starts goroutines instead.
func parallel(n int, fn func(i int)) {
	if n <= 1 {
		if n == 1 {
			fn(0)
		}
		return
	}
	if !theTeam.mu.TryLock() {
		var wg sync.WaitGroup
		for i := 1; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn(i)
			}()
		}
		fn(0)
		wg.Wait()
		return
	}
	defer theTeam.mu.Unlock()
	for len(theTeam.workers) < n-1 {
		w := &teamWorker{wake: make(chan struct{}, 1)}
		theTeam.workers = append(theTeam.workers, w)
		go w.loop()
	}
	var pending atomic.Int32
	pending.Store(int32(n - 1))
	for i := 1; i < n; i++ {
		job := func() {
			defer pending.Add(-1)
			fn(i)
		}
		theTeam.workers[i-1].give(&job)
	}
	fn(0)
	for pending.Load() > 0 {
		runtime.Gosched()
	}
}

// parallelPieces runs fn(0), …, fn(pieces-1) on nw workers (the calling
// goroutine and nw-1 of the team), each taking the next piece from a shared
// counter until none is left. With more pieces than workers a worker that
// starts late or runs slow (a woken thread, a vCPU the hypervisor
// preempts) leaves its share to the others instead of holding up the
// region.
func parallelPieces(nw, pieces int, fn func(piece int)) {
	var next atomic.Int32
	parallel(min(nw, pieces), func(int) {
		for {
			i := int(next.Add(1)) - 1
			if i >= pieces {
				return
			}
			fn(i)
		}
	})
}

// teamSpin is how long a team worker waits for work before it sleeps.
const teamSpin = 200 * time.Microsecond

var theTeam struct {
	mu      sync.Mutex // held by the region using the workers
	workers []*teamWorker
}

type teamWorker struct {
	job    atomic.Pointer[func()]
	asleep atomic.Bool
	wake   chan struct{} // one token: there may be a job
}

// give hands the worker its job, waking it if it sleeps.
func (w *teamWorker) give(job *func()) {
	w.job.Store(job)
	if w.asleep.Load() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *teamWorker) loop() {
	for {
		(*w.next())()
	}
}

// next waits for a job: spinning for teamSpin, then asleep until give
// wakes it. Going to sleep, it marks itself asleep before it looks for a
// job once more, so a job given meanwhile is either seen or wakes it.
func (w *teamWorker) next() *func() {
	start := time.Now()
	for i := 0; ; i++ {
		if job := w.job.Swap(nil); job != nil {
			return job
		}
		if i%64 == 63 {
			if time.Since(start) > teamSpin {
				break
			}
			runtime.Gosched()
		}
	}
	for {
		w.asleep.Store(true)
		if job := w.job.Swap(nil); job != nil {
			w.asleep.Store(false)
			return job
		}
		<-w.wake
		w.asleep.Store(false)
		if job := w.job.Swap(nil); job != nil {
			return job
		}
	}
}
