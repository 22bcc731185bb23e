package tensor

import (
	"fmt"
	"math/rand/v2"
	"slices"

	gt "gorgonia.org/tensor"
)

// The Dense-level API: float32 *tensor.Dense values (gorgonia.org/tensor)
// in, the same out. Functions that produce a tensor take the destination
// first, gonum style: a nil dst is allocated (on the first operand's engine),
// a non-nil dst must have the result's shape and is returned. Every function
// validates shapes, then calls one method of the operands' Backend (see
// BackendOf). Shape errors are programmer errors and panic with a message
// that names the shapes. Non-contiguous views (transposes, strided slices)
// are materialised into a copy before use.

// New returns a zero-filled float32 tensor of the given shape.
func New(shape ...int) *gt.Dense { return Zeros(shape...) }

// Zeros returns a zero-filled float32 tensor of the given shape.
func Zeros(shape ...int) *gt.Dense {
	kCheckShape("Zeros", shape)
	return gt.New(gt.WithShape(shape...), gt.Of(gt.Float32))
}

// Full returns a float32 tensor of the given shape filled with v.
func Full(v float32, shape ...int) *gt.Dense {
	t := Zeros(shape...)
	d := Data(t)
	for i := range d {
		d[i] = v
	}
	return t
}

// FromSlice wraps data (not copied) as a tensor of the given shape; with no
// shape it is a vector of len(data). It panics unless the shape holds
// exactly len(data) elements.
func FromSlice(data []float32, shape ...int) *gt.Dense {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	kCheckShape("FromSlice", shape)
	if n := kProd(shape); n != len(data) {
		panic(fmt.Sprintf("tensor: FromSlice: shape %v holds %d elements, data has %d", shape, n, len(data)))
	}
	if len(data) == 0 {
		return Zeros(shape...)
	}
	return gt.New(gt.WithShape(shape...), gt.WithBacking(data))
}

// RandN returns a tensor of standard normal samples drawn from rng (seed it:
// rand.New(rand.NewPCG(seed, seq))).
func RandN(rng *rand.Rand, shape ...int) *gt.Dense {
	t := Zeros(shape...)
	d := Data(t)
	for i := range d {
		d[i] = float32(rng.NormFloat64())
	}
	return t
}

// Data returns the float32 elements of t in row-major order, sharing t's
// memory. It panics if t is not float32, lives in memory Go cannot read, or
// is a non-contiguous view (Materialize it first).
func Data(t *gt.Dense) []float32 {
	if t == nil {
		panic("tensor: Data: nil tensor")
	}
	if t.Dtype() != gt.Float32 {
		panic(fmt.Sprintf("tensor: Data: tensor of shape %v has dtype %v, want float32", t.Shape(), t.Dtype()))
	}
	if !t.IsNativelyAccessible() {
		panic(fmt.Sprintf("tensor: Data: tensor of shape %v lives in memory Go cannot access (engine %T)", t.Shape(), t.Engine()))
	}
	n := kProd(t.Shape())
	if n == 0 {
		return []float32{}
	}
	if kStrided(t) {
		panic(fmt.Sprintf("tensor: Data: tensor of shape %v is a non-contiguous view; Materialize it first", t.Shape()))
	}
	return t.Float32s()[:n:n]
}

// ---- helpers -------------------------------------------------------------

func kProd(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func kCheckShape(op string, shape []int) {
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: %s: negative dimension in shape %v", op, shape))
		}
	}
}

// kIn checks that t is a float32 tensor and returns a contiguous version.
func kIn(op, name string, t *gt.Dense) *gt.Dense {
	if t == nil {
		panic(fmt.Sprintf("tensor: %s: %s is nil", op, name))
	}
	if t.Dtype() != gt.Float32 {
		panic(fmt.Sprintf("tensor: %s: %s (shape %v) has dtype %v, want float32", op, name, t.Shape(), t.Dtype()))
	}
	if kStrided(t) {
		return t.Materialize().(*gt.Dense)
	}
	return t
}

// kStrided reports whether t's elements are not laid out contiguously in
// row-major order (a transpose or strided slice). Empty tensors never are.
func kStrided(t *gt.Dense) bool {
	return kProd(t.Shape()) > 1 && t.RequiresIterator()
}

// kOut returns dst, or a new tensor of the given shape on ref's engine when
// dst is nil; a non-nil dst must have exactly that shape.
func kOut(op string, dst, ref *gt.Dense, shape []int) *gt.Dense {
	if dst == nil {
		return kAlloc(ref, shape)
	}
	if !slices.Equal([]int(dst.Shape()), shape) && !(len(shape) == 0 && dst.IsScalar()) {
		panic(fmt.Sprintf("tensor: %s: dst has shape %v, result has shape %v", op, dst.Shape(), shape))
	}
	if dst.Dtype() != gt.Float32 {
		panic(fmt.Sprintf("tensor: %s: dst (shape %v) has dtype %v, want float32", op, dst.Shape(), dst.Dtype()))
	}
	if kStrided(dst) {
		panic(fmt.Sprintf("tensor: %s: dst (shape %v) is a non-contiguous view", op, dst.Shape()))
	}
	return dst
}

func kAlloc(ref *gt.Dense, shape []int) *gt.Dense {
	if ref != nil && ref.Engine() != nil {
		if _, std := ref.Engine().(gt.StdEng); !std {
			return gt.New(gt.WithShape(shape...), gt.Of(gt.Float32), gt.WithEngine(ref.Engine()))
		}
	}
	return gt.New(gt.WithShape(shape...), gt.Of(gt.Float32))
}

// kAxis resolves a possibly negative axis against rank.
func kAxis(op string, shape gt.Shape, axis int) int {
	r := len(shape)
	if axis < -r || axis >= r {
		panic(fmt.Sprintf("tensor: %s: axis %d out of range for shape %v", op, axis, shape))
	}
	if axis < 0 {
		axis += r
	}
	return axis
}

// BroadcastShape returns the numpy broadcast of shapes a and b: aligned on
// the right, each pair of dimensions equal or one of them 1. It panics,
// naming both shapes, when they are incompatible.
func BroadcastShape(a, b []int) []int {
	r := max(len(a), len(b))
	out := make([]int, r)
	for i := 0; i < r; i++ {
		da, db := 1, 1
		if j := len(a) - r + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - r + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			panic(fmt.Sprintf("tensor: shapes %v and %v do not broadcast (axis %d: %d vs %d)", a, b, i, da, db))
		}
	}
	return out
}

// ---- element-wise --------------------------------------------------------

func kBinary(op BinaryOp, name string, dst, a, b *gt.Dense) *gt.Dense {
	a, b = kIn(name, "a", a), kIn(name, "b", b)
	var shape []int
	func() {
		defer func() {
			if r := recover(); r != nil {
				panic(fmt.Sprintf("tensor: %s: shapes %v and %v do not broadcast", name, a.Shape(), b.Shape()))
			}
		}()
		shape = BroadcastShape(a.Shape(), b.Shape())
	}()
	dst = kOut(name, dst, a, shape)
	kBackend(name, dst, a, b).Binary(op, dst, a, b)
	return dst
}

// Add sets dst = a + b with numpy broadcasting and returns dst.
func Add(dst, a, b *gt.Dense) *gt.Dense { return kBinary(OpAdd, "Add", dst, a, b) }

// Sub sets dst = a - b with numpy broadcasting.
func Sub(dst, a, b *gt.Dense) *gt.Dense { return kBinary(OpSub, "Sub", dst, a, b) }

// Mul sets dst = a ⊙ b (element-wise) with numpy broadcasting.
func Mul(dst, a, b *gt.Dense) *gt.Dense { return kBinary(OpMul, "Mul", dst, a, b) }

// Div sets dst = a / b (element-wise) with numpy broadcasting.
func Div(dst, a, b *gt.Dense) *gt.Dense { return kBinary(OpDiv, "Div", dst, a, b) }

func kScalar(op BinaryOp, name string, dst, a *gt.Dense, s float32, left bool) *gt.Dense {
	a = kIn(name, "a", a)
	dst = kOut(name, dst, a, a.Shape())
	kBackend(name, dst, a).BinaryScalar(op, dst, a, s, left)
	return dst
}

// AddScalar sets dst = a + s.
func AddScalar(dst, a *gt.Dense, s float32) *gt.Dense {
	return kScalar(OpAdd, "AddScalar", dst, a, s, false)
}

// SubScalar sets dst = a - s.
func SubScalar(dst, a *gt.Dense, s float32) *gt.Dense {
	return kScalar(OpSub, "SubScalar", dst, a, s, false)
}

// MulScalar sets dst = a·s.
func MulScalar(dst, a *gt.Dense, s float32) *gt.Dense {
	return kScalar(OpMul, "MulScalar", dst, a, s, false)
}

// DivScalar sets dst = a / s.
func DivScalar(dst, a *gt.Dense, s float32) *gt.Dense {
	return kScalar(OpDiv, "DivScalar", dst, a, s, false)
}

// ScalarSub sets dst = s - a.
func ScalarSub(dst, a *gt.Dense, s float32) *gt.Dense {
	return kScalar(OpSub, "ScalarSub", dst, a, s, true)
}

// ScalarDiv sets dst = s / a.
func ScalarDiv(dst, a *gt.Dense, s float32) *gt.Dense {
	return kScalar(OpDiv, "ScalarDiv", dst, a, s, true)
}

// Apply sets dst = f(a) element-wise for the function op.
func Apply(op UnaryOp, dst, a *gt.Dense) *gt.Dense {
	name := "Apply(" + op.String() + ")"
	a = kIn(name, "a", a)
	dst = kOut(name, dst, a, a.Shape())
	kBackend(name, dst, a).Unary(op, dst, a)
	return dst
}

// ApplyBackward sets dx = dy·f'(x) for the function op, given the forward
// input x and output y (exp, tanh and sigmoid read y; log, ReLU and GELU read
// x; the one not needed may be nil).
func ApplyBackward(op UnaryOp, dx, dy, x, y *gt.Dense) *gt.Dense {
	name := "ApplyBackward(" + op.String() + ")"
	dy = kIn(name, "dy", dy)
	ref := y
	switch op {
	case OpLog, OpReLU, OpGELU:
		x = kIn(name, "x", x)
		ref = x
	case OpExp, OpTanh, OpSigmoid:
		y = kIn(name, "y", y)
	case OpNeg:
		ref = dy
	}
	if !slices.Equal([]int(dy.Shape()), []int(ref.Shape())) {
		panic(fmt.Sprintf("tensor: %s: dy has shape %v, forward tensor has shape %v", name, dy.Shape(), ref.Shape()))
	}
	dx = kOut(name, dx, dy, dy.Shape())
	kBackend(name, dx, dy, ref).UnaryBackward(op, dx, dy, x, y)
	return dx
}

// Exp sets dst = eᵃ element-wise.
func Exp(dst, a *gt.Dense) *gt.Dense { return Apply(OpExp, dst, a) }

// Log sets dst = ln a element-wise.
func Log(dst, a *gt.Dense) *gt.Dense { return Apply(OpLog, dst, a) }

// Tanh sets dst = tanh a element-wise.
func Tanh(dst, a *gt.Dense) *gt.Dense { return Apply(OpTanh, dst, a) }

// Sigmoid sets dst = 1/(1+e⁻ᵃ) element-wise.
func Sigmoid(dst, a *gt.Dense) *gt.Dense { return Apply(OpSigmoid, dst, a) }

// ReLU sets dst = max(a, 0) element-wise.
func ReLU(dst, a *gt.Dense) *gt.Dense { return Apply(OpReLU, dst, a) }

// Gelu sets dst = GELU(a) element-wise (tanh approximation; the slice
// kernel is GELU).
func Gelu(dst, a *gt.Dense) *gt.Dense { return Apply(OpGELU, dst, a) }

// ---- reductions ----------------------------------------------------------

func kReduce(op ReduceOp, name string, dst, a *gt.Dense, axis int) *gt.Dense {
	a = kIn(name, "a", a)
	ax := kAxis(name, a.Shape(), axis)
	if a.Shape()[ax] == 0 && op != ReduceSum {
		panic(fmt.Sprintf("tensor: %s: axis %d of shape %v is empty", name, axis, a.Shape()))
	}
	shape := slices.Delete(slices.Clone([]int(a.Shape())), ax, ax+1)
	dst = kOut(name, dst, a, shape)
	kBackend(name, dst, a).Reduce(op, dst, a, ax)
	return dst
}

// Sum sets dst to the sum of a along axis (negative counts from the end);
// dst's shape is a's without that axis.
func Sum(dst, a *gt.Dense, axis int) *gt.Dense { return kReduce(ReduceSum, "Sum", dst, a, axis) }

// Mean sets dst to the mean of a along axis.
func Mean(dst, a *gt.Dense, axis int) *gt.Dense { return kReduce(ReduceMean, "Mean", dst, a, axis) }

// Max sets dst to the maximum of a along axis.
func Max(dst, a *gt.Dense, axis int) *gt.Dense { return kReduce(ReduceMax, "Max", dst, a, axis) }

// ArgMax returns an Int tensor (a's shape without axis) holding the index
// along axis of the first maximum.
func ArgMax(a *gt.Dense, axis int) *gt.Dense {
	a = kIn("ArgMax", "a", a)
	ax := kAxis("ArgMax", a.Shape(), axis)
	if a.Shape()[ax] == 0 {
		panic(fmt.Sprintf("tensor: ArgMax: axis %d of shape %v is empty", axis, a.Shape()))
	}
	shape := slices.Delete(slices.Clone([]int(a.Shape())), ax, ax+1)
	dst := gt.New(gt.WithShape(shape...), gt.Of(gt.Int))
	kBackend("ArgMax", a).ArgMax(dst, a, ax)
	return dst
}

// SumAll returns the sum of all elements of a.
func SumAll(a *gt.Dense) float32 {
	a = kIn("SumAll", "a", a)
	if BackendOf(a) == CPU {
		return VecSum(Data(a))
	}
	flat := a.ShallowClone()
	if err := flat.Reshape(kProd(a.Shape())); err != nil {
		panic(fmt.Sprintf("tensor: SumAll: reshape %v: %v", a.Shape(), err))
	}
	return Data(Sum(nil, flat, 0))[0]
}

// ---- softmax -------------------------------------------------------------

func kSoftmax(name string, dst, a *gt.Dense, axis int, log bool) *gt.Dense {
	a = kIn(name, "a", a)
	ax := kAxis(name, a.Shape(), axis)
	dst = kOut(name, dst, a, a.Shape())
	kBackend(name, dst, a).Softmax(dst, a, ax, log)
	return dst
}

// Softmax sets dst to the softmax of a along axis (negative counts from the
// end): exp(a - max) / Σ exp(a - max).
func Softmax(dst, a *gt.Dense, axis int) *gt.Dense { return kSoftmax("Softmax", dst, a, axis, false) }

// LogSoftmax sets dst to the log-softmax of a along axis.
func LogSoftmax(dst, a *gt.Dense, axis int) *gt.Dense {
	return kSoftmax("LogSoftmax", dst, a, axis, true)
}

func kSoftmaxBwd(name string, dx, dy, y *gt.Dense, axis int, log bool) *gt.Dense {
	dy, y = kIn(name, "dy", dy), kIn(name, "y", y)
	if !slices.Equal([]int(dy.Shape()), []int(y.Shape())) {
		panic(fmt.Sprintf("tensor: %s: dy has shape %v, y has shape %v", name, dy.Shape(), y.Shape()))
	}
	ax := kAxis(name, y.Shape(), axis)
	dx = kOut(name, dx, y, y.Shape())
	kBackend(name, dx, dy, y).SoftmaxBackward(dx, dy, y, ax, log)
	return dx
}

// SoftmaxBackward sets dx = y·(dy - Σ dy·y) along axis, for y = Softmax(x).
func SoftmaxBackward(dx, dy, y *gt.Dense, axis int) *gt.Dense {
	return kSoftmaxBwd("SoftmaxBackward", dx, dy, y, axis, false)
}

// LogSoftmaxBackward sets dx = dy - exp(y)·Σ dy along axis, for
// y = LogSoftmax(x).
func LogSoftmaxBackward(dx, dy, y *gt.Dense, axis int) *gt.Dense {
	return kSoftmaxBwd("LogSoftmaxBackward", dx, dy, y, axis, true)
}

// ---- layer norm ----------------------------------------------------------

// LayerNorm normalises x over its last axis, scales by gamma and shifts by
// beta (both vectors of that axis' length), writing dst (allocated when nil).
// It returns dst and the per-row mean and reciprocal standard deviation
// (shape: x's without the last axis) that LayerNormBackward needs.
func LayerNorm(dst, x, gamma, beta *gt.Dense, eps float32) (y, mean, rstd *gt.Dense) {
	const name = "LayerNorm"
	x, gamma, beta = kIn(name, "x", x), kIn(name, "gamma", gamma), kIn(name, "beta", beta)
	xs := x.Shape()
	if len(xs) == 0 {
		panic("tensor: LayerNorm: x is a scalar")
	}
	c := xs[len(xs)-1]
	if !slices.Equal([]int(gamma.Shape()), []int{c}) || !slices.Equal([]int(beta.Shape()), []int{c}) {
		panic(fmt.Sprintf("tensor: LayerNorm: x has shape %v, gamma %v and beta %v must be (%d)", xs, gamma.Shape(), beta.Shape(), c))
	}
	y = kOut(name, dst, x, xs)
	stat := slices.Clone([]int(xs[:len(xs)-1]))
	if len(stat) == 0 {
		stat = []int{1}
	}
	mean, rstd = kAlloc(x, stat), kAlloc(x, stat)
	kBackend(name, y, x, gamma, beta).LayerNorm(y, mean, rstd, x, gamma, beta, eps)
	return y, mean, rstd
}

// LayerNormBackward computes dx for LayerNorm and accumulates the gradients
// of gamma and beta into dgamma and dbeta (allocated as zeros when nil). It
// returns the three.
func LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma *gt.Dense) (*gt.Dense, *gt.Dense, *gt.Dense) {
	const name = "LayerNormBackward"
	dy, x, mean, rstd, gamma = kIn(name, "dy", dy), kIn(name, "x", x), kIn(name, "mean", mean), kIn(name, "rstd", rstd), kIn(name, "gamma", gamma)
	xs := x.Shape()
	if len(xs) == 0 || !slices.Equal([]int(dy.Shape()), []int(xs)) {
		panic(fmt.Sprintf("tensor: LayerNormBackward: dy has shape %v, x has shape %v", dy.Shape(), xs))
	}
	rows, c := kRowsCols(xs)
	if !slices.Equal([]int(gamma.Shape()), []int{c}) || kProd(mean.Shape()) != rows || kProd(rstd.Shape()) != rows {
		panic(fmt.Sprintf("tensor: LayerNormBackward: x has shape %v; gamma %v, mean %v, rstd %v do not match", xs, gamma.Shape(), mean.Shape(), rstd.Shape()))
	}
	dx = kOut(name, dx, x, xs)
	dgamma = kOut(name, dgamma, x, []int{c})
	dbeta = kOut(name, dbeta, x, []int{c})
	kBackend(name, dx, dgamma, dbeta, dy, x, mean, rstd, gamma).LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma)
	return dx, dgamma, dbeta
}

// ---- embedding -----------------------------------------------------------

// Embedding gathers rows ids of table (vocab×dim) into dst (len(ids)×dim).
func Embedding(dst, table *gt.Dense, ids []int) *gt.Dense {
	table = kIn("Embedding", "table", table)
	if table.Dims() != 2 {
		panic(fmt.Sprintf("tensor: Embedding: table has shape %v, want (vocab, dim)", table.Shape()))
	}
	dst = kOut("Embedding", dst, table, []int{len(ids), table.Shape()[1]})
	kBackend("Embedding", dst, table).EmbeddingGather(dst, table, ids)
	return dst
}

// EmbeddingBackward adds row i of dy (len(ids)×dim) into row ids[i] of
// dtable (vocab×dim).
func EmbeddingBackward(dtable, dy *gt.Dense, ids []int) {
	dtable, dy = kIn("EmbeddingBackward", "dtable", dtable), kIn("EmbeddingBackward", "dy", dy)
	if dtable.Dims() != 2 || !slices.Equal([]int(dy.Shape()), []int{len(ids), dtable.Shape()[1]}) {
		panic(fmt.Sprintf("tensor: EmbeddingBackward: dtable has shape %v, dy has shape %v, %d ids", dtable.Shape(), dy.Shape(), len(ids)))
	}
	kBackend("EmbeddingBackward", dtable, dy).EmbeddingScatterAdd(dtable, dy, ids)
}

// ---- matmul --------------------------------------------------------------

// MatMul sets dst = a·b for 2-D a (m×k) and b (k×n), or batched for 3-D a
// (B×m×k) with 3-D b (B×k×n) or a shared 2-D b. It runs Gemm.
func MatMul(dst, a, b *gt.Dense) *gt.Dense { return MatMulTrans(dst, a, b, false, false) }

// MatMulTrans is MatMul with op(a), op(b) = aᵀ, bᵀ where requested (the
// transpose swaps the last two axes).
func MatMulTrans(dst, a, b *gt.Dense, transA, transB bool) *gt.Dense {
	const name = "MatMul"
	a, b = kIn(name, "a", a), kIn(name, "b", b)
	as, bs := a.Shape(), b.Shape()
	bad := func() {
		panic(fmt.Sprintf("tensor: MatMul: shapes %v and %v (transA=%v, transB=%v) do not multiply", as, bs, transA, transB))
	}
	if len(as) < 2 || len(as) > 3 || len(bs) < 2 || len(bs) > 3 || len(bs) > len(as) {
		bad()
	}
	m, k := as[len(as)-2], as[len(as)-1]
	if transA {
		m, k = k, m
	}
	k2, n := bs[len(bs)-2], bs[len(bs)-1]
	if transB {
		k2, n = n, k2
	}
	if k != k2 || (len(bs) == 3 && bs[0] != as[0]) {
		bad()
	}
	shape := []int{m, n}
	if len(as) == 3 {
		shape = []int{as[0], m, n}
	}
	dst = kOut(name, dst, a, shape)
	kBackend(name, dst, a, b).MatMul(transA, transB, 1, a, b, 0, dst)
	return dst
}

// ---- optimiser -----------------------------------------------------------

// AdamWStep applies one AdamW update (see AdamW) to param in place, with the
// moment tensors m and v (same shape, zeros before the first step).
func AdamWStep(param, grad, m, v *gt.Dense, p AdamWParams) {
	const name = "AdamWStep"
	for _, t := range []*gt.Dense{param, grad, m, v} {
		if t == nil || kStrided(t) || t.Dtype() != gt.Float32 {
			panic("tensor: AdamWStep: param, grad, m and v must be contiguous float32 tensors")
		}
	}
	s := param.Shape()
	if !slices.Equal([]int(grad.Shape()), []int(s)) || !slices.Equal([]int(m.Shape()), []int(s)) || !slices.Equal([]int(v.Shape()), []int(s)) {
		panic(fmt.Sprintf("tensor: AdamWStep: shapes param %v, grad %v, m %v, v %v differ", s, grad.Shape(), m.Shape(), v.Shape()))
	}
	kBackend(name, param, grad, m, v).AdamW(param, grad, m, v, p)
}

// GlobalNormOf returns √(Σ over all tensors of Σ x²), accumulated in float64.
func GlobalNormOf(ts ...*gt.Dense) float64 {
	var s float64
	for i, t := range ts {
		t = kIn("GlobalNormOf", fmt.Sprintf("tensor %d", i), t)
		s += BackendOf(t).SumSquares(t)
	}
	return sqrt64(s)
}
