// Package device chooses where troupe's tensors live for a program that
// takes a --device flag: "cpu" (the default, Go memory and package tensor's
// CPU kernels) or "cuda" (an NVIDIA GPU through package cuda).
//
// Select is the one call a command makes with the flag's value. In the
// default build Select("cuda") returns an error saying the binary was built
// without -tags troupecuda; in a build with the tag it opens the GPU
// (cuda.NewEngine) and makes Engine return it. Tensors allocated with that
// engine, or copied to it with ToDevice, dispatch package tensor's
// Dense-level functions and nn's fused ops to package cuda's backend
// (tensor.BackendOf); everything else keeps running on the CPU.
//
// The selection is process-wide: a command selects once, before it builds
// models. It is safe to call from several goroutines, but a later Select
// replaces the engine that earlier callers may still hold.
package device
