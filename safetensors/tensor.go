package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/troupe-ml/troupe/tensor"
)

// Tensor is one named tensor: its element type, its shape (row-major; an
// empty shape is a scalar) and its raw little-endian bytes.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// NumElements returns the product of the dimensions (1 for a scalar).
func (t Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// check reports a Tensor whose Data does not hold exactly its shape's
// elements, which a hand-built Tensor can get wrong; tensors from a File
// always pass.
func (t Tensor) check() error {
	n, ok := numElements(t.Shape)
	if !ok {
		return fmt.Errorf("safetensors: tensor %q: invalid shape %v", t.Name, t.Shape)
	}
	size := t.DType.Size()
	if size == 0 {
		return fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
	}
	if n > math.MaxInt/size || len(t.Data) != n*size {
		return fmt.Errorf("safetensors: tensor %q: %d data bytes for dtype %s and shape %v", t.Name, len(t.Data), t.DType, t.Shape)
	}
	return nil
}

// numElements multiplies the dimensions, refusing negative ones and
// products that overflow an int.
func numElements(shape []int) (int, bool) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d != 0 && n > math.MaxInt/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// Float32s returns a copy of the values of an F32, F16, BF16 or F64 tensor
// as float32 (F64 rounds to nearest). Other dtypes are an error.
func (t Tensor) Float32s() ([]float32, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	d := t.Data
	switch t.DType {
	case F32:
		out := make([]float32, len(d)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
		}
		return out, nil
	case F64:
		out := make([]float32, len(d)/8)
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(d[8*i:])))
		}
		return out, nil
	case F16:
		out := make([]float32, len(d)/2)
		for i := range out {
			out[i] = tensor.F16ToFloat32(binary.LittleEndian.Uint16(d[2*i:]))
		}
		return out, nil
	case BF16:
		out := make([]float32, len(d)/2)
		for i := range out {
			out[i] = tensor.BF16ToFloat32(binary.LittleEndian.Uint16(d[2*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("safetensors: tensor %q has dtype %s, which does not convert to float32", t.Name, t.DType)
}

// Float64s returns a copy of the values of an F64, F32, F16 or BF16 tensor
// as float64 (exactly). Other dtypes are an error.
func (t Tensor) Float64s() ([]float64, error) {
	if t.DType != F64 {
		if t.DType != F32 && t.DType != F16 && t.DType != BF16 {
			return nil, fmt.Errorf("safetensors: tensor %q has dtype %s, which does not convert to float64", t.Name, t.DType)
		}
		f, err := t.Float32s()
		if err != nil {
			return nil, err
		}
		out := make([]float64, len(f))
		for i, v := range f {
			out[i] = float64(v)
		}
		return out, nil
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	out := make([]float64, len(t.Data)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return out, nil
}

// littleEndian reports whether this machine stores integers little-endian,
// the byte order of the format, so that Data can be viewed in place.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Uint16s returns the bit patterns of an F16 or BF16 tensor (convert them
// with tensor.F16ToFloat32 or tensor.BF16ToFloat32). On a little-endian
// machine with Data 2-byte aligned the result is a view of Data, sharing its
// memory (and, for a mapped File, read-only and valid until Close: do not
// write to it); otherwise it is a copy.
func (t Tensor) Uint16s() ([]uint16, error) {
	if t.DType != F16 && t.DType != BF16 {
		return nil, fmt.Errorf("safetensors: tensor %q has dtype %s, not F16 or BF16", t.Name, t.DType)
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	n := len(t.Data) / 2
	if n == 0 {
		return []uint16{}, nil
	}
	p := unsafe.SliceData(t.Data)
	if littleEndian && uintptr(unsafe.Pointer(p))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(p)), n), nil
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(t.Data[2*i:])
	}
	return out, nil
}

// mustShape panics when shape does not hold n elements: building a tensor
// with the wrong amount of data is a programming mistake.
func mustShape(name string, shape []int, n int) []int {
	m, ok := numElements(shape)
	if !ok || m != n {
		panic(fmt.Sprintf("safetensors: tensor %q: shape %v does not hold %d values", name, shape, n))
	}
	return append([]int{}, shape...)
}

// FromFloat32 returns an F32 tensor holding a copy of data. It panics when
// shape does not hold len(data) elements.
func FromFloat32(name string, shape []int, data []float32) Tensor {
	t := Tensor{Name: name, DType: F32, Shape: mustShape(name, shape, len(data)), Data: make([]byte, 4*len(data))}
	for i, v := range data {
		binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(v))
	}
	return t
}

// FromFloat64 returns an F64 tensor holding a copy of data. It panics when
// shape does not hold len(data) elements.
func FromFloat64(name string, shape []int, data []float64) Tensor {
	t := Tensor{Name: name, DType: F64, Shape: mustShape(name, shape, len(data)), Data: make([]byte, 8*len(data))}
	for i, v := range data {
		binary.LittleEndian.PutUint64(t.Data[8*i:], math.Float64bits(v))
	}
	return t
}

// FromHalf returns an F16 or BF16 tensor holding a copy of the bit patterns
// bits (from tensor.Float32ToF16 or tensor.Float32ToBF16). It panics when
// dtype is neither or shape does not hold len(bits) elements.
func FromHalf(name string, dtype DType, shape []int, bits []uint16) Tensor {
	if dtype != F16 && dtype != BF16 {
		panic(fmt.Sprintf("safetensors: FromHalf(%q): dtype %s is not F16 or BF16", name, dtype))
	}
	t := Tensor{Name: name, DType: dtype, Shape: mustShape(name, shape, len(bits)), Data: make([]byte, 2*len(bits))}
	for i, v := range bits {
		binary.LittleEndian.PutUint16(t.Data[2*i:], v)
	}
	return t
}
