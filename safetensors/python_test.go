package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/troupe-ml/troupe/tensor"
)

// numpyPython returns a Python interpreter that can import numpy, skipping
// the test when there is none: testdata/reference.py, an independent
// implementation of the format in Python, is the reference here.
func numpyPython(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Python")
	}
	for _, cand := range []string{"python3", "/usr/bin/python3"} {
		p, err := exec.LookPath(cand)
		if err != nil {
			continue
		}
		if exec.Command(p, "-c", "import numpy").Run() == nil {
			return p
		}
	}
	t.Skip("no python3 with numpy")
	return ""
}

type refTensor struct {
	DType  DType         `json:"dtype"`
	Shape  []int         `json:"shape"`
	Values []json.Number `json:"values"`
}

// checkPythonFile compares the file Python wrote (in Hugging Face's
// dtype-then-name order, unlike Write's) with the values numpy and torch
// decode from it, listed in expect.
func checkPythonFile(t *testing.T, file, expect string) {
	raw, err := os.ReadFile(expect)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]refTensor
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	f, err := Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata["format"] != "np" {
		t.Errorf("metadata %v", f.Metadata)
	}
	if len(f.Names()) != len(want) {
		t.Errorf("names %v, want %d tensors", f.Names(), len(want))
	}
	for name, w := range want {
		x, ok := f.Tensor(name)
		if !ok {
			t.Errorf("tensor %q missing", name)
			continue
		}
		if x.DType != w.DType || !cmp.Equal(x.Shape, w.Shape) {
			t.Errorf("%s: %s %v, want %s %v", name, x.DType, x.Shape, w.DType, w.Shape)
			continue
		}
		switch x.DType {
		case F64, F32, F16, BF16:
			got, err := x.Float64s()
			if err != nil {
				t.Fatal(err)
			}
			ref := make([]float64, len(w.Values))
			for i, v := range w.Values {
				ref[i], _ = v.Float64()
			}
			if !cmp.Equal(got, ref) {
				t.Errorf("%s: got %v, numpy decodes %v", name, got, ref)
			}
		default:
			got := decodeInts(x)
			ref := make([]int64, len(w.Values))
			for i, v := range w.Values {
				ref[i], _ = v.Int64()
			}
			if !cmp.Equal(got, ref) {
				t.Errorf("%s: got %v, numpy decodes %v", name, got, ref)
			}
		}
	}
	if _, ok := want["t.bf16"]; !ok {
		t.Log("torch unavailable: the Python file has no BF16 tensor")
	}
}

// decodeInts reads an integer or BOOL tensor's values.
func decodeInts(x Tensor) []int64 {
	n, d := x.NumElements(), x.Data
	out := make([]int64, n)
	for i := range out {
		switch x.DType {
		case I64:
			out[i] = int64(binary.LittleEndian.Uint64(d[8*i:]))
		case I32:
			out[i] = int64(int32(binary.LittleEndian.Uint32(d[4*i:])))
		case I16:
			out[i] = int64(int16(binary.LittleEndian.Uint16(d[2*i:])))
		case I8:
			out[i] = int64(int8(d[i]))
		case U8, BOOL:
			out[i] = int64(d[i])
		}
	}
	return out
}

// TestPythonReference checks the codec against testdata/reference.py, a
// Python implementation of the format from its description: Python parses
// a file Go wrote with every common dtype and checks its layout and values
// (the F16 and BF16 bits, from package tensor's rounding, must equal numpy's
// and torch's rounding of the same float32 values); then Go reads a file
// Python wrote and compares every value with numpy's and torch's decoding.
func TestPythonReference(t *testing.T) {
	py := numpyPython(t)
	rng := rand.New(rand.NewPCG(11, 12))
	src := []float32{
		0, float32(math.Copysign(0, -1)), 1, -2.5, 65504, 65519, 65520, 1e-8,
		1 + 1.0/(1<<11), 1 + 3.0/(1<<11), 1.0 / (1 << 25), 3.0 / (1 << 26), // binary16 ties and subnormals
		1 + 1.0/(1<<8), 1 + 3.0/(1<<8), math.MaxFloat32, // bfloat16 ties and overflow
		1.0000001,
	}
	for range 16 {
		src = append(src, float32(rng.NormFloat64()*100))
	}
	f16, bf16 := make([]uint16, len(src)), make([]uint16, len(src))
	for i, v := range src {
		f16[i], bf16[i] = tensor.Float32ToF16(v), tensor.Float32ToBF16(v)
	}
	f64 := make([]float64, len(src))
	for i, v := range src {
		f64[i] = float64(v) / 3
	}
	shape := []int{4, len(src) / 4}
	ts := []Tensor{
		FromFloat32("w.f32", shape, src),
		FromFloat64("w.f64", shape, f64),
		FromHalf("w.f16", F16, shape, f16),
		FromHalf("w.bf16", BF16, shape, bf16),
		FromFloat32("scalar", nil, []float32{7}),
	}
	ints := map[DType][]int64{
		I64:  {math.MinInt64, -1, 0, math.MaxInt64},
		I32:  {math.MinInt32, -7, 9, math.MaxInt32},
		I16:  {math.MinInt16, -3, 4, math.MaxInt16},
		I8:   {-128, -1, 1, 127},
		U8:   {0, 1, 200, 255},
		BOOL: {1, 0, 0, 1},
	}
	source := map[string]any{}
	for dt, vals := range ints {
		x := Tensor{Name: "i." + string(dt), DType: dt, Shape: []int{2, 2}}
		for _, v := range vals {
			switch dt.Size() {
			case 8:
				x.Data = binary.LittleEndian.AppendUint64(x.Data, uint64(v))
			case 4:
				x.Data = binary.LittleEndian.AppendUint32(x.Data, uint32(v))
			case 2:
				x.Data = binary.LittleEndian.AppendUint16(x.Data, uint16(v))
			default:
				x.Data = append(x.Data, byte(v))
			}
		}
		ts = append(ts, x)
		nums := make([]json.Number, len(vals))
		for i, v := range vals {
			nums[i] = json.Number(strconv.FormatInt(v, 10))
		}
		source[x.Name] = refTensor{dt, x.Shape, nums}
	}
	floatSource := func(x Tensor, vals []float64) refTensor {
		nums := make([]json.Number, len(vals))
		for i, v := range vals {
			nums[i] = json.Number(strconv.FormatFloat(v, 'g', -1, 64))
		}
		return refTensor{x.DType, x.Shape, nums}
	}
	src64 := make([]float64, len(src))
	for i, v := range src {
		src64[i] = float64(v)
	}
	for _, x := range ts[:4] {
		if x.DType == F64 {
			source[x.Name] = floatSource(x, f64)
		} else {
			source[x.Name] = floatSource(x, src64)
		}
	}
	source["scalar"] = floatSource(ts[4], []float64{7})
	meta := map[string]string{"format": "troupe", "k": "v"}

	dir := t.TempDir()
	file, sourcePath := filepath.Join(dir, "go.safetensors"), filepath.Join(dir, "source.json")
	fh, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(fh, ts, meta); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	sj, _ := json.Marshal(map[string]any{"metadata": meta, "tensors": source})
	if err := os.WriteFile(sourcePath, sj, 0o644); err != nil {
		t.Fatal(err)
	}
	pyFile, expect := filepath.Join(dir, "py.safetensors"), filepath.Join(dir, "expect.json")
	out, err := exec.Command(py, "testdata/reference.py", file, sourcePath, pyFile, expect).CombinedOutput()
	if err != nil {
		t.Fatalf("reference.py rejects the Go file or fails: %v\n%s", err, out)
	}
	t.Logf("reference.py: %s", out)
	checkPythonFile(t, pyFile, expect)
}
