// Package cuda is troupe's GPU backend: device memory, streams and its own
// CUDA kernels, driven through gorgonia.org/cu's driver API. Everything that
// touches the GPU is built only with the cuda build tag; without it this
// package holds documentation only, and troupe runs on the CPU kernels of
// package tensor.
package cuda
