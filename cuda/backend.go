package cuda

import (
	"fmt"
	"math"

	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/tensor"
)

// DenseBackend implements package tensor's Backend for tensors that live on
// a device: every *tensor.Dense whose Engine is a cuda Engine. With the build
// tag troupecuda, package cuda registers it for *Engine at init
// (tensor.RegisterBackend), so the Dense-level functions of package tensor
// (tensor.Add, Softmax, LayerNorm, MatMul, AdamWStep, ...) run on the GPU when
// their operands are device tensors, with no change to the caller:
//
//	x, _ := e.DenseToDevice(tensor.RandN(rng, 64, 512))
//	y := tensor.Softmax(nil, x, -1) // softmax_rows kernel; y lives on the device
//	h, _ := e.DenseToHost(y)
//
// The methods have the CPU backend's argument semantics (see tensor.Backend)
// and map onto the device kernels as follows; each call is enqueued on the
// engine's current stream (results are ready once a copy to the host returns).
//
//   - MatMul: GemmBatched (one launch; a shared 2-D b gets stride 0).
//   - Unary: the unary kernel (exp, log, tanh, sigmoid, ReLU, neg) and
//     gelu_fwd. UnaryBackward: composed from binary/unary launches (exp:
//     dy·y; log: dy/x; tanh: dy·(1−y²); sigmoid: dy·y(1−y); neg: −dy), gelu_bwd
//     for GELU, and for ReLU the mask min(max(+Inf·x, 0), 1)·dy (fmaxf drops
//     the NaN of +Inf·0), which equals the CPU's "dy where x > 0, else 0"
//     except that a non-finite dy where x ≤ 0 gives NaN instead of 0.
//   - Binary: binary_same for equal shapes, otherwise binary_bcast after
//     merging adjacent axes (up to 4 merged axes per launch; more are looped
//     over on the host, one launch per index of the leading axes).
//     BinaryScalar: the unary kernel's scale/add-constant for a+s, a−s, a·s,
//     and a one-element device scalar broadcast through binary_bcast for s−a,
//     a/s and s/a (true IEEE quotients, like the CPU).
//   - Reduce: reduce_rows when the axis is the last, reduce_cols (sum and
//     mean) when it is the first, otherwise a strided_copy that moves the axis
//     last and then reduce_rows; mean scales the sum by 1/n.
//   - Softmax / SoftmaxBackward: the row kernels; along an inner axis the
//     operands are permuted with strided_copy, then permuted back.
//   - LayerNorm / LayerNormBackward, EmbeddingGather / EmbeddingScatterAdd
//     (ids are range-checked on the host, then copied as int32), AdamW (a
//     GradScale other than 0 or 1 scales the gradient into a scratch buffer
//     first): the kernels of the same name.
//   - SumSquares: square then reduce_all, read back (summed in float32 on the
//     device, where the CPU sums in float64).
//   - Fill: the fill kernel. Copy: strided_copy over one axis of stride 1
//     with beta 0 (a plain element copy that never reads dst).
//
// Fallback: ArgMax has no device kernel. It copies the operand to the host
// and runs tensor.ArgMaxAxis there (its result is a host Int tensor on every
// backend). It waits for the stream.
//
// Errors from the driver have nowhere to go in the Backend signatures; they
// panic with a message naming the operation. Operands must all live on the
// same device (the same Engine); mixing engines panics.
type DenseBackend struct{}

var _ tensor.Backend = DenseBackend{}

// deviceKernels is the part of Engine that DenseBackend uses. It is an
// interface so that the mapping from Dense-level calls to kernels is tested
// without a GPU against a host-memory fake (backend_test.go); *Engine
// implements it (asserted in backend_register.go, tag troupecuda).
type deviceKernels interface {
	GemmBatched(transA, transB bool, batch, m, n, k int, alpha float32, a Buffer, lda, strideA int, b Buffer, ldb, strideB int, beta float32, c Buffer, ldc, strideC int) error
	Binary(op int, out, a, b Buffer) error
	BinaryBroadcast(op int, out, a, b Buffer, shape, aStrides, bStrides []int) error
	Unary(op int, out, x Buffer, alpha float32) error
	Fill(out Buffer, v float32) error
	GELU(dst, src Buffer) error
	GELUBackward(dx, dy, x Buffer) error
	SumRows(out, x Buffer, rows, cols int) error
	MaxRows(out, x Buffer, rows, cols int) error
	SumCols(out, x Buffer, rows, cols int, beta float32) error
	Sum(out, x Buffer) error
	StridedCopy(out, a Buffer, shape, strides []int, beta float32) error
	SoftmaxRows(dst, src Buffer, rows, cols int) error
	LogSoftmaxRows(dst, src Buffer, rows, cols int) error
	SoftmaxBackwardRows(dx, dy, y Buffer, rows, cols int) error
	LogSoftmaxBackwardRows(dx, dy, y Buffer, rows, cols int) error
	LayerNormRows(dst, mean, rstd, src, gamma, beta Buffer, rows, cols int, eps float32) error
	LayerNormBackwardRows(dx, dgamma, dbeta, dy, x, mean, rstd, gamma Buffer, rows, cols int) error
	EmbeddingGather(dst, table, ids Buffer, dim int) error
	EmbeddingScatterAdd(dtable, dy, ids Buffer, dim int) error
	AdamW(p, g, m, v Buffer, step int, c AdamWConfig) error
	NewBuffer(n int) (Buffer, error)
	FreeBuffer(b Buffer) error
	IDsToDevice(ids []int) (Buffer, error)
	ToHost(dst []float32, src Buffer) error
}

// Name returns "cuda".
func (DenseBackend) Name() string { return "cuda" }

// bDev returns the device of the operands (all must share one engine).
func bDev(op string, ts ...*gt.Dense) deviceKernels {
	var d deviceKernels
	var first gt.Engine
	for _, t := range ts {
		if t == nil {
			continue
		}
		e := t.Engine()
		k, ok := e.(deviceKernels)
		if !ok {
			panic(fmt.Sprintf("cuda: %s: operand of shape %v has engine %T, not a device engine", op, t.Shape(), e))
		}
		if d == nil {
			d, first = k, e
		} else if e != first {
			panic(fmt.Sprintf("cuda: %s: operands live on different devices (engines %p and %p)", op, first, e))
		}
	}
	if d == nil {
		panic(fmt.Sprintf("cuda: %s: no operands", op))
	}
	return d
}

func bNumel(s gt.Shape) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// bBuf returns the device buffer behind t (contiguous, as the Dense-level
// functions guarantee); empty for a tensor with no elements.
func bBuf(t *gt.Dense) Buffer {
	n := bNumel(t.Shape())
	if n == 0 {
		return Buffer{}
	}
	return BufferAt(t.Uintptr(), n)
}

func bCheck(op string, err error) {
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
}

// bScratch allocates n elements of scratch (at least one).
func bScratch(op string, d deviceKernels, n int) Buffer {
	b, err := d.NewBuffer(n)
	bCheck(op, err)
	return b.Slice(0, max(n, 0))
}

func bFree(op string, d deviceKernels, bs ...Buffer) {
	for _, b := range bs {
		bCheck(op, d.FreeBuffer(b))
	}
}

// bSplitAxis views shape as outer×shape[axis]×inner.
func bSplitAxis(shape gt.Shape, axis int) (outer, n, inner int) {
	if len(shape) == 0 {
		return 1, 1, 1
	}
	outer, inner = 1, 1
	for i, d := range shape {
		switch {
		case i < axis:
			outer *= d
		case i > axis:
			inner *= d
		}
	}
	return outer, shape[axis], inner
}

// MatMul runs GemmBatched: c = alpha·op(a)·op(b) + beta·c.
func (DenseBackend) MatMul(transA, transB bool, alpha float32, a, b *gt.Dense, beta float32, c *gt.Dense) {
	d := bDev("MatMul", a, b, c)
	as, bs, cs := a.Shape(), b.Shape(), c.Shape()
	ar, ac := as[len(as)-2], as[len(as)-1]
	br, bc := bs[len(bs)-2], bs[len(bs)-1]
	m, n := cs[len(cs)-2], cs[len(cs)-1]
	k := ac
	if transA {
		k = ar
	}
	batch, strideB := 1, br*bc
	if len(cs) == 3 {
		batch = cs[0]
	}
	if len(bs) == 2 {
		strideB = 0
	}
	bCheck("MatMul", d.GemmBatched(transA, transB, batch, m, n, k, alpha,
		bBuf(a), max(ac, 1), ar*ac, bBuf(b), max(bc, 1), strideB, beta, bBuf(c), max(n, 1), m*n))
}

var bUnaryCodes = map[tensor.UnaryOp]int{
	tensor.OpExp: UnaryExp, tensor.OpLog: UnaryLog, tensor.OpTanh: UnaryTanh,
	tensor.OpSigmoid: UnarySigmoid, tensor.OpReLU: UnaryReLU, tensor.OpNeg: UnaryNeg,
}

// Unary applies op element-wise.
func (DenseBackend) Unary(op tensor.UnaryOp, dst, src *gt.Dense) {
	name := "Unary(" + op.String() + ")"
	d := bDev(name, dst, src)
	out, x := bBuf(dst), bBuf(src)
	if out.Len() == 0 {
		return
	}
	if op == tensor.OpGELU {
		bCheck(name, d.GELU(out, x))
		return
	}
	code, ok := bUnaryCodes[op]
	if !ok {
		panic(fmt.Sprintf("cuda: Unary: unknown op %v", op))
	}
	bCheck(name, d.Unary(code, out, x, 0))
}

// UnaryBackward writes dx = dy·f'(x), composed from element-wise launches.
func (DenseBackend) UnaryBackward(op tensor.UnaryOp, dx, dy, x, y *gt.Dense) {
	name := "UnaryBackward(" + op.String() + ")"
	d := bDev(name, dx, dy, x, y)
	gx, gy := bBuf(dx), bBuf(dy)
	n := gx.Len()
	if n == 0 {
		return
	}
	switch op {
	case tensor.OpExp:
		bCheck(name, d.Binary(OpMul, gx, gy, bBuf(y)))
	case tensor.OpLog:
		bCheck(name, d.Binary(OpDiv, gx, gy, bBuf(x)))
	case tensor.OpTanh: // dy·(1 − y²)
		t := bScratch(name, d, n)
		yb := bBuf(y)
		bCheck(name, d.Unary(UnarySquare, t, yb, 0))
		bCheck(name, d.Unary(UnaryNeg, t, t, 0))
		bCheck(name, d.Unary(UnaryAddC, t, t, 1))
		bCheck(name, d.Binary(OpMul, gx, gy, t))
		bFree(name, d, t)
	case tensor.OpSigmoid: // dy·y·(1 − y)
		t := bScratch(name, d, n)
		yb := bBuf(y)
		bCheck(name, d.Unary(UnaryNeg, t, yb, 0))
		bCheck(name, d.Unary(UnaryAddC, t, t, 1))
		bCheck(name, d.Binary(OpMul, t, t, yb))
		bCheck(name, d.Binary(OpMul, gx, gy, t))
		bFree(name, d, t)
	case tensor.OpReLU: // dy·min(max(+Inf·x, 0), 1)
		t := bScratch(name, d, n)
		c := bScratch(name, d, 2)
		bCheck(name, d.Fill(c.Slice(0, 1), 0))
		bCheck(name, d.Fill(c.Slice(1, 2), 1))
		bCheck(name, d.Unary(UnaryScale, t, bBuf(x), float32(math.Inf(1))))
		bCheck(name, d.BinaryBroadcast(OpMax, t, t, c.Slice(0, 1), []int{n}, []int{1}, []int{0}))
		bCheck(name, d.BinaryBroadcast(OpMin, t, t, c.Slice(1, 2), []int{n}, []int{1}, []int{0}))
		bCheck(name, d.Binary(OpMul, gx, gy, t))
		bFree(name, d, t, c)
	case tensor.OpGELU:
		bCheck(name, d.GELUBackward(gx, gy, bBuf(x)))
	case tensor.OpNeg:
		bCheck(name, d.Unary(UnaryNeg, gx, gy, 0))
	default:
		panic(fmt.Sprintf("cuda: UnaryBackward: unknown op %v", op))
	}
}

var bBinaryCodes = [...]int{tensor.OpAdd: OpAdd, tensor.OpSub: OpSub, tensor.OpMul: OpMul, tensor.OpDiv: OpDiv}

func bBinaryCode(op tensor.BinaryOp) int {
	if op < 0 || int(op) >= len(bBinaryCodes) {
		panic(fmt.Sprintf("cuda: unknown binary op %v", op))
	}
	return bBinaryCodes[op]
}

// bBroadcastStrides returns the element strides of a contiguous tensor of
// shape s broadcast to full (aligned on the right; size-1 and missing axes
// get stride 0).
func bBroadcastStrides(s gt.Shape, full []int) []int {
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

// bMergeAxes drops size-1 axes and merges adjacent axes that are contiguous
// for both operands (so a same-shape operation becomes one axis and a bias
// add two). It returns at least one axis.
func bMergeAxes(shape, sa, sb []int) (ms, mas, mbs []int) {
	for i := range shape {
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
	if len(ms) == 0 {
		return []int{1}, []int{0}, []int{0}
	}
	return ms, mas, mbs
}

// Binary computes dst = a op b with numpy broadcasting.
func (DenseBackend) Binary(op tensor.BinaryOp, dst, a, b *gt.Dense) {
	name := "Binary(" + op.String() + ")"
	d := bDev(name, dst, a, b)
	code := bBinaryCode(op)
	shape := []int(dst.Shape())
	out, ab, bb := bBuf(dst), bBuf(a), bBuf(b)
	if out.Len() == 0 {
		return
	}
	ms, sa, sb := bMergeAxes(shape, bBroadcastStrides(a.Shape(), shape), bBroadcastStrides(b.Shape(), shape))
	if len(ms) == 1 && sa[0] == 1 && sb[0] == 1 {
		bCheck(name, d.Binary(code, out, ab, bb))
		return
	}
	r := len(ms)
	if r <= 4 {
		bCheck(name, d.BinaryBroadcast(code, out, ab, bb, ms, sa, sb))
		return
	}
	// More than four merged axes: one launch per index of the leading r−4.
	lead, tail := ms[:r-4], ms[r-4:]
	inner := 1
	for _, v := range tail {
		inner *= v
	}
	idx := make([]int, len(lead))
	for o := 0; o*inner < out.Len(); o++ {
		offA, offB := 0, 0
		for k, i := range idx {
			offA += i * sa[k]
			offB += i * sb[k]
		}
		bCheck(name, d.BinaryBroadcast(code, out.Slice(o*inner, (o+1)*inner), ab.Slice(offA, ab.Len()), bb.Slice(offB, bb.Len()), tail, sa[r-4:], sb[r-4:]))
		for k := len(idx) - 1; k >= 0; k-- {
			if idx[k]++; idx[k] < lead[k] {
				break
			}
			idx[k] = 0
		}
	}
}

// BinaryScalar computes dst = a op s (or s op a when scalarLeft).
func (DenseBackend) BinaryScalar(op tensor.BinaryOp, dst, a *gt.Dense, s float32, scalarLeft bool) {
	name := "BinaryScalar(" + op.String() + ")"
	d := bDev(name, dst, a)
	out, x := bBuf(dst), bBuf(a)
	n := out.Len()
	if n == 0 {
		return
	}
	switch {
	case op == tensor.OpAdd:
		bCheck(name, d.Unary(UnaryAddC, out, x, s))
	case op == tensor.OpMul:
		bCheck(name, d.Unary(UnaryScale, out, x, s))
	case op == tensor.OpSub && !scalarLeft:
		bCheck(name, d.Unary(UnaryAddC, out, x, -s))
	default: // s − a, a / s, s / a: a one-element device scalar, broadcast
		c := bScratch(name, d, 1)
		bCheck(name, d.Fill(c, s))
		if scalarLeft {
			bCheck(name, d.BinaryBroadcast(bBinaryCode(op), out, c, x, []int{n}, []int{0}, []int{1}))
		} else {
			bCheck(name, d.BinaryBroadcast(bBinaryCode(op), out, x, c, []int{n}, []int{1}, []int{0}))
		}
		bFree(name, d, c)
	}
}

// bAxisLast returns src (outer×n×inner) permuted to (outer×inner)×n in a
// new scratch buffer.
func bAxisLast(name string, d deviceKernels, src Buffer, outer, n, inner int) Buffer {
	t := bScratch(name, d, outer*n*inner)
	bCheck(name, d.StridedCopy(t, src, []int{outer, inner, n}, []int{n * inner, 1, inner}, 0))
	return t
}

// bAxisBack writes t ((outer×inner)×n) back to dst (outer×n×inner).
func bAxisBack(name string, d deviceKernels, dst, t Buffer, outer, n, inner int) {
	bCheck(name, d.StridedCopy(dst, t, []int{outer, n, inner}, []int{inner * n, 1, n}, 0))
}

// Reduce reduces src along axis into dst.
func (DenseBackend) Reduce(op tensor.ReduceOp, dst, src *gt.Dense, axis int) {
	name := "Reduce(" + op.String() + ")"
	d := bDev(name, dst, src)
	outer, n, inner := bSplitAxis(src.Shape(), axis)
	out, x := bBuf(dst), bBuf(src)
	if outer*inner == 0 {
		return
	}
	if n == 0 {
		if op != tensor.ReduceSum {
			panic(fmt.Sprintf("cuda: Reduce: %v over an empty axis of shape %v", op, src.Shape()))
		}
		bCheck(name, d.Fill(out, 0))
		return
	}
	switch {
	case op == tensor.ReduceMax:
		if inner == 1 {
			bCheck(name, d.MaxRows(out, x, outer, n))
			return
		}
		t := bAxisLast(name, d, x, outer, n, inner)
		bCheck(name, d.MaxRows(out, t, outer*inner, n))
		bFree(name, d, t)
		return
	case op != tensor.ReduceSum && op != tensor.ReduceMean:
		panic(fmt.Sprintf("cuda: Reduce: unknown op %v", op))
	case inner == 1:
		bCheck(name, d.SumRows(out, x, outer, n))
	case outer == 1:
		bCheck(name, d.SumCols(out, x, n, inner, 0))
	default:
		t := bAxisLast(name, d, x, outer, n, inner)
		bCheck(name, d.SumRows(out, t, outer*inner, n))
		bFree(name, d, t)
	}
	if op == tensor.ReduceMean {
		bCheck(name, d.Unary(UnaryScale, out, out, 1/float32(n)))
	}
}

// ArgMax copies src to the host and runs tensor.ArgMaxAxis there (no device
// kernel); dst is the host Int tensor the Dense-level ArgMax allocates.
func (DenseBackend) ArgMax(dst, src *gt.Dense, axis int) {
	d := bDev("ArgMax", src)
	outer, n, inner := bSplitAxis(src.Shape(), axis)
	h := make([]float32, outer*n*inner)
	bCheck("ArgMax", d.ToHost(h, bBuf(src)))
	tensor.ArgMaxAxis(dst.Ints()[:outer*inner], h, outer, n, inner)
}

// Softmax computes the (log-)softmax of src along axis.
func (DenseBackend) Softmax(dst, src *gt.Dense, axis int, log bool) {
	name := "Softmax"
	d := bDev(name, dst, src)
	outer, n, inner := bSplitAxis(src.Shape(), axis)
	out, x := bBuf(dst), bBuf(src)
	if out.Len() == 0 {
		return
	}
	rows := d.SoftmaxRows
	if log {
		rows = d.LogSoftmaxRows
	}
	if inner == 1 {
		bCheck(name, rows(out, x, outer, n))
		return
	}
	t := bAxisLast(name, d, x, outer, n, inner)
	u := bScratch(name, d, t.Len())
	bCheck(name, rows(u, t, outer*inner, n))
	bAxisBack(name, d, out, u, outer, n, inner)
	bFree(name, d, t, u)
}

// SoftmaxBackward computes dx from dy and the forward output y.
func (DenseBackend) SoftmaxBackward(dx, dy, y *gt.Dense, axis int, log bool) {
	name := "SoftmaxBackward"
	d := bDev(name, dx, dy, y)
	outer, n, inner := bSplitAxis(y.Shape(), axis)
	gx, gy, yb := bBuf(dx), bBuf(dy), bBuf(y)
	if gx.Len() == 0 {
		return
	}
	rows := d.SoftmaxBackwardRows
	if log {
		rows = d.LogSoftmaxBackwardRows
	}
	if inner == 1 {
		bCheck(name, rows(gx, gy, yb, outer, n))
		return
	}
	tdy := bAxisLast(name, d, gy, outer, n, inner)
	ty := bAxisLast(name, d, yb, outer, n, inner)
	u := bScratch(name, d, tdy.Len())
	bCheck(name, rows(u, tdy, ty, outer*inner, n))
	bAxisBack(name, d, gx, u, outer, n, inner)
	bFree(name, d, tdy, ty, u)
}

// LayerNorm normalises over the last axis (layernorm_fwd).
func (DenseBackend) LayerNorm(dst, mean, rstd, src, gamma, beta *gt.Dense, eps float32) {
	d := bDev("LayerNorm", dst, mean, rstd, src, gamma, beta)
	s := src.Shape()
	rows, cols := bNumel(s[:len(s)-1]), s[len(s)-1]
	bCheck("LayerNorm", d.LayerNormRows(bBuf(dst), bBuf(mean), bBuf(rstd), bBuf(src), bBuf(gamma), bBuf(beta), rows, cols, eps))
}

// LayerNormBackward computes dx and accumulates dgamma, dbeta.
func (DenseBackend) LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma *gt.Dense) {
	d := bDev("LayerNormBackward", dx, dgamma, dbeta, dy, x, mean, rstd, gamma)
	s := x.Shape()
	rows, cols := bNumel(s[:len(s)-1]), s[len(s)-1]
	bCheck("LayerNormBackward", d.LayerNormBackwardRows(bBuf(dx), bBuf(dgamma), bBuf(dbeta), bBuf(dy), bBuf(x),
		bBuf(mean), bBuf(rstd), bBuf(gamma), rows, cols))
}

// bIDs range-checks ids against a vocab×dim table on the host (the kernels
// do not) and copies them to the device as int32.
func bIDs(op string, d deviceKernels, ids []int, vocab, dim int) Buffer {
	for i, id := range ids {
		if id < 0 || id >= vocab {
			panic(fmt.Sprintf("cuda: %s: ids[%d] = %d out of range for a %d×%d table", op, i, id, vocab, dim))
		}
	}
	b, err := d.IDsToDevice(ids)
	bCheck(op, err)
	return b.Slice(0, len(ids))
}

// EmbeddingGather gathers rows ids of table into dst.
func (DenseBackend) EmbeddingGather(dst, table *gt.Dense, ids []int) {
	const name = "EmbeddingGather"
	d := bDev(name, dst, table)
	vocab, dim := table.Shape()[0], table.Shape()[1]
	if len(ids) == 0 || dim == 0 {
		return
	}
	ib := bIDs(name, d, ids, vocab, dim)
	bCheck(name, d.EmbeddingGather(bBuf(dst), bBuf(table), ib, dim))
	bFree(name, d, ib)
}

// EmbeddingScatterAdd adds row i of dy into row ids[i] of dtable (atomics).
func (DenseBackend) EmbeddingScatterAdd(dtable, dy *gt.Dense, ids []int) {
	const name = "EmbeddingScatterAdd"
	d := bDev(name, dtable, dy)
	vocab, dim := dtable.Shape()[0], dtable.Shape()[1]
	if len(ids) == 0 || dim == 0 {
		return
	}
	ib := bIDs(name, d, ids, vocab, dim)
	bCheck(name, d.EmbeddingScatterAdd(bBuf(dtable), bBuf(dy), ib, dim))
	bFree(name, d, ib)
}

// AdamW updates param, m and v in place (the adamw kernel; GradScale is
// applied to a scratch copy of the gradient first).
func (DenseBackend) AdamW(param, grad, m, v *gt.Dense, p tensor.AdamWParams) {
	const name = "AdamW"
	d := bDev(name, param, grad, m, v)
	if p.Step < 1 {
		panic(fmt.Sprintf("cuda: AdamW: step %d must be ≥ 1", p.Step))
	}
	pb, g := bBuf(param), bBuf(grad)
	if pb.Len() == 0 {
		return
	}
	var scaled Buffer
	if p.GradScale != 0 && p.GradScale != 1 {
		scaled = bScratch(name, d, g.Len())
		bCheck(name, d.Unary(UnaryScale, scaled, g, p.GradScale))
		g = scaled
	}
	c := AdamWConfig{LR: p.LR, Beta1: p.Beta1, Beta2: p.Beta2, Eps: p.Eps, WeightDecay: p.WeightDecay}
	bCheck(name, d.AdamW(pb, g, bBuf(m), bBuf(v), p.Step, c))
	if scaled.Len() > 0 {
		bFree(name, d, scaled)
	}
}

// SumSquares returns Σ x² (square, reduce_all, read back).
func (DenseBackend) SumSquares(x *gt.Dense) float64 {
	const name = "SumSquares"
	d := bDev(name, x)
	xb := bBuf(x)
	if xb.Len() == 0 {
		return 0
	}
	t := bScratch(name, d, xb.Len())
	s := bScratch(name, d, 1)
	bCheck(name, d.Unary(UnarySquare, t, xb, 0))
	bCheck(name, d.Sum(s, t))
	h := make([]float32, 1)
	bCheck(name, d.ToHost(h, s))
	bFree(name, d, t, s)
	return float64(h[0])
}

// Fill sets every element of dst to v (the fill kernel).
func (DenseBackend) Fill(dst *gt.Dense, v float32) {
	const name = "Fill"
	d := bDev(name, dst)
	out := bBuf(dst)
	if out.Len() == 0 {
		return
	}
	bCheck(name, d.Fill(out, v))
}

// Copy copies src into dst (the same number of elements) with one
// strided_copy launch.
func (DenseBackend) Copy(dst, src *gt.Dense) {
	const name = "Copy"
	d := bDev(name, dst, src)
	out, x := bBuf(dst), bBuf(src)
	if out.Len() != x.Len() {
		panic(fmt.Sprintf("cuda: Copy: dst has shape %v, src has shape %v (different sizes)", dst.Shape(), src.Shape()))
	}
	if out.Len() == 0 {
		return
	}
	bCheck(name, d.StridedCopy(out, x, []int{out.Len()}, []int{1}, 0))
}
