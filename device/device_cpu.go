//go:build !troupecuda

package device

import (
	"errors"
	"fmt"

	gt "gorgonia.org/tensor"
)

// ErrNoCUDA is returned by Select("cuda") in a build without the tag.
var ErrNoCUDA = errors.New("troupe was built without -tags troupecuda; rebuild with `go build -tags troupecuda` (needs the CUDA toolkit: scripts/install-cuda.sh) to select the cuda device")

func openCUDA() (gt.Engine, error) { return nil, ErrNoCUDA }

func toEngine(e gt.Engine, t *gt.Dense) (*gt.Dense, error) {
	return nil, fmt.Errorf("device: no way to copy a tensor of shape %v to engine %T in this build", t.Shape(), e)
}

func fromEngine(t *gt.Dense) (*gt.Dense, error) {
	return nil, fmt.Errorf("device: tensor of shape %v lives in memory of engine %T, which this build cannot read", t.Shape(), t.Engine())
}
