package nn

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	ts "gorgonia.org/tensor"
)

// Checkpoints use the safetensors layout (https://huggingface.co/docs/safetensors):
// an 8-byte little-endian header length N, N bytes of JSON mapping each
// tensor name to {"dtype":"F32","shape":[…],"data_offsets":[begin,end]}
// (offsets into the data section that follows) plus a "__metadata__" object
// of string pairs, then the raw little-endian tensor bytes. Any safetensors
// reader can load the parameters. troupe adds to the metadata:
//
//	troupe.sha256     hex SHA-256 of the data section, verified on load
//	troupe.optimizer  "1" when optimizer state is included
//
// Parameters are stored under their store names; optimizer state tensors
// under "optim." + the optimizer's state key.

const (
	metaChecksum = "troupe.sha256"
	metaOptim    = "troupe.optimizer"
	optimPrefix  = "optim."
)

type stEntry struct {
	Dtype       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// checkpointWriteHook, when set (tests), wraps the temp-file writer to
// simulate a failure part-way through a save.
var checkpointWriteHook func(io.Writer) io.Writer

// SaveCheckpoint writes every parameter of store, the state of opt (may be
// nil) and the string metadata meta (for example a tokenizer's JSON) to path
// in the safetensors format. The file is written to a temporary file in the
// same directory, synced, renamed over path and the directory synced, so a
// crash leaves either the old or the new checkpoint, never a torn one.
func SaveCheckpoint(path string, store *Store, opt Optimizer, meta map[string]string) error {
	type tensor struct {
		name  string
		shape []int
		data  []float32
	}
	var tensors []tensor
	for _, p := range store.Params() {
		tensors = append(tensors, tensor{p.Name, append([]int(nil), p.Shape()...), p.Data()})
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
			tensors = append(tensors, tensor{optimPrefix + k, []int{len(st[k])}, st[k]})
		}
		md[metaOptim] = "1"
	}
	header := map[string]any{}
	var data bytes.Buffer
	for _, t := range tensors {
		if _, dup := header[t.name]; dup {
			return fmt.Errorf("nn: checkpoint: duplicate tensor name %q", t.name)
		}
		begin := int64(data.Len())
		var b [4]byte
		for _, v := range t.data {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			data.Write(b[:])
		}
		header[t.name] = stEntry{Dtype: "F32", Shape: t.shape, DataOffsets: [2]int64{begin, int64(data.Len())}}
	}
	sum := sha256.Sum256(data.Bytes())
	md[metaChecksum] = hex.EncodeToString(sum[:])
	header["__metadata__"] = md
	hj, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("nn: checkpoint header: %w", err)
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
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
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hj)))
	for _, part := range [][]byte{n[:], hj, data.Bytes()} {
		if _, err := w.Write(part); err != nil {
			return fail(err)
		}
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
// safetensors file of F32 tensors) into store — creating parameters it
// lacks, refusing shape mismatches — and, when opt is non-nil and the file
// holds optimizer state, into opt. It verifies the SHA-256 checksum when the
// file has one and returns the metadata. Nothing is modified unless the
// whole file validates.
func LoadCheckpoint(path string, store *Store, opt Optimizer) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("nn: loading checkpoint: %w", err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("nn: checkpoint %s is corrupt or truncated: %s", path, fmt.Sprintf(format, a...))
	}
	if len(raw) < 8 {
		return nil, bad("%d bytes, shorter than the 8-byte header length", len(raw))
	}
	hn := binary.LittleEndian.Uint64(raw[:8])
	if hn > uint64(len(raw)-8) {
		return nil, bad("header length %d exceeds the %d bytes that follow", hn, len(raw)-8)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+hn], &header); err != nil {
		return nil, bad("header JSON: %v", err)
	}
	data := raw[8+hn:]
	meta := map[string]string{}
	if m, ok := header["__metadata__"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, bad("metadata: %v", err)
		}
		delete(header, "__metadata__")
	}
	if want, ok := meta[metaChecksum]; ok {
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != want {
			return nil, bad("SHA-256 of the data section does not match the header")
		}
	}
	vals := map[string][]float32{}
	shapes := map[string][]int{}
	for name, rm := range header {
		var e stEntry
		if err := json.Unmarshal(rm, &e); err != nil {
			return nil, bad("entry %q: %v", name, err)
		}
		if e.Dtype != "F32" {
			return nil, fmt.Errorf("nn: checkpoint %s: tensor %q has dtype %s, only F32 is supported", path, name, e.Dtype)
		}
		n := int64(1)
		for _, d := range e.Shape {
			if d < 0 {
				return nil, bad("tensor %q has negative dimension", name)
			}
			n *= int64(d)
		}
		b, en := e.DataOffsets[0], e.DataOffsets[1]
		if b < 0 || en < b || en > int64(len(data)) || en-b != 4*n {
			return nil, bad("tensor %q: offsets [%d,%d) for shape %v in %d data bytes", name, b, en, e.Shape, len(data))
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[b+int64(4*i):]))
		}
		vals[name], shapes[name] = v, e.Shape
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
	return meta, nil
}
