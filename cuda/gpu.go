package cuda

import "path/filepath"

// GPUPresent reports whether this machine exposes an NVIDIA GPU to the
// process, by looking for the driver's device nodes (/dev/nvidia0, ...). It
// does not load the CUDA driver, so it is safe to call from any build and is
// what tests use to skip before anything touches gorgonia.org/cu.
func GPUPresent() bool {
	m, _ := filepath.Glob("/dev/nvidia[0-9]*")
	return len(m) > 0
}
