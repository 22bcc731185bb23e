//go:build troupecuda

package main

// Built with -tags troupecuda, troupe links package cuda: its init
// registers the device backend for *cuda.Engine tensors
// (tensor.RegisterBackend), which library code and notebook scripts select
// with package device. The commands offer no --device: troupe's language
// models run on the CPU kernels. Such a binary starts only on a machine
// with an NVIDIA driver (gorgonia.org/cu initialises the driver when the
// program starts).

import _ "github.com/troupe-ml/troupe/cuda"
