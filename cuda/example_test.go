package cuda

import "fmt"

func ExampleSizeClass() {
	for _, n := range []int64{100, 1000, 5000, 1 << 20} {
		fmt.Println(n, "→", SizeClass(n))
	}
	// Output:
	// 100 → 512
	// 1000 → 1024
	// 5000 → 5120
	// 1048576 → 1048576
}

func ExampleGemmKernel() {
	fmt.Println(GemmKernel(false, false, true), GemmKernel(true, true, false))
	// Output: sgemm_nt tf32gemm_tn
}
