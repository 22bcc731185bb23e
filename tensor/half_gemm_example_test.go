package tensor_test

import (
	"fmt"

	"github.com/troupe-ml/troupe/tensor"
)

// A Linear layer with bfloat16 weights stored out×in (here 2×3), applied to
// one float32 input row: y = x·Wᵀ.
func ExampleGemmHalf() {
	w32 := []float32{
		1, 0.5, -2, // output 0
		0.25, 3, 1, // output 1
	}
	w := make([]uint16, len(w32))
	tensor.Float32sToBF16(w, w32) // all exactly representable
	x := []float32{2, 4, 1}
	y := make([]float32, 2)
	tensor.GemmHalf(true, 1, 2, 3, 1, x, 3, w, 3, tensor.BF16, 0, y, 2)
	fmt.Println(y)
	// Output: [2 13.5]
}

func ExampleHalfToFloat32() {
	h := []uint16{0x3c00, 0xc100, 0x7bff, 0x0001} // binary16
	f := make([]float32, len(h))
	tensor.HalfToFloat32(f, h, tensor.F16)
	fmt.Println(f)
	// Output: [1 -2.5 65504 5.9604645e-08]
}
