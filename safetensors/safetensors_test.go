package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

var allDTypes = []DType{F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, U64, U32, U16, F8E4M3, F8E5M2}

// randomTensors returns one tensor per dtype and shape, filled with seeded
// random bytes.
func randomTensors(seed uint64) []Tensor {
	rng := rand.New(rand.NewPCG(seed, 1))
	var ts []Tensor
	for _, dt := range allDTypes {
		for i, shape := range [][]int{{}, {3}, {2, 3}, {0, 4}, {1, 2, 1, 3}} {
			t := Tensor{Name: string(dt) + "." + string(rune('a'+i)), DType: dt, Shape: shape}
			t.Data = make([]byte, t.NumElements()*dt.Size())
			for j := range t.Data {
				t.Data[j] = byte(rng.Uint32())
			}
			ts = append(ts, t)
		}
	}
	rng.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	return ts
}

// tensorsOf returns every tensor of f by name.
func tensorsOf(t *testing.T, names []string, get func(string) (Tensor, bool)) map[string]Tensor {
	t.Helper()
	out := map[string]Tensor{}
	for _, n := range names {
		x, ok := get(n)
		if !ok {
			t.Fatalf("tensor %q listed but not found", n)
		}
		out[n] = x
	}
	return out
}

func byName(ts []Tensor) map[string]Tensor {
	out := map[string]Tensor{}
	for _, t := range ts {
		if t.Shape == nil {
			t.Shape = []int{}
		}
		out[t.Name] = t
	}
	return out
}

func TestRoundTripEveryDType(t *testing.T) {
	ts := randomTensors(1)
	meta := map[string]string{"format": "pt", "note": "quotes \" and \\ and <html> & ünïcode"}
	var buf bytes.Buffer
	if err := Write(&buf, ts, meta); err != nil {
		t.Fatal(err)
	}
	hn := binary.LittleEndian.Uint64(buf.Bytes())
	if hn%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", hn)
	}
	path := filepath.Join(t.TempDir(), "all.safetensors")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	read, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	opened, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	if runtime.GOOS == "linux" && opened.unmap == nil {
		t.Error("Open read the file instead of mapping it")
	}
	for _, f := range []struct {
		name string
		f    *File
	}{{"Read", read}, {"Open", opened}} {
		if d := cmp.Diff(meta, f.f.Metadata); d != "" {
			t.Errorf("%s: metadata differs:\n%s", f.name, d)
		}
		got := tensorsOf(t, f.f.Names(), f.f.Tensor)
		if d := cmp.Diff(byName(ts), got); d != "" {
			t.Errorf("%s: tensors differ:\n%s", f.name, d)
		}
	}
	// Data are laid out in name order.
	var want []byte
	for _, n := range read.Names() {
		x, _ := read.Tensor(n)
		want = append(want, x.Data...)
	}
	if !bytes.Equal(want, buf.Bytes()[8+hn:]) {
		t.Error("data section is not the tensors' data in name order")
	}
	if _, ok := read.Tensor("missing"); ok {
		t.Error("Tensor found a name the file lacks")
	}
	if err := read.Close(); err != nil {
		t.Error(err)
	}
	if _, ok := read.Tensor(ts[0].Name); ok || len(read.Names()) != 0 {
		t.Error("a closed File still hands out tensors")
	}
}

func TestEmptyFile(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Hugging Face's serialisation of no tensors: "{}" padded to 8 bytes.
	if want := "\x08\x00\x00\x00\x00\x00\x00\x00{}      "; buf.String() != want {
		t.Errorf("empty file %q, want %q", buf.String(), want)
	}
	f, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Names()) != 0 || f.Metadata == nil || len(f.Metadata) != 0 {
		t.Errorf("empty file: names %v, metadata %#v", f.Names(), f.Metadata)
	}
}

func TestFloatConversions(t *testing.T) {
	vals := []float32{0, 1, -2, 0.5, 3.14159265, 65504, 1e-3, float32(math.Inf(-1))}
	f32 := FromFloat32("w", []int{2, 4}, vals)
	if got, err := f32.Float32s(); err != nil || !cmp.Equal(got, vals) {
		t.Errorf("F32: %v, %v", got, err)
	}
	f64vals := []float64{1.0 / 3, -1e300, 2.5}
	f64 := FromFloat64("d", []int{3}, f64vals)
	if got, err := f64.Float64s(); err != nil || !cmp.Equal(got, f64vals) {
		t.Errorf("F64: %v, %v", got, err)
	}
	if got, err := f64.Float32s(); err != nil || !cmp.Equal(got, []float32{1.0 / 3, float32(math.Inf(-1)), 2.5}) {
		t.Errorf("F64 as float32: %v, %v", got, err)
	}
	// binary16 and bfloat16 patterns with their exact values.
	f16 := FromHalf("h", F16, []int{5}, []uint16{0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00})
	if got, err := f16.Float64s(); err != nil || !cmp.Equal(got, []float64{1, -2, 65504, math.Ldexp(1, -24), math.Inf(1)}) {
		t.Errorf("F16: %v, %v", got, err)
	}
	bf := FromHalf("b", BF16, []int{4}, []uint16{0x3f80, 0xc040, 0x4049, 0x0001})
	if got, err := bf.Float64s(); err != nil || !cmp.Equal(got, []float64{1, -3, 3.140625, math.Ldexp(1, -133)}) {
		t.Errorf("BF16: %v, %v", got, err)
	}
	for _, x := range []Tensor{{Name: "ids", DType: I64, Shape: []int{1}, Data: make([]byte, 8)}, {Name: "ids", DType: U8}} {
		if _, err := x.Float32s(); err == nil || !strings.Contains(err.Error(), `"ids"`) || !strings.Contains(err.Error(), string(x.DType)) {
			t.Errorf("Float32s of %s: error %v, want one naming the tensor and dtype", x.DType, err)
		}
		if _, err := x.Float64s(); err == nil {
			t.Errorf("Float64s of %s: no error", x.DType)
		}
		if _, err := x.Uint16s(); err == nil {
			t.Errorf("Uint16s of %s: no error", x.DType)
		}
	}
	short := Tensor{Name: "s", DType: F32, Shape: []int{3}, Data: make([]byte, 8)}
	if _, err := short.Float32s(); err == nil || !strings.Contains(err.Error(), "8 data bytes") {
		t.Errorf("inconsistent tensor: %v", err)
	}
}

func TestUint16sView(t *testing.T) {
	bits := []uint16{0x3c00, 0x1234, 0xffff, 0}
	h := FromHalf("h", BF16, []int{4}, bits)
	v, err := h.Uint16s()
	if err != nil || !cmp.Equal(v, bits) {
		t.Fatalf("Uint16s %x, %v", v, err)
	}
	if littleEndian && unsafe.Pointer(&v[0]) != unsafe.Pointer(&h.Data[0]) {
		t.Error("aligned Uint16s copied instead of viewing Data")
	}
	// Misaligned data are copied, not viewed.
	raw := make([]byte, 9)
	copy(raw[1:], h.Data)
	odd := Tensor{Name: "o", DType: F16, Shape: []int{4}, Data: raw[1:]}
	v, err = odd.Uint16s()
	if err != nil || !cmp.Equal(v, bits) {
		t.Fatalf("misaligned Uint16s %x, %v", v, err)
	}
	if unsafe.Pointer(&v[0]) == unsafe.Pointer(&odd.Data[0]) {
		t.Error("misaligned Uint16s aliases Data")
	}
}

func TestFromPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"shape":    func() { FromFloat32("w", []int{2, 2}, make([]float32, 3)) },
		"negative": func() { FromFloat64("w", []int{-1}, nil) },
		"dtype":    func() { FromHalf("w", F32, []int{1}, []uint16{1}) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), `"w"`) {
					t.Errorf("%s: panic %v, want one naming the tensor", name, r)
				}
			}()
			f()
		}()
	}
}

type failAfter struct{ left int }

func (w *failAfter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		n := w.left
		w.left = 0
		return n, errors.New("disk full")
	}
	w.left -= len(p)
	return len(p), nil
}

func TestWriteErrors(t *testing.T) {
	ok := FromFloat32("a", []int{1}, []float32{1})
	for _, tc := range []struct {
		name string
		ts   []Tensor
		want string
	}{
		{"duplicate", []Tensor{ok, ok}, `two tensors are named "a"`},
		{"reserved", []Tensor{FromFloat32("__metadata__", []int{1}, []float32{1})}, "reserved"},
		{"size", []Tensor{{Name: "b", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}, `"b": 4 data bytes`},
		{"dtype", []Tensor{{Name: "c", DType: "F12", Data: make([]byte, 4)}}, `unknown dtype "F12"`},
		{"negative", []Tensor{{Name: "d", DType: U8, Shape: []int{-1}}}, "invalid shape"},
	} {
		if err := Write(&bytes.Buffer{}, tc.ts, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	big := FromFloat32("big", []int{1 << 18}, make([]float32, 1<<18))
	err := Write(&failAfter{left: 1 << 19}, []Tensor{ok, big}, nil)
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), `"big"`) {
		t.Errorf("failing writer: %v", err)
	}
}

// rawFile assembles a file from a header and a data section, with the
// header length field set to the header's length.
func rawFile(header string, data int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, data)...)
}

func TestMalformed(t *testing.T) {
	var good bytes.Buffer
	if err := Write(&good, []Tensor{FromFloat32("w", []int{2, 3}, make([]float32, 6)), FromFloat32("z", []int{2}, []float32{1, 2})}, nil); err != nil {
		t.Fatal(err)
	}
	g := good.Bytes()
	withLen := func(n uint64) []byte {
		b := bytes.Clone(g)
		binary.LittleEndian.PutUint64(b, n)
		return b
	}
	for _, tc := range []struct {
		name   string
		file   []byte
		tensor string // the tensor the error must name, if any
		want   string
	}{
		{"empty", nil, "", "truncated: 0 bytes"},
		{"short length field", []byte{8, 0, 0}, "", "truncated: 3 bytes"},
		{"truncated header", g[:20], "", "truncated: header length"},
		{"truncated data", g[:len(g)-1], "z", "truncated: data_offsets [24,32) run past the end of the 31-byte"},
		{"header length past the file", withLen(uint64(len(g))), "", "truncated: header length"},
		{"huge header length", withLen(1 << 40), "", "exceeds the 100000000-byte limit"},
		{"max uint64 header length", withLen(math.MaxUint64), "", "exceeds the 100000000-byte limit"},
		{"bad JSON", rawFile(`{"w":{"dtype":"F32",}`, 0), "", "header JSON is invalid"},
		{"not an object", rawFile(`[1,2]`, 0), "", "not a JSON object"},
		{"trailing JSON", rawFile(`{}{}`, 0), "", "data after the header object"},
		{"invalid UTF-8", rawFile("{\"\xff\":{}}", 0), "", "UTF-8"},
		{"duplicate name", rawFile(`{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, 1), "", `"a" appears twice`},
		{"entry not an object", rawFile(`{"a":[0,4]}`, 4), "a", "not an object"},
		{"missing field", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, 4), "a", "lacks dtype, shape or data_offsets"},
		{"unknown dtype", rawFile(`{"a":{"dtype":"F24","shape":[1],"data_offsets":[0,3]}}`, 3), "a", `unknown dtype "F24"`},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "a", "negative dimension"},
		{"fractional dim", rawFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), "a", "header entry"},
		{"element overflow", rawFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4), "a", "overflows"},
		{"offsets not a pair", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 1), "a", "not a [begin, end] pair"},
		{"end before begin", rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, 4), "a", "do not form a range"},
		{"dtype size disagreement", rawFile(`{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}}`, 12), "a", "dtype F32 and shape [2 3] need 24 bytes, data_offsets [0,12) hold 12"},
		{"offsets past the end", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), "a", "run past the end of the 4-byte data section"},
		{"gap", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, 12), "b", `leave a gap after tensor "a"`},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "b", `overlap tensor "a"`},
		{"leading gap", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "a", "first 4 bytes"},
		{"trailing bytes", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 6), "", "data section has 6 bytes but the tensors cover 4"},
		{"metadata not strings", rawFile(`{"__metadata__":{"n":1}}`, 0), "", "__metadata__ is not an object of strings"},
		{"metadata not an object", rawFile(`{"__metadata__":"x"}`, 0), "", "__metadata__ is not an object of strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.safetensors")
			if err := os.WriteFile(path, tc.file, 0o644); err != nil {
				t.Fatal(err)
			}
			_, rerr := Read(bytes.NewReader(tc.file))
			_, oerr := Open(path)
			for _, e := range []struct {
				how  string
				err  error
				file string
			}{{"Read", rerr, ""}, {"Open", oerr, path}} {
				var fe *FormatError
				if !errors.As(e.err, &fe) {
					t.Fatalf("%s: error %v, want a *FormatError", e.how, e.err)
				}
				if !strings.Contains(e.err.Error(), tc.want) || fe.Tensor != tc.tensor || fe.File != e.file {
					t.Errorf("%s: error %q (file %q, tensor %q), want one containing %q, naming file %q and tensor %q",
						e.how, e.err, fe.File, fe.Tensor, tc.want, e.file, tc.tensor)
				}
			}
		})
	}
}

func TestOpenMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.safetensors")
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("error %v, want one naming %s", err, path)
	}
}

func TestZeroLengthTensors(t *testing.T) {
	// Empty tensors may share an offset with each other and with the next
	// tensor's start; the data section is still covered.
	file := rawFile(`{"e1":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"e2":{"dtype":"F64","shape":[3,0],"data_offsets":[4,4]}}`, 4)
	f, err := Read(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"a", "e1", "e2"}, f.Names()); d != "" {
		t.Error(d)
	}
	e2, _ := f.Tensor("e2")
	if v, err := e2.Float64s(); err != nil || len(v) != 0 || !cmp.Equal(e2.Shape, []int{3, 0}) {
		t.Errorf("e2: %v %v %v", e2.Shape, v, err)
	}
}
