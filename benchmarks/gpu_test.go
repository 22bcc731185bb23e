//go:build !troupecuda

package benchmarks

// The GPU benchmarks (BenchmarkCUDA*, cuda_test.go) need the build tag
// troupecuda, and a binary built with it exits at start-up on a machine
// without an NVIDIA driver (gorgonia.org/cu's init). So the default build
// cannot contain them; BenchmarkGPU stands in for them instead: on a
// machine with a driver it builds and runs them in a child
// `go test -tags troupecuda`, streaming its output, and elsewhere it skips
// with one line saying why. That way `go test ./benchmarks -bench .` measures
// the GPU wherever there is one.

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// gpuBenchPattern selects the tagged benchmarks the child run executes.
const gpuBenchPattern = "^BenchmarkCUDA"

// cudaLDFlags points the linker at the libcuda stub, as the Makefile's
// CUDA_LDFLAGS does (the real library is loaded at run time).
const cudaLDFlags = "-L/usr/lib/x86_64-linux-gnu/stubs -L/usr/local/cuda/lib64/stubs"

// nvidiaDriver returns "" when an NVIDIA driver is loaded, otherwise why
// the GPU benchmarks cannot run.
func nvidiaDriver() string {
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		return ""
	}
	if err := exec.Command("nvidia-smi", "-L").Run(); err == nil {
		return ""
	} else if errors.Is(err, exec.ErrNotFound) {
		return "no NVIDIA driver (/proc/driver/nvidia/version absent, nvidia-smi not installed)"
	} else {
		return fmt.Sprintf("no NVIDIA driver (/proc/driver/nvidia/version absent, nvidia-smi -L: %v)", err)
	}
}

// cudaHeaders reports whether cuda.h, which the troupecuda build needs, is
// installed.
func cudaHeaders() bool {
	for _, p := range []string{"/usr/include/cuda.h", "/usr/local/cuda/include/cuda.h"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// goTool returns the go command that built this test, falling back to PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// testFlag returns the value of the test binary's flag name ("" if unset).
func testFlag(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

var gpuOnce sync.Once

// BenchmarkGPU runs the GPU benchmarks (see the comment at the top of this
// file) once, whatever b.N, passing on -benchtime and -count.
func BenchmarkGPU(b *testing.B) {
	why := nvidiaDriver()
	if why == "" && !cudaHeaders() {
		why = "NVIDIA driver present but cuda.h missing (scripts/install-cuda.sh installs it)"
	}
	if why != "" {
		// go test shows a benchmark's Skip message only with -v; the line
		// goes to stdout so that every `go test -bench` run shows it.
		msg := fmt.Sprintf("BenchmarkGPU: skipped the GPU benchmarks (%s, -tags troupecuda): %s", gpuBenchPattern, why)
		gpuOnce.Do(func() { fmt.Println(msg) })
		b.SkipNow()
	}
	gpuOnce.Do(func() {
		args := []string{"test", "-tags", "troupecuda", ".", "-run", "^$", "-bench", gpuBenchPattern}
		if v := testFlag("test.benchtime"); v != "" {
			args = append(args, "-benchtime", v)
		}
		if v := testFlag("test.count"); v != "" && v != "1" {
			args = append(args, "-count", v)
		}
		cmd := exec.Command(goTool(), args...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = os.Environ()
		if os.Getenv("CGO_LDFLAGS") == "" {
			cmd.Env = append(cmd.Env, "CGO_LDFLAGS="+cudaLDFlags)
		}
		fmt.Printf("BenchmarkGPU: go %v\n", args)
		if err := cmd.Run(); err != nil {
			b.Errorf("go test -tags troupecuda -bench %s: %v", gpuBenchPattern, err)
		}
	})
}
