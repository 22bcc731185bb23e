//go:build troupecuda

package cuda

// GPU tests of DenseBackend: package tensor's Dense-level API called on
// device tensors (engine *Engine, dispatched through the backend registered
// at init) against the same calls on host tensors (the CPU backend), within
// float32 tolerance. They need a GPU (see the note in gpu_test.go).

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/tensor"
)

func denseUp(t *testing.T, e *Engine, h *gt.Dense) *gt.Dense {
	t.Helper()
	d, err := e.DenseToDevice(h)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func denseDown(t *testing.T, e *Engine, d *gt.Dense) []float32 {
	t.Helper()
	if d.Engine() != gt.Engine(e) {
		t.Fatalf("result of shape %v lives on engine %T, want the device engine", d.Shape(), d.Engine())
	}
	if bNumel(d.Shape()) == 0 {
		return []float32{}
	}
	h, err := e.DenseToHost(d)
	if err != nil {
		t.Fatal(err)
	}
	return tensor.Data(h)
}

func TestDeviceDenseBackend(t *testing.T) {
	e := newTestEngine(t, false)
	rng := rand.New(rand.NewPCG(11, 1))
	x := denseUp(t, e, tensor.RandN(rng, 2, 2))
	if b := tensor.BackendOf(x); b.Name() != "cuda" {
		t.Fatalf("BackendOf(device tensor) = %s, want cuda (registration at init)", b.Name())
	}
	for _, c := range denseBackendCases(rng, true) {
		host := make([]*gt.Dense, len(c.ins))
		dev := make([]*gt.Dense, len(c.ins))
		for i, in := range c.ins {
			host[i] = in.Clone().(*gt.Dense)
			dev[i] = denseUp(t, e, in)
		}
		want := tensor.Data(c.run(host))
		got := denseDown(t, e, c.run(dev))
		// Device transcendental functions (expf, tanhf, logf) and summation
		// orders differ from the CPU's; sums of up to 300 N(0,1) terms get
		// an absolute bound.
		closeF32(t, c.name, got, want, 2e-4, 1e-4)
	}
}

func TestDeviceDenseBackendHostResults(t *testing.T) {
	e := newTestEngine(t, false)
	rng := rand.New(rand.NewPCG(12, 1))
	x := tensor.RandN(rng, 6, 70, 9)
	dx := denseUp(t, e, x)
	for axis := 0; axis < 3; axis++ {
		if d := cmp.Diff(tensor.ArgMax(x, axis).Ints(), tensor.ArgMax(dx, axis).Ints()); d != "" {
			t.Errorf("ArgMax axis %d (-cpu +device):\n%s", axis, d)
		}
	}
	y := tensor.RandN(rng, 100000)
	want := tensor.GlobalNormOf(x, y)
	got := tensor.GlobalNormOf(dx, denseUp(t, e, y))
	if math.Abs(got-want) > 1e-4*want {
		t.Errorf("GlobalNormOf: device %v, cpu %v", got, want)
	}
}

// TestDeviceDenseBackendTF32 runs MatMul with the TF32 tensor-core GEMM
// (compute capability 8.0+), with TF32's tolerance.
func TestDeviceDenseBackendTF32(t *testing.T) {
	e := newTestEngine(t, true)
	if !e.TF32() {
		t.Skipf("skipped: %s (compute capability %d) has no TF32", e.Name(), e.ComputeCapability())
	}
	rng := rand.New(rand.NewPCG(13, 1))
	a, b := tensor.RandN(rng, 4, 130, 96), tensor.RandN(rng, 96, 72)
	want := tensor.Data(tensor.MatMul(nil, a, b))
	got := denseDown(t, e, tensor.MatMul(nil, denseUp(t, e, a), denseUp(t, e, b)))
	closeF32(t, "MatMul TF32 4×130×96·96×72", got, want, 5e-3, 5e-2) // TF32 rounds inputs to 10 mantissa bits
}
