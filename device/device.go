package device

import (
	"fmt"
	"strings"
	"sync"

	gt "gorgonia.org/tensor"
)

// Names lists the values Select accepts.
var Names = []string{"cpu", "cuda"}

var (
	mu       sync.Mutex
	selected = "cpu"
	engine   gt.Engine // nil: host memory
)

// Select makes name ("cpu" or "cuda", case-insensitive) the device of this
// process. It returns an error for an unknown name, for "cuda" in a build
// without -tags troupecuda, and when the GPU cannot be opened; the
// selection is then unchanged.
func Select(name string) error {
	n := strings.ToLower(strings.TrimSpace(name))
	mu.Lock()
	defer mu.Unlock()
	switch n {
	case "cpu":
		selected, engine = "cpu", nil
		return nil
	case "cuda":
		e, err := openCUDA()
		if err != nil {
			return fmt.Errorf("device: cuda: %w", err)
		}
		selected, engine = "cuda", e
		return nil
	}
	return fmt.Errorf("device: unknown device %q (want one of %s)", name, strings.Join(Names, ", "))
}

// Selected returns the name of the selected device ("cpu" until Select
// chooses another).
func Selected() string {
	mu.Lock()
	defer mu.Unlock()
	return selected
}

// Engine returns the engine new tensors should be allocated with on the
// selected device (gt.WithEngine), or nil for the CPU.
func Engine() gt.Engine {
	mu.Lock()
	defer mu.Unlock()
	return engine
}

// ToDevice returns t on the selected device: t itself on the CPU, a device
// copy under "cuda". t must be a contiguous float32 host tensor.
func ToDevice(t *gt.Dense) (*gt.Dense, error) {
	e := Engine()
	if e == nil {
		return t, nil
	}
	return toEngine(e, t)
}

// ToHost returns a host copy of t, or t itself when it already lives in Go
// memory.
func ToHost(t *gt.Dense) (*gt.Dense, error) {
	if t.IsNativelyAccessible() {
		return t, nil
	}
	return fromEngine(t)
}
