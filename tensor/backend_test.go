package tensor

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	gt "gorgonia.org/tensor"
)

func TestCPUBackendFillCopy(t *testing.T) {
	x := FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	CPU.Fill(x, -0.5)
	if d := cmp.Diff([]float32{-0.5, -0.5, -0.5, -0.5, -0.5, -0.5}, Data(x)); d != "" {
		t.Errorf("Fill (-want +got):\n%s", d)
	}
	src := FromSlice([]float32{6, 5, 4, 3, 2, 1}, 6)
	CPU.Copy(x, src)
	if d := cmp.Diff(Data(src), Data(x)); d != "" {
		t.Errorf("Copy (-want +got):\n%s", d)
	}
	ktMustPanic(t, "Copy sizes", []string{"Copy", "[6 5]"}, func() { CPU.Copy(x, New(5)) })
	CPU.Fill(New(0), 1) // empty: no-op
}

// TestBackendOfRegistrations checks the unlocked fast path of BackendOf:
// it must see registrations and removals.
func TestBackendOfRegistrations(t *testing.T) {
	rb := &ktRecordingBackend{}
	dev := gt.New(gt.WithShape(2), gt.Of(gt.Float32), gt.WithEngine(ktRecordingEngine{}))
	if BackendOf(dev) != CPU {
		t.Fatalf("before registration: BackendOf = %s, want cpu", BackendOf(dev).Name())
	}
	RegisterBackend(ktRecordingEngine{}, rb)
	if BackendOf(dev) != rb {
		t.Errorf("after registration: BackendOf = %s, want recording", BackendOf(dev).Name())
	}
	RegisterBackend(ktRecordingEngine{}, nil)
	if BackendOf(dev) != CPU {
		t.Errorf("after removal: BackendOf = %s, want cpu", BackendOf(dev).Name())
	}
}
