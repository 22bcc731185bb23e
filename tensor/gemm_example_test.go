package tensor_test

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/tensor"
)

// ExampleGemm multiplies a 2×3 matrix by the transpose of a 2×3 matrix and
// adds the result to C scaled by 0.5: C = 1·A·Bᵀ + 0.5·C.
func ExampleGemm() {
	a := []float32{
		1, 2, 3,
		4, 5, 6,
	}
	b := []float32{ // stored 2×3; op(B) = Bᵀ is 3×2
		1, 0, 1,
		0, 1, 0,
	}
	c := []float32{
		10, 10,
		10, 10,
	}
	tensor.Gemm(false, true, 2, 2, 3, 1, a, 3, b, 3, 0.5, c, 2)
	fmt.Println(c)
	// Output: [9 7 15 10]
}

// ExamplePackB packs a low-rank factor once and multiplies one row at a
// time by it, as decoding with a LoRA adapter does: the results are
// Gemm's, without packing B at every call.
func ExamplePackB() {
	a := []float32{ // 2×3 (rank 2, 3 inputs); op(B) = Aᵀ is 3×2
		1, 0, 2,
		0, 1, -1,
	}
	pa := tensor.PackB(true, 3, 2, a, 3)
	for _, x := range [][]float32{{1, 2, 3}, {0, 0, 1}} {
		u := make([]float32, 2)
		tensor.GemmPacked(false, 1, 1, x, 3, pa, 0, u, 2)
		fmt.Println(u)
	}
	// Output:
	// [7 -1]
	// [2 -1]
}

// ExampleInstall makes troupe's Gemm the BLAS behind Gorgonia's Mul.
func ExampleInstall() {
	tensor.Install()
	g := G.NewGraph()
	x := G.NewMatrix(g, G.Float32, G.WithShape(2, 2), G.WithName("x"),
		G.WithValue(gt.New(gt.WithShape(2, 2), gt.WithBacking([]float32{1, 2, 3, 4}))))
	w := G.NewMatrix(g, G.Float32, G.WithShape(2, 2), G.WithName("w"),
		G.WithValue(gt.New(gt.WithShape(2, 2), gt.WithBacking([]float32{0, 1, 1, 0}))))
	y := G.Must(G.Mul(x, w))
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		panic(err)
	}
	_, ours := G.WhichBLAS().(tensor.BLAS)
	fmt.Println(y.Value().Data(), ours)
	// Output: [2 1 4 3] true
}

// ExampleSetThreads runs Gemm on one goroutine, as single-threaded
// benchmarks do, and restores the default afterwards.
func ExampleSetThreads() {
	prev := tensor.SetThreads(1)
	defer tensor.SetThreads(prev)
	fmt.Println(tensor.Threads())
	// Output: 1
}
