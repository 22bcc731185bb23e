//go:build troupecuda

package cuda

import (
	"fmt"

	"gorgonia.org/tensor"
)

// Engine methods that let gorgonia.org/tensor's own API run on the GPU for
// device-resident float32 tensors: (*tensor.Dense).MatMul and tensor.Add,
// Sub, Mul, Div dispatch to the engine of their first operand.

var (
	_ tensor.MatMuler = (*Engine)(nil)
	_ tensor.Adder    = (*Engine)(nil)
	_ tensor.Suber    = (*Engine)(nil)
	_ tensor.Muler    = (*Engine)(nil)
	_ tensor.Diver    = (*Engine)(nil)
)

// deviceDense returns t as a contiguous row-major float32 *tensor.Dense whose
// engine is e, or an error.
func (e *Engine) deviceDense(op string, t tensor.Tensor) (*tensor.Dense, error) {
	d, ok := t.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("cuda: %s: operand is %T, want *tensor.Dense", op, t)
	}
	if d.Dtype() != tensor.Float32 {
		return nil, fmt.Errorf("cuda: %s: dtype %v, want float32", op, d.Dtype())
	}
	if d.Engine() != tensor.Engine(e) {
		return nil, fmt.Errorf("cuda: %s: tensor of shape %v is not on this engine's device", op, d.Shape())
	}
	if !e.WorksWith(d.DataOrder()) || d.IsMaterializable() {
		return nil, fmt.Errorf("cuda: %s: tensor of shape %v is not contiguous row-major", op, d.Shape())
	}
	return d, nil
}

// MatMul computes prealloc = a·b for device matrices (tensor.MatMuler).
func (e *Engine) MatMul(a, b, prealloc tensor.Tensor) error {
	A, err := e.deviceDense("MatMul", a)
	if err != nil {
		return err
	}
	B, err := e.deviceDense("MatMul", b)
	if err != nil {
		return err
	}
	C, err := e.deviceDense("MatMul", prealloc)
	if err != nil {
		return err
	}
	as, bs, cs := A.Shape(), B.Shape(), C.Shape()
	if len(as) != 2 || len(bs) != 2 || len(cs) != 2 || as[1] != bs[0] || cs[0] != as[0] || cs[1] != bs[1] {
		return fmt.Errorf("cuda: MatMul of %v and %v into %v", as, bs, cs)
	}
	m, k, n := as[0], as[1], bs[1]
	return e.Gemm(false, false, m, n, k, 1, DenseBuffer(A), k, DenseBuffer(B), n, 0, DenseBuffer(C), n)
}

func (e *Engine) binaryDense(name string, op int, a, b tensor.Tensor, opts []tensor.FuncOpt) (tensor.Tensor, error) {
	A, err := e.deviceDense(name, a)
	if err != nil {
		return nil, err
	}
	B, err := e.deviceDense(name, b)
	if err != nil {
		return nil, err
	}
	if !A.Shape().Eq(B.Shape()) {
		return nil, fmt.Errorf("cuda: %s: shapes %v and %v differ (device broadcasting: Engine.BinaryBroadcast)", name, A.Shape(), B.Shape())
	}
	fo := tensor.ParseFuncOpts(opts...)
	if fo.Incr() != nil {
		return nil, fmt.Errorf("cuda: %s: WithIncr is not supported on the device", name)
	}
	var out *tensor.Dense
	switch {
	case fo.Reuse() != nil:
		if out, err = e.deviceDense(name, fo.Reuse()); err != nil {
			return nil, err
		}
		if out.Shape().TotalSize() != A.Shape().TotalSize() {
			return nil, fmt.Errorf("cuda: %s: reuse tensor of shape %v for %v", name, out.Shape(), A.Shape())
		}
	case !fo.Safe():
		out = A
	default:
		out = tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(A.Shape().Clone()...), tensor.WithEngine(e))
	}
	return out, e.Binary(op, DenseBuffer(out), DenseBuffer(A), DenseBuffer(B))
}

func (e *Engine) scalarUnsupported(name string) error {
	return fmt.Errorf("cuda: %s with a scalar operand is not implemented on the device (use Engine.Unary)", name)
}

// Add computes a + b element-wise for same-shape device tensors.
func (e *Engine) Add(a, b tensor.Tensor, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	return e.binaryDense("Add", OpAdd, a, b, opts)
}

// AddScalar is not implemented on the device.
func (e *Engine) AddScalar(a tensor.Tensor, b interface{}, leftTensor bool, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	return nil, e.scalarUnsupported("AddScalar")
}

// Sub computes a − b element-wise for same-shape device tensors.
func (e *Engine) Sub(a, b tensor.Tensor, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	return e.binaryDense("Sub", OpSub, a, b, opts)
}

// SubScalar is not implemented on the device.
func (e *Engine) SubScalar(a tensor.Tensor, b interface{}, leftTensor bool, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	return nil, e.scalarUnsupported("SubScalar")
}

// Mul computes a ⊙ b element-wise for same-shape device tensors.
func (e *Engine) Mul(a, b tensor.Tensor, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	return e.binaryDense("Mul", OpMul, a, b, opts)
}

// MulScalar is not implemented on the device.
func (e *Engine) MulScalar(a tensor.Tensor, b interface{}, leftTensor bool, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	return nil, e.scalarUnsupported("MulScalar")
}

// Div computes a / b element-wise for same-shape device tensors.
func (e *Engine) Div(a, b tensor.Tensor, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	return e.binaryDense("Div", OpDiv, a, b, opts)
}

// DivScalar is not implemented on the device.
func (e *Engine) DivScalar(a tensor.Tensor, b interface{}, leftTensor bool, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	return nil, e.scalarUnsupported("DivScalar")
}
