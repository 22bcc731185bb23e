package cuda

import "fmt"

// The types and operator codes shared by the device wrappers (build tag
// troupecuda) and the pure-Go parts (the tensor.Backend logic in
// backend.go), kept untagged so that the latter compiles and is tested
// without the CUDA driver.

// Buffer is a span of device memory holding float32s (or int32 ids). It
// implements gorgonia.org/tensor's Memory, so it can back a *tensor.Dense
// whose engine is an Engine. Go code must never dereference its address.
type Buffer struct {
	ptr   uintptr
	bytes int64
}

// Uintptr returns the device address.
func (b Buffer) Uintptr() uintptr { return b.ptr }

// MemSize returns the size in bytes.
func (b Buffer) MemSize() uintptr { return uintptr(b.bytes) }

// Len returns the number of 4-byte elements.
func (b Buffer) Len() int { return int(b.bytes / 4) }

// Slice returns elements [from, to) of b (4-byte elements), sharing memory.
func (b Buffer) Slice(from, to int) Buffer {
	if from < 0 || to < from || to > b.Len() {
		panic(fmt.Sprintf("cuda: Buffer.Slice(%d, %d) of a %d-element buffer", from, to, b.Len()))
	}
	return Buffer{ptr: b.ptr + uintptr(from)*4, bytes: int64(to-from) * 4}
}

// BufferAt wraps a raw device address of n 4-byte elements (for memory
// allocated elsewhere, e.g. by a device *tensor.Dense).
func BufferAt(ptr uintptr, n int) Buffer { return Buffer{ptr: ptr, bytes: int64(n) * 4} }

// Binary operators for Binary and BinaryBroadcast.
const (
	OpAdd = iota
	OpSub
	OpMul
	OpDiv
	OpMax
	OpMin
)

// Unary operators for Unary.
const (
	UnaryScale   = iota // alpha·x
	UnaryExp            // exp x
	UnaryLog            // log x
	UnaryTanh           // tanh x
	UnaryReLU           // max(x, 0)
	UnaryNeg            // −x
	UnarySqrt           // √x
	UnarySquare         // x²
	UnaryAddC           // x + alpha
	UnarySigmoid        // 1/(1+exp(−x))
)

// AdamWConfig holds AdamW's hyper-parameters (Loshchilov & Hutter 2019).
type AdamWConfig struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
}

// need panics unless buffer b (argument name of op) holds n elements.
func need(op, name string, b Buffer, n int) {
	if b.Len() < n {
		panic(fmt.Sprintf("cuda: %s: %s has %d elements, need %d", op, name, b.Len(), n))
	}
}
