package tensor

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Gemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices, where
// op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb, ldc are
// the row strides (leading dimensions) of the stored matrices. As in BLAS,
// beta == 0 overwrites C without reading it (NaN in C does not propagate).
//
// Gemm is cache-blocked and packed in the manner of BLIS (Van Zee & van de
// Geijn, "BLIS: A Framework for Rapidly Instantiating BLAS Functionality",
// ACM TOMS 2015; Goto & van de Geijn, "Anatomy of High-Performance Matrix
// Multiplication", ACM TOMS 2008): for each KC×NC block of op(B) packed into
// NR-column panels and each MC×KC block of op(A) packed into MR-row panels,
// a register-blocked MR×NR micro-kernel (AVX-512, AVX2/FMA or portable Go,
// chosen from the CPU's features) updates C. Large products run on up to
// Threads() goroutines.
//
// Bad arguments (negative sizes, leading dimensions smaller than a row, slices
// too short or nil for the shapes) panic with a message naming the shapes.
func Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	gemmParallel(gemmDefault, Threads(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// GemmBatched runs batch independent Gemm calls; matrix i of A starts at
// a[i*strideA], and likewise for B and C. Batches of small products run in
// parallel across batch entries; large ones parallelise inside each product.
func GemmBatched(transA, transB bool, batch, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int) {
	gemmBatchedWith(gemmDefault, Threads(), transA, transB, batch, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c, ldc, strideC)
}

func gemmBatchedWith(kern *gemmKernel, threads int, transA, transB bool, batch, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int) {
	if batch < 0 || strideA < 0 || strideB < 0 || strideC < 0 {
		panic(fmt.Sprintf("tensor: GemmBatched: negative batch %d or stride (%d, %d, %d) for %d×%d×%d products", batch, strideA, strideB, strideC, m, n, k))
	}
	if batch == 0 {
		return
	}
	// Check the first and the last matrix of each operand; the ones between
	// lie inside those bounds.
	last := batch - 1
	checkGemmNamed("GemmBatched", transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	sub := func(s []float32, off int) []float32 {
		if off > len(s) {
			return nil
		}
		return s[off:]
	}
	checkGemmNamed(fmt.Sprintf("GemmBatched (matrix %d of %d, strides %d, %d, %d)", last, batch, strideA, strideB, strideC),
		transA, transB, m, n, k, sub(a, last*strideA), lda, sub(b, last*strideB), ldb, sub(c, last*strideC), ldc)
	if m == 0 || n == 0 {
		return
	}
	flops := m * n * max(k, 1)
	if threads > 1 && batch > 1 && flops < parallelMinFlops*threads {
		// Small products: spread whole products over the goroutines.
		parallelPieces(threads, batch, func(i int) {
			gemmSerial(kern, transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
		})
		return
	}
	for i := 0; i < batch; i++ {
		gemmParallel(kern, threads, transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
	}
}

// gemmThreads is the goroutine count for large products; 0 means GOMAXPROCS.
var gemmThreads atomic.Int32

// SetThreads sets how many goroutines Gemm and GemmBatched may use for large
// products; n <= 0 restores the default, runtime.GOMAXPROCS(0). It returns
// the previous setting (0 for the default).
func SetThreads(n int) int {
	if n < 0 {
		n = 0
	}
	return int(gemmThreads.Swap(int32(n)))
}

// Threads reports how many goroutines Gemm uses for large products.
func Threads() int {
	if n := gemmThreads.Load(); n > 0 {
		return int(n)
	}
	return runtime.GOMAXPROCS(0)
}

// ParallelFor runs fn over [0, n) split into up to Threads() contiguous
// ranges, each on its own goroutine, waiting for all; with fewer than two
// ranges of at least grain items it runs fn(0, n) on the caller. It is for
// the row-wise work around the products (normalization, activations,
// attention heads) that would otherwise run on one core between them.
func ParallelFor(n, grain int, fn func(lo, hi int)) {
	workers := min(Threads(), n/max(grain, 1))
	if workers < 2 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	splitTiles(n, 1, n, workers, fn)
}

// parallelMinFlops is the m·n·k below which a product runs on one goroutine:
// under it, start-up costs more than the split gains.
const parallelMinFlops = 96 * 96 * 96

// gemmKernel describes one micro-kernel and the blocking it wants.
type gemmKernel struct {
	name       string
	mr, nr     int // register tile of C
	mc, kc, nc int // cache blocks: A block mc×kc, B block kc×nc
	// aOuter runs the micro-tiles of a block row by row (the A micro-panel
	// stays in L1 while B streams from L2) instead of column by column.
	aOuter bool
	// fn computes C[0:mr,0:nr] = alpha·Ap·Bp + beta·C from packed panels.
	fn func(kc int, a, b, c *float32, ldc int, alpha, beta float32)
	// packAT, when set, packs a whole mr-row panel of a row-major
	// (untransposed) A faster than packTranspose; see packA.
	packAT func(panel, src []float32, lda, kb int)
	// bPairs: the packed B panels hold bfloat16 values in the pair layout
	// of packPairsGo, a step of nr columns in nr/2 float32 slots.
	bPairs bool
	// edges, fewest rows first, compute only the first rows rows of a tile
	// (same packed panels, same C convention): an edge tile with r < mr
	// valid rows takes the first with rows ≥ r, so a block whose row count
	// is not a multiple of mr wastes fewer multiply-adds on zero rows.
	edges []edgeKernel
	pool  sync.Pool // *gemmBuf
}

// edgeKernel is a micro-kernel for the first rows rows of an mr-row tile.
type edgeKernel struct {
	rows int
	fn   func(kc int, a, b, c *float32, ldc int, alpha, beta float32)
}

type kernelAvail struct {
	k  *gemmKernel
	ok bool
}

// gemmDefault is the fastest micro-kernel the CPU supports.
var gemmDefault = func() *gemmKernel {
	for _, ka := range gemmKernels() {
		if ka.ok {
			return ka.k
		}
	}
	return kernelGo
}()

// GemmKernel names the micro-kernel Gemm runs on this CPU: "avx512", "avx2"
// or "go".
func GemmKernel() string { return gemmDefault.name }

// gemmBuf holds one goroutine's packing buffers, 64-byte aligned.
type gemmBuf struct {
	a, b, tmp []float32
}

func (kern *gemmKernel) getBuf() *gemmBuf {
	if v := kern.pool.Get(); v != nil {
		return v.(*gemmBuf)
	}
	mcR := (kern.mc + kern.mr - 1) / kern.mr * kern.mr
	ncR := (kern.nc + kern.nr - 1) / kern.nr * kern.nr
	return &gemmBuf{
		a:   aligned(mcR * kern.kc),
		b:   aligned(kern.kc * ncR),
		tmp: aligned(kern.mr * kern.nr),
	}
}

// aligned returns a zeroed slice of n float32 starting on a 64-byte boundary.
func aligned(n int) []float32 {
	s := make([]float32, n+16)
	off := 0
	if r := uintptr(unsafe.Pointer(&s[0])) % 64; r != 0 {
		off = int(64-r) / 4
	}
	return s[off : off+n : off+n]
}

// gemmParallel splits a product over up to threads goroutines along M or N
// (whichever has more micro-tiles), each running gemmSerial on its slab.
func gemmParallel(kern *gemmKernel, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmParallelFrom(kern, threads, transA, m, n, k, alpha, a, lda, bSource{trans: transB, b: b, ldb: ldb}, beta, c, ldc)
}

// gemmParallelFrom is gemmParallel with op(B) from src.
func gemmParallelFrom(kern *gemmKernel, threads int, transA bool, m, n, k int, alpha float32, a []float32, lda int, src bSource, beta float32, c []float32, ldc int) {
	if threads <= 1 || m*n*max(k, 1) < parallelMinFlops {
		gemmSerialFrom(kern, transA, m, n, k, alpha, a, lda, src, beta, c, ldc)
		return
	}
	tm := (m + kern.mr - 1) / kern.mr
	tn := (n + kern.nr - 1) / kern.nr
	if tm >= tn {
		splitTiles(tm, kern.mr, m, threads, func(i0, i1 int) {
			aOff := i0 * lda
			if transA {
				aOff = i0
			}
			gemmSerialFrom(kern, transA, i1-i0, n, k, alpha, a[aOff:], lda, src, beta, c[i0*ldc:], ldc)
		})
		return
	}
	splitTiles(tn, kern.nr, n, threads, func(j0, j1 int) {
		gemmSerialFrom(kern, transA, m, j1-j0, k, alpha, a, lda, src.from(j0), beta, c[j0:], ldc)
	})
}

// splitTiles divides tiles micro-tiles of size tile (size elements in all,
// the last tile possibly short) into up to workers contiguous ranges and
// runs fn on each range [lo, hi) in its own goroutine, waiting for all.
func splitTiles(tiles, tile, size, workers int, fn func(lo, hi int)) {
	nw := min(workers, tiles)
	parallel(nw, func(w int) {
		lo := tiles * w / nw * tile
		hi := min(tiles*(w+1)/nw*tile, size)
		if lo < hi {
			fn(lo, hi)
		}
	})
}

// gemmSerial is the blocked, packed product on the calling goroutine. The
// arguments have been checked.
func gemmSerial(kern *gemmKernel, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmSerialFrom(kern, transA, m, n, k, alpha, a, lda, bSource{trans: transB, b: b, ldb: ldb}, beta, c, ldc)
}

// bSource is where gemmSerialFrom takes op(B)'s panels from: packed from
// b (row stride ldb, transposed if trans) as it goes, or, with packed set,
// from a PackedB's panels starting at column j0.
type bSource struct {
	trans  bool
	b      []float32
	ldb    int
	packed *PackedB
	j0     int
}

// from is the source of op(B)'s columns from j0 on.
func (src bSource) from(j0 int) bSource {
	switch {
	case src.packed != nil:
		src.j0 += j0
	case src.trans:
		src.b = src.b[j0*src.ldb:]
	default:
		src.b = src.b[j0:]
	}
	return src
}

// gemmSerialFrom is gemmSerial with op(B) from src. Each element of C
// takes the same operations in the same order whichever the source and
// whichever columns the call covers: a PackedB gives Gemm's bits.
func gemmSerialFrom(kern *gemmKernel, transA bool, m, n, k int, alpha float32, a []float32, lda int, src bSource, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	buf := kern.getBuf()
	defer kern.pool.Put(buf)
	packed := gemmBuf{a: buf.a, tmp: buf.tmp} // buf with a PackedB's panels
	mr, nr := kern.mr, kern.nr
	for jc := 0; jc < n; jc += kern.nc {
		nb := min(kern.nc, n-jc)
		for pc := 0; pc < k; pc += kern.kc {
			kb := min(kern.kc, k-pc)
			betaP := beta
			if pc > 0 {
				betaP = 1
			}
			bb := buf
			if pb := src.packed; pb != nil {
				// Block pc's panels follow the pc rows of those before it.
				off := pc*pb.nR + (src.j0+jc)*kb
				packed.b = pb.data[off : off+(nb+nr-1)/nr*nr*kb]
				bb = &packed
			} else {
				packB(buf.b, src.trans, src.b, src.ldb, pc, jc, kb, nb, nr)
			}
			for ic := 0; ic < m; ic += kern.mc {
				mb := min(kern.mc, m-ic)
				packA(buf.a, transA, a, lda, ic, pc, mb, kb, mr, kern.packAT)
				macroKernel(kern, bb, mb, nb, kb, alpha, betaP, c[ic*ldc+jc:], ldc)
			}
		}
	}
}

// macroKernel runs the micro-kernel over the packed mb×kb block of A and
// kb×nb block of B, updating the mb×nb block of C at c.
func macroKernel(kern *gemmKernel, buf *gemmBuf, mb, nb, kb int, alpha, beta float32, c []float32, ldc int) {
	mr, nr := kern.mr, kern.nr
	tmp := buf.tmp
	tile := func(ir, jr int) {
		mrr, nrr := min(mr, mb-ir), min(nr, nb-jr)
		ap, bp := &buf.a[ir*kb], &buf.b[jr*kb]
		if kern.bPairs {
			bp = &buf.b[jr*kb/2]
		}
		ci := ir*ldc + jr
		if mrr == mr && nrr == nr {
			kern.fn(kb, ap, bp, &c[ci], ldc, alpha, beta)
			return
		}
		fn := kern.fn
		for _, e := range kern.edges {
			if mrr <= e.rows {
				fn = e.fn
				if mrr == e.rows && nrr == nr {
					fn(kb, ap, bp, &c[ci], ldc, alpha, beta)
					return
				}
				break
			}
		}
		// Edge tile: compute the tile into tmp, then merge the valid part
		// into C.
		fn(kb, ap, bp, &tmp[0], nr, alpha, 0)
		for i := 0; i < mrr; i++ {
			row := c[ci+i*ldc : ci+i*ldc+nrr]
			t := tmp[i*nr : i*nr+nrr]
			if beta == 0 {
				copy(row, t)
			} else {
				for j := range row {
					row[j] = t[j] + beta*row[j]
				}
			}
		}
	}
	if kern.aOuter {
		for ir := 0; ir < mb; ir += mr {
			for jr := 0; jr < nb; jr += nr {
				tile(ir, jr)
			}
		}
		return
	}
	for jr := 0; jr < nb; jr += nr {
		for ir := 0; ir < mb; ir += mr {
			tile(ir, jr)
		}
	}
}

// scaleC computes C = beta·C (C = 0 when beta == 0).
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// packA packs the mb×kb block of op(A) at (i0, p0) into ceil(mb/mr) panels,
// panel ip holding kb steps of mr values op(A)[i0+ip·mr+r, p0+p], rows past
// mb zero. fast (may be nil) packs the whole panels of an untransposed A.
func packA(dst []float32, transA bool, a []float32, lda, i0, p0, mb, kb, mr int, fast func(panel, src []float32, lda, kb int)) {
	for ir := 0; ir < mb; ir += mr {
		mrr := min(mr, mb-ir)
		panel := dst[ir*kb : ir*kb+mr*kb]
		if transA {
			// op(A)[i, p] = a[p*lda+i]: each step is a contiguous run.
			off := (p0)*lda + i0 + ir
			packRuns(panel, a[off:off+(kb-1)*lda+mrr], lda, mrr, mr, kb)
		} else {
			// op(A)[i, p] = a[i*lda+p]: transpose rows into the panel.
			off := (i0+ir)*lda + p0
			if fast != nil && mrr == mr {
				fast(panel, a[off:off+(mrr-1)*lda+kb], lda, kb)
				continue
			}
			packTranspose(panel, a[off:off+(mrr-1)*lda+kb], lda, mrr, mr, kb)
		}
	}
}

// packB packs the kb×nb block of op(B) at (p0, j0) into ceil(nb/nr) panels,
// panel jp holding kb steps of nr values op(B)[p0+p, j0+jp·nr+j], columns
// past nb zero.
func packB(dst []float32, transB bool, b []float32, ldb, p0, j0, kb, nb, nr int) {
	for jr := 0; jr < nb; jr += nr {
		nrr := min(nr, nb-jr)
		panel := dst[jr*kb : jr*kb+nr*kb]
		if !transB {
			// op(B)[p, j] = b[p*ldb+j]: each step is a contiguous run.
			off := p0*ldb + j0 + jr
			packRuns(panel, b[off:off+(kb-1)*ldb+nrr], ldb, nrr, nr, kb)
		} else {
			// op(B)[p, j] = b[j*ldb+p]: transpose.
			off := (j0+jr)*ldb + p0
			packTranspose(panel, b[off:off+(nrr-1)*ldb+kb], ldb, nrr, nr, kb)
		}
	}
}

// packRuns sets panel[p*width+j] = src[p*ld+j] for p < kb, j < w, and zero
// for w ≤ j < width. len(panel) ≥ kb·width and len(src) ≥ (kb-1)·ld+w have
// been checked by the caller's slicing.
func packRuns(panel, src []float32, ld, w, width, kb int) {
	_ = panel[kb*width-1]
	_ = src[(kb-1)*ld+w-1]
	if w == width {
		switch width {
		case 32:
			for p := 0; p < kb; p++ {
				*(*[32]float32)(panel[p*32:]) = *(*[32]float32)(src[p*ld:])
			}
			return
		case 16:
			for p := 0; p < kb; p++ {
				*(*[16]float32)(panel[p*16:]) = *(*[16]float32)(src[p*ld:])
			}
			return
		case 6:
			// The AVX2 kernels' A panels from a transposed A (the LoRA
			// gradient dB = dyᵀ·u): a copy call per 24 bytes cost more than
			// the copy.
			for p := 0; p < kb; p++ {
				*(*[6]float32)(panel[p*6:]) = *(*[6]float32)(src[p*ld:])
			}
			return
		}
	}
	for p := 0; p < kb; p++ {
		d := panel[p*width : p*width+width]
		copy(d, src[p*ld:p*ld+w])
		clear(d[w:])
	}
}

// packTranspose sets panel[p*width+r] = src[r*ld+p] for p < kb, r < w, and
// zero for w ≤ r < width. It works in chunks of 16 steps so that the panel
// region being written stays in L1 while each source row is read in whole
// cache lines. The caller's slicing has checked len(panel) ≥ kb·width and
// len(src) ≥ (w-1)·ld+kb; the loops below use unchecked pointers within
// those bounds.
func packTranspose(panel, src []float32, ld, w, width, kb int) {
	_ = panel[kb*width-1]
	_ = src[(w-1)*ld+kb-1]
	const chunk = 16
	dp := unsafe.Pointer(&panel[0])
	sp := unsafe.Pointer(&src[0])
	stride := uintptr(width) * 4
	for p0 := 0; p0 < kb; p0 += chunk {
		pn := min(chunk, kb-p0)
		for r := 0; r < w; r++ {
			s := unsafe.Add(sp, (r*ld+p0)*4)
			// Each address is computed from its step, never stepped past
			// the last one: a pointer beyond the panel's allocation is
			// invalid even unused (checkptr, -race).
			p := 0
			for ; p+4 <= pn; p += 4 {
				v := (*[4]float32)(unsafe.Add(s, p*4))
				d := unsafe.Add(dp, ((p0+p)*width+r)*4)
				*(*float32)(d) = v[0]
				*(*float32)(unsafe.Add(d, stride)) = v[1]
				*(*float32)(unsafe.Add(d, 2*stride)) = v[2]
				*(*float32)(unsafe.Add(d, 3*stride)) = v[3]
			}
			for ; p < pn; p++ {
				*(*float32)(unsafe.Add(dp, ((p0+p)*width+r)*4)) = *(*float32)(unsafe.Add(s, p*4))
			}
		}
	}
	if w < width {
		for p := 0; p < kb; p++ {
			clear(panel[p*width+w : p*width+width])
		}
	}
}

func checkGemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkGemmNamed("Gemm", transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
}

func checkGemmNamed(fn string, transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("tensor: %s: negative size m=%d n=%d k=%d", fn, m, n, k))
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	checkOperand(fn, "A", ar, ac, lda, a, m, n, k)
	checkOperand(fn, "B", br, bc, ldb, b, m, n, k)
	checkOperand(fn, "C", m, n, ldc, c, m, n, k)
}

// checkOperand panics unless s holds a rows×cols matrix of row stride ld,
// operand name of function fn's m×n×k product (an empty product needs no
// data).
func checkOperand(fn, name string, rows, cols, ld int, s []float32, m, n, k int) {
	if ld < max(cols, 1) {
		panic(fmt.Sprintf("tensor: %s: %s is %d×%d but leading dimension is %d (want ≥ %d) in m=%d n=%d k=%d product", fn, name, rows, cols, ld, max(cols, 1), m, n, k))
	}
	if rows == 0 || cols == 0 || m == 0 || n == 0 {
		return
	}
	want := (rows-1)*ld + cols
	if s == nil {
		panic(fmt.Sprintf("tensor: %s: %s is nil but must be %d×%d (ld %d) in m=%d n=%d k=%d product", fn, name, rows, cols, ld, m, n, k))
	}
	if len(s) < want {
		panic(fmt.Sprintf("tensor: %s: %s is %d×%d with ld %d, needs %d elements, has %d", fn, name, rows, cols, ld, want, len(s)))
	}
}
