//go:build troupecuda

package cuda

import "github.com/troupe-ml/troupe/tensor"

// *Engine provides every kernel DenseBackend launches.
var _ deviceKernels = (*Engine)(nil)

// Every tensor whose engine is a *Engine dispatches package tensor's
// Dense-level functions to DenseBackend (tensor.RegisterBackend keys on the
// engine's dynamic type, so one registration covers all Engines; the backend
// takes the device from each call's operands).
func init() { tensor.RegisterBackend((*Engine)(nil), DenseBackend{}) }
