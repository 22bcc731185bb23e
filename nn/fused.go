package nn

// This file holds the machinery shared by troupe's fused Gorgonia ops: a
// forward op whose Do runs a Go closure over float32 slices, and the gradient
// op its SymDiff builds (the SDOp pattern of Gorgonia's op_softmax.go). The
// gradient op computes the gradients of all differentiable inputs in one
// pass; when there are several, it writes them packed into one flat vector
// and cheap segment ops cut out each input's gradient.
//
// Rules that keep the ops correct under Gorgonia's TapeMachine, which reuses
// buffers of intermediate nodes (Gorgonia issue 576):
//   - every Do returns a freshly allocated tensor, never one the op keeps;
//   - anything the backward pass needs besides the forward inputs, output and
//     upstream gradient is saved in buffers private to the op;
//   - the backward closure reads the forward inputs from the values handed to
//     the gradient op (those nodes are inputs of the gradient node, so the
//     machine keeps them alive), not from references kept by the forward.

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"

	kern "github.com/troupe-ml/troupe/tensor"
)

// f32s returns the float32 data of a Gorgonia value (tensor or scalar).
func f32s(v G.Value) []float32 {
	switch t := v.(type) {
	case *ts.Dense:
		return t.Float32s()
	case *G.F32:
		return []float32{float32(*t)}
	case ts.Tensor:
		if d, ok := t.Data().([]float32); ok {
			return d
		}
		if f, ok := t.Data().(float32); ok {
			return []float32{f}
		}
	}
	panic(fmt.Sprintf("nn: expected a float32 value, got %T", v))
}

func newDense(shape ts.Shape) *ts.Dense {
	if shape.IsScalar() {
		return ts.New(ts.FromScalar(float32(0)))
	}
	return ts.New(ts.WithShape(shape.Clone()...), ts.Of(ts.Float32))
}

func tensorType(s ts.Shape) hm.Type {
	if s.IsScalar() {
		return ts.Float32
	}
	return G.TensorType{Dims: s.Dims(), Of: ts.Float32}
}

// baseOp implements the bookkeeping methods of G.Op. Each op instance hashes
// to its own address so Gorgonia never merges two applications.
type baseOp struct {
	name  string
	arity int
	typ   hm.Type
	shape ts.Shape
}

func newBase(name string, inputs []*G.Node, out ts.Shape) baseOp {
	tys := make([]hm.Type, 0, len(inputs)+1)
	for _, n := range inputs {
		tys = append(tys, n.Type())
	}
	tys = append(tys, tensorType(out))
	return baseOp{name: name, arity: len(inputs), typ: hm.NewFnType(tys...), shape: out.Clone()}
}

func (o *baseOp) Arity() int       { return o.arity }
func (o *baseOp) Type() hm.Type    { return o.typ }
func (o *baseOp) ReturnsPtr() bool { return false }
func (o *baseOp) CallsExtern() bool {
	return false
}
func (o *baseOp) OverwritesInput() int { return -1 }
func (o *baseOp) InferShape(...G.DimSizer) (ts.Shape, error) {
	return o.shape.Clone(), nil
}
func (o *baseOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "troupe.%s@%p", o.name, o) }
func (o *baseOp) Hashcode() uint32 {
	h := fnv.New32a()
	o.WriteHash(h)
	return h.Sum32()
}
func (o *baseOp) String() string { return o.name }

// kernel describes one fused op: fwd computes out from the inputs (writing
// every element: out holds the previous run's values); bwd
// writes the gradient of each differentiable input into grads[i] (zeroed
// beforehand; nil for the others) given the inputs, the forward output and
// the upstream gradient dy.
type kernel struct {
	name string
	diff []bool
	fwd  func(in [][]float32, out []float32) error
	bwd  func(in [][]float32, out, dy []float32, grads [][]float32)
	// each, when set, replaces bwd for ops whose input gradients are
	// independent: each[i] writes the gradient of input i into g (zeroed
	// beforehand), and SymDiff adds one gradient op per input, with no
	// packing.
	each []func(in [][]float32, out, dy, g []float32)
	// full marks backward closures that write every element of their
	// gradients, so the buffers need not be zeroed first.
	full bool
	// dev runs the op on tensors of a non-CPU backend (nil: not supported
	// there).
	dev *devKernel
}

// devKernel is a fused op over *ts.Dense values of a non-CPU backend b.
// fwd writes out (allocated on the inputs' engine, reused between runs);
// bwd writes the gradient of input i into grads[i] for every non-nil
// grads[i] (zeroed beforehand unless the kernel is full), given the inputs,
// the forward output and the upstream gradient dy. Index inputs (token ids,
// targets, lengths) may live on either side; read them with hostFloats.
// Scratch tensors must be allocated once (onEngine) and kept: device memory
// is not reclaimed by the garbage collector.
type devKernel struct {
	fwd func(b kern.Backend, in []*ts.Dense, out *ts.Dense) error
	bwd func(b kern.Backend, in []*ts.Dense, out, dy *ts.Dense, grads []*ts.Dense) error
}

type fusedOp struct {
	baseOp
	k       *kernel
	inShape []ts.Shape
	ret     *ts.Dense
	dret    *ts.Dense // output on a device engine
}

// Output buffers. Each op instance allocates its output once and rewrites
// it on every run. This is safe under Gorgonia's TapeMachine: Reset clears
// every register between runs, so at the start of a run no register holds
// the buffer; within a run, Gorgonia may hand the buffer (as a preallocated
// register value) to a later node only after the op's own value is dead,
// and the op runs once per run.

func cached(ret **ts.Dense, shape ts.Shape) *ts.Dense {
	if *ret == nil {
		*ret = newDense(shape)
	}
	return *ret
}

// applyFused adds the op described by k to the graph of inputs[0].
func applyFused(k *kernel, out ts.Shape, inputs ...*G.Node) *G.Node {
	if len(k.diff) != len(inputs) {
		panic(fmt.Sprintf("nn: %s: %d inputs but %d differentiability flags", k.name, len(inputs), len(k.diff)))
	}
	op := &fusedOp{baseOp: newBase(k.name, inputs, out), k: k}
	for _, n := range inputs {
		op.inShape = append(op.inShape, n.Shape().Clone())
	}
	return G.Must(G.ApplyOp(op, inputs...))
}

func (o *fusedOp) Do(vals ...G.Value) (G.Value, error) {
	if b, ref := deviceOf(vals); ref != nil {
		return o.doDevice(b, ref, vals)
	}
	return o.doInto(cached(&o.ret, o.shape), vals)
}

// doDevice runs the devKernel for inputs on backend b (ref is one of them).
func (o *fusedOp) doDevice(b kern.Backend, ref *ts.Dense, vals []G.Value) (G.Value, error) {
	if o.k.dev == nil {
		return nil, fmt.Errorf("nn: %s: no implementation for tensors on backend %s (inputs %v)", o.name, b.Name(), o.inShape)
	}
	in, err := denseValues(vals)
	if err != nil {
		return nil, fmt.Errorf("nn: %s: %w", o.name, err)
	}
	out := onEngine(&o.dret, ref, o.shape)
	if err := o.k.dev.fwd(b, in, out); err != nil {
		return nil, fmt.Errorf("nn: %s on %s: %w", o.name, b.Name(), err)
	}
	return out, nil
}

// UsePreallocDo implements G.UsePreallocDoer; the op writes into its own
// buffer, not the register's.
func (o *fusedOp) UsePreallocDo(_ G.Value, vals ...G.Value) (G.Value, error) { return o.Do(vals...) }

func (o *fusedOp) doInto(ret *ts.Dense, vals []G.Value) (G.Value, error) {
	in := make([][]float32, len(vals))
	for i, v := range vals {
		in[i] = f32s(v)
	}
	if err := o.k.fwd(in, f32s(ret)); err != nil {
		return nil, fmt.Errorf("nn: %s: %w", o.name, err)
	}
	return ret, nil
}

func (o *fusedOp) DiffWRT(n int) []bool { return append([]bool(nil), o.k.diff...) }

func (o *fusedOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	var idx []int
	for i, d := range o.k.diff {
		if d {
			idx = append(idx, i)
		}
	}
	args := append(append(G.Nodes{}, inputs...), output, grad)
	ret := make(G.Nodes, len(inputs))
	if o.k.each != nil {
		for _, i := range idx {
			g := &gradOp{baseOp: newBase(fmt.Sprintf("%sGrad%d", o.name, i), args, o.inShape[i]), fwd: o, idx: []int{i}, one: true}
			n, err := G.ApplyOp(g, args...)
			if err != nil {
				return nil, err
			}
			ret[i] = n
		}
		return ret, nil
	}
	if len(idx) == 1 {
		g := &gradOp{baseOp: newBase(o.name+"Grad", args, o.inShape[idx[0]]), fwd: o, idx: idx}
		n, err := G.ApplyOp(g, args...)
		if err != nil {
			return nil, err
		}
		ret[idx[0]] = n
		return ret, nil
	}
	total := 0
	offs := make([]int, len(idx))
	for j, i := range idx {
		offs[j] = total
		total += o.inShape[i].TotalSize()
	}
	g := &gradOp{baseOp: newBase(o.name+"Grad", args, ts.Shape{total}), fwd: o, idx: idx}
	packed, err := G.ApplyOp(g, args...)
	if err != nil {
		return nil, err
	}
	for j, i := range idx {
		s := o.inShape[i]
		seg := &segmentOp{baseOp: newBase(o.name+"GradSeg", []*G.Node{packed}, s), off: offs[j], n: s.TotalSize()}
		if ret[i], err = G.ApplyOp(seg, packed); err != nil {
			return nil, err
		}
	}
	return ret, nil
}

// gradOp runs a fused op's backward closure.
type gradOp struct {
	baseOp
	fwd  *fusedOp
	idx  []int
	one  bool // runs k.each[idx[0]]
	ret  *ts.Dense
	dret *ts.Dense // on a device engine
}

// doDevice runs the devKernel's backward for inputs on backend b, writing
// the gradients into views of one buffer as the slice path does.
func (o *gradOp) doDevice(b kern.Backend, ref *ts.Dense, vals []G.Value) (G.Value, error) {
	k := o.fwd.k
	if k.dev == nil || k.dev.bwd == nil {
		return nil, fmt.Errorf("nn: %s: no implementation for tensors on backend %s (inputs %v)", o.name, b.Name(), o.fwd.inShape)
	}
	all, err := denseValues(vals)
	if err != nil {
		return nil, fmt.Errorf("nn: %s: %w", o.name, err)
	}
	n := len(o.fwd.inShape)
	ret := onEngine(&o.dret, ref, o.shape)
	if !k.full {
		b.Fill(ret, 0)
	}
	grads := make([]*ts.Dense, n)
	off := 0
	for _, i := range o.idx {
		sz := o.fwd.inShape[i].TotalSize()
		grads[i] = denseView(ret, off, o.fwd.inShape[i])
		off += sz
	}
	if err := k.dev.bwd(b, all[:n], all[n], all[n+1], grads); err != nil {
		return nil, fmt.Errorf("nn: %s on %s: %w", o.name, b.Name(), err)
	}
	return ret, nil
}

func (o *gradOp) Do(vals ...G.Value) (G.Value, error) {
	if b, ref := deviceOf(vals); ref != nil {
		return o.doDevice(b, ref, vals)
	}
	ret := cached(&o.ret, o.shape)
	if !o.fwd.k.full {
		zero(f32s(ret))
	}
	return o.doInto(ret, vals)
}

// UsePreallocDo implements G.UsePreallocDoer (see fusedOp.UsePreallocDo).
func (o *gradOp) UsePreallocDo(_ G.Value, vals ...G.Value) (G.Value, error) { return o.Do(vals...) }

func (o *gradOp) doInto(ret *ts.Dense, vals []G.Value) (G.Value, error) {
	n := len(o.fwd.inShape)
	in := make([][]float32, n)
	for i := 0; i < n; i++ {
		in[i] = f32s(vals[i])
	}
	out, dy := f32s(vals[n]), f32s(vals[n+1])
	buf := f32s(ret)
	if o.one {
		o.fwd.k.each[o.idx[0]](in, out, dy, buf)
		return ret, nil
	}
	grads := make([][]float32, n)
	off := 0
	for _, i := range o.idx {
		sz := o.fwd.inShape[i].TotalSize()
		grads[i] = buf[off : off+sz]
		off += sz
	}
	o.fwd.k.bwd(in, out, dy, grads)
	return ret, nil
}

// segmentOp copies a contiguous segment of a flat vector into a tensor of
// the given shape. It only appears inside gradient graphs.
type segmentOp struct {
	baseOp
	off, n int
	ret    *ts.Dense
	dret   *ts.Dense // on a device engine
}

// UsePreallocDo implements G.UsePreallocDoer (see fusedOp.UsePreallocDo).
func (o *segmentOp) UsePreallocDo(_ G.Value, vals ...G.Value) (G.Value, error) { return o.Do(vals...) }

func (o *segmentOp) Do(vals ...G.Value) (G.Value, error) {
	if b, ref := deviceOf(vals); ref != nil {
		ret := onEngine(&o.dret, ref, o.shape)
		b.Copy(ret, denseView(ref, o.off, ts.Shape{o.n}))
		return ret, nil
	}
	ret := cached(&o.ret, o.shape)
	copy(f32s(ret), f32s(vals[0])[o.off:o.off+o.n])
	return ret, nil
}

func zero(s []float32) {
	for i := range s {
		s[i] = 0
	}
}

func lastDim(n *G.Node) int {
	s := n.Shape()
	if s.Dims() == 0 {
		return 1
	}
	return s[s.Dims()-1]
}

func rowsOf(n *G.Node) int {
	s := n.Shape()
	if s.Dims() == 0 {
		return 1
	}
	return s.TotalSize() / s[s.Dims()-1]
}

// deviceOf returns the backend of the first input value that lives on a
// non-CPU backend, and that value; (nil, nil) when all are CPU values.
func deviceOf(vals []G.Value) (kern.Backend, *ts.Dense) {
	for _, v := range vals {
		if d, ok := v.(*ts.Dense); ok {
			if b := kern.BackendOf(d); b != kern.CPU {
				return b, d
			}
		}
	}
	return nil, nil
}

// denseValues returns the values as float32 tensors (scalars as host
// tensors of shape ()).
func denseValues(vals []G.Value) ([]*ts.Dense, error) {
	out := make([]*ts.Dense, len(vals))
	for i, v := range vals {
		switch t := v.(type) {
		case *ts.Dense:
			if t.Dtype() != ts.Float32 {
				return nil, fmt.Errorf("input %d (shape %v) has dtype %v, want float32", i, t.Shape(), t.Dtype())
			}
			out[i] = t
		case *G.F32:
			out[i] = ts.New(ts.FromScalar(float32(*t)))
		default:
			return nil, fmt.Errorf("input %d is a %T, want a float32 tensor", i, v)
		}
	}
	return out, nil
}

// onEngine returns *t, first allocating it with shape on ref's engine. Like
// cached, the op owns the tensor and rewrites it on every run.
func onEngine(t **ts.Dense, ref *ts.Dense, shape ts.Shape) *ts.Dense {
	if *t == nil {
		s := shape.Clone()
		if s.IsScalar() {
			s = ts.Shape{1}
		}
		*t = ts.New(ts.WithShape(s...), ts.Of(ts.Float32), ts.WithEngine(ref.Engine()))
	}
	return *t
}

// denseView returns a tensor of the given shape over the elements of t
// starting at element off, sharing t's memory (host or device) and engine.
// t must stay alive while the view is used.
func denseView(t *ts.Dense, off int, shape ts.Shape) *ts.Dense {
	n := shape.TotalSize()
	if off < 0 || off+n > t.Shape().TotalSize() {
		panic(fmt.Sprintf("nn: view of %d elements at %d of a tensor of shape %v", n, off, t.Shape()))
	}
	if n == 0 {
		return ts.New(ts.WithShape(shape.Clone()...), ts.Of(ts.Float32), ts.WithEngine(t.Engine()))
	}
	return ts.New(ts.WithShape(shape.Clone()...), ts.Of(ts.Float32), ts.WithEngine(t.Engine()),
		ts.FromMemory(t.Uintptr()+uintptr(off)*4, uintptr(n)*4))
}

// hostFloats returns t's elements in Go memory: t's own when Go can read
// them, otherwise a copy made through t's engine (a device-to-host copy).
func hostFloats(t *ts.Dense) ([]float32, error) {
	if t.IsNativelyAccessible() {
		return t.Float32s()[:t.Shape().TotalSize()], nil
	}
	n := t.Shape().TotalSize()
	h := make([]float32, max(n, 1))
	if n == 0 {
		return h[:0], nil
	}
	if err := t.Engine().Memcpy(kern.FromSlice(h), t); err != nil {
		return nil, fmt.Errorf("copying a tensor of shape %v to the host: %w", t.Shape(), err)
	}
	return h, nil
}

// upload copies host into t (host or device memory, len(host) elements).
func upload(t *ts.Dense, host []float32) error {
	if len(host) != t.Shape().TotalSize() {
		panic(fmt.Sprintf("nn: upload of %d values into a tensor of shape %v", len(host), t.Shape()))
	}
	if len(host) == 0 {
		return nil
	}
	if t.IsNativelyAccessible() {
		copy(t.Float32s(), host)
		return nil
	}
	if err := t.Engine().Memcpy(t, kern.FromSlice(host)); err != nil {
		return fmt.Errorf("copying %d values to a tensor of shape %v: %w", len(host), t.Shape(), err)
	}
	return nil
}

// rows2 views t as rows×cols (its leading dimensions flattened).
func rows2(t *ts.Dense, rows, cols int) *ts.Dense { return denseView(t, 0, ts.Shape{rows, cols}) }
