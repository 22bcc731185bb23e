// Package benchmarks holds troupe's speed measurements: go test ./benchmarks
// -bench . reports GFLOP/s, tokens/s and requests/s for the kernels, models
// and servers, beside gonum and plain Gorgonia compositions of the same work.
// benchmarks/compare runs the same shapes in PyTorch for a side-by-side ratio.
package benchmarks
