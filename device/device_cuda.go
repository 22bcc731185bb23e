//go:build troupecuda

package device

import (
	"errors"
	"fmt"

	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/cuda"
)

// ErrNoCUDA is never returned in a build with the tag; it exists in both
// builds so that callers can test for it with errors.Is.
var ErrNoCUDA = errors.New("troupe was built without -tags troupecuda")

// openCUDA opens the first GPU. Importing package cuda also registers its
// tensor.Backend for *cuda.Engine, so tensors on the engine dispatch there.
func openCUDA() (gt.Engine, error) {
	if !cuda.GPUPresent() {
		return nil, errors.New("no NVIDIA GPU visible (/dev/nvidia[0-9]* absent)")
	}
	return cuda.NewEngine(cuda.Options{})
}

func toEngine(e gt.Engine, t *gt.Dense) (*gt.Dense, error) {
	ce, ok := e.(*cuda.Engine)
	if !ok {
		return nil, fmt.Errorf("device: engine %T is not a CUDA engine", e)
	}
	return ce.DenseToDevice(t)
}

func fromEngine(t *gt.Dense) (*gt.Dense, error) {
	ce, ok := t.Engine().(*cuda.Engine)
	if !ok {
		return nil, fmt.Errorf("device: tensor of shape %v lives in memory of engine %T, which this build cannot read", t.Shape(), t.Engine())
	}
	return ce.DenseToHost(t)
}
