package tensor

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	gt "gorgonia.org/tensor"
)

// UnaryOp names an element-wise function.
type UnaryOp int

const (
	OpExp UnaryOp = iota
	OpLog
	OpTanh
	OpSigmoid
	OpReLU
	OpGELU // tanh approximation
	OpNeg
)

var unaryNames = [...]string{"exp", "log", "tanh", "sigmoid", "relu", "gelu", "neg"}

func (op UnaryOp) String() string {
	if op >= 0 && int(op) < len(unaryNames) {
		return unaryNames[op]
	}
	return fmt.Sprintf("UnaryOp(%d)", int(op))
}

// BinaryOp names an element-wise arithmetic operation.
type BinaryOp int

const (
	OpAdd BinaryOp = iota
	OpSub
	OpMul
	OpDiv
)

var binaryNames = [...]string{"add", "sub", "mul", "div"}

func (op BinaryOp) String() string {
	if op >= 0 && int(op) < len(binaryNames) {
		return binaryNames[op]
	}
	return fmt.Sprintf("BinaryOp(%d)", int(op))
}

// Backend is the kernel set behind the Dense-level functions, expressed over
// *tensor.Dense values so that an implementation can work on memory that is
// not Go-accessible (a GPU's). The Dense-level functions validate shapes,
// allocate destinations (on the operands' engine) and then call exactly one
// Backend method, so an implementation may assume its arguments are
// float32, contiguous and of consistent shapes:
//
//   - MatMul: c = alpha·op(a)·op(b) + beta·c, 2-D, or batched over the
//     leading axis of 3-D operands (b may be 2-D and shared by the batch).
//   - Unary / UnaryBackward: exp, log, tanh, sigmoid, ReLU, GELU, neg, and
//     dx = dy·f'(x) given the input x and the output y (each op uses the one
//     it needs; the other may be nil).
//   - Binary: dst = a op b with numpy broadcasting (a and b already
//     broadcast-compatible with dst's shape); BinaryScalar: dst = a op s, or
//     s op a when scalarLeft.
//   - Reduce / ArgMax along one axis (the axis is removed from dst's shape).
//   - Softmax / SoftmaxBackward along one axis, log-softmax when log is set.
//   - LayerNorm / LayerNormBackward over the last axis (dgamma and dbeta
//     accumulate).
//   - EmbeddingGather / EmbeddingScatterAdd (ids stay on the host).
//   - AdamW (in place) and SumSquares (for global-norm clipping).
//   - Fill (every element of dst set to v) and Copy (dst = src, same number
//     of elements): what callers outside this package (nn's fused ops)
//     need to zero accumulators and move gradient segments without reading
//     the memory from Go.
//
// CPU is the implementation for Go memory. Package cuda registers its own
// for its engine with RegisterBackend.
type Backend interface {
	Name() string
	MatMul(transA, transB bool, alpha float32, a, b *gt.Dense, beta float32, c *gt.Dense)
	Unary(op UnaryOp, dst, src *gt.Dense)
	UnaryBackward(op UnaryOp, dx, dy, x, y *gt.Dense)
	Binary(op BinaryOp, dst, a, b *gt.Dense)
	BinaryScalar(op BinaryOp, dst, a *gt.Dense, s float32, scalarLeft bool)
	Reduce(op ReduceOp, dst, src *gt.Dense, axis int)
	ArgMax(dst, src *gt.Dense, axis int) // dst has dtype Int
	Softmax(dst, src *gt.Dense, axis int, log bool)
	SoftmaxBackward(dx, dy, y *gt.Dense, axis int, log bool)
	LayerNorm(dst, mean, rstd, src, gamma, beta *gt.Dense, eps float32)
	LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma *gt.Dense)
	EmbeddingGather(dst, table *gt.Dense, ids []int)
	EmbeddingScatterAdd(dtable, dy *gt.Dense, ids []int)
	AdamW(param, grad, m, v *gt.Dense, p AdamWParams)
	SumSquares(x *gt.Dense) float64
	Fill(dst *gt.Dense, v float32)
	Copy(dst, src *gt.Dense)
}

var (
	backendMu sync.RWMutex
	backends  = map[reflect.Type]Backend{}
	// nBackends is len(backends), read without the lock: while nothing is
	// registered (every default build) BackendOf returns CPU at the cost of
	// one atomic load, which keeps the per-op dispatch of nn's fused ops
	// free on the CPU.
	nBackends atomic.Int32
)

// RegisterBackend makes b the backend for every tensor whose Engine has the
// same dynamic type as engine (for example a CUDA engine). Tensors with the
// default engines (tensor.StdEng, tensor.Float32Engine) or no engine use
// CPU. Registering again for the same engine type replaces the backend; a nil
// b removes it.
func RegisterBackend(engine gt.Engine, b Backend) {
	if engine == nil {
		panic("tensor: RegisterBackend: nil engine")
	}
	backendMu.Lock()
	defer backendMu.Unlock()
	if b == nil {
		delete(backends, reflect.TypeOf(engine))
	} else {
		backends[reflect.TypeOf(engine)] = b
	}
	nBackends.Store(int32(len(backends)))
}

// BackendOf returns the backend for t's engine (CPU when none is registered).
func BackendOf(t *gt.Dense) Backend {
	if nBackends.Load() == 0 {
		return CPU
	}
	e := t.Engine()
	if e == nil {
		return CPU
	}
	backendMu.RLock()
	b, ok := backends[reflect.TypeOf(e)]
	backendMu.RUnlock()
	if !ok {
		return CPU
	}
	return b
}

// kBackend returns the common backend of the non-nil operands and panics
// when they live on different ones.
func kBackend(op string, ts ...*gt.Dense) Backend {
	var b Backend
	for _, t := range ts {
		if t == nil {
			continue
		}
		tb := BackendOf(t)
		if b == nil {
			b = tb
		} else if tb != b {
			names := make([]string, 0, len(ts))
			for _, t := range ts {
				if t != nil {
					names = append(names, BackendOf(t).Name())
				}
			}
			panic(fmt.Sprintf("tensor: %s: operands live on different backends (%s)", op, strings.Join(names, ", ")))
		}
	}
	if b == nil {
		return CPU
	}
	return b
}
