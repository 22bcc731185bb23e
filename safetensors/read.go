package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

const (
	// maxHeader is the largest header accepted, Hugging Face's limit: it
	// bounds what a corrupt length field can make a reader allocate.
	maxHeader   = 100_000_000
	metadataKey = "__metadata__"
)

// FormatError describes a malformed safetensors file.
type FormatError struct {
	File   string // the path, or "" for a stream given to Read
	Tensor string // the tensor at fault, or "" when the fault is not in one tensor
	Reason string
}

func (e *FormatError) Error() string {
	s := "safetensors: "
	if e.File != "" {
		s += e.File + ": "
	}
	if e.Tensor != "" {
		s += "tensor " + strconv.Quote(e.Tensor) + ": "
	}
	return s + e.Reason
}

// entry is one tensor's header record, its offsets relative to the data
// section.
type entry struct {
	dtype      DType
	shape      []int
	begin, end int
}

// File is a parsed safetensors file whose tensors are views of one buffer:
// a read-only memory mapping (Open) or the bytes read (Read).
type File struct {
	// Metadata holds the header's "__metadata__" strings (empty, not nil,
	// when the file has none).
	Metadata map[string]string

	data    []byte // the data section
	tensors map[string]entry
	names   []string
	unmap   func() error
}

// Read reads a whole safetensors file from r into memory and validates it.
// Errors are *FormatError for a malformed file.
func Read(r io.Reader) (*File, error) {
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r, 8); err != nil {
		if err == io.EOF {
			return nil, &FormatError{Reason: fmt.Sprintf("truncated: %d bytes, shorter than the 8-byte header length", buf.Len())}
		}
		return nil, fmt.Errorf("safetensors: reading: %w", err)
	}
	if n := binary.LittleEndian.Uint64(buf.Bytes()); n > maxHeader {
		return nil, headerTooLarge("", n)
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("safetensors: reading: %w", err)
	}
	return parse("", buf.Bytes())
}

func headerTooLarge(file string, n uint64) error {
	return &FormatError{File: file, Reason: fmt.Sprintf("header length %d exceeds the %d-byte limit", n, maxHeader)}
}

// parse validates buf, a whole file, as Hugging Face's reader does: the
// header is UTF-8 JSON, an object whose "__metadata__" holds strings and
// whose other members each describe a tensor of a known dtype whose
// data_offsets span exactly its elements; sorted by offset, the tensors
// cover the data section from its first byte to its last with neither gap
// nor overlap.
func parse(file string, buf []byte) (*File, error) {
	bad := func(tensor, format string, a ...any) error {
		return &FormatError{File: file, Tensor: tensor, Reason: fmt.Sprintf(format, a...)}
	}
	if len(buf) < 8 {
		return nil, bad("", "truncated: %d bytes, shorter than the 8-byte header length", len(buf))
	}
	hn := binary.LittleEndian.Uint64(buf)
	if hn > maxHeader {
		return nil, headerTooLarge(file, hn)
	}
	if hn > uint64(len(buf)-8) {
		return nil, bad("", "truncated: header length %d exceeds the %d bytes that follow", hn, len(buf)-8)
	}
	header := buf[8 : 8+hn]
	data := buf[8+hn:]
	if !utf8.Valid(header) {
		return nil, bad("", "header is not valid UTF-8")
	}
	members, err := objectMembers(header)
	if err != nil {
		return nil, bad("", "header JSON is invalid: %v", err)
	}

	f := &File{Metadata: map[string]string{}, data: data, tensors: make(map[string]entry, len(members))}
	for _, m := range members {
		if m.key == metadataKey {
			if err := json.Unmarshal(m.value, &f.Metadata); err != nil || f.Metadata == nil {
				return nil, bad("", "__metadata__ is not an object of strings: %s", clip(m.value))
			}
			continue
		}
		e, err := parseEntry(m.value, len(data))
		if err != nil {
			return nil, bad(m.key, "%v", err)
		}
		f.tensors[m.key] = e
		f.names = append(f.names, m.key)
	}

	// Contiguity, in offset order (zero-length tensors sit anywhere their
	// offset allows; ties keep name order so errors are deterministic).
	slices.Sort(f.names)
	byOffset := slices.Clone(f.names)
	slices.SortStableFunc(byOffset, func(a, b string) int {
		ea, eb := f.tensors[a], f.tensors[b]
		return cmp.Or(cmp.Compare(ea.begin, eb.begin), cmp.Compare(ea.end, eb.end))
	})
	pos, prev := 0, ""
	for _, name := range byOffset {
		e := f.tensors[name]
		switch {
		case e.begin > pos && prev == "":
			return nil, bad(name, "data_offsets begin at %d, leaving the first %d bytes of the data section unused", e.begin, e.begin)
		case e.begin > pos:
			return nil, bad(name, "data_offsets [%d,%d) leave a gap after tensor %q, which ends at %d", e.begin, e.end, prev, pos)
		case e.begin < pos:
			return nil, bad(name, "data_offsets [%d,%d) overlap tensor %q, which ends at %d", e.begin, e.end, prev, pos)
		}
		pos, prev = e.end, name
	}
	if pos != len(data) {
		return nil, bad("", "data section has %d bytes but the tensors cover %d", len(data), pos)
	}
	return f, nil
}

// parseEntry decodes and checks one tensor record against a data section of
// dataLen bytes.
func parseEntry(raw json.RawMessage, dataLen int) (entry, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return entry{}, fmt.Errorf("header entry is not an object: %s", clip(raw))
	}
	var rec struct {
		DType   *string  `json:"dtype"`
		Shape   *[]int64 `json:"shape"`
		Offsets *[]int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return entry{}, fmt.Errorf("header entry %s: %v", clip(raw), err)
	}
	if rec.DType == nil || rec.Shape == nil || rec.Offsets == nil {
		return entry{}, fmt.Errorf("header entry %s lacks dtype, shape or data_offsets", clip(raw))
	}
	e := entry{dtype: DType(*rec.DType)}
	size := e.dtype.Size()
	if size == 0 {
		return entry{}, fmt.Errorf("unknown dtype %q", *rec.DType)
	}
	n := int64(1)
	e.shape = make([]int, len(*rec.Shape))
	for i, d := range *rec.Shape {
		if d < 0 {
			return entry{}, fmt.Errorf("shape %v has a negative dimension", *rec.Shape)
		}
		if d > math.MaxInt || d != 0 && n > math.MaxInt64/int64(size)/d {
			return entry{}, fmt.Errorf("shape %v: the element count overflows", *rec.Shape)
		}
		n *= d
		e.shape[i] = int(d)
	}
	off := *rec.Offsets
	if len(off) != 2 {
		return entry{}, fmt.Errorf("data_offsets %v is not a [begin, end] pair", off)
	}
	b, en := off[0], off[1]
	switch {
	case b < 0 || en < b:
		return entry{}, fmt.Errorf("data_offsets [%d,%d) do not form a range", b, en)
	case en-b != n*int64(size):
		return entry{}, fmt.Errorf("dtype %s and shape %v need %d bytes, data_offsets [%d,%d) hold %d", e.dtype, e.shape, n*int64(size), b, en, en-b)
	case en > int64(dataLen):
		return entry{}, fmt.Errorf("truncated: data_offsets [%d,%d) run past the end of the %d-byte data section", b, en, dataLen)
	}
	e.begin, e.end = int(b), int(en)
	return e, nil
}

type member struct {
	key   string
	value json.RawMessage
}

// objectMembers splits a JSON object into its members in order, refusing
// anything but one object and duplicate keys (which a map would silently
// collapse to the last).
func objectMembers(b []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("the header is not a JSON object")
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string) // inside an object the decoder yields only string keys
		if seen[key] {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("value of %q: %v", key, err)
		}
		out = append(out, member{key, v})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the header object")
	}
	return out, nil
}

// clip shortens a JSON fragment for an error message.
func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

// DataSection returns the bytes after the header, which the tensors cover
// exactly (in offset order, not necessarily name order): a checksum of the
// stored data is a checksum of this. It aliases the buffer until Close.
func (f *File) DataSection() []byte { return f.data[:len(f.data):len(f.data)] }

// Names returns the tensor names, sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Tensor returns the tensor called name. Its Data aliases the file's buffer
// (read-only for a mapped file) and stays valid until Close.
func (f *File) Tensor(name string) (Tensor, bool) {
	e, ok := f.tensors[name]
	if !ok {
		return Tensor{}, false
	}
	return Tensor{Name: name, DType: e.dtype, Shape: slices.Clone(e.shape), Data: f.data[e.begin:e.end:e.end]}, true
}

// Close releases the buffer (unmapping a mapped file); the File then holds
// no tensors.
func (f *File) Close() error {
	f.tensors, f.names, f.data = nil, nil, nil
	if u := f.unmap; u != nil {
		f.unmap = nil
		if err := u(); err != nil {
			return fmt.Errorf("safetensors: unmapping: %w", err)
		}
	}
	return nil
}
