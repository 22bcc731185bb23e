package nn

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/troupe-ml/troupe/safetensors"
	ts "gorgonia.org/tensor"
)

// Checkpoints are safetensors files (package safetensors), so any
// safetensors reader can load the parameters. troupe adds to the metadata:
//
//	troupe.sha256     hex SHA-256 of the data section, verified on load
//	troupe.optimizer  "1" when optimizer state is included
//
// Parameters are stored as F32 under their store names; optimizer state
// tensors under "optim." + the optimizer's state key.

const (
	metaChecksum = "troupe.sha256"
	metaOptim    = "troupe.optimizer"
	optimPrefix  = "optim."
)

// checkpointWriteHook, when set (tests), wraps the temp-file writer to
// simulate a failure part-way through a save.
var checkpointWriteHook func(io.Writer) io.Writer

// SaveCheckpoint writes every parameter of store, the state of opt (may be
// nil) and the string metadata meta (for example a tokenizer's JSON) to path
// in the safetensors format. The file is written to a temporary file in the
// same directory, synced, renamed over path and the directory synced, so a
// crash leaves either the old or the new checkpoint, never a torn one.
func SaveCheckpoint(path string, store *Store, opt Optimizer, meta map[string]string) error {
	var tensors []safetensors.Tensor
	for _, p := range store.Params() {
		tensors = append(tensors, safetensors.FromFloat32(p.Name, p.Shape(), p.Data()))
	}
	md := map[string]string{}
	for k, v := range meta {
		md[k] = v
	}
	if opt != nil {
		st := opt.State()
		keys := make([]string, 0, len(st))
		for k := range st {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			tensors = append(tensors, safetensors.FromFloat32(optimPrefix+k, []int{len(st[k])}, st[k]))
		}
		md[metaOptim] = "1"
	}
	// safetensors.Write lays the data section out in name order, so hashing
	// the tensors in that order hashes the data section without building it.
	byName := slices.Clone(tensors)
	slices.SortFunc(byName, func(a, b safetensors.Tensor) int { return strings.Compare(a.Name, b.Name) })
	h := sha256.New()
	for _, t := range byName {
		h.Write(t.Data)
	}
	md[metaChecksum] = hex.EncodeToString(h.Sum(nil))

	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("nn: saving checkpoint %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("nn: saving checkpoint %s: %w", path, err)
	}
	var w io.Writer = f
	if checkpointWriteHook != nil {
		w = checkpointWriteHook(f)
	}
	if err := safetensors.Write(w, tensors, md); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("nn: saving checkpoint %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("nn: saving checkpoint %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// LoadCheckpoint reads a checkpoint written by SaveCheckpoint (or any
// safetensors file of F32, F16, BF16 or F64 tensors, converted to float32)
// into store — creating parameters it lacks, refusing shape mismatches —
// and, when opt is non-nil and the file holds optimizer state, into opt. It
// verifies the SHA-256 checksum when the file has one and returns the
// metadata. Nothing is modified unless the whole file validates.
func LoadCheckpoint(path string, store *Store, opt Optimizer) (map[string]string, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, fmt.Errorf("nn: loading checkpoint: %w", err)
	}
	defer f.Close()
	if want, ok := f.Metadata[metaChecksum]; ok {
		sum := sha256.Sum256(f.DataSection())
		if hex.EncodeToString(sum[:]) != want {
			return nil, fmt.Errorf("nn: checkpoint %s is corrupt: SHA-256 of the data section does not match the header", path)
		}
	}
	vals := map[string][]float32{}
	shapes := map[string][]int{}
	for _, name := range f.Names() {
		t, _ := f.Tensor(name)
		v, err := t.Float32s()
		if err != nil {
			return nil, fmt.Errorf("nn: checkpoint %s: %w", path, err)
		}
		vals[name], shapes[name] = v, t.Shape
	}
	// Validate shapes against the store before changing anything.
	optState := map[string][]float32{}
	for name, v := range vals {
		if strings.HasPrefix(name, optimPrefix) {
			optState[strings.TrimPrefix(name, optimPrefix)] = v
			continue
		}
		if p := store.Param(name); p != nil && !p.Shape().Eq(ts.Shape(shapes[name])) {
			return nil, fmt.Errorf("nn: checkpoint %s: parameter %q has shape %v, the store has %v", path, name, shapes[name], p.Shape())
		}
	}
	if opt != nil && len(optState) > 0 {
		if err := opt.SetState(optState); err != nil {
			return nil, fmt.Errorf("nn: checkpoint %s: optimizer state: %w", path, err)
		}
	}
	names := make([]string, 0, len(vals))
	for name := range vals {
		if !strings.HasPrefix(name, optimPrefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		p := store.GetOrCreate(name, ts.Shape(shapes[name]), Zeros)
		copy(p.Data(), vals[name])
	}
	return f.Metadata, nil
}
