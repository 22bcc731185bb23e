package cuda

// Tests of DenseBackend's dispatch and kernel mapping without a GPU: fakeDev
// is a gorgonia.org/tensor engine whose "device memory" is Go memory that
// the tensor package may not read (AllocAccessible is false, so
// tensor.Data panics on it), and whose kernel methods follow the CUDA
// kernels' documented semantics (buffer-length checks included) on the host.
// Package tensor's Dense-level functions run on fake tensors through
// DenseBackend and are compared with the same calls on host tensors (the CPU
// backend). This checks the Dense → kernel mapping (shapes, strides, axis
// permutes, broadcasting, scalar forms, fallbacks, scratch buffers); it does
// not check the CUDA kernels themselves (gpu_test.go and backend_gpu_test.go
// do that on a GPU).

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/tensor"
)

type fakeDev struct {
	mem     map[uintptr][]float32 // keeps allocations alive
	calls   map[string]int
	scratch int // NewBuffer minus FreeBuffer
}

func newFakeDev() *fakeDev {
	return &fakeDev{mem: map[uintptr][]float32{}, calls: map[string]int{}}
}

func fakePtr(u uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&u)) }

func (f *fakeDev) f32(b Buffer) []float32 {
	if b.Len() == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(fakePtr(b.ptr)), b.Len())
}

func (f *fakeDev) i32s(b Buffer) []int32 {
	if b.Len() == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(fakePtr(b.ptr)), b.Len())
}

func (f *fakeDev) alloc(n int) Buffer {
	n = max(n, 1)
	s := make([]float32, n)
	p := uintptr(unsafe.Pointer(&s[0]))
	f.mem[p] = s
	return Buffer{ptr: p, bytes: int64(n) * 4}
}

// ---- gorgonia.org/tensor Engine ----

func (f *fakeDev) AllocAccessible() bool { return false }
func (f *fakeDev) NonStdAlloc()          {}
func (f *fakeDev) Alloc(size int64) (gt.Memory, error) {
	return f.alloc(int((size + 3) / 4)), nil
}
func (f *fakeDev) Free(mem gt.Memory, size int64) error { delete(f.mem, mem.Uintptr()); return nil }
func (f *fakeDev) Memset(mem gt.Memory, val interface{}) error {
	return fmt.Errorf("fakeDev: Memset not supported")
}
func (f *fakeDev) Memclr(mem gt.Memory) { clear(f.f32(BufferAt(mem.Uintptr(), int(mem.MemSize()/4)))) }
func (f *fakeDev) Memcpy(dst, src gt.Memory) error {
	return fmt.Errorf("fakeDev: Memcpy not supported")
}
func (f *fakeDev) Accessible(mem gt.Memory) (gt.Memory, error) {
	return nil, fmt.Errorf("fakeDev: not accessible")
}
func (f *fakeDev) WorksWith(order gt.DataOrder) bool {
	return order.IsRowMajor() && order.IsContiguous()
}

// ---- kernels (the semantics of ops.go) ----

func (f *fakeDev) GemmBatched(transA, transB bool, batch, m, n, k int, alpha float32, a Buffer, lda, strideA int, b Buffer, ldb, strideB int, beta float32, c Buffer, ldc, strideC int) error {
	f.calls["gemm"]++
	if err := CheckGemm(transA, transB, batch, m, n, k, a.Len(), lda, strideA, b.Len(), ldb, strideB, c.Len(), ldc, strideC); err != nil {
		panic(err.Error())
	}
	A, B, C := f.f32(a), f.f32(b), f.f32(c)
	for i := 0; i < batch && m > 0 && n > 0; i++ {
		tensor.Gemm(transA, transB, m, n, k, alpha, A[i*strideA:], lda, B[i*strideB:], ldb, beta, C[i*strideC:], ldc)
	}
	return nil
}

func fakeBinop(op int, x, y float32) float32 {
	switch op {
	case OpAdd:
		return x + y
	case OpSub:
		return x - y
	case OpMul:
		return x * y
	case OpDiv:
		return x / y
	case OpMax, OpMin: // fmaxf/fminf: a NaN operand yields the other
		if x != x {
			return y
		}
		if y != y {
			return x
		}
		if (op == OpMax) == (x > y) {
			return x
		}
		return y
	}
	panic(op)
}

func (f *fakeDev) Binary(op int, out, a, b Buffer) error {
	f.calls["binary_same"]++
	n := out.Len()
	need("Binary", "a", a, n)
	need("Binary", "b", b, n)
	o, x, y := f.f32(out), f.f32(a), f.f32(b)
	for i := range o {
		o[i] = fakeBinop(op, x[i], y[i])
	}
	return nil
}

// fake4 pads shape/strides to 4 dims and returns the element count and the
// largest offset read.
func fake4(shape, strides []int) (sh, st [4]int, total, maxOff int) {
	sh = [4]int{1, 1, 1, 1}
	off := 4 - len(shape)
	total = 1
	for i, d := range shape {
		sh[off+i], st[off+i] = d, strides[i]
		total *= d
		if d > 0 {
			maxOff += (d - 1) * strides[i]
		}
	}
	return
}

func (f *fakeDev) BinaryBroadcast(op int, out, a, b Buffer, shape, aStrides, bStrides []int) error {
	f.calls["binary_bcast"]++
	if len(shape) > 4 || len(aStrides) != len(shape) || len(bStrides) != len(shape) {
		panic(fmt.Sprintf("BinaryBroadcast: shape %v strides %v %v", shape, aStrides, bStrides))
	}
	sh, sa, total, amax := fake4(shape, aStrides)
	_, sb, _, bmax := fake4(shape, bStrides)
	if total == 0 {
		return nil
	}
	need("BinaryBroadcast", "out", out, total)
	need("BinaryBroadcast", "a", a, amax+1)
	need("BinaryBroadcast", "b", b, bmax+1)
	o, x, y := f.f32(out), f.f32(a), f.f32(b)
	i := 0
	for i0 := 0; i0 < sh[0]; i0++ {
		for i1 := 0; i1 < sh[1]; i1++ {
			for i2 := 0; i2 < sh[2]; i2++ {
				for i3 := 0; i3 < sh[3]; i3++ {
					o[i] = fakeBinop(op, x[i0*sa[0]+i1*sa[1]+i2*sa[2]+i3*sa[3]], y[i0*sb[0]+i1*sb[1]+i2*sb[2]+i3*sb[3]])
					i++
				}
			}
		}
	}
	return nil
}

func (f *fakeDev) Unary(op int, out, x Buffer, alpha float32) error {
	f.calls["unary"]++
	need("Unary", "x", x, out.Len())
	o, s := f.f32(out), f.f32(x)
	for i := range o {
		v := float64(s[i])
		var r float64
		switch op {
		case UnaryScale:
			r = float64(alpha * s[i])
		case UnaryExp:
			r = math.Exp(v)
		case UnaryLog:
			r = math.Log(v)
		case UnaryTanh:
			r = math.Tanh(v)
		case UnaryReLU:
			r = math.Max(v, 0)
		case UnaryNeg:
			r = -v
		case UnarySqrt:
			r = math.Sqrt(v)
		case UnarySquare:
			r = float64(s[i] * s[i])
		case UnaryAddC:
			r = float64(s[i] + alpha)
		case UnarySigmoid:
			r = 1 / (1 + math.Exp(-v))
		default:
			panic(op)
		}
		o[i] = float32(r)
	}
	return nil
}

func (f *fakeDev) Fill(out Buffer, v float32) error {
	f.calls["fill"]++
	for i := range f.f32(out) {
		f.f32(out)[i] = v
	}
	return nil
}

func (f *fakeDev) GELU(dst, src Buffer) error {
	f.calls["gelu_fwd"]++
	need("GELU", "dst", dst, src.Len())
	tensor.GELU(f.f32(dst)[:src.Len()], f.f32(src))
	return nil
}

func (f *fakeDev) GELUBackward(dx, dy, x Buffer) error {
	f.calls["gelu_bwd"]++
	n := x.Len()
	need("GELUBackward", "dx", dx, n)
	need("GELUBackward", "dy", dy, n)
	tensor.GELUBackward(f.f32(dx)[:n], f.f32(dy)[:n], f.f32(x))
	return nil
}

func (f *fakeDev) reduceRows(out, x Buffer, rows, cols int, max bool) {
	f.calls["reduce_rows"]++
	need("reduce rows", "x", x, rows*cols)
	need("reduce rows", "out", out, rows)
	o, s := f.f32(out), f.f32(x)
	for r := 0; r < rows; r++ {
		acc := float32(0)
		if max {
			acc = float32(math.Inf(-1))
		}
		for _, v := range s[r*cols : (r+1)*cols] {
			if max {
				acc = fakeBinop(OpMax, acc, v)
			} else {
				acc += v
			}
		}
		o[r] = acc
	}
}

func (f *fakeDev) SumRows(out, x Buffer, rows, cols int) error {
	f.reduceRows(out, x, rows, cols, false)
	return nil
}

func (f *fakeDev) MaxRows(out, x Buffer, rows, cols int) error {
	f.reduceRows(out, x, rows, cols, true)
	return nil
}

func (f *fakeDev) SumCols(out, x Buffer, rows, cols int, beta float32) error {
	f.calls["reduce_cols"]++
	need("SumCols", "x", x, rows*cols)
	need("SumCols", "out", out, cols)
	o, s := f.f32(out), f.f32(x)
	for c := 0; c < cols; c++ {
		acc := float32(0)
		for r := 0; r < rows; r++ {
			acc += s[r*cols+c]
		}
		if beta == 0 {
			o[c] = acc
		} else {
			o[c] = beta*o[c] + acc
		}
	}
	return nil
}

func (f *fakeDev) Sum(out, x Buffer) error {
	f.calls["reduce_all"]++
	need("Sum", "out", out, 1)
	acc := float32(0)
	for _, v := range f.f32(x) {
		acc += v
	}
	f.f32(out)[0] = acc
	return nil
}

func (f *fakeDev) StridedCopy(out, a Buffer, shape, strides []int, beta float32) error {
	f.calls["strided_copy"]++
	if len(shape) > 4 || len(strides) != len(shape) {
		panic(fmt.Sprintf("StridedCopy: shape %v strides %v", shape, strides))
	}
	sh, st, total, amax := fake4(shape, strides)
	if total == 0 {
		return nil
	}
	need("StridedCopy", "out", out, total)
	need("StridedCopy", "a", a, amax+1)
	o, x := f.f32(out), f.f32(a)
	i := 0
	for i0 := 0; i0 < sh[0]; i0++ {
		for i1 := 0; i1 < sh[1]; i1++ {
			for i2 := 0; i2 < sh[2]; i2++ {
				for i3 := 0; i3 < sh[3]; i3++ {
					v := x[i0*st[0]+i1*st[1]+i2*st[2]+i3*st[3]]
					if beta != 0 {
						v += beta * o[i]
					}
					o[i] = v
					i++
				}
			}
		}
	}
	return nil
}

func (f *fakeDev) rows2(name string, dst, src Buffer, rows, cols int, k func(d, s []float32, r, c int)) error {
	f.calls[name]++
	need(name, "src", src, rows*cols)
	need(name, "dst", dst, rows*cols)
	k(f.f32(dst)[:rows*cols], f.f32(src)[:rows*cols], rows, cols)
	return nil
}

func (f *fakeDev) SoftmaxRows(dst, src Buffer, rows, cols int) error {
	return f.rows2("softmax_rows", dst, src, rows, cols, tensor.SoftmaxRows)
}

func (f *fakeDev) LogSoftmaxRows(dst, src Buffer, rows, cols int) error {
	return f.rows2("logsoftmax_rows", dst, src, rows, cols, tensor.LogSoftmaxRows)
}

func (f *fakeDev) rows3(name string, dx, dy, y Buffer, rows, cols int, k func(a, b, c []float32, r, cl int)) error {
	f.calls[name]++
	n := rows * cols
	need(name, "dx", dx, n)
	need(name, "dy", dy, n)
	need(name, "y", y, n)
	k(f.f32(dx)[:n], f.f32(dy)[:n], f.f32(y)[:n], rows, cols)
	return nil
}

func (f *fakeDev) SoftmaxBackwardRows(dx, dy, y Buffer, rows, cols int) error {
	return f.rows3("softmax_bwd_rows", dx, dy, y, rows, cols, tensor.SoftmaxBackwardRows)
}

func (f *fakeDev) LogSoftmaxBackwardRows(dx, dy, y Buffer, rows, cols int) error {
	return f.rows3("logsoftmax_bwd_rows", dx, dy, y, rows, cols, tensor.LogSoftmaxBackwardRows)
}

func (f *fakeDev) LayerNormRows(dst, mean, rstd, src, gamma, beta Buffer, rows, cols int, eps float32) error {
	f.calls["layernorm_fwd"]++
	n := rows * cols
	for _, c := range []struct {
		b Buffer
		l int
	}{{dst, n}, {src, n}, {mean, rows}, {rstd, rows}, {gamma, cols}, {beta, cols}} {
		need("LayerNormRows", "buffer", c.b, c.l)
	}
	tensor.LayerNormRows(f.f32(dst)[:n], f.f32(mean)[:rows], f.f32(rstd)[:rows], f.f32(src)[:n], f.f32(gamma)[:cols], f.f32(beta)[:cols], rows, cols, eps)
	return nil
}

func (f *fakeDev) LayerNormBackwardRows(dx, dgamma, dbeta, dy, x, mean, rstd, gamma Buffer, rows, cols int) error {
	f.calls["layernorm_bwd"]++
	n := rows * cols
	for _, c := range []struct {
		b Buffer
		l int
	}{{dx, n}, {dy, n}, {x, n}, {mean, rows}, {rstd, rows}, {gamma, cols}, {dgamma, cols}, {dbeta, cols}} {
		need("LayerNormBackwardRows", "buffer", c.b, c.l)
	}
	tensor.LayerNormBackwardRows(f.f32(dx)[:n], f.f32(dgamma)[:cols], f.f32(dbeta)[:cols], f.f32(dy)[:n], f.f32(x)[:n],
		f.f32(mean)[:rows], f.f32(rstd)[:rows], f.f32(gamma)[:cols], rows, cols)
	return nil
}

func (f *fakeDev) EmbeddingGather(dst, table, ids Buffer, dim int) error {
	f.calls["embedding_gather"]++
	n := ids.Len()
	need("EmbeddingGather", "dst", dst, n*dim)
	d, t := f.f32(dst), f.f32(table)
	for i, id := range f.i32s(ids) {
		copy(d[i*dim:(i+1)*dim], t[int(id)*dim:(int(id)+1)*dim])
	}
	return nil
}

func (f *fakeDev) EmbeddingScatterAdd(dtable, dy, ids Buffer, dim int) error {
	f.calls["embedding_scatter_add"]++
	n := ids.Len()
	need("EmbeddingScatterAdd", "dy", dy, n*dim)
	t, g := f.f32(dtable), f.f32(dy)
	for i, id := range f.i32s(ids) {
		for j := 0; j < dim; j++ {
			t[int(id)*dim+j] += g[i*dim+j]
		}
	}
	return nil
}

func (f *fakeDev) AdamW(p, g, m, v Buffer, step int, c AdamWConfig) error {
	f.calls["adamw"]++
	n := p.Len()
	need("AdamW", "g", g, n)
	need("AdamW", "m", m, n)
	need("AdamW", "v", v, n)
	tensor.AdamW(f.f32(p), f.f32(g)[:n], f.f32(m)[:n], f.f32(v)[:n], tensor.AdamWParams{
		LR: c.LR, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay, Step: step})
	return nil
}

func (f *fakeDev) NewBuffer(n int) (Buffer, error) {
	f.scratch++
	return f.alloc(n), nil
}

func (f *fakeDev) FreeBuffer(b Buffer) error {
	if _, ok := f.mem[b.ptr]; !ok {
		panic("fakeDev: FreeBuffer of an unknown buffer")
	}
	f.scratch--
	delete(f.mem, b.ptr)
	return nil
}

func (f *fakeDev) IDsToDevice(ids []int) (Buffer, error) {
	b, _ := f.NewBuffer(len(ids))
	for i, id := range ids {
		f.i32s(b)[i] = int32(id)
	}
	return b, nil
}

func (f *fakeDev) ToHost(dst []float32, src Buffer) error {
	f.calls["to_host"]++
	copy(dst, f.f32(src))
	return nil
}

var _ deviceKernels = (*fakeDev)(nil)

// ---- helpers ----

// onFake copies a host tensor to a new fake-device tensor.
func (f *fakeDev) onFake(h *gt.Dense) *gt.Dense {
	d := gt.New(gt.WithShape(h.Shape().Clone()...), gt.Of(gt.Float32), gt.WithEngine(f))
	copy(f.f32(bBuf(d)), tensor.Data(h))
	return d
}

// host copies a fake-device tensor back to Go memory.
func (f *fakeDev) host(d *gt.Dense) []float32 {
	if _, ok := d.Engine().(*fakeDev); !ok {
		panic(fmt.Sprintf("result of shape %v is on engine %T, not the fake device", d.Shape(), d.Engine()))
	}
	return append([]float32{}, f.f32(bBuf(d))...)
}

func registerFake(t *testing.T) {
	tensor.RegisterBackend((*fakeDev)(nil), DenseBackend{})
	t.Cleanup(func() { tensor.RegisterBackend((*fakeDev)(nil), nil) })
}

// closeF32 compares with go-cmp's EquateApprox rule (|x−y| ≤ abs or ≤
// rel·min(|x|,|y|)), NaNs equal; a plain loop screens first because cmp's
// reflection over 10⁵ elements is slow, and cmp.Diff reports mismatches.
func closeF32(t *testing.T, name string, got, want []float32, rel, abs float64) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		x, y := float64(got[i]), float64(want[i])
		if x != x && y != y || x == y {
			continue
		}
		d := math.Abs(x - y)
		ok = d <= abs || d <= rel*math.Min(math.Abs(x), math.Abs(y))
	}
	if ok {
		return
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(rel, abs), cmpopts.EquateNaNs()); d != "" {
		t.Errorf("%s: device vs CPU (-cpu +device):\n%s", name, d)
	}
}

// denseCase is one call of package tensor's Dense-level API: run gets the
// inputs (host tensors for the CPU reference, device tensors for the
// backend under test) and returns the tensor to compare.
type denseCase struct {
	name string
	ins  []*gt.Dense
	run  func(xs []*gt.Dense) *gt.Dense
}

// denseBackendCases lists the Dense-level calls that DenseBackend serves
// (every Backend method except ArgMax and SumSquares, which return host
// values), with seeded random inputs; big adds sizes that span many
// thread blocks on a GPU.
func denseBackendCases(rng *rand.Rand, big bool) []denseCase {
	rn := func(shape ...int) *gt.Dense { return tensor.RandN(rng, shape...) }
	pos := func(shape ...int) *gt.Dense { // positive, for log and div
		x := rn(shape...)
		for i, v := range tensor.Data(x) {
			tensor.Data(x)[i] = float32(math.Abs(float64(v))) + 0.1
		}
		return x
	}
	var cases []denseCase
	add := func(name string, run func(xs []*gt.Dense) *gt.Dense, ins ...*gt.Dense) {
		cases = append(cases, denseCase{name, ins, run})
	}
	// MatMul: 2-D, batched with 3-D b, batched with shared b, all transposes.
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			ash, bsh := []int{5, 7}, []int{7, 3}
			if ta {
				ash = []int{7, 5}
			}
			if tb {
				bsh = []int{3, 7}
			}
			add(fmt.Sprintf("MatMulTrans(%v,%v)", ta, tb), func(x []*gt.Dense) *gt.Dense {
				return tensor.MatMulTrans(nil, x[0], x[1], ta, tb)
			}, rn(ash...), rn(bsh...))
			add(fmt.Sprintf("MatMulTrans batched (%v,%v)", ta, tb), func(x []*gt.Dense) *gt.Dense {
				return tensor.MatMulTrans(nil, x[0], x[1], ta, tb)
			}, rn(append([]int{4}, ash...)...), rn(append([]int{4}, bsh...)...))
			add(fmt.Sprintf("MatMulTrans shared b (%v,%v)", ta, tb), func(x []*gt.Dense) *gt.Dense {
				return tensor.MatMulTrans(nil, x[0], x[1], ta, tb)
			}, rn(append([]int{3}, ash...)...), rn(bsh...))
		}
	}
	// (No k = 0 case: the CPU backend's Gemm rejects a leading dimension of 0.)
	// Binary with broadcasting, including > 4 merged axes.
	bins := []struct {
		name string
		fn   func(dst, a, b *gt.Dense) *gt.Dense
	}{{"Add", tensor.Add}, {"Sub", tensor.Sub}, {"Mul", tensor.Mul}, {"Div", tensor.Div}}
	shapes := [][2][]int{
		{{4, 5}, {4, 5}}, {{4, 5}, {5}}, {{4, 1}, {1, 5}}, {{3, 1, 5}, {1, 4, 1}}, {{1}, {2, 3}},
		{{2, 3, 2, 3, 2, 3}, {3, 1, 3, 1, 3}}, {{2, 1, 2, 1, 2, 1, 2}, {2, 1, 2, 1, 2, 1}}, {{0, 3}, {3}},
	}
	for _, op := range bins {
		for _, s := range shapes {
			add(fmt.Sprintf("%s %v %v", op.name, s[0], s[1]), func(x []*gt.Dense) *gt.Dense { return op.fn(nil, x[0], x[1]) }, rn(s[0]...), pos(s[1]...))
		}
	}
	scal := []struct {
		name string
		fn   func(dst, a *gt.Dense, s float32) *gt.Dense
	}{{"AddScalar", tensor.AddScalar}, {"SubScalar", tensor.SubScalar}, {"MulScalar", tensor.MulScalar},
		{"DivScalar", tensor.DivScalar}, {"ScalarSub", tensor.ScalarSub}, {"ScalarDiv", tensor.ScalarDiv}}
	for _, op := range scal {
		add(op.name, func(x []*gt.Dense) *gt.Dense { return op.fn(nil, x[0], 0.7) }, pos(3, 4))
	}
	// Unary forward and backward.
	relux := tensor.FromSlice([]float32{-2, -0.5, 0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, 0.5, 3, float32(math.NaN())}, 2, 4)
	for op := tensor.OpExp; op <= tensor.OpNeg; op++ {
		in := rn(3, 5)
		if op == tensor.OpLog {
			in = pos(3, 5)
		}
		add("Apply "+op.String(), func(x []*gt.Dense) *gt.Dense { return tensor.Apply(op, nil, x[0]) }, in)
		if op == tensor.OpReLU {
			in = relux
		}
		add("ApplyBackward "+op.String(), func(x []*gt.Dense) *gt.Dense {
			return tensor.ApplyBackward(op, nil, x[1], x[0], tensor.Apply(op, nil, x[0]))
		}, in, rn(in.Shape()...))
	}
	// Reductions along every axis.
	red := []struct {
		name string
		fn   func(dst, a *gt.Dense, axis int) *gt.Dense
	}{{"Sum", tensor.Sum}, {"Mean", tensor.Mean}, {"Max", tensor.Max}}
	for _, op := range red {
		for axis := -1; axis < 3; axis++ {
			add(fmt.Sprintf("%s axis %d", op.name, axis), func(x []*gt.Dense) *gt.Dense { return op.fn(nil, x[0], axis) }, rn(3, 4, 5))
		}
		add(op.name+" 1-D", func(x []*gt.Dense) *gt.Dense { return op.fn(nil, x[0], 0) }, rn(9))
	}
	add("Sum over empty axis", func(x []*gt.Dense) *gt.Dense { return tensor.Sum(nil, x[0], 1) }, rn(3, 0))
	// Softmax family along the last and an inner axis.
	for _, axis := range []int{-1, 1, 0} {
		add(fmt.Sprintf("Softmax axis %d", axis), func(x []*gt.Dense) *gt.Dense { return tensor.Softmax(nil, x[0], axis) }, rn(3, 4, 5))
		add(fmt.Sprintf("LogSoftmax axis %d", axis), func(x []*gt.Dense) *gt.Dense { return tensor.LogSoftmax(nil, x[0], axis) }, rn(3, 4, 5))
		add(fmt.Sprintf("SoftmaxBackward axis %d", axis), func(x []*gt.Dense) *gt.Dense {
			return tensor.SoftmaxBackward(nil, x[1], tensor.Softmax(nil, x[0], axis), axis)
		}, rn(3, 4, 5), rn(3, 4, 5))
		add(fmt.Sprintf("LogSoftmaxBackward axis %d", axis), func(x []*gt.Dense) *gt.Dense {
			return tensor.LogSoftmaxBackward(nil, x[1], tensor.LogSoftmax(nil, x[0], axis), axis)
		}, rn(3, 4, 5), rn(3, 4, 5))
	}
	// Layer norm: y, mean, rstd, and dx, dgamma, dbeta (accumulating into non-zero).
	for i, get := range []string{"y", "mean", "rstd", "dx", "dgamma", "dbeta"} {
		add("LayerNorm "+get, func(x []*gt.Dense) *gt.Dense {
			y, mean, rstd := tensor.LayerNorm(nil, x[0], x[1], x[2], 1e-5)
			if i < 3 {
				return []*gt.Dense{y, mean, rstd}[i]
			}
			dx, dg, db := tensor.LayerNormBackward(nil, x[4], x[5], x[3], x[0], mean, rstd, x[1])
			return []*gt.Dense{dx, dg, db}[i-3]
		}, rn(2, 3, 8), rn(8), rn(8), rn(2, 3, 8), rn(8), rn(8))
	}
	ids := []int{3, 0, 3, 5, 1}
	add("Embedding", func(x []*gt.Dense) *gt.Dense { return tensor.Embedding(nil, x[0], ids) }, rn(6, 4))
	add("EmbeddingBackward", func(x []*gt.Dense) *gt.Dense {
		tensor.EmbeddingBackward(x[0], x[1], ids)
		return x[0]
	}, rn(6, 4), rn(5, 4))
	for _, gs := range []float32{0, 0.5} {
		for i, get := range []string{"param", "m", "v"} {
			add(fmt.Sprintf("AdamWStep GradScale %v %s", gs, get), func(x []*gt.Dense) *gt.Dense {
				for step := 1; step <= 3; step++ {
					tensor.AdamWStep(x[0], x[1], x[2], x[3], tensor.AdamWParams{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Step: step, GradScale: gs})
				}
				return x[[]int{0, 2, 3}[i]] // param, m or v
			}, rn(37), rn(37), tensor.Zeros(37), tensor.Zeros(37))
		}
	}
	// Fill and Copy have no Dense-level function: callers (nn's fused ops)
	// call the backend directly.
	add("Backend Fill", func(x []*gt.Dense) *gt.Dense {
		tensor.BackendOf(x[0]).Fill(x[0], 2.5)
		return x[0]
	}, rn(3, 4))
	add("Backend Copy (3,4) from (12)", func(x []*gt.Dense) *gt.Dense {
		tensor.BackendOf(x[0]).Copy(x[0], x[1])
		return x[0]
	}, rn(3, 4), rn(12))

	if big {
		add("MatMul 130×90·90×70", func(x []*gt.Dense) *gt.Dense { return tensor.MatMul(nil, x[0], x[1]) }, rn(130, 90), rn(90, 70))
		add("MatMulTrans batched 3×(70×130)ᵀ·(90×70)ᵀ", func(x []*gt.Dense) *gt.Dense {
			return tensor.MatMulTrans(nil, x[0], x[1], true, true)
		}, rn(3, 70, 130), rn(90, 70))
		add("Add bias 257×300 + 300", func(x []*gt.Dense) *gt.Dense { return tensor.Add(nil, x[0], x[1]) }, rn(257, 300), rn(300))
		add("Mul 6-D broadcast", func(x []*gt.Dense) *gt.Dense { return tensor.Mul(nil, x[0], x[1]) }, rn(3, 5, 4, 7, 2, 9), rn(5, 1, 7, 1, 9))
		for axis := 0; axis < 3; axis++ {
			add(fmt.Sprintf("Sum (8,300,33) axis %d", axis), func(x []*gt.Dense) *gt.Dense { return tensor.Sum(nil, x[0], axis) }, rn(8, 300, 33))
			add(fmt.Sprintf("Max (8,300,33) axis %d", axis), func(x []*gt.Dense) *gt.Dense { return tensor.Max(nil, x[0], axis) }, rn(8, 300, 33))
			add(fmt.Sprintf("LogSoftmax (8,300,33) axis %d", axis), func(x []*gt.Dense) *gt.Dense { return tensor.LogSoftmax(nil, x[0], axis) }, rn(8, 300, 33))
			add(fmt.Sprintf("SoftmaxBackward (8,300,33) axis %d", axis), func(x []*gt.Dense) *gt.Dense {
				return tensor.SoftmaxBackward(nil, x[1], tensor.Softmax(nil, x[0], axis), axis)
			}, rn(8, 300, 33), rn(8, 300, 33))
		}
		add("Softmax 16×50257", func(x []*gt.Dense) *gt.Dense { return tensor.Softmax(nil, x[0], -1) }, rn(16, 50257))
		add("Gelu 100000", func(x []*gt.Dense) *gt.Dense { return tensor.Gelu(nil, x[0]) }, rn(100000))
		add("ApplyBackward gelu 100000", func(x []*gt.Dense) *gt.Dense {
			return tensor.ApplyBackward(tensor.OpGELU, nil, x[1], x[0], nil)
		}, rn(100000), rn(100000))
		add("LayerNorm 300×768", func(x []*gt.Dense) *gt.Dense {
			y, _, _ := tensor.LayerNorm(nil, x[0], x[1], x[2], 1e-5)
			return y
		}, rn(300, 768), rn(768), rn(768))
		add("LayerNormBackward dgamma 300×768", func(x []*gt.Dense) *gt.Dense {
			_, mean, rstd := tensor.LayerNorm(nil, x[0], x[1], x[2], 1e-5)
			_, dg, _ := tensor.LayerNormBackward(nil, nil, nil, x[3], x[0], mean, rstd, x[1])
			return dg
		}, rn(300, 768), rn(768), rn(768), rn(300, 768))
		bigIDs := make([]int, 500)
		for i := range bigIDs {
			bigIDs[i] = rng.IntN(50)
		}
		add("EmbeddingBackward 500 ids (repeats) dim 96", func(x []*gt.Dense) *gt.Dense {
			tensor.EmbeddingBackward(x[0], x[1], bigIDs)
			return x[0]
		}, rn(50, 96), rn(500, 96))
	}
	return cases
}

// TestDenseBackendFake runs package tensor's Dense-level API on fake-device
// tensors and on host tensors and compares.
func TestDenseBackendFake(t *testing.T) {
	registerFake(t)
	f := newFakeDev()
	rng := rand.New(rand.NewPCG(7, 1))
	cases := denseBackendCases(rng, !testing.Short())
	for _, c := range cases {
		hostIns := make([]*gt.Dense, len(c.ins))
		devIns := make([]*gt.Dense, len(c.ins))
		for i, in := range c.ins {
			hostIns[i] = in.Clone().(*gt.Dense)
			devIns[i] = f.onFake(in)
		}
		want := tensor.Data(c.run(hostIns))
		got := f.host(c.run(devIns))
		closeF32(t, c.name, got, want, 1e-5, 1e-5)
	}
	if f.scratch != 0 {
		t.Errorf("%d scratch buffers not freed", f.scratch)
	}
	for _, k := range []string{"gemm", "binary_same", "binary_bcast", "unary", "gelu_fwd", "gelu_bwd", "reduce_rows", "reduce_cols",
		"strided_copy", "softmax_rows", "logsoftmax_rows", "softmax_bwd_rows", "logsoftmax_bwd_rows", "layernorm_fwd", "layernorm_bwd",
		"embedding_gather", "embedding_scatter_add", "adamw", "fill"} {
		if f.calls[k] == 0 {
			t.Errorf("kernel %s was never called", k)
		}
	}
}

// TestDenseBackendFakeHostResults covers the calls whose results come back
// to the host: ArgMax (the host fallback), GlobalNormOf (SumSquares).
func TestDenseBackendFakeHostResults(t *testing.T) {
	registerFake(t)
	f := newFakeDev()
	rng := rand.New(rand.NewPCG(8, 1))
	x := tensor.RandN(rng, 3, 4, 5)
	dx := f.onFake(x)
	for axis := 0; axis < 3; axis++ {
		want, got := tensor.ArgMax(x, axis).Ints(), tensor.ArgMax(dx, axis).Ints()
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("ArgMax axis %d (-cpu +device):\n%s", axis, d)
		}
	}
	y := tensor.RandN(rng, 7)
	want := tensor.GlobalNormOf(x, y)
	got := tensor.GlobalNormOf(dx, f.onFake(y))
	if math.Abs(got-want) > 1e-5*want {
		t.Errorf("GlobalNormOf: device %v, cpu %v", got, want)
	}
	if f.calls["to_host"] == 0 {
		t.Error("ArgMax/GlobalNormOf did not read back through ToHost")
	}
	if tensor.BackendOf(dx).Name() != "cuda" {
		t.Errorf("BackendOf(fake device tensor) = %s, want cuda", tensor.BackendOf(dx).Name())
	}
}

func fakePanics(t *testing.T, name, want string, fn func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Errorf("%s: no panic", name)
			return
		}
		if s := fmt.Sprint(r); !strings.Contains(s, want) {
			t.Errorf("%s: panic %q, want it to mention %q", name, s, want)
		}
	}()
	fn()
}

func TestDenseBackendFakeErrors(t *testing.T) {
	registerFake(t)
	f1, f2 := newFakeDev(), newFakeDev()
	rng := rand.New(rand.NewPCG(9, 1))
	a, b := f1.onFake(tensor.RandN(rng, 2, 3)), f2.onFake(tensor.RandN(rng, 2, 3))
	fakePanics(t, "two devices", "different devices", func() { tensor.Add(nil, a, b) })
	fakePanics(t, "host and device", "different backends", func() { tensor.Add(nil, a, tensor.RandN(rng, 2, 3)) })
	table := f1.onFake(tensor.RandN(rng, 4, 2))
	fakePanics(t, "id out of range", "ids[1] = 4 out of range", func() { tensor.Embedding(nil, table, []int{0, 4}) })
	fakePanics(t, "Data of a device tensor", "cannot access", func() { tensor.Data(a) })
}

// ExampleDenseBackend shows the dispatch with the host-memory fake device of
// this package's tests standing in for a GPU: package tensor's Softmax on a
// tensor whose engine has DenseBackend registered runs the device kernels
// (softmax_rows here) and returns a tensor on the same device. With the tag
// troupecuda, package cuda registers DenseBackend for *Engine itself.
func ExampleDenseBackend() {
	tensor.RegisterBackend((*fakeDev)(nil), DenseBackend{})
	defer tensor.RegisterBackend((*fakeDev)(nil), nil)
	dev := newFakeDev()
	x := dev.onFake(tensor.FromSlice([]float32{1, 2, 3, 0, 0, 0}, 2, 3))
	y := tensor.Softmax(nil, x, -1)
	fmt.Println(tensor.BackendOf(y).Name(), dev.calls["softmax_rows"])
	fmt.Printf("%.4f\n", dev.host(y))
	// Output:
	// cuda 1
	// [0.0900 0.2447 0.6652 0.3333 0.3333 0.3333]
}
