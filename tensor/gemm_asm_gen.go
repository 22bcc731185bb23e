//go:build ignore

// gemm_asm_gen.go writes gemm_amd64.s, the register-blocked micro-kernels of
// Gemm. Run it with
//
//	go run gemm_asm_gen.go > gemm_amd64.s
//
// Each kernel computes C[0:mr, 0:nr] = alpha·Ap·Bp + beta·C for a packed
// A micro-panel Ap (kc steps of mr values) and a packed B micro-panel Bp (kc
// steps of nr values), where C is row-major with leading dimension ldc
// (elements). beta == 0 (either sign) stores without reading C, so garbage
// (NaN) in C does not propagate, as BLAS requires.
package main

import (
	"fmt"
	"os"
	"strings"
)

type kernel struct {
	name   string // Go symbol
	mr     int    // rows of the C tile
	vecs   int    // vector registers per C row
	width  int    // float32 lanes per vector register
	reg    string // "Z" or "Y"
	zero   string // instruction that zeroes a register (three-operand form)
	unroll int    // k-loop unroll factor
	pfA    int    // prefetch distance for A in bytes (0: none)
	pfB    int    // prefetch distance for B in bytes (0: none)
	bcst   bool   // FMAs take A from memory with embedded broadcast
	aRows  int    // rows per step of the packed A panel (default mr)
	// bf16: the packed B panel holds bfloat16 bit patterns, 16 columns a
	// step as 8 32-bit lanes, lane j holding column j in its low half and
	// column 8+j in its high half; one load, a shift (columns 0–7) and a
	// mask (columns 8–15) widen a step exactly. Needs vecs 2, width 8.
	bf16 bool
	// split: even and odd steps accumulate into two sets of registers,
	// summed at the end, so that a kernel with few accumulators (the
	// 2-row edge) waits on half as long FMA dependency chains.
	split bool
}

func (k kernel) nr() int { return k.vecs * k.width }

var w strings.Builder

func emit(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }

func gen(k kernel) {
	mr, nv := k.mr, k.vecs
	nAcc := mr * nv
	sets := 1
	if k.split {
		sets = 2
	}
	base := sets * nAcc // first register after the accumulators
	bReg := func(v int) string { return fmt.Sprintf("%s%d", k.reg, base+v) }
	aReg := func(r int) string { return fmt.Sprintf("%s%d", k.reg, base+nv+r%2) }
	mask := ""
	if k.bf16 {
		// A takes one register, the mask the last.
		aReg = func(int) string { return fmt.Sprintf("%s%d", k.reg, base+nv) }
		mask = fmt.Sprintf("%s%d", k.reg, base+nv+1)
	}
	set := 0 // the accumulator set the step being emitted adds into
	acc := func(r, v int) string { return fmt.Sprintf("%s%d", k.reg, set*nAcc+r*nv+v) }
	vbytes := k.width * 4
	aRows := k.aRows
	if aRows == 0 {
		aRows = mr
	}
	aStep, bStep := aRows*4, k.nr()*4
	if k.bf16 {
		bStep = k.nr() * 2
	}

	emit("// func %s(kc int, a, b, c *float32, ldc int, alpha, beta float32)", k.name)
	emit("TEXT ·%s(SB), NOSPLIT, $0-48", k.name)
	emit("\tMOVQ kc+0(FP), CX")
	emit("\tMOVQ a+8(FP), AX")
	emit("\tMOVQ b+16(FP), BX")
	emit("\tMOVQ c+24(FP), DI")
	emit("\tMOVQ ldc+32(FP), R8")
	emit("\tSHLQ $2, R8")
	for i := 0; i < base; i++ {
		r := fmt.Sprintf("%s%d", k.reg, i)
		emit("\t%s %s, %s, %s", k.zero, r, r, r)
	}
	if k.bf16 {
		emit("\tVPCMPEQD %s, %s, %s", mask, mask, mask)
		emit("\tVPSLLD $16, %s, %s", mask, mask)
	}
	// Prefetch the C tile: it is read (beta != 0) and written at the end.
	emit("\tMOVQ DI, R9")
	for r := 0; r < mr; r++ {
		for off := 0; off < k.nr()*4; off += 64 {
			emit("\tPREFETCHT0 %d(R9)", off)
		}
		if r < mr-1 {
			emit("\tADDQ R8, R9")
		}
	}
	body := func(p int) {
		if k.bf16 {
			emit("\tVMOVDQU %d(BX), %s", p*bStep, bReg(1))
			emit("\tVPSLLD $16, %s, %s", bReg(1), bReg(0))
			emit("\tVPAND %s, %s, %s", mask, bReg(1), bReg(1))
		}
		for v := 0; v < nv && !k.bf16; v++ {
			emit("\tVMOVUPS %d(BX), %s", p*bStep+v*vbytes, bReg(v))
		}
		if k.pfA > 0 {
			emit("\tPREFETCHT0 %d(AX)", p*aStep+k.pfA)
		}
		if k.pfB > 0 {
			for off := 0; off < bStep; off += 64 {
				emit("\tPREFETCHT0 %d(BX)", p*bStep+k.pfB+off)
			}
		}
		for r := 0; r < mr; r++ {
			if k.bcst {
				for v := 0; v < nv; v++ {
					emit("\tVFMADD231PS.BCST %d(AX), %s, %s", p*aStep+r*4, bReg(v), acc(r, v))
				}
				continue
			}
			emit("\tVBROADCASTSS %d(AX), %s", p*aStep+r*4, aReg(r))
			for v := 0; v < nv; v++ {
				emit("\tVFMADD231PS %s, %s, %s", bReg(v), aReg(r), acc(r, v))
			}
		}
	}
	u := k.unroll
	emit("\tMOVQ CX, DX")
	emit("\tSHRQ $%d, DX", log2(u))
	emit("\tJEQ %s_tail", k.name)
	emit("%s_loop:", k.name)
	for p := 0; p < u; p++ {
		set = p % sets
		body(p)
	}
	set = 0
	emit("\tADDQ $%d, AX", u*aStep)
	emit("\tADDQ $%d, BX", u*bStep)
	emit("\tDECQ DX")
	emit("\tJNE %s_loop", k.name)
	emit("%s_tail:", k.name)
	emit("\tANDQ $%d, CX", u-1)
	emit("\tJEQ %s_epilogue", k.name)
	emit("%s_loop1:", k.name)
	body(0)
	emit("\tADDQ $%d, AX", aStep)
	emit("\tADDQ $%d, BX", bStep)
	emit("\tDECQ CX")
	emit("\tJNE %s_loop1", k.name)
	emit("%s_epilogue:", k.name)
	for i := 0; i < nAcc && sets == 2; i++ {
		emit("\tVADDPS %s%d, %s%d, %s%d", k.reg, nAcc+i, k.reg, i, k.reg, i)
	}
	alpha := bReg(0)
	betaR := bReg(1)
	// alpha == 1 (bits 0x3f800000) skips the scaling.
	emit("\tMOVL alpha+40(FP), DX")
	emit("\tCMPL DX, $0x3f800000")
	emit("\tJEQ %s_beta", k.name)
	emit("\tVBROADCASTSS alpha+40(FP), %s", alpha)
	for i := 0; i < nAcc; i++ {
		r := fmt.Sprintf("%s%d", k.reg, i)
		emit("\tVMULPS %s, %s, %s", alpha, r, r)
	}
	emit("%s_beta:", k.name)
	emit("\tMOVL beta+44(FP), DX")
	emit("\tANDL $0x7fffffff, DX")
	emit("\tJEQ %s_store", k.name)
	emit("\tVBROADCASTSS beta+44(FP), %s", betaR)
	for r := 0; r < mr; r++ {
		for v := 0; v < nv; v++ {
			emit("\tVFMADD231PS %d(DI), %s, %s", v*vbytes, betaR, acc(r, v))
			emit("\tVMOVUPS %s, %d(DI)", acc(r, v), v*vbytes)
		}
		if r < mr-1 {
			emit("\tADDQ R8, DI")
		}
	}
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("%s_store:", k.name)
	for r := 0; r < mr; r++ {
		for v := 0; v < nv; v++ {
			emit("\tVMOVUPS %s, %d(DI)", acc(r, v), v*vbytes)
		}
		if r < mr-1 {
			emit("\tADDQ R8, DI")
		}
	}
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("")
}

// genPackA6 writes packA6AVX2(panel, src *float32, lda, k8 int): a 6-row
// A micro-panel from a row-major A (row r at src+r*lda), panel[p*6+r] =
// src[r*lda+p] for p < 8·k8, eight steps at a time. Rows 0–3 are transposed
// within 128-bit lanes (VUNPCK[LH]PS, VSHUFPS), so lane 0 of each result
// holds a step of the first four steps and lane 1 one of the last four;
// rows 4 and 5 are interleaved into pairs (VUNPCK[LH]PS). Each step is then
// a 16-byte store and an 8-byte one, and no instruction crosses lanes
// except VEXTRACTF128.
func genPackA6() {
	const name = "packA6AVX2"
	emit("// func %s(panel, src *float32, lda, k8 int)", name)
	emit("TEXT ·%s(SB), NOSPLIT, $0-32", name)
	emit("\tMOVQ panel+0(FP), DI")
	emit("\tMOVQ src+8(FP), SI")
	emit("\tMOVQ lda+16(FP), DX")
	emit("\tSHLQ $2, DX")
	emit("\tLEAQ (DX)(DX*2), R8") // 3 rows
	emit("\tLEAQ (SI)(DX*4), R9") // row 4
	emit("\tMOVQ k8+24(FP), CX")
	emit("\tTESTQ CX, CX")
	emit("\tJEQ %s_done", name)
	emit("%s_loop:", name)
	for i, mem := range []string{"(SI)", "(SI)(DX*1)", "(SI)(DX*2)", "(SI)(R8*1)", "(R9)", "(R9)(DX*1)"} {
		emit("\tVMOVUPS %s, Y%d", mem, i)
	}
	// Rows 0–3: a 4×4 transpose in each lane, into Y8–Y11 (step q in lane
	// 0, step 4+q in lane 1 of Y(8+q)).
	emit("\tVUNPCKLPS Y1, Y0, Y6")  // r0p0 r1p0 r0p1 r1p1
	emit("\tVUNPCKHPS Y1, Y0, Y7")  // r0p2 r1p2 r0p3 r1p3
	emit("\tVUNPCKLPS Y3, Y2, Y12") // r2p0 r3p0 r2p1 r3p1
	emit("\tVUNPCKHPS Y3, Y2, Y13") // r2p2 r3p2 r2p3 r3p3
	emit("\tVSHUFPS $0x44, Y12, Y6, Y8")
	emit("\tVSHUFPS $0xEE, Y12, Y6, Y9")
	emit("\tVSHUFPS $0x44, Y13, Y7, Y10")
	emit("\tVSHUFPS $0xEE, Y13, Y7, Y11")
	// Rows 4–5: pairs, steps 0,1 (lane 0) and 4,5 (lane 1) in Y14; steps
	// 2,3 and 6,7 in Y15.
	emit("\tVUNPCKLPS Y5, Y4, Y14")
	emit("\tVUNPCKHPS Y5, Y4, Y15")
	for q := 0; q < 4; q++ {
		emit("\tVMOVUPS X%d, %d(DI)", 8+q, q*24)
	}
	emit("\tVMOVLPS X14, 16(DI)")
	emit("\tVMOVHPS X14, 40(DI)")
	emit("\tVMOVLPS X15, 64(DI)")
	emit("\tVMOVHPS X15, 88(DI)")
	for q := 0; q < 4; q++ {
		emit("\tVEXTRACTF128 $1, Y%d, %d(DI)", 8+q, (4+q)*24)
	}
	emit("\tVEXTRACTF128 $1, Y14, X14")
	emit("\tVEXTRACTF128 $1, Y15, X15")
	emit("\tVMOVLPS X14, 112(DI)")
	emit("\tVMOVHPS X14, 136(DI)")
	emit("\tVMOVLPS X15, 160(DI)")
	emit("\tVMOVHPS X15, 184(DI)")
	emit("\tADDQ $32, SI")
	emit("\tADDQ $32, R9")
	emit("\tADDQ $192, DI")
	emit("\tDECQ CX")
	emit("\tJNE %s_loop", name)
	emit("%s_done:", name)
	emit("\tVZEROUPPER")
	emit("\tRET")
	emit("")
}

func log2(n int) int {
	l := 0
	for 1<<l < n {
		l++
	}
	if 1<<l != n {
		panic("unroll must be a power of two")
	}
	return l
}

func main() {
	emit("// Code generated by gemm_asm_gen.go; DO NOT EDIT.")
	emit("")
	emit("//go:build amd64 && !purego")
	emit("")
	emit("#include \"textflag.h\"")
	emit("")
	// The AVX-512 kernel runs with the A micro-panel resident in L1 and B
	// streaming from L2 (gemmKernel.aOuter), so it prefetches B ahead.
	gen(kernel{name: "sgemmKernelAVX512", mr: 14, vecs: 2, width: 16, reg: "Z", zero: "VPXORD", unroll: 4, pfB: 1024})
	// Edge kernel: the first 8 rows of a 14-row packed panel, for the last
	// rows of a block (e.g. 512 = 36·14 + 8).
	gen(kernel{name: "sgemmKernelAVX512x8", mr: 8, aRows: 14, vecs: 2, width: 16, reg: "Z", zero: "VPXORD", unroll: 4, pfB: 1024})
	// And the first 4 rows (32 = 2·14 + 4: a 32-token prefill's last rows).
	gen(kernel{name: "sgemmKernelAVX512x4", mr: 4, aRows: 14, vecs: 2, width: 16, reg: "Z", zero: "VPXORD", unroll: 4, pfB: 1024})
	gen(kernel{name: "sgemmKernelAVX2", mr: 6, vecs: 2, width: 8, reg: "Y", zero: "VXORPS", unroll: 4, pfA: 256})
	// Edge kernels: the first 2 or 4 rows of a 6-row packed panel.
	gen(kernel{name: "sgemmKernelAVX2x2", mr: 2, aRows: 6, vecs: 2, width: 8, reg: "Y", zero: "VXORPS", unroll: 4, pfA: 256, split: true})
	gen(kernel{name: "sgemmKernelAVX2x4", mr: 4, aRows: 6, vecs: 2, width: 8, reg: "Y", zero: "VXORPS", unroll: 4, pfA: 256})
	// The same kernels on B panels of bfloat16 pairs (GemmHalf).
	gen(kernel{name: "sgemmKernelAVX2BF16", mr: 6, vecs: 2, width: 8, reg: "Y", zero: "VXORPS", unroll: 4, pfA: 256, bf16: true})
	gen(kernel{name: "sgemmKernelAVX2BF16x2", mr: 2, aRows: 6, vecs: 2, width: 8, reg: "Y", zero: "VXORPS", unroll: 4, pfA: 256, bf16: true, split: true})
	gen(kernel{name: "sgemmKernelAVX2BF16x4", mr: 4, aRows: 6, vecs: 2, width: 8, reg: "Y", zero: "VXORPS", unroll: 4, pfA: 256, bf16: true})
	genPackA6()
	os.Stdout.WriteString(w.String())
}
