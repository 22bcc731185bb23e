//go:build !amd64 || purego

package tensor

// gemmKernels lists the micro-kernels this build has: with the purego build
// tag, or off amd64, only the portable Go one.
func gemmKernels() []kernelAvail {
	return []kernelAvail{{kernelGo, true}}
}
