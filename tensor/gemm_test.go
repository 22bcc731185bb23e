package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// refGemm is the float64 naive reference: it returns alpha·op(A)·op(B) +
// beta·C as an m×n row-major float64 matrix (beta == 0 ignores C).
func refGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			out[i*n+j] = v
		}
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.Float64()*2 - 1)
	}
	return s
}

// gemmCase is one product with its operands laid out with padded leading
// dimensions.
type gemmCase struct {
	transA, transB bool
	m, n, k        int
	lda, ldb, ldc  int
	alpha, beta    float32
	a, b, c        []float32
	nanC           bool
	want           []float64 // the float64 reference result
}

func (g gemmCase) String() string {
	return fmt.Sprintf("tA=%v tB=%v m=%d n=%d k=%d lda=%d ldb=%d ldc=%d alpha=%g beta=%g", g.transA, g.transB, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.alpha, g.beta)
}

func newGemmCase(r *rand.Rand, transA, transB bool, m, n, k, padA, padB, padC int, alpha, beta float32) gemmCase {
	g := gemmCase{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	g.lda, g.ldb, g.ldc = max(ac, 1)+padA, max(bc, 1)+padB, max(n, 1)+padC
	g.a = randSlice(r, max(ar*g.lda, 0))
	g.b = randSlice(r, max(br*g.ldb, 0))
	g.c = randSlice(r, max(m*g.ldc, 0))
	if beta == 0 {
		// BLAS semantics: C is not read, so garbage must not leak.
		for i := range g.c {
			g.c[i] = float32(math.NaN())
		}
		g.nanC = true
	}
	g.want = refGemm(transA, transB, m, n, k, alpha, g.a, g.lda, g.b, g.ldb, beta, g.c, g.ldc)
	return g
}

// tolerance for float32 results against the float64 reference with inner
// dimension k: relative 1e-5 plus an absolute margin that grows with k (the
// worst-case rounding of a k-term float32 dot product of values in [-1, 1]).
func gemmTol(k int, alpha, beta float32) cmp.Option {
	return cmpopts.EquateApprox(gemmTolParams(k, alpha, beta))
}

func gemmTolParams(k int, alpha, beta float32) (fraction, margin float64) {
	return 1e-5, 2e-7 * float64(k+4) * (math.Abs(float64(alpha)) + math.Abs(float64(beta)) + 1)
}

// diffGemm is cmp.Diff(want, got, gemmTol(...)). go-cmp's reflection costs
// about a microsecond per element, so for large results a direct check with
// EquateApprox's rule (|x-y| ≤ max(fraction·min(|x|,|y|), margin), NaN
// unequal) runs first and go-cmp only reports a mismatch it found.
func diffGemm(want, got []float64, k int, alpha, beta float32) string {
	if len(want) > 4096 && len(want) == len(got) {
		fraction, margin := gemmTolParams(k, alpha, beta)
		ok := true
		for i, w := range want {
			g := got[i]
			if !(math.Abs(w-g) <= max(fraction*min(math.Abs(w), math.Abs(g)), margin)) {
				ok = false
				break
			}
		}
		if ok {
			return ""
		}
	}
	return cmp.Diff(want, got, gemmTol(k, alpha, beta))
}

// run multiplies with kern on threads goroutines and compares with the
// reference, including that padding columns of C are untouched.
func (g gemmCase) run(t *testing.T, kern *gemmKernel, threads int) {
	t.Helper()
	want := g.want
	c := append([]float32(nil), g.c...)
	checkGemm(g.transA, g.transB, g.m, g.n, g.k, g.a, g.lda, g.b, g.ldb, c, g.ldc)
	gemmParallel(kern, threads, g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, c, g.ldc)
	got := make([]float64, g.m*g.n)
	for i := 0; i < g.m; i++ {
		for j := 0; j < g.n; j++ {
			got[i*g.n+j] = float64(c[i*g.ldc+j])
		}
		// Padding between rows must be untouched.
		for j := g.n; j < g.ldc && i*g.ldc+j < len(c); j++ {
			if !sameBits(c[i*g.ldc+j], g.c[i*g.ldc+j]) {
				t.Fatalf("%s kernel %s threads %d: padding C[%d,%d] changed from %v to %v", g, kern.name, threads, i, j, g.c[i*g.ldc+j], c[i*g.ldc+j])
			}
		}
	}
	if diff := diffGemm(want, got, g.k, g.alpha, g.beta); diff != "" {
		t.Fatalf("%s kernel %s threads %d: mismatch (-want +got):\n%s", g, kern.name, threads, diff)
	}
}

func sameBits(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }

// kernelsUnderTest returns every micro-kernel of this build; those the CPU
// lacks are reported with t.Skip-style logs by the caller.
func forEachKernel(t *testing.T, f func(t *testing.T, kern *gemmKernel)) {
	for _, ka := range gemmKernels() {
		t.Run(ka.k.name, func(t *testing.T) {
			if !ka.ok {
				t.Skipf("CPU lacks the instructions of micro-kernel %s", ka.k.name)
			}
			f(t, ka.k)
		})
	}
}

func TestGemmKernels(t *testing.T) {
	// 8, 22 and 64 leave exactly 8 rows after whole 14-row tiles, 32
	// exactly 4 (the AVX-512 edge kernels' sizes); 7, 13, 15... leave
	// other remainders.
	sizes := []int{0, 1, 2, 7, 8, 13, 14, 15, 16, 17, 22, 31, 32, 33, 64, 65}
	forEachKernel(t, func(t *testing.T, kern *gemmKernel) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			cases := 60
			if testing.Short() {
				cases = 20
			}
			for i := 0; i < cases; i++ {
				m := sizes[r.IntN(len(sizes))]
				n := sizes[r.IntN(len(sizes))]
				k := sizes[r.IntN(len(sizes))]
				ab := [][2]float32{{1, 0}, {1, 1}, {-0.5, 2}, {2.5, 0}, {0, 0.5}, {0, 0}}[r.IntN(6)]
				g := newGemmCase(r, tr[0], tr[1], m, n, k, r.IntN(4), r.IntN(4), r.IntN(4), ab[0], ab[1])
				g.run(t, kern, 1)
			}
		}
	})
}

// TestGemmEdgeRows runs every row count up to two tiles and one row, so
// that each remainder after whole mr-row tiles meets its edge kernel (or the
// full kernel), with whole and partial column panels, both betas.
func TestGemmEdgeRows(t *testing.T) {
	forEachKernel(t, func(t *testing.T, kern *gemmKernel) {
		r := rand.New(rand.NewPCG(7, 8))
		for m := 1; m <= 2*kern.mr+1; m++ {
			for _, n := range []int{kern.nr, 2*kern.nr + 3} {
				for _, beta := range []float32{0, -0.5} {
					g := newGemmCase(r, false, r.IntN(2) == 0, m, n, 37, 1, 2, 1, 1.5, beta)
					g.run(t, kern, 1)
				}
			}
		}
	})
}

// TestGemmLarge covers shapes that cross every cache block (MC, KC, NC) of
// each kernel, the edge tiles they leave, and the parallel split.
func TestGemmLarge(t *testing.T) {
	type shape struct{ m, n, k int }
	// Short mode still crosses KC (300 > 256) and MC (200 > 168) once.
	shapes := []shape{{200, 33, 300}, {33, 257, 7}, {1, 70, 257}, {257, 1, 33}, {176, 64, 270}}
	if !testing.Short() {
		shapes = append(shapes, shape{200, 190, 513}, shape{150, 2100, 20}, shape{129, 70, 1000}, shape{257, 257, 257})
	}
	r := rand.New(rand.NewPCG(3, 4))
	var cases []gemmCase
	for _, s := range shapes {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			cases = append(cases, newGemmCase(r, tr[0], tr[1], s.m, s.n, s.k, 1+r.IntN(3), r.IntN(3), 3, 0.75, []float32{0, 1, -1.5}[r.IntN(3)]))
		}
	}
	forEachKernel(t, func(t *testing.T, kern *gemmKernel) {
		for _, g := range cases {
			for _, threads := range []int{1, 3} {
				g.run(t, kern, threads)
			}
		}
	})
}

// TestGemmPublic goes through the exported entry point, with the default
// kernel and thread count.
func TestGemmPublic(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range [][3]int{{0, 5, 3}, {5, 0, 3}, {5, 3, 0}, {7, 7, 7}, {64, 96, 128}, {150, 120, 90}} {
		g := newGemmCase(r, false, true, s[0], s[1], s[2], 1, 2, 0, 1, 0)
		want := refGemm(g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc)
		Gemm(g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc)
		got := make([]float64, g.m*g.n)
		for i := range g.m {
			for j := range g.n {
				got[i*g.n+j] = float64(g.c[i*g.ldc+j])
			}
		}
		if diff := cmp.Diff(want, got, gemmTol(g.k, 1, 0)); diff != "" {
			t.Fatalf("%s: mismatch (-want +got):\n%s", g, diff)
		}
	}
}

func TestGemmBatched(t *testing.T) {
	forEachKernel(t, func(t *testing.T, kern *gemmKernel) {
		r := rand.New(rand.NewPCG(7, 8))
		shapes := [][4]int{{3, 7, 9, 5}, {5, 33, 17, 65}, {2, 100, 110, 90}, {1, 1, 1, 1}, {4, 0, 3, 2}}
		if testing.Short() {
			shapes[2] = [4]int{2, 60, 70, 50}
		}
		for _, s := range shapes {
			for _, threads := range []int{1, 2} {
				batch, m, n, k := s[0], s[1], s[2], s[3]
				tA, tB := r.IntN(2) == 1, r.IntN(2) == 1
				one := newGemmCase(r, tA, tB, m, n, k, 1, 0, 2, 1.5, 0.5)
				sa, sb, sc := len(one.a)+3, len(one.b)+1, len(one.c)+5
				a, b, c := randSlice(r, batch*sa), randSlice(r, batch*sb), randSlice(r, batch*sc)
				orig := append([]float32(nil), c...)
				gemmBatchedWith(kern, threads, tA, tB, batch, m, n, k, 1.5, a, one.lda, sa, b, one.ldb, sb, 0.5, c, one.ldc, sc)
				for i := 0; i < batch; i++ {
					want := refGemm(tA, tB, m, n, k, 1.5, a[i*sa:], one.lda, b[i*sb:], one.ldb, 0.5, orig[i*sc:], one.ldc)
					got := make([]float64, m*n)
					for r := range m {
						for j := range n {
							got[r*n+j] = float64(c[i*sc+r*one.ldc+j])
						}
					}
					if diff := cmp.Diff(want, got, gemmTol(k, 1.5, 0.5)); diff != "" {
						t.Fatalf("batch %v tA=%v tB=%v entry %d threads %d: mismatch (-want +got):\n%s", s, tA, tB, i, threads, diff)
					}
				}
			}
		}
	})
}

// TestGemmBetaZeroNaN checks that beta = 0 ignores NaN and Inf in C, on every
// kernel, for full and edge tiles, and for k = 0.
func TestGemmBetaZeroNaN(t *testing.T) {
	forEachKernel(t, func(t *testing.T, kern *gemmKernel) {
		r := rand.New(rand.NewPCG(9, 10))
		for _, s := range [][3]int{{40, 70, 20}, {3, 5, 0}, {kern.mr, kern.nr, 3}} {
			g := newGemmCase(r, false, false, s[0], s[1], s[2], 0, 0, 0, 1, 0)
			for i := range g.c {
				g.c[i] = []float32{float32(math.NaN()), float32(math.Inf(1))}[i%2]
			}
			gemmParallel(kern, 1, false, false, g.m, g.n, g.k, 1, g.a, g.lda, g.b, g.ldb, 0, g.c, g.ldc)
			for i, v := range g.c {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("m=%d n=%d k=%d: C[%d] = %v after beta = 0", g.m, g.n, g.k, i, v)
				}
			}
		}
	})
}

func TestGemmPanics(t *testing.T) {
	a, b, c := make([]float32, 12), make([]float32, 20), make([]float32, 15)
	cases := []struct {
		name string
		f    func()
		want string
	}{
		{"negative m", func() { Gemm(false, false, -1, 5, 4, 1, a, 4, b, 5, 0, c, 5) }, "m=-1 n=5 k=4"},
		{"short lda", func() { Gemm(false, false, 3, 5, 4, 1, a, 3, b, 5, 0, c, 5) }, "A is 3×4 but leading dimension is 3"},
		{"short ldb transposed", func() { Gemm(false, true, 3, 5, 4, 1, a, 4, b, 3, 0, c, 5) }, "B is 5×4 but leading dimension is 3"},
		{"short A", func() { Gemm(false, false, 3, 5, 4, 1, a[:11], 4, b, 5, 0, c, 5) }, "A is 3×4 with ld 4, needs 12 elements, has 11"},
		{"short C", func() { Gemm(false, false, 3, 5, 4, 1, a, 4, b, 5, 0, c[:14], 5) }, "C is 3×5 with ld 5, needs 15 elements, has 14"},
		{"nil B", func() { Gemm(false, false, 3, 5, 4, 1, a, 4, nil, 5, 0, c, 5) }, "B is nil but must be 4×5"},
		{"batched negative stride", func() { GemmBatched(false, false, 2, 3, 5, 4, 1, a, 4, -12, b, 5, 20, 0, c, 5, 15) }, "stride (-12, 20, 15) for 3×5×4"},
		{"batched short", func() { GemmBatched(false, false, 2, 3, 5, 4, 1, a, 4, 12, b, 5, 20, 0, c, 5, 15) }, "matrix 1 of 2"},
		{"batched negative batch", func() { GemmBatched(false, false, -1, 3, 5, 4, 1, a, 4, 0, b, 5, 0, 0, c, 5, 0) }, "negative batch -1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatalf("no panic")
				}
				if msg := fmt.Sprint(r); !strings.Contains(msg, tc.want) {
					t.Fatalf("panic %q does not name %q", msg, tc.want)
				}
			}()
			tc.f()
		})
	}
}

func TestSetThreads(t *testing.T) {
	prev := SetThreads(3)
	defer SetThreads(prev)
	if got := Threads(); got != 3 {
		t.Fatalf("Threads() = %d after SetThreads(3)", got)
	}
	SetThreads(0)
	if got := Threads(); got < 1 {
		t.Fatalf("Threads() = %d with the default", got)
	}
}

// FuzzGemm checks random shapes, transposes, leading dimensions and
// alpha/beta against the reference, on the default kernel (one and two
// goroutines) and on the portable one.
func FuzzGemm(f *testing.F) {
	f.Add(uint8(7), uint8(33), uint8(5), false, true, uint8(1), uint8(0), uint8(3), int8(2), int8(0), uint64(1))
	f.Add(uint8(14), uint8(32), uint8(64), true, false, uint8(0), uint8(2), uint8(0), int8(-3), int8(1), uint64(2))
	f.Add(uint8(0), uint8(3), uint8(9), true, true, uint8(5), uint8(5), uint8(5), int8(1), int8(4), uint64(3))
	f.Fuzz(func(t *testing.T, m, n, k uint8, transA, transB bool, padA, padB, padC uint8, alpha, beta int8, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 11))
		g := newGemmCase(r, transA, transB, int(m%130), int(n%130), int(k%200), int(padA%9), int(padB%9), int(padC%9), float32(alpha)/4, float32(beta)/4)
		g.run(t, gemmDefault, 1)
		g.run(t, gemmDefault, 2)
		g.run(t, kernelGo, 1)
	})
}

// TestPackAFast checks each kernel's fast A packer against the definition
// panel[p·mr+r] = a[r·lda+p], for step counts around multiples of 8.
func TestPackAFast(t *testing.T) {
	forEachKernel(t, func(t *testing.T, kern *gemmKernel) {
		if kern.packAT == nil {
			t.Skipf("kernel %s packs A with packTranspose", kern.name)
		}
		r := rand.New(rand.NewPCG(13, 14))
		mr := kern.mr
		for _, kb := range []int{1, 7, 8, 9, 16, 17, 64, 255, 256, 259} {
			lda := kb + r.IntN(5)
			src := randSlice(r, (mr-1)*lda+kb)
			got := make([]float32, mr*kb)
			for i := range got {
				got[i] = float32(math.NaN())
			}
			kern.packAT(got, src, lda, kb)
			for p := 0; p < kb; p++ {
				for i := 0; i < mr; i++ {
					if want := src[i*lda+p]; !sameBits(got[p*mr+i], want) {
						t.Fatalf("kb=%d lda=%d: panel[%d] (step %d row %d) = %v, want %v", kb, lda, p*mr+i, p, i, got[p*mr+i], want)
					}
				}
			}
		}
	})
}

// TestParallelFor: every index is visited exactly once, on one goroutine
// below the grain and split above it.
func TestParallelFor(t *testing.T) {
	prev := SetThreads(3)
	defer SetThreads(prev)
	for _, tt := range []struct{ n, grain, wantCalls int }{{0, 1, 0}, {5, 10, 1}, {10, 5, 2}, {100, 10, 3}, {7, 1, 3}} {
		var mu sync.Mutex
		seen := make([]int, tt.n)
		calls := 0
		ParallelFor(tt.n, tt.grain, func(lo, hi int) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		for i, c := range seen {
			if c != 1 {
				t.Errorf("n=%d grain=%d: index %d visited %d times", tt.n, tt.grain, i, c)
			}
		}
		if calls != tt.wantCalls {
			t.Errorf("n=%d grain=%d: %d ranges, want %d", tt.n, tt.grain, calls, tt.wantCalls)
		}
	}
}

func TestParallelPieces(t *testing.T) {
	for _, tt := range []struct{ nw, pieces int }{{1, 5}, {2, 8}, {3, 100}, {4, 2}, {2, 0}} {
		var mu sync.Mutex
		seen := make([]int, tt.pieces)
		parallelPieces(tt.nw, tt.pieces, func(p int) {
			mu.Lock()
			defer mu.Unlock()
			seen[p]++
		})
		for i, c := range seen {
			if c != 1 {
				t.Errorf("%d workers, %d pieces: piece %d ran %d times", tt.nw, tt.pieces, i, c)
			}
		}
	}
}
