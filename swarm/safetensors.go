package swarm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
)

// stTensor is one tensor of a safetensors file, float32 or float64.
type stTensor struct {
	Name  string
	Shape []int
	F32   []float32
	F64   []float64
}

type stHeaderEntry struct {
	Dtype       string `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

// writeSafetensors writes tensors in the safetensors format: an 8-byte
// little-endian header length, a JSON header, then the raw little-endian data.
func writeSafetensors(w io.Writer, meta map[string]string, ts []stTensor) error {
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	off := 0
	for _, t := range ts {
		e := stHeaderEntry{Shape: t.Shape}
		n := 0
		if t.F64 != nil {
			e.Dtype, n = "F64", 8*len(t.F64)
		} else {
			e.Dtype, n = "F32", 4*len(t.F32)
		}
		e.DataOffsets = [2]int{off, off + n}
		off += n
		header[t.Name] = e
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	buf := make([]byte, 8, 8+len(hb)+off)
	binary.LittleEndian.PutUint64(buf, uint64(len(hb)))
	buf = append(buf, hb...)
	for _, t := range ts {
		if t.F64 != nil {
			for _, x := range t.F64 {
				buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(x))
			}
		} else {
			for _, x := range t.F32 {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
			}
		}
	}
	_, err = w.Write(buf)
	return err
}

// readSafetensors reads what writeSafetensors wrote (F32 and F64 only).
func readSafetensors(r io.Reader) (map[string]string, map[string]stTensor, error) {
	var hl [8]byte
	if _, err := io.ReadFull(r, hl[:]); err != nil {
		return nil, nil, fmt.Errorf("safetensors header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(hl[:])
	if n > 1<<24 {
		return nil, nil, fmt.Errorf("safetensors header of %d bytes is too large", n)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, nil, fmt.Errorf("safetensors header: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimRight(hb, " "), &raw); err != nil {
		return nil, nil, fmt.Errorf("safetensors header: %w", err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors data: %w", err)
	}
	meta := map[string]string{}
	out := map[string]stTensor{}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, nil, fmt.Errorf("safetensors metadata: %w", err)
			}
			continue
		}
		var e stHeaderEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, fmt.Errorf("safetensors tensor %q: %w", name, err)
		}
		a, b := e.DataOffsets[0], e.DataOffsets[1]
		if a < 0 || b < a || b > len(data) {
			return nil, nil, fmt.Errorf("safetensors tensor %q: offsets [%d,%d) outside %d data bytes", name, a, b, len(data))
		}
		numel := 1
		for _, d := range e.Shape {
			if d < 0 || (d > 0 && numel > (1<<40)/d) {
				return nil, nil, fmt.Errorf("safetensors tensor %q: bad shape %v", name, e.Shape)
			}
			numel *= d
		}
		t := stTensor{Name: name, Shape: e.Shape}
		seg := data[a:b]
		switch e.Dtype {
		case "F32":
			if len(seg) != 4*numel {
				return nil, nil, fmt.Errorf("safetensors tensor %q: %d bytes for %d F32 values", name, len(seg), numel)
			}
			t.F32 = make([]float32, numel)
			for i := range t.F32 {
				t.F32[i] = math.Float32frombits(binary.LittleEndian.Uint32(seg[4*i:]))
			}
		case "F64":
			if len(seg) != 8*numel {
				return nil, nil, fmt.Errorf("safetensors tensor %q: %d bytes for %d F64 values", name, len(seg), numel)
			}
			t.F64 = make([]float64, numel)
			for i := range t.F64 {
				t.F64[i] = math.Float64frombits(binary.LittleEndian.Uint64(seg[8*i:]))
			}
		default:
			return nil, nil, errors.New("safetensors tensor " + name + ": unsupported dtype " + e.Dtype)
		}
		out[name] = t
	}
	return meta, out, nil
}
