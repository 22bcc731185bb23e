package policies

import (
	"fmt"
	"io"
	"slices"

	"github.com/troupe-ml/troupe/safetensors"
)

// stTensor is one tensor of a safetensors file, float32 or float64.
type stTensor struct {
	Name  string
	Shape []int
	F32   []float32
	F64   []float64
}

// writeSafetensors writes tensors (F64 when F64 is set, else F32) and meta
// with package safetensors.
func writeSafetensors(w io.Writer, meta map[string]string, ts []stTensor) error {
	out := make([]safetensors.Tensor, len(ts))
	for i, t := range ts {
		n := len(t.F32)
		if t.F64 != nil {
			n = len(t.F64)
		}
		// A shape that disagrees with the data is refused here rather than
		// left to safetensors.FromFloat*, which panics on it.
		if (safetensors.Tensor{Shape: t.Shape}).NumElements() != n || slices.ContainsFunc(t.Shape, func(d int) bool { return d < 0 }) {
			return fmt.Errorf("safetensors tensor %q: shape %v does not hold %d values", t.Name, t.Shape, n)
		}
		if t.F64 != nil {
			out[i] = safetensors.FromFloat64(t.Name, t.Shape, t.F64)
		} else {
			out[i] = safetensors.FromFloat32(t.Name, t.Shape, t.F32)
		}
	}
	return safetensors.Write(w, out, meta)
}

// readSafetensors reads a whole safetensors file from r, validated by
// package safetensors, returning its metadata (never nil) and its F32 and
// F64 tensors by name; any other dtype is an error.
func readSafetensors(r io.Reader) (map[string]string, map[string]stTensor, error) {
	f, err := safetensors.Read(r)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	out := map[string]stTensor{}
	for _, name := range f.Names() {
		x, _ := f.Tensor(name)
		t := stTensor{Name: name, Shape: x.Shape}
		switch x.DType {
		case safetensors.F32:
			t.F32, err = x.Float32s()
		case safetensors.F64:
			t.F64, err = x.Float64s()
		default:
			err = fmt.Errorf("safetensors tensor %q: unsupported dtype %s (want F32 or F64)", name, x.DType)
		}
		if err != nil {
			return nil, nil, err
		}
		out[name] = t
	}
	return f.Metadata, out, nil
}
