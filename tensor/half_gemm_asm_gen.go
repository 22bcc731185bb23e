//go:build ignore

// half_gemm_asm_gen.go writes half_gemm_amd64.s, the AVX2 kernels of
// GemmHalf and HalfToFloat32 and the AVX-512 matrix-vector kernel. Run it
// with
//
//	go run half_gemm_asm_gen.go > half_gemm_amd64.s
//
// Every kernel widens 16-bit values to float32 in registers: bfloat16 by
// putting each value into the upper half of a 32-bit lane (VPMOVZXWD and
// VPSLLD, or a shift and a mask of pairs), binary16 with the F16C
// conversion (VCVTPH2PS). Both are exact, so the kernels see the same
// float32 values as the scalar converters of half.go.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

var w strings.Builder

func emit(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }

// r names general-purpose register n (the assembler's registers 8 to 15); the
// generator spells the high registers through it.
func r(n int) string { return "R" + strconv.Itoa(n) }

// format is one 16-bit storage format.
type format struct {
	name string // BF16 or F16, part of the Go symbol
	// conv widens 8 values at mem into the ymm register y.
	conv func(mem, y string)
}

var formats = []format{
	{"BF16", func(mem, y string) {
		emit("\tVPMOVZXWD %s, %s", mem, y)
		emit("\tVPSLLD $16, %s, %s", y, y)
	}},
	{"F16", func(mem, y string) {
		emit("\tVCVTPH2PS %s, %s", mem, y)
	}},
}

func y(i int) string { return fmt.Sprintf("Y%d", i) }

// genWiden writes widen<F>AVX2(dst *float32, src *uint16, n16 int): n16
// blocks of 16 values.
func genWiden(f format) {
	name := "widen" + f.name + "AVX2"
	emit("// func %s(dst *float32, src *uint16, n16 int)", name)
	emit("TEXT ·%s(SB), NOSPLIT, $0-24", name)
	emit("\tMOVQ dst+0(FP), DI")
	emit("\tMOVQ src+8(FP), SI")
	emit("\tMOVQ n16+16(FP), CX")
	emit("\tTESTQ CX, CX")
	emit("\tJEQ %s_done", name)
	emit("%s_loop:", name)
	f.conv("(SI)", "Y0")
	f.conv("16(SI)", "Y1")
	emit("\tVMOVUPS Y0, (DI)")
	emit("\tVMOVUPS Y1, 32(DI)")
	emit("\tADDQ $32, SI")
	emit("\tADDQ $64, DI")
	emit("\tDECQ CX")
	emit("\tJNE %s_loop", name)
	emit("%s_done:", name)
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("")
}

// genPackRuns writes packRuns<F>AVX2(panel *float32, src *uint16, ld, v8,
// kb int): panel[p*8*v8+j] = widen(src[p*ld+j]) for p < kb, j < 8·v8 (a
// full panel of packed B from a k×n B).
func genPackRuns(f format) {
	name := "packRuns" + f.name + "AVX2"
	emit("// func %s(panel *float32, src *uint16, ld, v8, kb int)", name)
	emit("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	emit("\tMOVQ panel+0(FP), DI")
	emit("\tMOVQ src+8(FP), " + r(11))
	emit("\tMOVQ ld+16(FP), DX")
	emit("\tSHLQ $1, DX")
	emit("\tMOVQ v8+24(FP), R8")
	emit("\tMOVQ kb+32(FP), CX")
	emit("\tTESTQ CX, CX")
	emit("\tJEQ %s_done", name)
	emit("%s_step:", name)
	emit("\tMOVQ " + r(11) + ", SI")
	emit("\tMOVQ R8, R9")
	emit("%s_vec:", name)
	f.conv("(SI)", "Y0")
	emit("\tVMOVUPS Y0, (DI)")
	emit("\tADDQ $16, SI")
	emit("\tADDQ $32, DI")
	emit("\tDECQ R9")
	emit("\tJNE %s_vec", name)
	emit("\tADDQ DX, " + r(11))
	emit("\tDECQ CX")
	emit("\tJNE %s_step", name)
	emit("%s_done:", name)
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("")
}

// genPackT writes packT<F>AVX2(panel *float32, src *uint16, ld, width, r8,
// k8 int): panel[p*width+r] = widen(src[r*ld+p]) for r < 8·r8, p < 8·k8 (a
// panel of packed B from an n×k B), by 8×8 blocks: eight rows of eight
// values are widened into Y0–Y7 and transposed in registers (unpack, shuffle,
// then swap 128-bit lanes) into eight packed steps. Each group of eight rows
// is swept along k before the next, so the reads from memory are eight
// streams at a time rather than the panel's width (a 32-token prefill of
// Qwen2.5-0.5B's shapes, whose packing is mostly these reads, ran about a
// tenth faster than with the row groups inside the k loop).
func genPackT(f format) {
	name := "packT" + f.name + "AVX2"
	emit("// func %s(panel *float32, src *uint16, ld, width, r8, k8 int)", name)
	emit("TEXT ·%s(SB), NOSPLIT, $0-48", name)
	emit("\tMOVQ panel+0(FP), DI")
	emit("\tMOVQ src+8(FP), SI")
	emit("\tMOVQ ld+16(FP), DX")
	emit("\tSHLQ $1, DX")                               // DX: source row stride in bytes
	emit("\tLEAQ (DX)(DX*2), " + r(10))                 // r(10): 3 source rows
	emit("\tMOVQ width+24(FP), " + r(13))               //
	emit("\tSHLQ $2, " + r(13))                         // r(13): panel step stride in bytes
	emit("\tLEAQ (" + r(13) + ")(" + r(13) + "*2), AX") // AX: 3 panel steps
	emit("\tMOVQ r8+32(FP), R9")
	emit("\tTESTQ R9, R9")
	emit("\tJEQ %s_done", name)
	emit("\tCMPQ k8+40(FP), $0")
	emit("\tJEQ %s_done", name)
	emit("%s_rblock:", name)
	emit("\tMOVQ k8+40(FP), CX")
	emit("\tMOVQ SI, " + r(11)) // rows 0–3 of the current row group
	emit("\tMOVQ DI, BX")       // steps 0–3 of the current column block
	emit("%s_kblock:", name)
	emit("\tLEAQ (" + r(11) + ")(DX*4), " + r(12)) // rows 4–7
	rows := []string{"(" + r(11) + ")", "(" + r(11) + ")(DX*1)", "(" + r(11) + ")(DX*2)", "(" + r(11) + ")(" + r(10) + "*1)", "(" + r(12) + ")", "(" + r(12) + ")(DX*1)", "(" + r(12) + ")(DX*2)", "(" + r(12) + ")(" + r(10) + "*1)"}
	for q, mem := range rows {
		f.conv(mem, y(q))
	}
	// Prefetch the next group's rows at this step: the group after is
	// read as soon as this one is swept, and the hardware prefetcher
	// alone left these short strided runs waiting on memory.
	emit("\tLEAQ (" + r(12) + ")(DX*4), R8")
	for _, m := range []string{"(R8)", "(R8)(DX*1)", "(R8)(DX*2)", "(R8)(" + r(10) + "*1)"} {
		emit("\tPREFETCHT0 " + m)
	}
	emit("\tLEAQ (R8)(DX*4), R8")
	for _, m := range []string{"(R8)", "(R8)(DX*1)", "(R8)(DX*2)", "(R8)(" + r(10) + "*1)"} {
		emit("\tPREFETCHT0 " + m)
	}
	for q := 0; q < 8; q += 2 {
		emit("\tVUNPCKLPS %s, %s, %s", y(q+1), y(q), y(8+q))
		emit("\tVUNPCKHPS %s, %s, %s", y(q+1), y(q), y(9+q))
	}
	// Y8..Y15 = t0..t7; s0..s7 into Y0..Y7.
	for h := 0; h < 2; h++ {
		t := 8 + 4*h
		s := 4 * h
		emit("\tVSHUFPS $0x44, %s, %s, %s", y(t+2), y(t), y(s))
		emit("\tVSHUFPS $0xEE, %s, %s, %s", y(t+2), y(t), y(s+1))
		emit("\tVSHUFPS $0x44, %s, %s, %s", y(t+3), y(t+1), y(s+2))
		emit("\tVSHUFPS $0xEE, %s, %s, %s", y(t+3), y(t+1), y(s+3))
	}
	for p := 0; p < 4; p++ {
		emit("\tVPERM2F128 $0x20, %s, %s, %s", y(4+p), y(p), y(8+p))
		emit("\tVPERM2F128 $0x31, %s, %s, %s", y(4+p), y(p), y(12+p))
	}
	emit("\tLEAQ (BX)(" + r(13) + "*4), R8") // steps 4–7
	outs := []string{"(BX)", "(BX)(" + r(13) + "*1)", "(BX)(" + r(13) + "*2)", "(BX)(AX*1)", "(R8)", "(R8)(" + r(13) + "*1)", "(R8)(" + r(13) + "*2)", "(R8)(AX*1)"}
	for p, mem := range outs {
		emit("\tVMOVUPS %s, %s", y(8+p), mem)
	}
	emit("\tADDQ $16, " + r(11))
	emit("\tLEAQ (BX)(" + r(13) + "*8), BX")
	emit("\tDECQ CX")
	emit("\tJNE %s_kblock", name)
	emit("\tLEAQ (SI)(DX*8), SI")
	emit("\tADDQ $32, DI")
	emit("\tDECQ R9")
	emit("\tJNE %s_rblock", name)
	emit("%s_done:", name)
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("")
}

// gemvPrologue starts the matrix-vector kernel name(rows, steps int,
// x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int): rows in
// r(9), steps in r(13), x in r(12) with its row stride in bytes in r(8), w
// in BX with its row stride in bytes in DX, dst in DI with its row stride
// in bytes in SI; then the instructions of setup, and a jump to name_done
// when there are no rows.
func gemvPrologue(name, rows, steps string, setup []string) {
	emit("// func %s(%s, %s int, x *float32, ldx int, w *uint16, ldw int, dst *float32, ldo int)", name, rows, steps)
	emit("TEXT ·%s(SB), NOSPLIT, $0-64", name)
	emit("\tMOVQ %s+0(FP), R9", rows)
	emit("\tMOVQ %s+8(FP), %s", steps, r(13))
	emit("\tMOVQ x+16(FP), " + r(12))
	emit("\tMOVQ ldx+24(FP), R8")
	emit("\tSHLQ $2, R8")
	emit("\tMOVQ w+32(FP), BX")
	emit("\tMOVQ ldw+40(FP), DX")
	emit("\tSHLQ $1, DX")
	emit("\tMOVQ dst+48(FP), DI")
	emit("\tMOVQ ldo+56(FP), SI")
	emit("\tSHLQ $2, SI")
	for _, ins := range setup {
		emit("\t" + ins)
	}
	emit("\tTESTQ R9, R9")
	emit("\tJEQ %s_done", name)
}

// genGemv writes hgemv<F>AVX2M<M>(nb, k16 int, x *float32, ldx int,
// w *uint16, ldw int, dst *float32, ldo int): dst[i*ldo+4*b+r] =
// Σ_p x[i*ldx+p]·w[(4*b+r)*ldw+p] for i < M, blocks b < nb of four rows of
// w, r < 4, over 16·k16 values. Each block reads its four rows as four
// streams while prefetching the next block.
//
// Each step of 16 values yields two vectors of eight widened weights per
// row, part 0 and part 1, which meet the x vectors at offsets 0 and 32 bytes
// of the step's 64 bytes of x. For binary16 the parts are values 0–7 and
// 8–15 (two VCVTPH2PS), x as stored. For bfloat16 one 32-byte load holds
// the 16 values as pairs in 32-bit lanes: shifting each lane left by 16
// widens the even values and masking off the low half widens the odd ones,
// three instructions for 16 weights. The caller therefore passes x with
// each block of 16 reordered as its 8 even then its 8 odd values.
//
// Both parts accumulate into one register per row of x and row of w, so a
// row's sums run in the same order for every M and batching rows of x
// never changes a result (with one row of x, separate accumulators for
// part 1 would hide more FMA latency, but the kernel waits on memory).
// With one or two rows of x, x stays in registers; with three, the FMAs
// read x from memory (L1) to free registers for the 12 accumulators.
func genGemv(f format, M int) {
	name := fmt.Sprintf("hgemv%sAVX2M%d", f.name, M)
	const R = 4
	acc := func(i, r int) string { return y(i*R + r) }
	next := R * M
	xInReg := M <= 2
	xBase := next
	xr := func(i, part int) string { return y(xBase + 2*i + part) }
	if xInReg {
		next += 2 * M
	}
	t0, t1 := y(next), y(next+1)
	mask := y(next + 2)
	bf16 := f.name == "BF16"
	setup := []string{"LEAQ (DX)(DX*2), " + r(10)}
	if bf16 {
		setup = append(setup, fmt.Sprintf("VPCMPEQD %s, %s, %s", mask, mask, mask), fmt.Sprintf("VPSLLD $16, %s, %s", mask, mask))
	}
	gemvPrologue(name, "nb", "k16", setup)
	emit("%s_block:", name)
	emit("\tMOVQ " + r(12) + ", AX")
	emit("\tMOVQ " + r(13) + ", CX")
	// r(11) sweeps the next block of rows, prefetching it; in the last block
	// it sweeps the current one instead, since prefetching past the end of
	// w can cost a page walk per line.
	emit("\tLEAQ (BX)(DX*4), " + r(11))
	emit("\tCMPQ R9, $1")
	emit("\tCMOVQEQ BX, " + r(11))
	for i := 0; i < R*M; i++ {
		emit("\tVXORPS %s, %s, %s", y(i), y(i), y(i))
	}
	xRows := []string{"(AX)", "(AX)(R8*1)", "(AX)(R8*2)"}
	wRows := []string{"(BX)", "(BX)(DX*1)", "(BX)(DX*2)", "(BX)(" + r(10) + "*1)"}
	emit("\tTESTQ CX, CX")
	emit("\tJEQ %s_reduce", name)
	emit("%s_loop:", name)
	if xInReg {
		for i := 0; i < M; i++ {
			emit("\tVMOVUPS %s, %s", xRows[i], xr(i, 0))
			emit("\tVMOVUPS 32%s, %s", xRows[i], xr(i, 1))
		}
	}
	for r := 0; r < R; r++ {
		// t0: part 0, t1: part 1.
		if bf16 {
			emit("\tVMOVDQU %s, %s", wRows[r], t1)
			emit("\tVPSLLD $16, %s, %s", t1, t0)
			emit("\tVPAND %s, %s, %s", mask, t1, t1)
		} else {
			emit("\tVCVTPH2PS %s, %s", wRows[r], t0)
			emit("\tVCVTPH2PS 16%s, %s", wRows[r], t1)
		}
		for i := 0; i < M; i++ {
			for part, t := range []string{t0, t1} {
				if xInReg {
					emit("\tVFMADD231PS %s, %s, %s", xr(i, part), t, acc(i, r))
				} else {
					emit("\tVFMADD231PS %d%s, %s, %s", 32*part, xRows[i], t, acc(i, r))
				}
			}
		}
	}
	emit("\tPREFETCHT0 (" + r(11) + ")")
	emit("\tPREFETCHT0 64(" + r(11) + ")")
	emit("\tADDQ $128, " + r(11))
	emit("\tADDQ $64, AX")
	emit("\tADDQ $32, BX")
	emit("\tDECQ CX")
	emit("\tJNE %s_loop", name)
	emit("%s_reduce:", name)
	// The two temporaries are free once the loop is done.
	h0, h1 := t0, t1
	l0, l1 := "X"+t0[1:], "X"+t1[1:]
	dRows := []string{"(DI)", "(DI)(SI*1)", "(DI)(SI*2)"}
	for i := 0; i < M; i++ {
		emit("\tVHADDPS %s, %s, %s", acc(i, 1), acc(i, 0), h0)
		emit("\tVHADDPS %s, %s, %s", acc(i, 3), acc(i, 2), h1)
		emit("\tVHADDPS %s, %s, %s", h1, h0, h0)
		emit("\tVEXTRACTF128 $1, %s, %s", h0, l1)
		emit("\tVADDPS %s, %s, %s", l1, l0, l0)
		emit("\tVMOVUPS %s, %s", l0, dRows[i])
	}
	// Next block: four rows on from where this one started.
	emit("\tMOVQ " + r(13) + ", CX")
	emit("\tSHLQ $5, CX")
	emit("\tSUBQ CX, BX")
	emit("\tLEAQ (BX)(DX*4), BX")
	emit("\tADDQ $16, DI")
	emit("\tDECQ R9")
	emit("\tJNE %s_block", name)
	emit("%s_done:", name)
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("")
}

// genGemv512 writes hgemv<F>AVX512M<M>(n, k32 int, x *float32, ldx int,
// w *uint16, ldw int, dst *float32, ldo int): dst[i*ldo+j] =
// Σ_p x[i*ldx+p]·w[j*ldw+p] for i < M, j < n, over 32·k32 values.
//
// Unlike genGemv's kernels it reads one row of w at a time, front to back,
// so the weights stream through memory as one sequential read that the
// hardware prefetcher follows; four rows read side by side as four streams
// reached about 60 % of the read bandwidth on an AMD EPYC with AVX-512, one
// row about 90 %. A step of 64 values is two 64-byte loads widened into four
// vectors of 16 float32 (parts 0–3, meeting x at byte offsets 0, 64, 128
// and 192 of the step's 256 bytes), each with its own accumulator per row
// of x; an odd 32-value block at the end takes parts 0 and 1. For
// bfloat16 a 64-byte load holds 32 values as pairs in 32-bit lanes, widened
// by a shift (the even values) and a mask (the odd ones), so the caller
// passes x with each block of 32 reordered as its 16 even then its 16 odd
// values; binary16 widens 16 values per VCVTPH2PS with x as stored. The
// sums are reduced in the same order for every M, so a row's result does
// not depend on how many rows of x share the call.
func genGemv512(f format, M int) {
	name := fmt.Sprintf("hgemv%sAVX512M%d", f.name, M)
	acc := func(i, q int) int { return 4*i + q }
	const t0, mask = 16, 31
	bf16 := f.name == "BF16"
	// r(11): from the end of a row's 64·k32 bytes to the next row.
	setup := []string{"LEAQ (R8)(R8*2), " + r(10), "MOVQ " + r(13) + ", " + r(11), "SHLQ $6, " + r(11), "NEGQ " + r(11), "ADDQ DX, " + r(11)}
	if bf16 {
		setup = append(setup, fmt.Sprintf("VPTERNLOGD $0xff, Z%d, Z%d, Z%d", mask, mask, mask), fmt.Sprintf("VPSLLD $16, Z%d, Z%d", mask, mask))
	}
	gemvPrologue(name, "n", "k32", setup)
	xRows := []string{"(AX)", "(AX)(R8*1)", "(AX)(R8*2)", "(AX)(" + r(10) + "*1)"}
	// widen loads the 32 values at byte offset off of the row into parts
	// q0 and q0+1.
	widen := func(off, q0 int) {
		if bf16 {
			emit("\tVMOVDQU32 %d(BX), Z%d", off, t0+q0+1)
			emit("\tVPSLLD $16, Z%d, Z%d", t0+q0+1, t0+q0)
			emit("\tVPANDD Z%d, Z%d, Z%d", mask, t0+q0+1, t0+q0+1)
			return
		}
		emit("\tVCVTPH2PS %d(BX), Z%d", off, t0+q0)
		emit("\tVCVTPH2PS %d(BX), Z%d", off+32, t0+q0+1)
	}
	fma := func(parts int) {
		for i := 0; i < M; i++ {
			for q := 0; q < parts; q++ {
				emit("\tVFMADD231PS %d%s, Z%d, Z%d", 64*q, xRows[i], t0+q, acc(i, q))
			}
		}
	}
	emit("%s_row:", name)
	emit("\tMOVQ " + r(12) + ", AX")
	emit("\tMOVQ " + r(13) + ", CX")
	for i := 0; i < 4*M; i++ {
		emit("\tVPXORD Z%d, Z%d, Z%d", i, i, i)
	}
	emit("\tSHRQ $1, CX")
	emit("\tJEQ %s_tail", name)
	emit("%s_loop:", name)
	widen(0, 0)
	widen(64, 2)
	fma(4)
	emit("\tADDQ $128, BX")
	emit("\tADDQ $256, AX")
	emit("\tDECQ CX")
	emit("\tJNE %s_loop", name)
	emit("%s_tail:", name)
	emit("\tTESTQ $1, " + r(13))
	emit("\tJEQ %s_reduce", name)
	widen(0, 0)
	fma(2)
	emit("\tADDQ $64, BX")
	emit("%s_reduce:", name)
	emit("\tLEAQ (DI)(SI*2), CX")
	dRows := []string{"(DI)", "(DI)(SI*1)", "(DI)(SI*2)", "(CX)(SI*1)"}
	for i := 0; i < M; i++ {
		a0, a1, a2, a3 := acc(i, 0), acc(i, 1), acc(i, 2), acc(i, 3)
		emit("\tVADDPS Z%d, Z%d, Z%d", a1, a0, a0)
		emit("\tVADDPS Z%d, Z%d, Z%d", a3, a2, a2)
		emit("\tVADDPS Z%d, Z%d, Z%d", a2, a0, a0)
		emit("\tVEXTRACTF64X4 $1, Z%d, Y%d", a0, t0)
		emit("\tVADDPS Y%d, Y%d, Y%d", t0, a0, a0)
		emit("\tVEXTRACTF32X4 $1, Y%d, X%d", a0, t0)
		emit("\tVADDPS X%d, X%d, X%d", t0, a0, a0)
		emit("\tVHADDPS X%d, X%d, X%d", a0, a0, a0)
		emit("\tVHADDPS X%d, X%d, X%d", a0, a0, a0)
		emit("\tVMOVSS X%d, %s", a0, dRows[i])
	}
	emit("\tADDQ $4, DI")
	emit("\tADDQ " + r(11) + ", BX")
	emit("\tDECQ R9")
	emit("\tJNE %s_row", name)
	emit("%s_done:", name)
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("")
}

// genPairsRuns writes packPairsRunsAVX2(panel, src *uint16, ld, kb int):
// for each of kb steps, the 16 values at src+p*ld (a k×n B) go to the 32
// bytes of step p as pairs, column j and column 8+j in 32-bit lane j (the
// layout sgemmKernelAVX2BF16 widens in registers): one interleave of the
// low and the high eight.
func genPairsRuns() {
	const name = "packPairsRunsAVX2"
	emit("// func %s(panel, src *uint16, ld, kb int)", name)
	emit("TEXT ·%s(SB), NOSPLIT, $0-32", name)
	emit("\tMOVQ panel+0(FP), DI")
	emit("\tMOVQ src+8(FP), SI")
	emit("\tMOVQ ld+16(FP), DX")
	emit("\tSHLQ $1, DX")
	emit("\tMOVQ kb+24(FP), CX")
	emit("\tTESTQ CX, CX")
	emit("\tJEQ %s_done", name)
	emit("%s_step:", name)
	emit("\tVMOVDQU (SI), X0")
	emit("\tVMOVDQU 16(SI), X1")
	emit("\tVPUNPCKLWD X1, X0, X2")
	emit("\tVPUNPCKHWD X1, X0, X3")
	emit("\tVMOVDQU X2, (DI)")
	emit("\tVMOVDQU X3, 16(DI)")
	emit("\tADDQ DX, SI")
	emit("\tADDQ $32, DI")
	emit("\tDECQ CX")
	emit("\tJNE %s_step", name)
	emit("%s_done:", name)
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("")
}

// genPairsT writes packPairsTAVX2(panel, src *uint16, ld, k8 int): the same
// layout from 16 rows of an n×k B (row r at src+r*ld), 8 steps at a time.
// Rows r and r+8 are interleaved first (VPUNPCK[LH]WD), which makes each
// 32-bit lane the pair a step needs; 4×4 transposes of those lanes
// (VPUNPCK[LH]DQ, VPUNPCK[LH]QDQ) then give each step's 16 bytes for rows
// 0–3 (and, in the second half, 4–7). All moves are 16-bit exact copies.
func genPairsT() {
	const name = "packPairsTAVX2"
	emit("// func %s(panel, src *uint16, ld, k8 int)", name)
	emit("TEXT ·%s(SB), NOSPLIT, $0-32", name)
	emit("\tMOVQ panel+0(FP), DI")
	emit("\tMOVQ src+8(FP), SI")
	emit("\tMOVQ ld+16(FP), DX")
	emit("\tSHLQ $1, DX")                          // DX: row stride in bytes
	emit("\tLEAQ (DX)(DX*2), " + r(10))            // 3 rows
	emit("\tLEAQ (SI)(DX*4), " + r(11))            // row 4
	emit("\tLEAQ (" + r(11) + ")(DX*4), " + r(12)) // row 8
	emit("\tLEAQ (" + r(12) + ")(DX*4), " + r(13)) // row 12
	emit("\tMOVQ k8+24(FP), CX")
	emit("\tTESTQ CX, CX")
	emit("\tJEQ %s_done", name)
	emit("%s_kblock:", name)
	quad := func(base string) []string {
		return []string{"(" + base + ")", "(" + base + ")(DX*1)", "(" + base + ")(DX*2)", "(" + base + ")(" + r(10) + "*1)"}
	}
	x := func(i int) string { return fmt.Sprintf("X%d", i) }
	for h, bases := range [][2]string{{"SI", r(12)}, {r(11), r(13)}} {
		lo, hi := quad(bases[0]), quad(bases[1])
		for i := 0; i < 4; i++ {
			emit("\tVMOVDQU %s, %s", lo[i], x(i))
			emit("\tVMOVDQU %s, %s", hi[i], x(4+i))
		}
		for i := 0; i < 4; i++ {
			emit("\tVPUNPCKLWD %s, %s, %s", x(4+i), x(i), x(8+i))
			emit("\tVPUNPCKHWD %s, %s, %s", x(4+i), x(i), x(12+i))
		}
		// Steps 0–3 from X8–X11, steps 4–7 from X12–X15.
		for q := 0; q < 2; q++ {
			b := 8 + 4*q
			emit("\tVPUNPCKLDQ %s, %s, X0", x(b+1), x(b))
			emit("\tVPUNPCKHDQ %s, %s, X1", x(b+1), x(b))
			emit("\tVPUNPCKLDQ %s, %s, X2", x(b+3), x(b+2))
			emit("\tVPUNPCKHDQ %s, %s, X3", x(b+3), x(b+2))
			emit("\tVPUNPCKLQDQ X2, X0, X4")
			emit("\tVPUNPCKHQDQ X2, X0, X5")
			emit("\tVPUNPCKLQDQ X3, X1, X6")
			emit("\tVPUNPCKHQDQ X3, X1, X7")
			for p := 0; p < 4; p++ {
				emit("\tVMOVDQU %s, %d(DI)", x(4+p), (4*q+p)*32+16*h)
			}
		}
	}
	for _, reg := range []string{"SI", r(11), r(12), r(13)} {
		emit("\tADDQ $16, %s", reg)
	}
	emit("\tADDQ $256, DI")
	emit("\tDECQ CX")
	emit("\tJNE %s_kblock", name)
	emit("%s_done:", name)
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("")
}

// genPairOrder writes pairOrderAVX2(dst, src *float32, blocks, bs int):
// pairOrder over blocks blocks of bs values (a multiple of 16). Each 16
// values are split by two lane-wise shuffles (VSHUFPS 0x88 takes the
// even-indexed values of each 128-bit lane pair, 0xDD the odd) and put in
// order across the lanes by VPERMPD 0xD8; the even ones go to the block's
// first half, the odd ones to its second.
func genPairOrder() {
	const name = "pairOrderAVX2"
	emit("// func %s(dst, src *float32, blocks, bs int)", name)
	emit("TEXT ·%s(SB), NOSPLIT, $0-32", name)
	emit("\tMOVQ dst+0(FP), DI")
	emit("\tMOVQ src+8(FP), SI")
	emit("\tMOVQ blocks+16(FP), CX")
	emit("\tMOVQ bs+24(FP), DX")
	emit("\tMOVQ DX, " + r(8))
	emit("\tSHRQ $4, " + r(8)) // 16-value parts a block
	emit("\tMOVQ DX, " + r(9))
	emit("\tSHLQ $1, " + r(9)) // bytes of half a block
	emit("\tTESTQ CX, CX")
	emit("\tJEQ %s_done", name)
	emit("%s_block:", name)
	emit("\tMOVQ %s, %s", r(8), r(10))
	emit("\tMOVQ DI, %s", r(11))
	emit("%s_part:", name)
	emit("\tVMOVUPS (SI), Y0")
	emit("\tVMOVUPS 32(SI), Y1")
	emit("\tVSHUFPS $0x88, Y1, Y0, Y2")
	emit("\tVSHUFPS $0xDD, Y1, Y0, Y3")
	emit("\tVPERMPD $0xD8, Y2, Y2")
	emit("\tVPERMPD $0xD8, Y3, Y3")
	emit("\tVMOVUPS Y2, (%s)", r(11))
	emit("\tVMOVUPS Y3, (%s)(%s*1)", r(11), r(9))
	emit("\tADDQ $64, SI")
	emit("\tADDQ $32, %s", r(11))
	emit("\tDECQ %s", r(10))
	emit("\tJNE %s_part", name)
	emit("\tLEAQ (DI)(DX*4), DI")
	emit("\tDECQ CX")
	emit("\tJNE %s_block", name)
	emit("%s_done:", name)
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("")
}

func main() {
	emit("// Code generated by half_gemm_asm_gen.go; DO NOT EDIT.")
	emit("")
	emit("//go:build amd64 && !purego")
	emit("")
	emit("#include \"textflag.h\"")
	emit("")
	for _, f := range formats {
		genWiden(f)
		genPackRuns(f)
		genPackT(f)
		for M := 1; M <= 3; M++ {
			genGemv(f, M)
		}
		for M := 1; M <= 4; M++ {
			genGemv512(f, M)
		}
	}
	genPairsRuns()
	genPairsT()
	genPairOrder()
	os.Stdout.WriteString(w.String())
}
