package nn

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/tensor"
	"github.com/troupe-ml/troupe/textgen"
)

func trainedLM(t *testing.T, seed uint64) (*LM, *LMTrainer) {
	t.Helper()
	store := NewStore(seed)
	m := NewLM(store, LMConfig{Vocab: 7, Dim: 8, Layers: 1, Heads: 2, MaxLen: 8})
	tr := NewLMTrainer(m, NewAdamW(Constant(1e-2), 0.1), TrainConfig{})
	if _, err := tr.SupervisedStep([]SeqExample{{Prompt: []int{1}, Target: []int{2, 3}}}); err != nil {
		t.Fatal(err)
	}
	return m, tr
}

func storeValues(s *Store) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range s.Params() {
		out[p.Name] = append([]float32(nil), p.Data()...)
	}
	return out
}

func TestCheckpointRoundTrip(t *testing.T) {
	m, tr := trainedLM(t, 1)
	path := filepath.Join(t.TempDir(), "ck.safetensors")
	meta := map[string]string{"tokenizer": `{"vocab":["a","b"]}`}
	if err := SaveCheckpoint(path, m.Store, tr.Optimizer(), meta); err != nil {
		t.Fatal(err)
	}
	store2 := NewStore(99)
	opt2 := NewAdamW(Constant(1e-2), 0.1)
	got, err := LoadCheckpoint(path, store2, opt2)
	if err != nil {
		t.Fatal(err)
	}
	if got["tokenizer"] != meta["tokenizer"] {
		t.Errorf("metadata lost: %v", got)
	}
	if d := cmp.Diff(storeValues(m.Store), storeValues(store2)); d != "" {
		t.Errorf("parameters differ:\n%s", d)
	}
	if d := cmp.Diff(tr.Optimizer().State(), opt2.State()); d != "" {
		t.Errorf("optimizer state differs:\n%s", d)
	}
	// The loaded store drives an identical model.
	m2 := NewLM(store2, m.Config)
	a, _ := m.Generate([][]int{{1, 2}}, textgen.GenerateOptions{Temperature: 1, MaxTokens: 5, Seed: 1})
	b, _ := m2.Generate([][]int{{1, 2}}, textgen.GenerateOptions{Temperature: 1, MaxTokens: 5, Seed: 1})
	if d := cmp.Diff(a, b); d != "" {
		t.Errorf("generation after reload differs:\n%s", d)
	}
}

type failingWriter struct {
	w    io.Writer
	left int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.left {
		n, _ := f.w.Write(p[:f.left])
		f.left = 0
		return n, errors.New("simulated disk failure")
	}
	f.left -= len(p)
	return f.w.Write(p)
}

func TestCheckpointCorruptionAndAtomicity(t *testing.T) {
	m, tr := trainedLM(t, 2)
	dir := t.TempDir()
	path := filepath.Join(dir, "ck.safetensors")
	if err := SaveCheckpoint(path, m.Store, tr.Optimizer(), nil); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	before := storeValues(m.Store)

	// A save that fails half-way leaves the previous file intact and no temp file.
	if _, err := tr.SupervisedStep([]SeqExample{{Prompt: []int{4}, Target: []int{5, 6}}}); err != nil {
		t.Fatal(err)
	}
	checkpointWriteHook = func(w io.Writer) io.Writer { return &failingWriter{w: w, left: 100} }
	err := SaveCheckpoint(path, m.Store, tr.Optimizer(), nil)
	checkpointWriteHook = nil
	if err == nil {
		t.Fatal("failing save reported success")
	}
	now, _ := os.ReadFile(path)
	if !cmp.Equal(good, now) {
		t.Fatal("previous checkpoint modified by a failed save")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temp files left behind: %v", ents)
	}
	fresh := NewStore(5)
	if _, err := LoadCheckpoint(path, fresh, nil); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, storeValues(fresh)); d != "" {
		t.Fatalf("previous checkpoint does not load the previous parameters:\n%s", d)
	}

	for _, tc := range []struct {
		name, want string
		mut        func([]byte) []byte
	}{
		{"truncated data", "truncated", func(b []byte) []byte { return b[:len(b)-10] }},
		{"truncated header", "truncated", func(b []byte) []byte { return b[:20] }},
		{"tiny", "truncated", func(b []byte) []byte { return b[:3] }},
		{"flipped data byte", "SHA-256", func(b []byte) []byte { b[len(b)-5] ^= 0x40; return b }},
		{"garbled header", "header JSON", func(b []byte) []byte { b[9] = '!'; return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "bad.safetensors")
			os.WriteFile(p, tc.mut(append([]byte(nil), good...)), 0o644)
			s := NewStore(1)
			NewLM(s, m.Config)
			orig := storeValues(s)
			_, err := LoadCheckpoint(p, s, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
			if !cmp.Equal(orig, storeValues(s)) {
				t.Fatal("store modified by a failed load")
			}
		})
	}
}

// TestCheckpointForeignLayout loads files SaveCheckpoint does not write: a
// data section out of name order (as other writers lay it out) whose
// checksum covers the section as stored, and half-precision weights, which
// load converted to float32.
func TestCheckpointForeignLayout(t *testing.T) {
	dir := t.TempDir()
	// "b" first in the data section, then "a".
	var data []byte
	for _, v := range []float32{3, 4, 5, 1, 2} {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
	}
	sum := sha256.Sum256(data)
	header := fmt.Sprintf(`{"__metadata__":{"troupe.sha256":%q},"a":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},"b":{"dtype":"F32","shape":[3,1],"data_offsets":[0,12]}}`,
		hex.EncodeToString(sum[:]))
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	file = append(append(file, header...), data...)
	path := filepath.Join(dir, "foreign.safetensors")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewStore(1)
	if _, err := LoadCheckpoint(path, s, nil); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string][]float32{"a": {1, 2}, "b": {3, 4, 5}}, storeValues(s)); d != "" {
		t.Errorf("loaded values differ:\n%s", d)
	}
	if got := s.Param("b").Shape(); !cmp.Equal([]int(got), []int{3, 1}) {
		t.Errorf("b has shape %v", got)
	}

	w := []float32{0.5, -1.25, 3, 1e-3}
	bf, f16 := make([]uint16, 4), make([]uint16, 4)
	tensor.Float32sToBF16(bf, w)
	tensor.Float32sToF16(f16, w)
	half := filepath.Join(dir, "half.safetensors")
	hf, err := os.Create(half)
	if err != nil {
		t.Fatal(err)
	}
	err = safetensors.Write(hf, []safetensors.Tensor{
		safetensors.FromHalf("bf", safetensors.BF16, []int{2, 2}, bf),
		safetensors.FromHalf("h", safetensors.F16, []int{4}, f16),
	}, nil)
	hf.Close()
	if err != nil {
		t.Fatal(err)
	}
	s = NewStore(1)
	if _, err := LoadCheckpoint(half, s, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string][]float32{"bf": make([]float32, 4), "h": make([]float32, 4)}
	for i := range w {
		want["bf"][i], want["h"][i] = tensor.BF16ToFloat32(bf[i]), tensor.F16ToFloat32(f16[i])
	}
	if d := cmp.Diff(want, storeValues(s)); d != "" {
		t.Errorf("half weights differ:\n%s", d)
	}

	ints := filepath.Join(dir, "ints.safetensors")
	f, _ := os.Create(ints)
	safetensors.Write(f, []safetensors.Tensor{{Name: "ids", DType: safetensors.I64, Shape: []int{1}, Data: make([]byte, 8)}}, nil)
	f.Close()
	if _, err := LoadCheckpoint(ints, NewStore(1), nil); err == nil || !strings.Contains(err.Error(), `"ids"`) || !strings.Contains(err.Error(), "I64") {
		t.Errorf("integer tensor: error %v, want one naming the tensor and its dtype", err)
	}
}
