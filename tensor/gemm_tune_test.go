//go:build linux

package tensor

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func threadCPUSeconds(t *testing.T) float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Fatal(err)
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// TestGemmTune is a tuning aid, not a speed claim. With GEMM_TUNE=<n> it
// times the n×n×n product on one goroutine for each blocking in GEMM_BLOCKS
// ("mc,kc,nc,aOuter,edge;..."; default: each kernel's own), interleaved over
// several rounds, and reports the median GFLOP per CPU-second of the calling
// thread (CLOCK_THREAD_CPUTIME_ID), which stays meaningful on a machine
// shared with other jobs. GEMM_TRANS=tt selects transposes (default nn).
// GEMM_MICRO=1 times the micro-kernels alone on L1-resident panels. Speed
// figures come from the benchmarks, not from this.
func TestGemmTune(t *testing.T) {
	env := os.Getenv("GEMM_TUNE")
	if env == "" {
		t.Skip("set GEMM_TUNE=<n> to run")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if os.Getenv("GEMM_MICRO") != "" {
		for _, ka := range gemmKernels() {
			if !ka.ok || ka.k == kernelGo {
				continue
			}
			k := ka.k
			for _, kc := range []int{128, 256, 384} {
				r := rand.New(rand.NewPCG(1, 1))
				ap, bp, c := aligned(k.mr*kc), aligned(k.nr*kc), aligned(k.mr*k.nr)
				copy(ap, randSlice(r, len(ap)))
				copy(bp, randSlice(r, len(bp)))
				best := 0.0
				for rep := 0; rep < 5; rep++ {
					iters := 100_000_000 / (k.mr * k.nr * kc)
					t0 := threadCPUSeconds(t)
					for i := 0; i < iters; i++ {
						k.fn(kc, &ap[0], &bp[0], &c[0], k.nr, 1, 1)
					}
					best = max(best, 2*float64(k.mr*k.nr*kc*iters)/(threadCPUSeconds(t)-t0)/1e9)
				}
				fmt.Printf("%-7s micro-kernel kc=%d: %.1f GFLOP/cpu-s (best of 5)\n", k.name, kc, best)
			}
		}
	}
	n, err := strconv.Atoi(env)
	if err != nil {
		t.Fatal(err)
	}
	tA, tB := false, false
	if tr := os.Getenv("GEMM_TRANS"); len(tr) == 2 {
		tA, tB = tr[0] == 't', tr[1] == 't'
	}
	var kerns []*gemmKernel
	for _, ka := range gemmKernels() {
		if !ka.ok || ka.k == kernelGo {
			continue
		}
		if blks := os.Getenv("GEMM_BLOCKS"); blks != "" && ka.k == gemmDefault {
			for _, blk := range strings.Split(blks, ";") {
				var v [5]int
				for i, f := range strings.Split(blk, ",") {
					v[i], _ = strconv.Atoi(f)
				}
				k := ka.k
				nk := &gemmKernel{name: k.name, mr: k.mr, nr: k.nr, mc: v[0], kc: v[1], nc: v[2], aOuter: v[3] == 1, fn: k.fn}
				if v[4] == 1 { // fifth field 1: with the kernel's edge kernels
					nk.name, nk.edges = k.name+"+edge", k.edges
				}
				kerns = append(kerns, nk)
			}
			continue
		}
		kerns = append(kerns, ka.k)
	}
	r := rand.New(rand.NewPCG(1, 1))
	x, y, z := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
	rates := make([][]float64, len(kerns))
	iters := max(1, 300_000_000/(n*n*n))
	for round := 0; round < 7; round++ {
		for i, k := range kerns {
			gemmSerial(k, tA, tB, n, n, n, 1, x, n, y, n, 0, z, n)
			t0 := threadCPUSeconds(t)
			for it := 0; it < iters; it++ {
				gemmSerial(k, tA, tB, n, n, n, 1, x, n, y, n, 0, z, n)
			}
			rates[i] = append(rates[i], 2*float64(n*n*n*iters)/(threadCPUSeconds(t)-t0)/1e9)
		}
	}
	for i, k := range kerns {
		slices.Sort(rates[i])
		fmt.Printf("%-7s mc=%d kc=%d nc=%d aOuter=%v n=%d tA=%v tB=%v: median %.1f max %.1f GFLOP/cpu-s\n",
			k.name, k.mc, k.kc, k.nc, k.aOuter, n, tA, tB, rates[i][len(rates[i])/2], rates[i][len(rates[i])-1])
	}
}
