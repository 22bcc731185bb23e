// Package tensor holds troupe's float32 tensors and the CPU kernels that
// every other package runs on.
//
// Tensors are gorgonia.org/tensor *tensor.Dense values, so they flow into
// Gorgonia expression graphs unchanged. The kernels work on plain []float32
// slices with explicit shapes and strides (the gonum/BLAS convention), and the
// Dense-level helpers wrap them.
//
// The centre of the package is Gemm, a cache-blocked, packed (BLIS-style)
// single-precision matrix multiply with AVX-512 and AVX2/FMA micro-kernels in
// Go assembly, chosen at run time from the CPU's features, and a pure-Go
// fallback (build tag purego forces it). Install makes it the BLAS that
// Gorgonia and gorgonia.org/tensor call, so every Gorgonia Mul and
// BatchedMatMul runs on it.
//
// Package nn builds its fused Gorgonia ops on these kernels; package cuda
// supplies device versions of the same kernel set behind the cuda build tag.
package tensor
