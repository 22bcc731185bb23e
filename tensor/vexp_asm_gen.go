//go:build ignore

// vexp_asm_gen.go writes vexp_amd64.s, the vector loops declared in
// vexp_amd64.go: exp (softmax), GELU and its derivative, sigmoid and tanh,
// sums, maxima, layer norm, AdamW and the element-wise ops. Run it with
//
//	go run vexp_asm_gen.go > vexp_amd64.s
//
// The exp-based loops of softmax, GELU and sigmoid come in two widths from
// one template each: AVX2/FMA, 8 lanes in Y registers, reading the constant
// tables as 32-byte vectors, and AVX-512, 16 lanes in Z registers,
// broadcasting each constant from its first element. Every loop handles the
// largest multiple of its lane count; the Go wrappers finish the tail.
package main

import (
	"fmt"
	"math"
	"math/bits"
	"os"
	"strings"
)

var w = new(strings.Builder)

func emit(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }

// macro emits "#define head" with the lines that body emits as its
// replacement text.
func macro(head string, body func()) {
	outer := w
	w = new(strings.Builder)
	body()
	text := strings.TrimSuffix(w.String(), "\n")
	w = outer
	emit("#define %s \\\n%s", head, strings.ReplaceAll(text, "\n", " \\\n"))
	emit("")
}

// f32 is the bit pattern of x rounded to float32.
func f32(x float64) uint32 { return math.Float32bits(float32(x)) }

// geluK0 and geluK1 are those of gelu.go: u = geluK0·(x + geluK1·x³).
const (
	geluK0 = 0.7978845608028654 // √(2/π)
	geluK1 = 0.044715
)

// consts are the tables the loops read, 8 copies of each value (one AVX2
// vector). The exp constants are those of Exp32 (math32.go): the clamp to
// [-87, 88], log2(e), ln2 in two parts (the first exact in n·ln2hi), the
// Taylor coefficients 1/k! and the exponent bias.
var consts = []struct {
	name string
	bits uint32
}{
	{"kxlo", f32(-87)},
	{"kxhi", f32(88)},
	{"kxlog2e", f32(math.Log2E)},
	{"kxln2hi", f32(0.693359375)},
	{"kxln2lo", f32(-2.12194440e-4)},
	{"kxc7", f32(1.0 / 5040)},
	{"kxc6", f32(1.0 / 720)},
	{"kxc5", f32(1.0 / 120)},
	{"kxc4", f32(1.0 / 24)},
	{"kxc3", f32(1.0 / 6)},
	{"kxc2", f32(0.5)},
	{"kxone", f32(1)},
	{"kxtwo", f32(2)},
	{"kxmtwo", f32(-2)},
	{"kxbias", 127},
	// GELU: -2u = x·(ga + gb·x²); its derivative's 2√(2/π)(1 + 3·geluK1·x²)
	// = gc + gd·x².
	{"kxga", f32(-2 * geluK0)},
	{"kxgb", f32(-2 * geluK0 * geluK1)},
	{"kxgc", f32(2 * geluK0)},
	{"kxgd", f32(2 * geluK0 * 3 * geluK1)},
	{"kxninf", f32(math.Inf(-1))},
	{"kxsign", 1 << 31},
}

func emitConsts() {
	for _, c := range consts {
		for i := 0; i < 8; i++ {
			emit("DATA %s<>+%d(SB)/4, $%#x", c.name, 4*i, c.bits)
		}
		emit("GLOBL %s<>(SB), RODATA|NOPTR, $32", c.name)
		emit("")
	}
}

// isa is one vector width.
type isa struct {
	name  string // symbol suffix
	reg   string // register prefix
	lanes int
}

var (
	avx2   = isa{"AVX2", "Y", 8}
	avx512 = isa{"AVX512", "Z", 16}
)

func (v isa) r(i int) string { return fmt.Sprintf("%s%d", v.reg, i) }

// gp names general-purpose register n (the assembler's registers 8 to 15).
func gp(n int) string { return fmt.Sprintf("R%d", n) }

func (v isa) bytes() int { return 4 * v.lanes }

func (v isa) shift() int { return bits.TrailingZeros(uint(v.lanes)) }

func (v isa) wide() bool { return v.lanes == 16 }

// k is the table c as the memory operand of instruction op: the whole
// vector for AVX2, an embedded broadcast of its first element for AVX-512.
func (v isa) k(op, c string) string {
	if v.wide() {
		return op + ".BCST " + c + "<>(SB)"
	}
	return op + " " + c + "<>(SB)"
}

// load sets register dst to the table c in every lane.
func (v isa) load(c, dst string) {
	op := "VMOVUPS"
	if v.wide() {
		op = "VBROADCASTSS"
	}
	emit("\t%s %s<>(SB), %s", op, c, dst)
}

// The exp building blocks, shared by the EXP macros and tanh. Registers 13
// to 15 hold 1, 88 and -87 (LOADCONST).

// reduce splits x (clamped) into n = round(x·log2e), in register n as an
// int32, and r = x - n·ln2, in place of x.
func reduce(v isa, x, n string) {
	emit("\t%s, %s, %s", v.k("VMULPS", "kxlog2e"), x, n)
	if v.wide() {
		emit("\tVRNDSCALEPS $0, %s, %s", n, n)
	} else {
		emit("\tVROUNDPS $0, %s, %s", n, n)
	}
	emit("\t%s, %s, %s", v.k("VFNMADD231PS", "kxln2hi"), n, x)
	emit("\t%s, %s, %s", v.k("VFNMADD231PS", "kxln2lo"), n, x)
	emit("\tVCVTPS2DQ %s, %s", n, n)
}

// horner sets acc to the polynomial in r with the tables cs as
// coefficients, highest degree first, followed by ones more coefficients 1.
func horner(v isa, acc, r string, ones int, cs ...string) {
	v.load(cs[0], acc)
	for _, c := range cs[1:] {
		emit("\t%s, %s, %s", v.k("VFMADD213PS", c), r, acc)
	}
	for i := 0; i < ones; i++ {
		emit("\tVFMADD213PS %s, %s, %s", v.r(13), r, acc)
	}
}

// pow2 turns the integer n into the float 2ⁿ, in place.
func pow2(v isa, n string) {
	emit("\t%s, %s, %s", v.k("VPADDD", "kxbias"), n, n)
	emit("\tVPSLLD $23, %s, %s", n, n)
}

// expMacros emits EXP<lanes> and LOADCONST<lanes>.
func expMacros(v isa) {
	params, flush := "IN, OUT, T1, T2, T3", "T3"
	if v.wide() {
		params, flush = "IN, OUT, T1, T2", "K1"
	}
	emit("// EXP%d computes OUT = exp(IN) for %d float32 lanes (IN is preserved).", v.lanes, v.lanes)
	emit("// Same algorithm as Exp32: clamp to [-87, 88] (NaN passes through), n =")
	emit("// round(x·log2e), r = x - n·ln2 (two-part ln2), degree-6 Taylor polynomial,")
	emit("// scale by 2^n built in the exponent bits, and lanes with x < -87 set to 0")
	emit("// (NaN lanes keep NaN). Expects LOADCONST%d. Clobbers T1, T2, %s.", v.lanes, flush)
	macro(fmt.Sprintf("EXP%d(%s)", v.lanes, params), func() {
		emit("\tVMAXPS IN, %s, T1", v.r(15))
		emit("\tVMINPS T1, %s, T1", v.r(14))
		reduce(v, "T1", "T2")
		horner(v, "OUT", "T1", 2, "kxc6", "kxc5", "kxc4", "kxc3", "kxc2")
		pow2(v, "T2")
		emit("\tVMULPS T2, OUT, OUT")
		if v.wide() {
			emit("\tVCMPPS $5, %s, IN, K1", v.r(15)) // not less than -87, or NaN
			emit("\tVMOVAPS.Z OUT, K1, OUT")
		} else {
			emit("\tVCMPPS $1, %s, IN, T3", v.r(15)) // less than -87
			emit("\tVANDNPS OUT, T3, OUT")
		}
	})
	macro(fmt.Sprintf("LOADCONST%d", v.lanes), func() {
		v.load("kxlo", v.r(15))
		v.load("kxhi", v.r(14))
		v.load("kxone", v.r(13))
	})
}

// exp emits EXP of register base into base+1, with base+2 to base+4 as
// temporaries.
func (v isa) exp(base int) {
	regs := []string{v.r(base), v.r(base + 1), v.r(base + 2), v.r(base + 3), v.r(base + 4)}
	if v.wide() {
		regs = regs[:4]
	}
	emit("\tEXP%d(%s)", v.lanes, strings.Join(regs, ", "))
}

// text emits the header of the function name with Go parameters params and
// an argument frame of frame bytes.
func text(name, params string, frame int, doc ...string) {
	emit("// func %s%s", name, params)
	for _, d := range doc {
		emit("// %s", d)
	}
	emit("TEXT ·%s(SB), NOSPLIT, $0-%d", name, frame)
}

// args loads the base pointers of the slice parameters params into regs,
// in order, 24 bytes apart from offset off, and the length of the one named
// count into CX.
func args(off int, count, params string, regs ...string) {
	for i, p := range strings.Split(params, " ") {
		emit("\tMOVQ %s_base+%d(FP), %s", p, off+24*i, regs[i])
		if p == count {
			emit("\tMOVQ %s_len+%d(FP), CX", p, off+24*i+8)
		}
	}
}

// bcast broadcasts the float32 parameters named, 4 bytes apart from offset
// off, into the Y registers from first on.
func bcast(off, first int, names ...string) {
	for i, n := range names {
		emit("\tVBROADCASTSS %s+%d(FP), Y%d", n, off+4*i, first+i)
	}
}

// at is the memory operand of block blk of pointer p.
func (v isa) at(p string, blk int) string {
	if blk == 0 {
		return "(" + p + ")"
	}
	return fmt.Sprintf("%d(%s)", blk*v.bytes(), p)
}

// loop emits the loop over the CX elements, rounded down to a multiple of
// v.lanes: body(0) handles the vector at each pointer of ptrs, which then
// advance. With pairArg, the count's argument, it takes two vectors an
// iteration, body(0) and body(1) at the next offset, and rereads the count
// for a last odd vector: reductions keep an accumulator per block, so that
// two dependency chains run side by side.
func loop(v isa, pairArg string, body func(blk int), ptrs ...string) {
	blocks := 1
	emit("\tSHRQ $%d, CX", v.shift())
	emit("\tJZ done")
	if pairArg != "" {
		blocks = 2
		emit("\tSHRQ $1, CX")
		emit("\tJZ tail")
	}
	emit("loop:")
	for b := 0; b < blocks; b++ {
		body(b)
	}
	for _, p := range ptrs {
		emit("\tADDQ $%d, %s", blocks*v.bytes(), p)
	}
	emit("\tDECQ CX")
	emit("\tJNZ loop")
	if pairArg != "" {
		emit("tail:")
		emit("\tMOVQ %s, CX", pairArg)
		emit("\tBTQ $%d, CX", v.shift())
		emit("\tJCC done")
		body(0)
	}
	emit("done:")
}

// ret ends a function, storing the float32 results, each given as "X
// name" (a register whose low lane holds the result, the result's name),
// from offset off on.
func ret(off int, results ...string) {
	emit("\tVZEROUPPER")
	for i, res := range results {
		x, name, _ := strings.Cut(res, " ")
		emit("\tMOVSS %s, %s+%d(FP)", x, name, off+4*i)
	}
	emit("\tRET")
	emit("")
}

func genExpShiftSum(v isa) {
	text("expShiftSum"+v.name, "(dst, src []float32, shift float32) float32", 60,
		"dst[i] = exp(src[i] - shift) for i < len(dst) rounded down to "+fmt.Sprint(v.lanes)+";",
		"returns the sum of what it wrote.")
	args(0, "dst", "dst src", "DI", "SI")
	emit("\tVBROADCASTSS shift+48(FP), %s", v.r(12))
	emit("\tLOADCONST%d", v.lanes)
	for _, acc := range []string{v.r(11), v.r(10)} {
		emit("\tVXORPS %s, %s, %s", acc, acc, acc)
	}
	loop(v, "dst_len+8(FP)", func(b int) {
		in, out, acc := v.r(5*b), v.r(5*b+1), v.r(11-b)
		emit("\tVMOVUPS %s, %s", v.at("SI", b), in)
		emit("\tVSUBPS %s, %s, %s", v.r(12), in, in)
		v.exp(5 * b)
		emit("\tVMOVUPS %s, %s", out, v.at("DI", b))
		emit("\tVADDPS %s, %s, %s", out, acc, acc)
	}, "SI", "DI")
	emit("\tVADDPS %s, %s, %[2]s", v.r(10), v.r(11))
	if v.wide() {
		emit("\tVEXTRACTF64X4 $1, Z11, Y1")
		emit("\tVADDPS Y1, Y11, Y11")
	}
	emit("\tHSUM8(Y11, X11, X1)")
	ret(56, "X11 ret")
}

// sigmoidDiv sets register 1 to num/(1 + exp(x)) for x in register 0.
func sigmoidDiv(v isa, num string) {
	v.exp(0)
	emit("\tVADDPS %s, %s, %s", v.r(13), v.r(1), v.r(1))
	emit("\tVDIVPS %s, %s, %s", v.r(1), num, v.r(1))
}

// geluSigma loads x from (SI) into register 5, x² into register 6, and
// sets register 1 to num/(1 + exp(-2u)) = num·σ(2u); registers 12 and 11
// hold the tables kxga and kxgb.
func geluSigma(v isa, num string) {
	x, x2 := v.r(5), v.r(6)
	emit("\tVMOVUPS (SI), %s", x)
	emit("\tVMULPS %s, %s, %s", x, x, x2)
	emit("\tVMOVAPS %s, %s", v.r(11), v.r(0))
	emit("\tVFMADD213PS %s, %s, %s", v.r(12), x2, v.r(0))
	emit("\tVMULPS %s, %s, %s", x, v.r(0), v.r(0))
	sigmoidDiv(v, num)
}

func loadGELU(v isa, tables ...string) {
	emit("\tLOADCONST%d", v.lanes)
	for i, c := range tables {
		v.load(c, v.r(12-i))
	}
}

func genGELU(v isa) {
	text("gelu"+v.name, "(dst, src []float32)", 48,
		"dst[i] = x/(1 + exp(-2√(2/π)(x + 0.044715x³))) for i < len(dst) rounded",
		fmt.Sprintf("down to %d.", v.lanes))
	args(0, "dst", "dst src", "DI", "SI")
	loadGELU(v, "kxga", "kxgb")
	loop(v, "", func(int) {
		geluSigma(v, v.r(5))
		emit("\tVMOVUPS %s, (DI)", v.r(1))
	}, "SI", "DI")
	ret(0)
}

func genGELUBackward(v isa) {
	text("geluBackward"+v.name, "(dx, dy, x []float32)", 72,
		"dx[i] = dy[i]·(s + x·s(1-s)·2√(2/π)(1 + 3·0.044715x²)), s = σ(2u(x)), for",
		fmt.Sprintf("i < len(dx) rounded down to %d.", v.lanes))
	args(0, "dx", "dx dy x", "DI", "DX", "SI")
	loadGELU(v, "kxga", "kxgb", "kxgc", "kxgd")
	loop(v, "", func(int) {
		geluSigma(v, v.r(13))
		s, t := v.r(1), v.r(7)
		emit("\tVSUBPS %s, %s, %s", s, v.r(13), t)
		emit("\tVMULPS %s, %s, %s", s, t, t)
		emit("\tVMULPS %s, %s, %s", v.r(5), t, t)
		emit("\tVMOVAPS %s, %s", v.r(9), v.r(8))
		emit("\tVFMADD213PS %s, %s, %s", v.r(10), v.r(6), v.r(8))
		emit("\tVFMADD213PS %s, %s, %s", s, v.r(8), t)
		emit("\tVMULPS (DX), %s, %s", t, t)
		emit("\tVMOVUPS %s, (DI)", t)
	}, "SI", "DX", "DI")
	ret(0)
}

func genSigmoid(v isa) {
	text("sigmoid"+v.name, "(dst, src []float32)", 48,
		fmt.Sprintf("dst[i] = 1/(1 + exp(-src[i])) for the first len(dst) rounded down to %d.", v.lanes))
	args(0, "dst", "dst src", "DI", "SI")
	emit("\tLOADCONST%d", v.lanes)
	emit("\tVXORPS %s, %s, %s", v.r(12), v.r(12), v.r(12))
	loop(v, "", func(int) {
		emit("\tVSUBPS (SI), %s, %s", v.r(12), v.r(0))
		sigmoidDiv(v, v.r(13))
		emit("\tVMOVUPS %s, (DI)", v.r(1))
	}, "SI", "DI")
	ret(0)
}

func genTanh() {
	v := avx2
	text("tanhAVX2", "(dst, src []float32)", 48,
		"dst[i] = tanh(src[i]) for the first len(dst) rounded down to 8, as Tanh32:",
		"e = expm1(-2|x|) = 2ⁿ·q + (2ⁿ - 1) with q = expm1(r) from its polynomial",
		"(exact cancellation-free when n = 0), tanh(-|x|) = e/(e+2), sign restored.")
	args(0, "dst", "dst src", "DI", "SI")
	emit("\tLOADCONST8")
	v.load("kxsign", "Y12")
	v.load("kxtwo", "Y11")
	loop(v, "", func(int) {
		emit("\tVMOVUPS (SI), Y5")
		emit("\tVANDNPS Y5, Y12, Y0")
		emit("\t%s, Y0, Y0", v.k("VMULPS", "kxmtwo"))
		emit("\tVMAXPS Y0, Y15, Y0")
		reduce(v, "Y0", "Y2")
		horner(v, "Y1", "Y0", 1, "kxc7", "kxc6", "kxc5", "kxc4", "kxc3", "kxc2")
		emit("\tVMULPS Y0, Y1, Y1")
		pow2(v, "Y2")
		emit("\tVSUBPS Y13, Y2, Y3")
		emit("\tVFMADD213PS Y3, Y2, Y1")
		emit("\tVADDPS Y11, Y1, Y3")
		emit("\tVDIVPS Y3, Y1, Y1")
		emit("\tVANDNPS Y12, Y5, Y4")
		emit("\tVXORPS Y4, Y1, Y1")
		emit("\tVMOVUPS Y1, (DI)")
	}, "SI", "DI")
	ret(0)
}

func genMax() {
	text("maxAVX2", "(x []float32) float32", 28,
		"The maximum of the first len(x) rounded down to 8 elements, NaNs skipped",
		"(-Inf when there is nothing else).")
	args(0, "x", "x", "SI")
	avx2.load("kxninf", "Y0")
	emit("\tVMOVUPS Y0, Y1")
	loop(avx2, "x_len+8(FP)", func(b int) {
		emit("\tVMOVUPS %s, Y%d", avx2.at("SI", b), 2+b)
		// max(Y2, Y0): a NaN in Y2 yields Y0.
		emit("\tVMAXPS Y%d, Y%d, Y%[1]d", b, 2+b)
	}, "SI")
	emit("\tVMAXPS Y1, Y0, Y0")
	emit("\tVEXTRACTF128 $1, Y0, X1")
	emit("\tVMAXPS X1, X0, X0")
	for _, perm := range []string{"0x4e", "0xb1"} {
		emit("\tVPERMILPS $%s, X0, X1", perm)
		emit("\tVMAXPS X1, X0, X0")
	}
	ret(24, "X0 ret")
}

// genScalarOp writes name(dst, src []float32, s float32): dst[i] = src[i] op s.
func genScalarOp(name, op, doc string) {
	text(name, "(dst, src []float32, s float32)", 52,
		doc+" for the first len(dst) rounded down to 8 elements.")
	args(0, "dst", "dst src", "DI", "SI")
	bcast(48, 2, "s")
	loop(avx2, "", func(int) {
		emit("\t%s (SI), Y2, Y0", op)
		emit("\tVMOVUPS Y0, (DI)")
	}, "SI", "DI")
	ret(0)
}

// genSum writes sumAVX2 or, with mu, sumSqDevAVX2: a pair of accumulators
// Y0 and Y1 summed at the end.
func genSum(name, params, doc string, mu bool) {
	off := 24 // the result
	if mu {
		off = 32
	}
	text(name, params, off+4, doc+" over the first len(x) rounded down to 8 elements.")
	args(0, "x", "x", "SI")
	if mu {
		bcast(24, 4, "mu")
	}
	emit("\tVXORPS Y0, Y0, Y0")
	emit("\tVXORPS Y1, Y1, Y1")
	loop(avx2, "x_len+8(FP)", func(b int) {
		if !mu {
			emit("\tVADDPS %s, Y%d, Y%[2]d", avx2.at("SI", b), b)
			return
		}
		emit("\tVMOVUPS %s, Y%d", avx2.at("SI", b), 2+b)
		emit("\tVSUBPS Y4, Y%d, Y%[1]d", 2+b)
		emit("\tVFMADD231PS Y%d, Y%[1]d, Y%d", 2+b, b)
	}, "SI")
	emit("\tVADDPS Y1, Y0, Y0")
	emit("\tHSUM8(Y0, X0, X1)")
	ret(off, "X0 ret")
}

// xhat loads x from (SI) into Y0 as (x-mu)·rs, mu and rs in Y4 and Y5.
func xhat() {
	emit("\tVMOVUPS (SI), Y0")
	emit("\tVSUBPS Y4, Y0, Y0")
	emit("\tVMULPS Y5, Y0, Y0")
}

func genLayerNorm() {
	text("lnApplyAVX2", "(dst, x, gamma, beta []float32, mu, rs float32)", 104,
		"dst[i] = (x[i]-mu)·rs·gamma[i] + beta[i] for the first len(dst) rounded",
		"down to 8 elements.")
	args(0, "dst", "dst x gamma beta", "DI", "SI", "R8", "R9")
	bcast(96, 4, "mu", "rs")
	loop(avx2, "", func(int) {
		xhat()
		emit("\tVMOVUPS (R9), Y1")
		emit("\tVFMADD231PS (R8), Y0, Y1")
		emit("\tVMOVUPS Y1, (DI)")
	}, "SI", "DI", "R8", "R9")
	ret(0)

	text("lnBwdReduceAVX2", "(dgamma, dbeta, dy, x, gamma []float32, mu, rs float32) (sdy, sdyx float32)", 136,
		"With xh = (x-mu)·rs and g = dy·gamma: dgamma += dy·xh, dbeta += dy, and",
		"returns Σ g and Σ g·xh, over the first len(x) rounded down to 8 elements.")
	args(0, "x", "dgamma dbeta dy x gamma", gp(10), gp(11), "DX", "SI", "R8")
	bcast(120, 4, "mu", "rs")
	emit("\tVXORPS Y6, Y6, Y6")
	emit("\tVXORPS Y7, Y7, Y7")
	loop(avx2, "", func(int) {
		xhat()
		emit("\tVMOVUPS (DX), Y1")
		emit("\tVMULPS (R8), Y1, Y2")
		emit("\tVADDPS Y2, Y6, Y6")
		emit("\tVFMADD231PS Y0, Y2, Y7")
		emit("\tVMOVUPS (%s), Y3", gp(10))
		emit("\tVFMADD231PS Y0, Y1, Y3")
		emit("\tVMOVUPS Y3, (%s)", gp(10))
		emit("\tVADDPS (%s), Y1, Y3", gp(11))
		emit("\tVMOVUPS Y3, (%s)", gp(11))
	}, "SI", "DX", "R8", gp(10), gp(11))
	emit("\tHSUM8(Y6, X6, X1)")
	emit("\tHSUM8(Y7, X7, X1)")
	ret(128, "X6 sdy", "X7 sdyx")

	text("lnBwdDxAVX2", "(dx, dy, x, gamma []float32, mu, rs, mdy, mdyx float32)", 112,
		"dx = rs·(dy·gamma - mdy - xh·mdyx), xh = (x-mu)·rs, over the first len(dx)",
		"rounded down to 8 elements.")
	args(0, "dx", "dx dy x gamma", "DI", "DX", "SI", "R8")
	bcast(96, 4, "mu", "rs", "mdy", "mdyx")
	loop(avx2, "", func(int) {
		xhat()
		emit("\tVMOVUPS (DX), Y1")
		emit("\tVMULPS (R8), Y1, Y1")
		emit("\tVSUBPS Y6, Y1, Y1")
		emit("\tVFNMADD231PS Y7, Y0, Y1")
		emit("\tVMULPS Y5, Y1, Y1")
		emit("\tVMOVUPS Y1, (DI)")
	}, "SI", "DX", "R8", "DI")
	ret(0)
}

func genBinops() {
	for _, op := range []struct{ name, ins, sym string }{
		{"add", "VADDPS", "+"}, {"sub", "VSUBPS", "-"}, {"mul", "VMULPS", "·"}, {"div", "VDIVPS", "/"},
	} {
		text(op.name+"AVX2", "(dst, a, b []float32)", 72,
			"dst = a "+op.sym+" b over the first len(dst) rounded down to 8 elements.")
		args(0, "dst", "dst a b", "DI", "SI", "DX")
		loop(avx2, "", func(int) {
			emit("\tVMOVUPS (SI), Y0")
			emit("\t%s (DX), Y0, Y0", op.ins)
			emit("\tVMOVUPS Y0, (DI)")
		}, "SI", "DX", "DI")
		ret(0)
	}
}

func genAxpy() {
	text("axpyAVX2", "(alpha float32, x, y []float32)", 56,
		"y += alpha·x over the first len(x) rounded down to 8 elements.")
	bcast(0, 2, "alpha")
	args(8, "x", "x y", "SI", "DI")
	loop(avx2, "", func(int) {
		emit("\tVMOVUPS (DI), Y0")
		emit("\tVFMADD231PS (SI), Y2, Y0")
		emit("\tVMOVUPS Y0, (DI)")
	}, "SI", "DI")
	ret(0)
}

func genAdamW() {
	text("adamwAVX2", "(param, grad, m, v []float32, b1, b2, gs, rc2, eps, decay, step float32)", 124,
		"One AdamW update (see AdamW) over the first len(param) rounded down to 8.")
	args(0, "param", "param grad m v", "DI", "SI", "R8", "R9")
	// Y8, Y9 = b1, 1-b1; Y10, Y11 = b2, 1-b2.
	for i, b := range []string{"b1", "b2"} {
		r := 8 + 2*i
		bcast(96+4*i, r, b)
		emit("\tVBROADCASTSS kxone<>(SB), Y%d", r+1)
		emit("\tVSUBPS Y%d, Y%d, Y%[2]d", r, r+1)
	}
	bcast(104, 12, "gs", "rc2", "eps", "decay")
	bcast(120, 7, "step")
	loop(avx2, "", func(int) {
		emit("\tVMULPS (SI), Y12, Y0")
		emit("\tVMULPS (R8), Y8, Y1")
		emit("\tVFMADD231PS Y0, Y9, Y1")
		emit("\tVMOVUPS Y1, (R8)")
		emit("\tVMULPS Y0, Y0, Y2")
		emit("\tVMULPS (R9), Y10, Y3")
		emit("\tVFMADD231PS Y2, Y11, Y3")
		emit("\tVMOVUPS Y3, (R9)")
		emit("\tVSQRTPS Y3, Y3")
		emit("\tVFMADD213PS Y14, Y13, Y3")
		emit("\tVMULPS Y7, Y1, Y1")
		emit("\tVDIVPS Y3, Y1, Y1")
		emit("\tVMULPS (DI), Y15, Y4")
		emit("\tVSUBPS Y1, Y4, Y4")
		emit("\tVMOVUPS Y4, (DI)")
	}, "DI", "SI", "R8", "R9")
	ret(0)
}

func main() {
	emit("// Code generated by vexp_asm_gen.go; DO NOT EDIT.")
	emit("")
	emit("//go:build amd64 && !purego")
	emit("")
	emit("#include \"textflag.h\"")
	emit("")
	emitConsts()
	emit("// HSUM8 folds the 8 lanes of Y into the low lane of X (clobbers XT).")
	macro("HSUM8(Y, X, XT)", func() {
		emit("\tVEXTRACTF128 $1, Y, XT")
		emit("\tVADDPS XT, X, X")
		emit("\tVHADDPS X, X, X")
		emit("\tVHADDPS X, X, X")
	})
	for _, v := range []isa{avx2, avx512} {
		expMacros(v)
		genExpShiftSum(v)
		genGELU(v)
		genGELUBackward(v)
		genSigmoid(v)
	}
	genTanh()
	genMax()
	genScalarOp("scaleAVX2", "VMULPS", "dst[i] = src[i]·s")
	genScalarOp("addScalarAVX2", "VADDPS", "dst[i] = src[i] + s")
	genSum("sumAVX2", "(x []float32) float32", "Σ x[i]", false)
	genSum("sumSqDevAVX2", "(x []float32, mu float32) float32", "Σ (x[i]-mu)²", true)
	genLayerNorm()
	genBinops()
	genAxpy()
	genAdamW()
	os.Stdout.WriteString(w.String())
}
