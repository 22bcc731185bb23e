package tensor_test

import (
	"fmt"

	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/tensor"
)

// deviceEngine stands in for a device's engine (package cuda supplies the
// real one behind the cuda build tag). Embedding StdEng keeps this example's
// memory on the Go heap.
type deviceEngine struct{ gt.StdEng }

// deviceKernels is a backend for deviceEngine tensors. A real one would launch
// device kernels; this one reports the call and runs the CPU kernel.
type deviceKernels struct{ tensor.CPUBackend }

func (deviceKernels) Name() string { return "device" }

func (d deviceKernels) Softmax(dst, src *gt.Dense, axis int, log bool) {
	fmt.Printf("device softmax over axis %d of %v\n", axis, src.Shape())
	d.CPUBackend.Softmax(dst, src, axis, log)
}

func ExampleRegisterBackend() {
	tensor.RegisterBackend(deviceEngine{}, deviceKernels{})
	defer tensor.RegisterBackend(deviceEngine{}, nil)

	x := gt.New(gt.WithShape(2, 2), gt.Of(gt.Float32), gt.WithEngine(deviceEngine{}))
	copy(tensor.Data(x), []float32{0, 0, 1, 3})
	// The caller is the same as for a CPU tensor; the engine picks the kernels.
	p := tensor.Softmax(nil, x, -1)
	fmt.Printf("%s %.4f\n", tensor.BackendOf(p).Name(), tensor.Data(p))
	// Output:
	// device softmax over axis 1 of (2, 2)
	// device [0.5000 0.5000 0.1192 0.8808]
}
