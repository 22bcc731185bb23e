package safetensors

// DType names the element type of a tensor as the safetensors header spells
// it.
type DType string

// The element types troupe reads and writes. The 8-bit float and unsigned
// wide-integer types are listed so that files holding them open (their bytes
// are available through Tensor.Data); only the float types convert.
const (
	F64    DType = "F64"
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U8     DType = "U8"
	BOOL   DType = "BOOL"
	U64    DType = "U64"
	U32    DType = "U32"
	U16    DType = "U16"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
)

// Size returns the bytes per element of d, or 0 when d is not a known type.
func (d DType) Size() int {
	switch d {
	case F64, I64, U64:
		return 8
	case F32, I32, U32:
		return 4
	case F16, BF16, I16, U16:
		return 2
	case I8, U8, BOOL, F8E4M3, F8E5M2:
		return 1
	}
	return 0
}
