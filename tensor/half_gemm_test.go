package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// widenRef widens one value with the scalar converters of half.go, the
// reference the kernels' own widening is checked against.
func widenRef(h uint16, f Half) float32 {
	if f == BF16 {
		return BF16ToFloat32(h)
	}
	return F16ToFloat32(h)
}

// halfCase is one GemmHalf product with padded leading dimensions and its
// float64 reference result.
type halfCase struct {
	transB        bool
	f             Half
	m, n, k       int
	lda, ldb, ldc int
	alpha, beta   float32
	a, c          []float32
	b             []uint16
	want          []float64
}

func (g halfCase) String() string {
	return fmt.Sprintf("%v tB=%v m=%d n=%d k=%d lda=%d ldb=%d ldc=%d alpha=%g beta=%g", g.f, g.transB, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.alpha, g.beta)
}

func newHalfCase(r *rand.Rand, f Half, transB bool, m, n, k, padA, padB, padC int, alpha, beta float32) halfCase {
	g := halfCase{transB: transB, f: f, m: m, n: n, k: k, alpha: alpha, beta: beta}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	g.lda, g.ldb, g.ldc = max(k, 1)+padA, max(bc, 1)+padB, max(n, 1)+padC
	g.a = randSlice(r, m*g.lda)
	g.b = make([]uint16, br*g.ldb)
	for i := range g.b {
		v := float32(r.Float64()*2 - 1)
		if f == BF16 {
			g.b[i] = Float32ToBF16(v)
		} else {
			g.b[i] = Float32ToF16(v)
		}
	}
	g.c = randSlice(r, m*g.ldc)
	if beta == 0 {
		// C must not be read: NaN would leak into the result.
		for i := range g.c {
			g.c[i] = float32(math.NaN())
		}
	}
	g.want = g.reference()
	return g
}

// reference is the float64 result: B widened by the scalar converters,
// products and sums in float64.
func (g halfCase) reference() []float64 {
	want := make([]float64, g.m*g.n)
	for i := 0; i < g.m; i++ {
		for j := 0; j < g.n; j++ {
			var s float64
			for p := 0; p < g.k; p++ {
				var h uint16
				if g.transB {
					h = g.b[j*g.ldb+p]
				} else {
					h = g.b[p*g.ldb+j]
				}
				s += float64(g.a[i*g.lda+p]) * float64(widenRef(h, g.f))
			}
			v := float64(g.alpha) * s
			if g.beta != 0 {
				v += float64(g.beta) * float64(g.c[i*g.ldc+j])
			}
			want[i*g.n+j] = v
		}
	}
	return want
}

// halfRoutes are the two algorithms GemmHalf dispatches between by m; the
// tests run both on every shape they apply to.
var halfRoutes = []struct {
	name string
	run  func(hp *halfPath, threads int, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, f Half, beta float32, c []float32, ldc int)
	ok   func(transB bool) bool
}{
	{"packed", func(hp *halfPath, threads int, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, f Half, beta float32, c []float32, ldc int) {
		if m == 0 || n == 0 {
			return
		}
		if k == 0 || alpha == 0 {
			scaleC(m, n, beta, c, ldc)
			return
		}
		gemmHalfParallel(hp, threads, transB, m, n, k, alpha, a, lda, b, ldb, f, beta, c, ldc)
	}, func(bool) bool { return true }},
	{"gemv", func(hp *halfPath, threads int, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, f Half, beta float32, c []float32, ldc int) {
		if m == 0 || n == 0 {
			return
		}
		if k == 0 || alpha == 0 {
			scaleC(m, n, beta, c, ldc)
			return
		}
		gemvHalfParallel(hp, threads, m, n, k, alpha, a, lda, b, ldb, f, beta, c, ldc)
	}, func(transB bool) bool { return transB }},
	{"dispatch", gemmHalfWith, func(bool) bool { return true }},
}

// check runs the product with route on path hp and compares with the
// reference; padding columns of C must be left untouched.
func (g halfCase) check(t *testing.T, hp *halfPath, route string, threads int) {
	t.Helper()
	c := append([]float32(nil), g.c...)
	checkGemmHalf(g.transB, g.m, g.n, g.k, g.a, g.lda, g.b, g.ldb, g.f, c, g.ldc)
	for _, rt := range halfRoutes {
		if rt.name == route {
			rt.run(hp, threads, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.f, g.beta, c, g.ldc)
		}
	}
	got := make([]float64, g.m*g.n)
	for i := 0; i < g.m; i++ {
		for j := 0; j < g.n; j++ {
			got[i*g.n+j] = float64(c[i*g.ldc+j])
		}
		for j := g.n; j < g.ldc && i*g.ldc+j < len(c); j++ {
			if !sameBits(c[i*g.ldc+j], g.c[i*g.ldc+j]) {
				t.Fatalf("%s path %s route %s threads %d: padding C[%d,%d] changed from %v to %v", g, hp.name, route, threads, i, j, g.c[i*g.ldc+j], c[i*g.ldc+j])
			}
		}
	}
	if diff := diffGemm(g.want, got, g.k, g.alpha, g.beta); diff != "" {
		t.Fatalf("%s path %s route %s threads %d: mismatch (-want +got):\n%s", g, hp.name, route, threads, diff)
	}
}

// forEachHalfPath runs f on every GemmHalf implementation of this build,
// skipping those the CPU cannot execute.
func forEachHalfPath(t *testing.T, f func(t *testing.T, hp *halfPath)) {
	for _, pa := range halfPaths() {
		t.Run(pa.p.name, func(t *testing.T) {
			if !pa.ok {
				t.Skipf("CPU lacks the instructions of path %s", pa.p.name)
			}
			f(t, pa.p)
		})
	}
}

func TestGemmHalfShapes(t *testing.T) {
	sizes := []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 100}
	abs := [][2]float32{{1, 0}, {1, 1}, {-0.5, 2}, {2.5, 0}, {0, 0.5}, {0, 0}, {0.75, -1}}
	forEachHalfPath(t, func(t *testing.T, hp *halfPath) {
		for _, f := range []Half{BF16, F16} {
			for _, transB := range []bool{true, false} {
				t.Run(fmt.Sprintf("%v/transB=%v", f, transB), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(f), 1))
					cases := 80
					if testing.Short() {
						cases = 25
					}
					for i := 0; i < cases; i++ {
						m := sizes[r.IntN(len(sizes))]
						if i%2 == 0 {
							m = sizes[r.IntN(8)] // decode-sized rows half the time
						}
						n, k := sizes[r.IntN(len(sizes))], sizes[r.IntN(len(sizes))]
						ab := abs[r.IntN(len(abs))]
						g := newHalfCase(r, f, transB, m, n, k, r.IntN(4), r.IntN(4), r.IntN(4), ab[0], ab[1])
						for _, rt := range halfRoutes {
							if rt.ok(transB) {
								g.check(t, hp, rt.name, 1)
							}
						}
					}
				})
			}
		}
	})
}

// TestGemmHalfLarge covers shapes that cross the packed path's cache blocks
// (KC, MC, NC) and both routes' splits over goroutines.
func TestGemmHalfLarge(t *testing.T) {
	type shape struct{ m, n, k int }
	shapes := []shape{{130, 70, 300}, {5, 700, 400}, {16, 33, 1000}, {1, 2100, 130}, {2, 1501, 400}}
	if !testing.Short() {
		shapes = append(shapes, shape{200, 190, 513}, shape{3, 1100, 600}, shape{40, 2100, 20})
	}
	r := rand.New(rand.NewPCG(3, 4))
	var cases []halfCase
	for _, s := range shapes {
		for _, f := range []Half{BF16, F16} {
			for _, transB := range []bool{true, false} {
				cases = append(cases, newHalfCase(r, f, transB, s.m, s.n, s.k, 1+r.IntN(3), r.IntN(3), 3, 0.75, []float32{0, 1, -1.5}[r.IntN(3)]))
			}
		}
	}
	forEachHalfPath(t, func(t *testing.T, hp *halfPath) {
		for _, g := range cases {
			for _, threads := range []int{1, 3} {
				for _, rt := range halfRoutes {
					if rt.ok(g.transB) {
						g.check(t, hp, rt.name, threads)
					}
				}
			}
		}
	})
}

// TestGemmHalfPublic goes through the exported entry point with the default
// path and thread count, including empty products.
func TestGemmHalfPublic(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range [][3]int{{0, 5, 3}, {5, 0, 3}, {5, 3, 0}, {1, 7, 7}, {8, 96, 128}, {150, 120, 90}} {
		for _, f := range []Half{BF16, F16} {
			for _, transB := range []bool{true, false} {
				beta := float32(0)
				if s[2] == 0 {
					beta = 0.5 // k = 0 scales C
				}
				g := newHalfCase(r, f, transB, s[0], s[1], s[2], 1, 2, 0, 1, beta)
				c := append([]float32(nil), g.c...)
				GemmHalf(g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.f, g.beta, c, g.ldc)
				got := make([]float64, g.m*g.n)
				for i := range g.m {
					for j := range g.n {
						got[i*g.n+j] = float64(c[i*g.ldc+j])
					}
				}
				if diff := diffGemm(g.want, got, g.k, g.alpha, g.beta); diff != "" {
					t.Fatalf("%s: mismatch (-want +got):\n%s", g, diff)
				}
			}
		}
	}
}

// TestGemmHalfSpecialValues checks that infinities and NaN in B reach C as
// they would through the float64 reference (a NaN or Inf weight poisons the
// outputs it touches).
func TestGemmHalfSpecialValues(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	forEachHalfPath(t, func(t *testing.T, hp *halfPath) {
		for _, f := range []Half{BF16, F16} {
			inf, nan := uint16(0x7f80), uint16(0x7fc1)
			if f == F16 {
				inf, nan = 0x7c00, 0x7e01
			}
			for _, m := range []int{1, 3, 20} {
				g := newHalfCase(r, f, true, m, 9, 40, 0, 0, 0, 1, 0)
				g.b[2*g.ldb+5] = inf
				g.b[6*g.ldb+39] = nan
				g.want = g.reference()
				for _, rt := range halfRoutes {
					if !rt.ok(true) {
						continue
					}
					c := make([]float32, len(g.c))
					rt.run(hp, 1, true, g.m, g.n, g.k, 1, g.a, g.lda, g.b, g.ldb, f, 0, c, g.ldc)
					for i := 0; i < m; i++ {
						for j := 0; j < g.n; j++ {
							got, want := float64(c[i*g.ldc+j]), g.want[i*g.n+j]
							if math.IsNaN(want) != math.IsNaN(got) || (math.IsInf(want, 0) && got != want) {
								t.Fatalf("%v m=%d path %s route %s: C[%d,%d] = %v, want %v", f, m, hp.name, rt.name, i, j, got, want)
							}
						}
					}
				}
			}
		}
	})
}

// TestHalfToFloat32 widens all 65536 patterns in both formats, on every
// path and at every offset modulo the vector width, against the scalar
// converters: bit-exact, except that a NaN need only stay a NaN of the same
// sign (hardware conversion quiets signalling NaNs).
func TestHalfToFloat32(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	forEachHalfPath(t, func(t *testing.T, hp *halfPath) {
		for _, f := range []Half{BF16, F16} {
			for _, off := range []int{0, 1, 7, 13} {
				dst := make([]float32, len(src)-off+1)
				dst[len(dst)-1] = 42 // past the end: must stay
				hp.widen(dst, src[off:], f)
				for i, h := range src[off:] {
					want, got := widenRef(h, f), dst[i]
					if math.IsNaN(float64(want)) {
						if !math.IsNaN(float64(got)) || math.Signbit(float64(got)) != math.Signbit(float64(want)) {
							t.Fatalf("%v %#04x: got %v (%#08x), want NaN %#08x", f, h, got, math.Float32bits(got), math.Float32bits(want))
						}
						continue
					}
					if !sameBits(got, want) {
						t.Fatalf("%v %#04x: got %v (%#08x), want %v (%#08x)", f, h, got, math.Float32bits(got), want, math.Float32bits(want))
					}
				}
				if dst[len(dst)-1] != 42 {
					t.Fatalf("%v offset %d: wrote past len(src)", f, off)
				}
			}
		}
	})
	// The portable scalar helper used by the Go kernels.
	for _, f := range []Half{BF16, F16} {
		for _, h := range src {
			want, got := widenRef(h, f), halfToF32(h, f)
			if !sameBits(got, want) {
				t.Fatalf("halfToF32(%#04x, %v) = %#08x, want %#08x", h, f, math.Float32bits(got), math.Float32bits(want))
			}
		}
	}
}

func TestHalfToFloat32Public(t *testing.T) {
	src := []uint16{0x3f80, 0xc000, 0x0000, 0x8000}
	dst := make([]float32, 5)
	HalfToFloat32(dst, src, BF16)
	if want := []float32{1, -2, 0, float32(math.Copysign(0, -1)), 0}; fmt.Sprint(dst) != fmt.Sprint(want) {
		t.Fatalf("HalfToFloat32 bf16 = %v, want %v", dst, want)
	}
	HalfToFloat32(dst, []uint16{0x3c00, 0xc000, 0x7bff, 0x0001}, F16)
	if want := []float32{1, -2, 65504, 0x1p-24, 0}; fmt.Sprint(dst) != fmt.Sprint(want) {
		t.Fatalf("HalfToFloat32 f16 = %v, want %v", dst, want)
	}
}

func TestGemmHalfPanics(t *testing.T) {
	a, c := make([]float32, 12), make([]float32, 15)
	b := make([]uint16, 20)
	cases := []struct {
		name string
		f    func()
		want string
	}{
		{"negative n", func() { GemmHalf(true, 3, -5, 4, 1, a, 4, b, 4, BF16, 0, c, 5) }, "m=3 n=-5 k=4"},
		{"unknown format", func() { GemmHalf(true, 3, 5, 4, 1, a, 4, b, 4, 0, 0, c, 5) }, "unknown format Half(0) in m=3 n=5 k=4"},
		{"short lda", func() { GemmHalf(true, 3, 5, 4, 1, a, 3, b, 4, BF16, 0, c, 5) }, "A is 3×4 but leading dimension is 3"},
		{"short ldb transposed", func() { GemmHalf(true, 3, 5, 4, 1, a, 4, b, 3, F16, 0, c, 5) }, "B (f16) is 5×4 but leading dimension is 3"},
		{"short ldb", func() { GemmHalf(false, 3, 5, 4, 1, a, 4, b, 4, BF16, 0, c, 5) }, "B (bf16) is 4×5 but leading dimension is 4"},
		{"short B", func() { GemmHalf(true, 3, 5, 4, 1, a, 4, b[:19], 4, BF16, 0, c, 5) }, "B (bf16) is 5×4 with ld 4, needs 20 elements, has 19"},
		{"short C", func() { GemmHalf(true, 3, 5, 4, 1, a, 4, b, 4, BF16, 0, c[:14], 5) }, "C is 3×5 with ld 5, needs 15 elements, has 14"},
		{"nil A", func() { GemmHalf(true, 3, 5, 4, 1, nil, 4, b, 4, BF16, 0, c, 5) }, "A is nil but must be 3×4"},
		{"widen short dst", func() { HalfToFloat32(make([]float32, 2), b[:3], BF16) }, "dst has 2 elements, src 3"},
		{"widen unknown format", func() { HalfToFloat32(make([]float32, 3), b[:3], 7) }, "unknown format Half(7)"},
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

// FuzzGemmHalf checks random shapes, formats, leading dimensions and
// alpha/beta against the reference on the default path and the portable
// one, through both routes.
func FuzzGemmHalf(f *testing.F) {
	f.Add(uint8(1), uint8(33), uint8(17), true, false, uint8(1), uint8(0), uint8(3), int8(4), int8(0), uint64(1))
	f.Add(uint8(9), uint8(64), uint8(65), false, true, uint8(0), uint8(2), uint8(0), int8(-3), int8(1), uint64(2))
	f.Fuzz(func(t *testing.T, m, n, k uint8, transB, f16 bool, padA, padB, padC uint8, alpha, beta int8, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 11))
		format := BF16
		if f16 {
			format = F16
		}
		g := newHalfCase(r, format, transB, int(m%40), int(n%130), int(k%200), int(padA%9), int(padB%9), int(padC%9), float32(alpha)/4, float32(beta)/4)
		for _, hp := range []*halfPath{halfDefault, halfGo} {
			for _, rt := range halfRoutes {
				if rt.ok(transB) {
					g.check(t, hp, rt.name, 1)
					g.check(t, hp, rt.name, 2)
				}
			}
		}
	})
}

// TestPackBHalf compares every path's B packer with the portable one,
// bit for bit, for the panel widths of all micro-kernels (8, 16, 32),
// partial last panels and step counts that are not multiples of 8.
func TestPackBHalf(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	forEachHalfPath(t, func(t *testing.T, hp *halfPath) {
		for _, f := range []Half{BF16, F16} {
			for _, transB := range []bool{true, false} {
				for _, nr := range []int{8, 16, 32} {
					for _, s := range [][2]int{{1, 1}, {7, 8}, {19, 64}, {33, 100}, {64, 17}} {
						kb, nb := s[0], s[1]
						ldb := nb + 3
						if transB {
							ldb = kb + 5
						}
						b := make([]uint16, (kb+nb+4)*ldb)
						for i := range b {
							b[i] = uint16(r.Uint32())
						}
						size := (nb + nr - 1) / nr * nr * kb
						want, got := make([]float32, size), make([]float32, size)
						for i := range got {
							got[i] = -1234.5678 // not a widened 16-bit value: every element must be written
						}
						packBHalfGo(want, transB, b, ldb, 2, 1, kb, nb, nr, f)
						hp.packB(got, transB, b, ldb, 2, 1, kb, nb, nr, f)
						for i := range want {
							wb, gb := math.Float32bits(want[i]), math.Float32bits(got[i])
							if wb != gb && !(math.IsNaN(float64(want[i])) && math.IsNaN(float64(got[i]))) {
								t.Fatalf("%v transB=%v nr=%d kb=%d nb=%d: panel[%d] = %#08x, want %#08x", f, transB, nr, kb, nb, i, gb, wb)
							}
						}
					}
				}
			}
		}
	})
}

// TestPackPairs checks the bfloat16 pair packer of every path that has one
// against the definition: step s of the panel of columns j0…j0+15 holds
// op(B)[p0+s, j0+j] at 16-bit slot 2j (j < 8) or 2(j−8)+1, zero past nb;
// widening each 32-bit lane's halves (the micro-kernel's shift and mask)
// then gives columns 0–7 and 8–15 in order. Steps that are not a multiple
// of 8 and partial panels are included.
func TestPackPairs(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	forEachHalfPath(t, func(t *testing.T, hp *halfPath) {
		if hp.packBF16 == nil {
			t.Skipf("path %s packs bfloat16 as float32", hp.name)
		}
		for _, transB := range []bool{true, false} {
			for _, s := range [][2]int{{1, 1}, {7, 16}, {8, 16}, {9, 17}, {19, 64}, {33, 100}, {64, 15}, {256, 48}} {
				kb, nb := s[0], s[1]
				ldb := nb + 3
				if transB {
					ldb = kb + 5
				}
				b := make([]uint16, (kb+nb+4)*ldb)
				for i := range b {
					b[i] = uint16(r.Uint32())
				}
				const p0, j0 = 2, 1
				panels := (nb + 15) / 16
				got := make([]uint16, panels*16*kb)
				for i := range got {
					got[i] = 0xdead // every slot must be written
				}
				hp.packBF16(got, transB, b, ldb, p0, j0, kb, nb)
				for pn := 0; pn < panels; pn++ {
					for st := 0; st < kb; st++ {
						lanes := got[(pn*kb+st)*16 : (pn*kb+st)*16+16]
						for j := 0; j < 16; j++ {
							col := pn*16 + j
							var want uint16
							if col < nb {
								if transB {
									want = b[(j0+col)*ldb+p0+st]
								} else {
									want = b[(p0+st)*ldb+j0+col]
								}
							}
							slot := 2 * j
							if j >= 8 {
								slot = 2*(j-8) + 1
							}
							if lanes[slot] != want {
								t.Fatalf("transB=%v kb=%d nb=%d: panel %d step %d column %d = %#04x, want %#04x", transB, kb, nb, pn, st, j, lanes[slot], want)
							}
						}
					}
				}
				ref := make([]uint16, len(got))
				packPairsGo(ref, transB, b, ldb, p0, j0, kb, nb)
				if !slices.Equal(ref, got) {
					t.Fatalf("transB=%v kb=%d nb=%d: packPairsGo differs from %s's packer", transB, kb, nb, hp.name)
				}
			}
		}
	})
}

// TestGemvHalfRowsIndependent: on the matrix-vector route a row of C is the
// same bits whether its row of A is multiplied alone or among up to
// HalfGEMVRows others, on one thread or three, so that batching
// decoding requests together never changes what any of them generates.
func TestGemvHalfRowsIndependent(t *testing.T) {
	forEachHalfPath(t, func(t *testing.T, hp *halfPath) {
		for _, f := range []Half{BF16, F16} {
			// k = 2080 and 6200 take fewer rows of x a call on the paths
			// that set gemvXBytes.
			for _, s := range []struct{ n, k int }{{37, 96}, {300, 896}, {64, 100}, {1100, 640}, {150, 2080}, {40, 6200}} {
				r := rand.New(rand.NewPCG(uint64(s.n), uint64(s.k)))
				g := newHalfCase(r, f, true, HalfGEMVRows, s.n, s.k, 0, 0, 0, 1, 0)
				all := make([]float32, HalfGEMVRows*s.n)
				gemvHalfParallel(hp, 3, HalfGEMVRows, s.n, s.k, 1, g.a, g.lda, g.b, g.ldb, f, 0, all, s.n)
				for m := 1; m <= HalfGEMVRows; m++ {
					for i0 := 0; i0+m <= HalfGEMVRows; i0 += m {
						got := make([]float32, m*s.n)
						gemvHalfParallel(hp, 1, m, s.n, s.k, 1, g.a[i0*g.lda:], g.lda, g.b, g.ldb, f, 0, got, s.n)
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(all[i0*s.n+i]) {
								t.Fatalf("%v %dx%d: row %d of %d rows from %d: C[%d] = %v, alone among %d rows %v", f, s.n, s.k, i0+i/s.n, m, i0, i%s.n, got[i], HalfGEMVRows, all[i0*s.n+i])
							}
						}
					}
				}
			}
		}
	})
}
