package tensor

import (
	"fmt"

	gt "gorgonia.org/tensor"
)

// CPUBackend runs the Backend kernel set on Go memory with the package's
// slice kernels (and Gemm for MatMul).
type CPUBackend struct{}

// CPU is the backend of every tensor whose engine has no registered backend.
var CPU Backend = CPUBackend{}

// Name returns "cpu".
func (CPUBackend) Name() string { return "cpu" }

// MatMul runs Gemm (2-D) or GemmBatched (3-D a and c; b 3-D or shared 2-D).
func (CPUBackend) MatMul(transA, transB bool, alpha float32, a, b *gt.Dense, beta float32, c *gt.Dense) {
	as, bs, cs := a.Shape(), b.Shape(), c.Shape()
	ad, bd, cd := Data(a), Data(b), Data(c)
	ar, ac := as[len(as)-2], as[len(as)-1]
	br, bc := bs[len(bs)-2], bs[len(bs)-1]
	m, n := cs[len(cs)-2], cs[len(cs)-1]
	k := ac
	if transA {
		k = ar
	}
	// Leading dimensions are at least 1 so that empty operands (k = 0 or
	// n = 0) pass Gemm's argument checks; Gemm then only scales C by beta.
	lda, ldb, ldc := max(ac, 1), max(bc, 1), max(n, 1)
	if len(cs) == 2 {
		Gemm(transA, transB, m, n, k, alpha, ad, lda, bd, ldb, beta, cd, ldc)
		return
	}
	strideB := br * bc
	if len(bs) == 2 {
		strideB = 0
	}
	GemmBatched(transA, transB, cs[0], m, n, k, alpha, ad, lda, ar*ac, bd, ldb, strideB, beta, cd, ldc, m*n)
}

// Unary applies op element-wise.
func (CPUBackend) Unary(op UnaryOp, dst, src *gt.Dense) {
	d, s := Data(dst), Data(src)
	switch op {
	case OpExp:
		VecExp(d, s)
	case OpLog:
		VecLog(d, s)
	case OpTanh:
		VecTanh(d, s)
	case OpSigmoid:
		VecSigmoid(d, s)
	case OpReLU:
		VecReLU(d, s)
	case OpGELU:
		GELU(d, s)
	case OpNeg:
		VecMulScalar(d, s, -1)
	default:
		panic(fmt.Sprintf("tensor: Unary: unknown op %v", op))
	}
}

// UnaryBackward writes dx = dy·f'(x).
func (CPUBackend) UnaryBackward(op UnaryOp, dx, dy, x, y *gt.Dense) {
	dxd, dyd := Data(dx), Data(dy)
	switch op {
	case OpExp:
		ExpBackward(dxd, dyd, Data(y))
	case OpLog:
		LogBackward(dxd, dyd, Data(x))
	case OpTanh:
		TanhBackward(dxd, dyd, Data(y))
	case OpSigmoid:
		SigmoidBackward(dxd, dyd, Data(y))
	case OpReLU:
		ReLUBackward(dxd, dyd, Data(x))
	case OpGELU:
		GELUBackward(dxd, dyd, Data(x))
	case OpNeg:
		VecMulScalar(dxd, dyd, -1)
	default:
		panic(fmt.Sprintf("tensor: UnaryBackward: unknown op %v", op))
	}
}

// Binary computes dst = a op b with numpy broadcasting.
func (CPUBackend) Binary(op BinaryOp, dst, a, b *gt.Dense) {
	shape := []int(dst.Shape())
	kBroadcastLoop(op, Data(dst), shape, Data(a), kBroadcastStrides(a.Shape(), shape), Data(b), kBroadcastStrides(b.Shape(), shape))
}

// BinaryScalar computes dst = a op s (or s op a when scalarLeft).
func (CPUBackend) BinaryScalar(op BinaryOp, dst, a *gt.Dense, s float32, scalarLeft bool) {
	kScalarOp(op, Data(dst), Data(a), s, scalarLeft)
}

// Reduce reduces src along axis into dst.
func (CPUBackend) Reduce(op ReduceOp, dst, src *gt.Dense, axis int) {
	outer, n, inner := kSplitAxis(src.Shape(), axis)
	ReduceAxis(op, Data(dst), Data(src), outer, n, inner)
}

// ArgMax writes the index of the maximum along axis to the Int tensor dst.
func (CPUBackend) ArgMax(dst, src *gt.Dense, axis int) {
	outer, n, inner := kSplitAxis(src.Shape(), axis)
	ArgMaxAxis(dst.Ints()[:outer*inner], Data(src), outer, n, inner)
}

// Softmax computes the (log-)softmax of src along axis.
func (CPUBackend) Softmax(dst, src *gt.Dense, axis int, log bool) {
	outer, n, inner := kSplitAxis(src.Shape(), axis)
	SoftmaxAxis(Data(dst), Data(src), outer, n, inner, log)
}

// SoftmaxBackward computes dx from dy and the forward output y.
func (CPUBackend) SoftmaxBackward(dx, dy, y *gt.Dense, axis int, log bool) {
	outer, n, inner := kSplitAxis(y.Shape(), axis)
	SoftmaxBackwardAxis(Data(dx), Data(dy), Data(y), outer, n, inner, log)
}

// LayerNorm normalises over the last axis.
func (CPUBackend) LayerNorm(dst, mean, rstd, src, gamma, beta *gt.Dense, eps float32) {
	rows, cols := kRowsCols(src.Shape())
	LayerNormRows(Data(dst), Data(mean), Data(rstd), Data(src), Data(gamma), Data(beta), rows, cols, eps)
}

// LayerNormBackward computes dx and accumulates dgamma, dbeta.
func (CPUBackend) LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma *gt.Dense) {
	rows, cols := kRowsCols(x.Shape())
	LayerNormBackwardRows(Data(dx), Data(dgamma), Data(dbeta), Data(dy), Data(x), Data(mean), Data(rstd), Data(gamma), rows, cols)
}

// EmbeddingGather gathers rows of table.
func (CPUBackend) EmbeddingGather(dst, table *gt.Dense, ids []int) {
	EmbeddingGather(Data(dst), Data(table), ids, table.Shape()[1])
}

// EmbeddingScatterAdd adds rows of dy into dtable.
func (CPUBackend) EmbeddingScatterAdd(dtable, dy *gt.Dense, ids []int) {
	EmbeddingScatterAdd(Data(dtable), Data(dy), ids, dtable.Shape()[1])
}

// AdamW updates param, m and v in place.
func (CPUBackend) AdamW(param, grad, m, v *gt.Dense, p AdamWParams) {
	AdamW(Data(param), Data(grad), Data(m), Data(v), p)
}

// SumSquares returns Σ x².
func (CPUBackend) SumSquares(x *gt.Dense) float64 { return SumSquares(Data(x)) }

// Fill sets every element of dst to v.
func (CPUBackend) Fill(dst *gt.Dense, v float32) {
	d := Data(dst)
	for i := range d {
		d[i] = v
	}
}

// Copy copies src into dst (the same number of elements).
func (CPUBackend) Copy(dst, src *gt.Dense) {
	d, s := Data(dst), Data(src)
	kSameLen("Copy", "(dst, src)", len(d), len(s))
	copy(d, s)
}

// kSplitAxis views shape as outer×shape[axis]×inner.
func kSplitAxis(shape gt.Shape, axis int) (outer, n, inner int) {
	outer, inner = 1, 1
	for i, d := range shape {
		switch {
		case i < axis:
			outer *= d
		case i > axis:
			inner *= d
		}
	}
	if len(shape) == 0 {
		return 1, 1, 1
	}
	return outer, shape[axis], inner
}

// kRowsCols views shape as rows×(last axis).
func kRowsCols(shape gt.Shape) (rows, cols int) {
	o, n, _ := kSplitAxis(shape, len(shape)-1)
	return o, n
}

// kBroadcastStrides returns the element strides of a contiguous tensor of
// shape s broadcast to full (numpy rules: aligned on the right, size-1 and
// missing axes get stride 0).
func kBroadcastStrides(s gt.Shape, full []int) []int {
	st := make([]int, len(full))
	off := len(full) - len(s)
	acc := 1
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] != 1 {
			st[off+i] = acc
		}
		acc *= s[i]
	}
	return st
}

// kBroadcastLoop computes dst = a op b over shape, where a and b are read
// through strides (0 on broadcast axes). Adjacent axes that are contiguous
// for both operands are merged first, so the common cases (same shape, bias
// row, per-row scalar) run as one long inner loop per outer index.
func kBroadcastLoop(op BinaryOp, dst []float32, shape []int, a []float32, sa []int, b []float32, sb []int) {
	// merge axes
	var ms, mas, mbs []int
	for i := 0; i < len(shape); i++ {
		if shape[i] == 1 {
			continue
		}
		if k := len(ms) - 1; k >= 0 && mas[k] == sa[i]*shape[i] && mbs[k] == sb[i]*shape[i] {
			ms[k] *= shape[i]
			mas[k], mbs[k] = sa[i], sb[i]
			continue
		}
		ms, mas, mbs = append(ms, shape[i]), append(mas, sa[i]), append(mbs, sb[i])
	}
	if len(dst) == 0 {
		return
	}
	if len(ms) == 0 { // all size 1
		ms, mas, mbs = []int{1}, []int{0}, []int{0}
	}
	r := len(ms)
	n := ms[r-1]
	ia, ib := mas[r-1], mbs[r-1]
	idx := make([]int, r-1)
	offA, offB := 0, 0
	for off := 0; off < len(dst); off += n {
		d := dst[off : off+n]
		switch {
		case ia == 1 && ib == 1:
			kVecOp(op, d, a[offA:offA+n], b[offB:offB+n])
		case ia == 1 && ib == 0:
			kScalarOp(op, d, a[offA:offA+n], b[offB], false)
		case ia == 0 && ib == 1:
			kScalarOp(op, d, b[offB:offB+n], a[offA], true)
		default:
			for j := range d {
				d[j] = kApply(op, a[offA+j*ia], b[offB+j*ib])
			}
		}
		// advance the odometer over the outer axes
		for k := r - 2; k >= 0; k-- {
			idx[k]++
			offA += mas[k]
			offB += mbs[k]
			if idx[k] < ms[k] {
				break
			}
			offA -= mas[k] * ms[k]
			offB -= mbs[k] * ms[k]
			idx[k] = 0
		}
	}
}

func kApply(op BinaryOp, x, y float32) float32 {
	switch op {
	case OpAdd:
		return x + y
	case OpSub:
		return x - y
	case OpMul:
		return x * y
	case OpDiv:
		return x / y
	}
	panic(fmt.Sprintf("tensor: unknown binary op %v", op))
}

func kVecOp(op BinaryOp, d, a, b []float32) {
	switch op {
	case OpAdd:
		VecAdd(d, a, b)
	case OpSub:
		VecSub(d, a, b)
	case OpMul:
		VecMul(d, a, b)
	case OpDiv:
		VecDiv(d, a, b)
	default:
		panic(fmt.Sprintf("tensor: unknown binary op %v", op))
	}
}

// kScalarOp computes d = a op s, or s op a when left.
func kScalarOp(op BinaryOp, d, a []float32, s float32, left bool) {
	switch {
	case op == OpAdd:
		VecAddScalar(d, a, s)
	case op == OpMul:
		VecMulScalar(d, a, s)
	case op == OpSub && !left:
		VecAddScalar(d, a, -s)
	case op == OpSub && left:
		VecScalarSub(d, a, s)
	case op == OpDiv && !left:
		kSameLen("div", "(dst, a)", len(d), len(a))
		for i, v := range a { // divide (not multiply by 1/s) for exact IEEE quotients
			d[i] = v / s
		}
	case op == OpDiv && left:
		VecScalarDiv(d, a, s)
	default:
		panic(fmt.Sprintf("tensor: unknown binary op %v", op))
	}
}
