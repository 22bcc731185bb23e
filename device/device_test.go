//go:build !troupecuda

package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/tensor"
)

func TestSelect(t *testing.T) {
	t.Cleanup(func() { _ = Select("cpu") })
	cases := []struct {
		name    string
		want    string // selected afterwards
		wantErr string // substring; "" for success
		noCUDA  bool
	}{
		{name: "cpu", want: "cpu"},
		{name: " CPU ", want: "cpu"},
		{name: "cuda", want: "cpu", wantErr: "without -tags troupecuda", noCUDA: true},
		{name: "tpu", want: "cpu", wantErr: `unknown device "tpu"`},
		{name: "", want: "cpu", wantErr: "unknown device"},
	}
	for _, c := range cases {
		err := Select(c.name)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("Select(%q) = %v, want nil", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("Select(%q) = %v, want an error containing %q", c.name, err, c.wantErr)
		case c.noCUDA != errors.Is(err, ErrNoCUDA):
			t.Errorf("Select(%q): errors.Is(err, ErrNoCUDA) = %v, want %v", c.name, !c.noCUDA, c.noCUDA)
		}
		if got := Selected(); got != c.want {
			t.Errorf("after Select(%q): Selected() = %q, want %q", c.name, got, c.want)
		}
		if Engine() != nil {
			t.Errorf("after Select(%q): Engine() = %T, want nil (CPU)", c.name, Engine())
		}
	}
}

func TestToDeviceOnCPU(t *testing.T) {
	x := tensor.FromSlice([]float32{1, 2, 3}, 3)
	d, err := ToDevice(x)
	if err != nil || d != x {
		t.Fatalf("ToDevice on the CPU = %p, %v; want the same tensor %p", d, err, x)
	}
	h, err := ToHost(d)
	if err != nil || h != x {
		t.Fatalf("ToHost of a host tensor = %p, %v; want the same tensor %p", h, err, x)
	}
}
