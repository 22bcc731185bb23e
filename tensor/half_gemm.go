package tensor

import (
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// Half names a 16-bit floating-point storage format (see half.go).
type Half uint8

const (
	// BF16 is bfloat16: the upper 16 bits of an IEEE 754 float32.
	BF16 Half = iota + 1
	// F16 is IEEE 754 binary16.
	F16
)

// String returns "bf16", "f16", or Half(n) for an unknown format.
func (f Half) String() string {
	switch f {
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("Half(%d)", uint8(f))
}

func (f Half) valid() bool { return f == BF16 || f == F16 }

// GemmHalf computes C = alpha·A·op(B) + beta·C where A is m×k float32 (row
// stride lda), C is m×n float32 (row stride ldc) and B holds 16-bit values
// (bit patterns) in format f with row stride ldb:
//
//   - transB: B is n×k row-major, a Linear weight stored out×in, so
//     C = A·Bᵀ (y = x·Wᵀ);
//   - !transB: B is k×n row-major, so C = A·B (for example dX = dY·W).
//
// As in BLAS, beta == 0 overwrites C without reading it. B is widened to
// float32 exactly and every product is accumulated in float32, so the result
// is that of Gemm on the widened B up to the order of the float32 sums.
//
// Few rows (decoding: m ≤ HalfGEMVRows with transB) take a matrix-vector
// kernel that streams B once from memory, 16 bits a weight, widening in
// registers. Larger products take Gemm's packed, cache-blocked path: with
// AVX2, bfloat16 panels stay 16-bit (reordered into pairs) and the
// micro-kernel widens them in registers; otherwise B is widened to float32
// while its panels are packed, for Gemm's micro-kernels.
// Large products run on up to Threads() goroutines, split over n.
//
// Bad arguments (negative sizes, leading dimensions smaller than a row,
// slices too short or nil for the shapes, an unknown format) panic with a
// message naming the shapes.
func GemmHalf(transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, f Half, beta float32, c []float32, ldc int) {
	checkGemmHalf(transB, m, n, k, a, lda, b, ldb, f, c, ldc)
	gemmHalfWith(halfDefault, Threads(), transB, m, n, k, alpha, a, lda, b, ldb, f, beta, c, ldc)
}

// HalfGEMVRows is the largest m for which GemmHalf with transB takes the
// matrix-vector (streaming) kernel instead of packing B: up to 16 rows it
// was the faster of the two at every weight shape of BenchmarkGemmHalf on
// an AVX2 machine, since packing widens all of B for few uses of each
// panel.
const HalfGEMVRows = 16

// HalfToFloat32 widens the 16-bit values src (format f) into dst[:len(src)]
// exactly; it panics if dst is shorter than src or f is unknown.
func HalfToFloat32(dst []float32, src []uint16, f Half) {
	if !f.valid() {
		panic(fmt.Sprintf("tensor: HalfToFloat32: unknown format %v", f))
	}
	if len(dst) < len(src) {
		panic(fmt.Sprintf("tensor: HalfToFloat32: dst has %d elements, src %d", len(dst), len(src)))
	}
	halfDefault.widen(dst[:len(src)], src, f)
}

// halfToF32 widens one value. The binary16 case is branch-free for every
// input (it runs in the inner loops of the portable kernels): the 15
// magnitude bits placed at float32's exponent/mantissa position and scaled
// by 2¹¹² give every finite value exactly, subnormals included (they become
// float32 denormals that the scaling normalises); an all-ones exponent is
// then forced to float32's, keeping infinities and NaN payloads.
func halfToF32(h uint16, f Half) float32 {
	if f == BF16 {
		return math.Float32frombits(uint32(h) << 16)
	}
	return f16ToF32Fast(h)
}

const f16Scale = 0x1p112

func f16ToF32Fast(h uint16) float32 {
	mag := uint32(h&0x7fff) << 13
	v := math.Float32bits(math.Float32frombits(mag) * f16Scale)
	if h&0x7c00 == 0x7c00 {
		v = 0x7f800000 | mag
	}
	return math.Float32frombits(v | uint32(h&0x8000)<<16)
}

// widenGo is the portable HalfToFloat32.
func widenGo(dst []float32, src []uint16, f Half) {
	dst = dst[:len(src)]
	if f == BF16 {
		for i, h := range src {
			dst[i] = math.Float32frombits(uint32(h) << 16)
		}
		return
	}
	for i, h := range src {
		dst[i] = f16ToF32Fast(h)
	}
}

// halfPath is one implementation of GemmHalf: a float32 micro-kernel for the
// packed path with the B packer that feeds it, and a matrix-vector kernel.
type halfPath struct {
	name string
	kern *gemmKernel
	// packB packs like packB in gemm.go, widening from format f.
	packB func(dst []float32, transB bool, b []uint16, ldb, p0, j0, kb, nb, nr int, f Half)
	// gemv computes dst[i*ldo+j] = Σ_p x[i*ldx+p]·w[j*ldw+p] for i < mx,
	// j < nb·gemvR (nb blocks of gemvR rows of w), over the first k
	// values; mx ≤ gemvM, k is a multiple of gemvK.
	gemv         func(mx, nb, k int, x []float32, ldx int, w []uint16, ldw int, f Half, dst []float32, ldo int)
	gemvR, gemvM int
	gemvK        int
	// gemvXBytes, when set, bounds the bytes of x one gemv call reads, so
	// that x stays in L1: fewer rows of x a call (down to one) when k is
	// long. For a kernel that loads x once per row of w (gemvR = 1), x is
	// most of its loads; one that uses each load of x on several rows of w
	// reads x from L2 at little cost and loses more by streaming w once per
	// row of x than it gains.
	gemvXBytes int
	// gemvPair, when set: for bfloat16, gemv wants x with each block of
	// gemvPair values reordered as its even-indexed then its odd-indexed
	// ones (pairOrder), the order in which a vector load of bfloat16 pairs
	// widens.
	gemvPair int
	// pairOrder, when set, does pairOrder's work faster.
	pairOrder func(dst, src []float32, bs int)
	widen     func(dst []float32, src []uint16, f Half)
	// kernBF16, when set, takes bfloat16 products on the packed path: a
	// micro-kernel that widens B in registers (widening is exact and free
	// beside the FMAs) from panels of 16-bit pairs that packBF16 packs;
	// packing then moves half the bytes and does no arithmetic.
	kernBF16 *gemmKernel
	packBF16 func(dst []uint16, transB bool, b []uint16, ldb, p0, j0, kb, nb int)
}

type halfPathAvail struct {
	p  *halfPath
	ok bool
}

// halfGo is the portable path.
var halfGo = &halfPath{name: "go", kern: kernelGo, packB: packBHalfGo, gemv: gemvHalfGo, gemvR: 4, gemvM: 4, gemvK: 1, widen: widenGo}

// halfDefault is the fastest path the CPU supports.
var halfDefault = func() *halfPath {
	for _, pa := range halfPaths() {
		if pa.ok {
			return pa.p
		}
	}
	return halfGo
}()

// gemmHalfWith runs a checked product on path hp with up to threads
// goroutines.
func gemmHalfWith(hp *halfPath, threads int, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, f Half, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if transB && m <= HalfGEMVRows {
		gemvHalfParallel(hp, threads, m, n, k, alpha, a, lda, b, ldb, f, beta, c, ldc)
		return
	}
	gemmHalfParallel(hp, threads, transB, m, n, k, alpha, a, lda, b, ldb, f, beta, c, ldc)
}

// gemmHalfParallel is the packed path. It splits over n (each goroutine
// widens only its own columns of B), or over m when n has fewer
// micro-tiles than there are goroutines.
func gemmHalfParallel(hp *halfPath, threads int, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, f Half, beta float32, c []float32, ldc int) {
	kern := hp.kern
	if threads <= 1 || m*n*k < parallelMinFlops {
		gemmHalfSerial(hp, transB, m, n, k, alpha, a, lda, b, ldb, f, beta, c, ldc)
		return
	}
	tm := (m + kern.mr - 1) / kern.mr
	tn := (n + kern.nr - 1) / kern.nr
	if tn >= threads || tn >= tm {
		splitTiles(tn, kern.nr, n, threads, func(j0, j1 int) {
			bOff := j0
			if transB {
				bOff = j0 * ldb
			}
			gemmHalfSerial(hp, transB, m, j1-j0, k, alpha, a, lda, b[bOff:], ldb, f, beta, c[j0:], ldc)
		})
		return
	}
	splitTiles(tm, kern.mr, m, threads, func(i0, i1 int) {
		gemmHalfSerial(hp, transB, i1-i0, n, k, alpha, a[i0*lda:], lda, b, ldb, f, beta, c[i0*ldc:], ldc)
	})
}

// gemmHalfSerial is gemmSerial with B widened from 16 bits while packing;
// A is never transposed.
func gemmHalfSerial(hp *halfPath, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, f Half, beta float32, c []float32, ldc int) {
	if f == BF16 && hp.kernBF16 != nil {
		gemmBF16Serial(hp, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	kern := hp.kern
	buf := kern.getBuf()
	defer kern.pool.Put(buf)
	for jc := 0; jc < n; jc += kern.nc {
		nb := min(kern.nc, n-jc)
		for pc := 0; pc < k; pc += kern.kc {
			kb := min(kern.kc, k-pc)
			betaP := beta
			if pc > 0 {
				betaP = 1
			}
			hp.packB(buf.b, transB, b, ldb, pc, jc, kb, nb, kern.nr, f)
			for ic := 0; ic < m; ic += kern.mc {
				mb := min(kern.mc, m-ic)
				packA(buf.a, false, a, lda, ic, pc, mb, kb, kern.mr, kern.packAT)
				macroKernel(kern, buf, mb, nb, kb, alpha, betaP, c[ic*ldc+jc:], ldc)
			}
		}
	}
}

// gemmBF16Serial is gemmHalfSerial for bfloat16 B on hp.kernBF16: B's
// blocks are packed as 16-bit pairs (hp.packBF16) and widened by the
// micro-kernel.
func gemmBF16Serial(hp *halfPath, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	kern := hp.kernBF16
	buf := kern.getBuf()
	defer kern.pool.Put(buf)
	// The B buffer holds float32 slots; the panels are 16-bit values, two
	// a slot.
	b16 := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(buf.b))), 2*len(buf.b))
	// k in blocks of equal size (at most kc): 896 as 3·299 rather than
	// 384+384+128, whose short last block pays the per-tile costs (C read
	// and written, the call) over fewer multiply-adds.
	blocks := max(1, (k+kern.kc-1)/kern.kc)
	kcE := (k + blocks - 1) / blocks
	for jc := 0; jc < n; jc += kern.nc {
		nb := min(kern.nc, n-jc)
		for pc := 0; pc < k; pc += kcE {
			kb := min(kcE, k-pc)
			betaP := beta
			if pc > 0 {
				betaP = 1
			}
			hp.packBF16(b16, transB, b, ldb, pc, jc, kb, nb)
			for ic := 0; ic < m; ic += kern.mc {
				mb := min(kern.mc, m-ic)
				packA(buf.a, false, a, lda, ic, pc, mb, kb, kern.mr, kern.packAT)
				macroKernel(kern, buf, mb, nb, kb, alpha, betaP, c[ic*ldc+jc:], ldc)
			}
		}
	}
}

// pairsNR is the panel width of the bfloat16-pair layout.
const pairsNR = 16

// pairSlot is where column j (< 16) of a step goes in the pair layout: 32-bit
// lane j mod 8, the low half for j < 8 and the high half for the rest, so
// that shifting each lane left by 16 widens columns 0–7 and masking off its
// low half widens columns 8–15.
func pairSlot(j int) int {
	if j < 8 {
		return 2 * j
	}
	return 2*(j-8) + 1
}

// packPairsGo packs the kb×nb block of a bfloat16 op(B) at (p0, j0) into
// ceil(nb/16) panels of kb steps of 16 values in pair order (pairSlot),
// columns past nb zero: the layout of hp.packBF16, portably.
func packPairsGo(dst []uint16, transB bool, b []uint16, ldb, p0, j0, kb, nb int) {
	for jr := 0; jr < nb; jr += pairsNR {
		packPairsPanelGo(dst[jr*kb:jr*kb+pairsNR*kb], transB, b, ldb, p0, j0+jr, min(pairsNR, nb-jr), 0, kb)
	}
}

// packPairsPanelGo writes steps [s0, kb) of one panel: the nrr ≤ 16 columns
// from j0 of op(B) at rows p0+s, zero past nrr.
func packPairsPanelGo(panel []uint16, transB bool, b []uint16, ldb, p0, j0, nrr, s0, kb int) {
	for s := s0; s < kb; s++ {
		st := panel[s*pairsNR : s*pairsNR+pairsNR]
		for j := 0; j < pairsNR; j++ {
			var v uint16
			if j < nrr {
				if transB {
					v = b[(j0+j)*ldb+p0+s]
				} else {
					v = b[(p0+s)*ldb+j0+j]
				}
			}
			st[pairSlot(j)] = v
		}
	}
}

// packBHalfGo packs the kb×nb block of op(B) at (p0, j0) into ceil(nb/nr)
// panels of nr columns (columns past nb zero), widening to float32: the
// layout packB produces from a float32 B.
func packBHalfGo(dst []float32, transB bool, b []uint16, ldb, p0, j0, kb, nb, nr int, f Half) {
	for jr := 0; jr < nb; jr += nr {
		nrr := min(nr, nb-jr)
		panel := dst[jr*kb : jr*kb+nr*kb]
		if !transB {
			off := p0*ldb + j0 + jr
			packRunsHalfGo(panel, b[off:off+(kb-1)*ldb+nrr], ldb, nrr, nr, kb, f)
		} else {
			off := (j0+jr)*ldb + p0
			packTransposeHalfGo(panel, b[off:off+(nrr-1)*ldb+kb], ldb, nrr, nr, kb, f)
		}
	}
}

// packRunsHalfGo sets panel[p*width+j] = widen(src[p*ld+j]) for p < kb,
// j < w, and zero for w ≤ j < width.
func packRunsHalfGo(panel []float32, src []uint16, ld, w, width, kb int, f Half) {
	for p := 0; p < kb; p++ {
		d := panel[p*width : p*width+width]
		widenGo(d[:w], src[p*ld:p*ld+w], f)
		clear(d[w:])
	}
}

// packTransposeHalfGo sets panel[p*width+r] = widen(src[r*ld+p]) for p < kb,
// r < w, and zero for w ≤ r < width, in chunks of 16 steps so that the
// panel region being written stays in L1.
func packTransposeHalfGo(panel []float32, src []uint16, ld, w, width, kb int, f Half) {
	_ = panel[kb*width-1]
	_ = src[(w-1)*ld+kb-1]
	const chunk = 16
	for p0 := 0; p0 < kb; p0 += chunk {
		pn := min(chunk, kb-p0)
		for r := 0; r < w; r++ {
			s := src[r*ld+p0 : r*ld+p0+pn]
			d := p0*width + r
			if f == BF16 {
				for _, h := range s {
					panel[d] = math.Float32frombits(uint32(h) << 16)
					d += width
				}
			} else {
				for _, h := range s {
					panel[d] = f16ToF32Fast(h)
					d += width
				}
			}
		}
	}
	if w < width {
		for p := 0; p < kb; p++ {
			clear(panel[p*width+w : p*width+width])
		}
	}
}

// gemvHalfParallel is the matrix-vector path for transB (C = A·Bᵀ, B n×k)
// with few rows: B's rows are split over the threads when the product is
// large enough to pay for them.
func gemvHalfParallel(hp *halfPath, threads int, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, f Half, beta float32, c []float32, ldc int) {
	// x as the kernel reads it: A itself, or a reordered copy of the part
	// the kernel covers.
	xk, ldxk := a, lda
	if kv := k / hp.gemvK * hp.gemvK; hp.gemvPair > 0 && f == BF16 && kv > 0 && n >= hp.gemvR {
		bp := pairBufPool.Get().(*[]float32)
		defer pairBufPool.Put(bp)
		if cap(*bp) < m*kv {
			*bp = make([]float32, m*kv)
		}
		xk, ldxk = (*bp)[:m*kv], kv
		order := hp.pairOrder
		if order == nil {
			order = pairOrder
		}
		for i := 0; i < m; i++ {
			order(xk[i*kv:(i+1)*kv], a[i*lda:i*lda+kv], hp.gemvPair)
		}
	}
	// Each goroutine should do at least gemvParMinWork multiply-adds: one
	// row of x streams that many weights, more rows reuse each weight for
	// as many products (so a decoding batch splits the key and value
	// projections too).
	const gemvParMinWork = 1 << 18
	work := m * n * k
	nw := min(threads, work/gemvParMinWork, n/hp.gemvR)
	if nw <= 1 {
		gemvHalfSerial(hp, m, n, k, alpha, a, lda, xk, ldxk, b, ldb, f, beta, c, ldc)
		return
	}
	// B's rows in pieces of whole blocks of gemvR taken in turn
	// (parallelPieces): gemvPieces a worker, and for a large B (a
	// vocabulary's output projection) pieces of at most about
	// gemvPieceWeights, so that the threads finish within a short piece of
	// each other.
	tn := n / hp.gemvR
	pieces := min(tn, max(nw*gemvPieces, n*k/gemvPieceWeights), work/(gemvParMinWork/gemvPieces))
	parallelPieces(nw, pieces, func(p int) {
		j0 := tn * p / pieces * hp.gemvR
		j1 := tn * (p + 1) / pieces * hp.gemvR
		if p == pieces-1 {
			j1 = n
		}
		gemvHalfSerial(hp, m, j1-j0, k, alpha, a, lda, xk, ldxk, b[j0*ldb:], ldb, f, beta, c[j0:], ldc)
	})
}

// gemvPieces is how many pieces a worker's share of a parallel
// matrix-vector product is cut into at least; gemvPieceWeights is the most
// weights of B a piece has beyond that (2 MiB of 16-bit values).
const (
	gemvPieces       = 4
	gemvPieceWeights = 1 << 20
)

// gemvXBytes is halfPath.gemvXBytes where it is set: half of a 48 KiB L1
// data cache, leaving the rest to the rows of w.
const gemvXBytes = 24 << 10

var pairBufPool = sync.Pool{New: func() any { return new([]float32) }}

// pairOrder copies src to dst with each block of bs values reordered as
// its bs/2 even-indexed values followed by its bs/2 odd-indexed ones;
// len(src) is a multiple of bs.
func pairOrder(dst, src []float32, bs int) {
	dst = dst[:len(src)]
	h := bs / 2
	for c := 0; c+bs <= len(src); c += bs {
		s, d := src[c:c+bs], dst[c:c+bs]
		for j := range h {
			d[j] = s[2*j]
			d[h+j] = s[2*j+1]
		}
	}
}

// gemvHalfSerial computes C = alpha·A·Bᵀ + beta·C (B n×k) on the calling
// goroutine; the kernel reads x from xk (row stride ldxk: A, or A in the
// order the kernel wants), the Go code the values past the kernel's part of
// k from A. B's rows go in chunks of at most gemvChunk (whole blocks of
// gemvR) and about 96 KiB; the kernel runs on each chunk once per group of
// at most gemvM rows of x (fewer for a long k where the path sets
// gemvXBytes), so a chunk is read from memory once and from L2 by the
// later groups. The rows past the last whole block reuse the kernel on the
// final gemvR rows (recomputing some) when n ≥ gemvR.
func gemvHalfSerial(hp *halfPath, m, n, k int, alpha float32, a []float32, lda int, xk []float32, ldxk int, b []uint16, ldb int, f Half, beta float32, c []float32, ldc int) {
	const gemvChunk = 512
	// A path with gemvXBytes takes fewer rows of x a call when they would
	// not stay in L1. Qwen2.5-0.5B's down projection (k = 4864) at 8 rows:
	// one row a call took the AVX-512 kernel (gemvR = 1) from 52–55 to
	// 67–77 GFLOP/s on an AMD EPYC with a 48 KiB L1; it would take the
	// AVX2 kernel (gemvR = 4) from 46–47 down to 28–30, and the portable
	// one from 2.6–3.2 to 1.7–2.0, on an AVX2-only EPYC with 32 KiB.
	R, M := hp.gemvR, hp.gemvM
	if hp.gemvXBytes > 0 {
		M = max(1, min(M, hp.gemvXBytes/(4*k)))
	}
	kv := k / hp.gemvK * hp.gemvK
	var tmp [4 * gemvChunk]float32
	chunk := min(gemvChunk, max(R, (96<<10)/(2*k)/R*R))
	// store finishes columns [j0+rs, j0+cnt) of C's rows i0..i0+mx-1 from
	// tmp (row stride ldo), the sums over the first kd values of k.
	store := func(i0, mx, j0, rs, cnt, ldo, kd int) {
		for i := 0; i < mx; i++ {
			xi := a[(i0+i)*lda : (i0+i)*lda+k]
			crow := c[(i0+i)*ldc+j0 : (i0+i)*ldc+j0+cnt]
			t := tmp[i*ldo : i*ldo+cnt]
			for r := rs; r < cnt; r++ {
				s := t[r]
				if kd < k {
					wr := b[(j0+r)*ldb : (j0+r)*ldb+k]
					for p := kd; p < k; p++ {
						s += xi[p] * halfToF32(wr[p], f)
					}
				}
				if beta == 0 {
					crow[r] = alpha * s
				} else {
					crow[r] = alpha*s + beta*crow[r]
				}
			}
		}
	}
	if n < R {
		// Too few rows for a block: the portable kernel, all of k.
		for i0 := 0; i0 < m; i0 += M {
			mx := min(M, m-i0)
			gemvHalfGoRows(n, mx, k, a[i0*lda:], lda, b, ldb, f, tmp[:], n)
			store(i0, mx, 0, 0, n, n, k)
		}
		return
	}
	// With C = A·Bᵀ over a k the kernel covers, it writes C itself.
	direct := alpha == 1 && beta == 0 && kv == k
	if direct && m <= M {
		// One group of rows of x reads each chunk once: no chunks.
		chunk = n
	}
	run := func(j0, nb, rs int) {
		cnt := nb * R
		w := b[j0*ldb : (j0+cnt-1)*ldb+k]
		for i0 := 0; i0 < m; i0 += M {
			mx := min(M, m-i0)
			if direct {
				hp.gemv(mx, nb, kv, xk[i0*ldxk:i0*ldxk+(mx-1)*ldxk+kv], ldxk, w, ldb, f, c[i0*ldc+j0:], ldc)
				continue
			}
			if kv > 0 {
				hp.gemv(mx, nb, kv, xk[i0*ldxk:i0*ldxk+(mx-1)*ldxk+kv], ldxk, w, ldb, f, tmp[:], cnt)
			} else {
				clear(tmp[:mx*cnt])
			}
			store(i0, mx, j0, rs, cnt, cnt, kv)
		}
	}
	nFull := n / R * R
	for j0 := 0; j0 < nFull; j0 += chunk {
		run(j0, min(chunk, nFull-j0)/R, 0)
	}
	if nFull < n {
		run(n-R, 1, nFull-(n-R)) // overlapping last block; rows ≥ nFull stored
	}
}

// gemvHalfGo is the portable matrix-vector kernel (gemvR = 4, gemvM = 4,
// any k).
func gemvHalfGo(mx, nb, k int, x []float32, ldx int, w []uint16, ldw int, f Half, dst []float32, ldo int) {
	for blk := 0; blk < nb; blk++ {
		gemvHalfGoRows(4, mx, k, x, ldx, w[4*blk*ldw:], ldw, f, dst[4*blk:], ldo)
	}
}

// gemvHalfGoRows sets dst[i*ldo+r] = Σ_{p<k} x[i*ldx+p]·w[r*ldw+p] for
// i < mx ≤ 4, r < R, widening each row of w once per 256 values.
func gemvHalfGoRows(R, mx, k int, x []float32, ldx int, w []uint16, ldw int, f Half, dst []float32, ldo int) {
	var row [256]float32
	for r := 0; r < R; r++ {
		var acc [4]float32
		for p0 := 0; p0 < k; p0 += len(row) {
			pn := min(len(row), k-p0)
			wr := row[:pn]
			widenGo(wr, w[r*ldw+p0:r*ldw+p0+pn], f)
			for i := 0; i < mx; i++ {
				xi := x[i*ldx+p0 : i*ldx+p0+pn]
				var s0, s1, s2, s3 float32
				p := 0
				for ; p+4 <= pn; p += 4 {
					s0 += xi[p] * wr[p]
					s1 += xi[p+1] * wr[p+1]
					s2 += xi[p+2] * wr[p+2]
					s3 += xi[p+3] * wr[p+3]
				}
				for ; p < pn; p++ {
					s0 += xi[p] * wr[p]
				}
				acc[i] += (s0 + s1) + (s2 + s3)
			}
		}
		for i := 0; i < mx; i++ {
			dst[i*ldo+r] = acc[i]
		}
	}
}

func checkGemmHalf(transB bool, m, n, k int, a []float32, lda int, b []uint16, ldb int, f Half, c []float32, ldc int) {
	if !f.valid() {
		panic(fmt.Sprintf("tensor: GemmHalf: unknown format %v in m=%d n=%d k=%d product", f, m, n, k))
	}
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("tensor: GemmHalf: negative size m=%d n=%d k=%d", m, n, k))
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	need := func(name string, rows, cols, ld, length int, isNil bool) {
		if ld < max(cols, 1) {
			panic(fmt.Sprintf("tensor: GemmHalf: %s is %d×%d but leading dimension is %d (want ≥ %d) in m=%d n=%d k=%d product", name, rows, cols, ld, max(cols, 1), m, n, k))
		}
		if rows == 0 || cols == 0 || m == 0 || n == 0 {
			return
		}
		want := (rows-1)*ld + cols
		if isNil {
			panic(fmt.Sprintf("tensor: GemmHalf: %s is nil but must be %d×%d (ld %d) in m=%d n=%d k=%d product", name, rows, cols, ld, m, n, k))
		}
		if length < want {
			panic(fmt.Sprintf("tensor: GemmHalf: %s is %d×%d with ld %d, needs %d elements, has %d", name, rows, cols, ld, want, length))
		}
	}
	need("A", m, k, lda, len(a), a == nil)
	need("B ("+f.String()+")", br, bc, ldb, len(b), b == nil)
	need("C", m, n, ldc, len(c), c == nil)
}
