package safetensors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func writeFile(t *testing.T, path string, ts []Tensor) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(f, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// shardedDir writes the tensors over two shards and an index as
// transformers' save_pretrained does, returning the directory.
func shardedDir(t *testing.T, ts []Tensor) string {
	t.Helper()
	dir := t.TempDir()
	half := len(ts) / 2
	writeFile(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), ts[:half])
	writeFile(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), ts[half:])
	var wm []string
	for i, x := range ts {
		shard := "model-00001-of-00002.safetensors"
		if i >= half {
			shard = "model-00002-of-00002.safetensors"
		}
		wm = append(wm, `"`+x.Name+`":"`+shard+`"`)
	}
	index := `{"metadata":{"total_size":1234},"weight_map":{` + strings.Join(wm, ",") + `}}`
	if err := os.WriteFile(filepath.Join(dir, IndexFile), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDirSharded(t *testing.T) {
	ts := randomTensors(3)
	d, err := OpenDir(shardedDir(t, ts))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(byName(ts), tensorsOf(t, d.Names(), d.Tensor)); d != "" {
		t.Errorf("tensors differ:\n%s", d)
	}
	if _, ok := d.Tensor("missing"); ok {
		t.Error("found a tensor the index lacks")
	}
	if err := d.Close(); err != nil {
		t.Error(err)
	}
}

func TestDirSingle(t *testing.T) {
	ts := randomTensors(4)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, SingleFile), ts)
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d := cmp.Diff(byName(ts), tensorsOf(t, d.Names(), d.Tensor)); d != "" {
		t.Errorf("tensors differ:\n%s", d)
	}
}

func TestDirErrors(t *testing.T) {
	ts := []Tensor{FromFloat32("a", []int{1}, []float32{1}), FromFloat32("b", []int{1}, []float32{2})}
	for _, tc := range []struct {
		name  string
		setup func(dir string) // breaks a good sharded directory
		want  []string
	}{
		{"nothing", func(dir string) {
			os.Remove(filepath.Join(dir, IndexFile))
		}, []string{"neither", SingleFile}},
		{"missing shard", func(dir string) {
			os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
		}, []string{"model-00002-of-00002.safetensors", IndexFile, "no such file"}},
		{"tensor not in its shard", func(dir string) {
			writeIndex(dir, `{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors"}}`)
		}, []string{`tensor "b"`, "model-00001-of-00002.safetensors, which lacks it"}},
		{"corrupt shard", func(dir string) {
			os.WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), []byte("\x01\x00\x00\x00\x00\x00\x00\x00{"), 0o644)
		}, []string{"model-00001-of-00002.safetensors", "header JSON is invalid"}},
		{"bad index JSON", func(dir string) { writeIndex(dir, `{"weight_map":`) }, []string{IndexFile}},
		{"no weight map", func(dir string) { writeIndex(dir, `{"metadata":{}}`) }, []string{IndexFile, "weight_map"}},
		{"shard outside the directory", func(dir string) {
			writeIndex(dir, `{"weight_map":{"a":"../model-00001-of-00002.safetensors"}}`)
		}, []string{`tensor "a"`, "not a file inside"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shardedDir(t, ts)
			tc.setup(dir)
			_, err := OpenDir(dir)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func writeIndex(dir, s string) {
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(s), 0o644)
}
