//go:build troupecuda

package cuda

import (
	"fmt"

	"github.com/troupe-ml/troupe/tensor"
)

// ExampleEngine multiplies two matrices on the GPU and checks the result
// against package tensor's CPU Gemm. (No Output line: it needs a GPU, so it
// is compiled everywhere but run only by scripts/device-check.sh via -run.)
func ExampleEngine() {
	e, err := NewEngine(Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	a := []float32{1, 2, 3, 4, 5, 6} // 2×3
	b := []float32{1, 0, 0, 1, 1, 1} // 3×2
	da, _ := e.ToDevice(a)
	db, _ := e.ToDevice(b)
	dc, _ := e.Zeros(4)
	if err := e.Gemm(false, false, 2, 2, 3, 1, da, 3, db, 2, 0, dc, 2); err != nil {
		fmt.Println(err)
		return
	}
	c, _ := e.HostCopy(dc)
	want := make([]float32, 4)
	tensor.Gemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, want, 2)
	fmt.Println(c, want)
}
