package safetensors

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

// TestLoadDirHugePages: a checkpoint above HugeMin loads through LoadDir
// with the tensors OpenDir maps, and readHuge returns the file's bytes at
// a 2 MiB boundary with its data section on a 64-byte line.
func TestLoadDirHugePages(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	big := make([]float32, HugeMin/4+1000)
	for i := range big {
		big[i] = r.Float32()
	}
	ts := []Tensor{FromFloat32("big", []int{len(big)}, big), FromFloat32("small", []int{3}, []float32{1, 2, 3})}
	dir := t.TempDir()
	path := filepath.Join(dir, SingleFile)
	writeFile(t, path, ts)

	mapped, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	loaded, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range mapped.Names() {
		a, _ := mapped.Tensor(name)
		b, ok := loaded.Tensor(name)
		if !ok || !bytes.Equal(a.Data, b.Data) || !cmp.Equal(a.Shape, b.Shape) || a.DType != b.DType {
			t.Fatalf("LoadDir's %s differs from OpenDir's", name)
		}
	}
	if err := loaded.Close(); err != nil {
		t.Fatal(err)
	}

	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	buf, free, ok := readHuge(fh, len(want))
	if !ok {
		t.Skip("this kernel refuses MADV_HUGEPAGE")
	}
	defer free()
	if !bytes.Equal(buf, want) {
		t.Fatal("readHuge's bytes differ from the file's")
	}
	hlen := binary.LittleEndian.Uint64(want)
	if p := uintptr(unsafe.Pointer(&buf[8+hlen])); p%64 != 0 {
		t.Fatalf("readHuge's data section starts at %#x, not on a 64-byte line", p)
	}
	if p := uintptr(unsafe.Pointer(&buf[0])); p%(2<<20) > 64 {
		t.Fatalf("readHuge's buffer starts at %#x, more than a line past a 2 MiB boundary", p)
	}
}
