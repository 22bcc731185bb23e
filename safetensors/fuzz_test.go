package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzHeader feeds arbitrary headers (with a data section of the given
// length) to Read. A file must either be refused with a *FormatError or
// read into tensors whose data match their dtype and shape and which Write
// reproduces exactly.
func FuzzHeader(f *testing.F) {
	var valid bytes.Buffer
	Write(&valid, randomTensors(7)[:6], map[string]string{"k": "v"})
	hn := binary.LittleEndian.Uint64(valid.Bytes())
	f.Add(string(valid.Bytes()[8:8+hn]), uint16(len(valid.Bytes())-8-int(hn)), false)
	for _, h := range []string{
		`{}`,
		`{"__metadata__":{"a":"b"}}`,
		`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`,
		`{"a":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},"b":{"dtype":"I64","shape":[1,1],"data_offsets":[2,10]}}`,
		`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`,
		`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`,
		`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`,
		`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`,
		`{"a":{"dtype":"X","shape":[1],"data_offsets":[0,1]}}`,
		`{"a":1,"a":2}`,
		`{"__metadata__":null}`,
		`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`,
		`[`, ``, "{\"\xff\":1}",
	} {
		f.Add(h, uint16(8), false)
		f.Add(h, uint16(0), true)
	}
	f.Fuzz(func(t *testing.T, header string, dataLen uint16, lie bool) {
		file := rawFile(header, int(dataLen))
		if lie { // a length field that disagrees with the header
			binary.LittleEndian.PutUint64(file, uint64(len(header))+uint64(dataLen)/2+1)
		}
		for i := range int(dataLen) {
			file[len(file)-int(dataLen)+i] = byte(i * 7)
		}
		got, err := Read(bytes.NewReader(file))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			return
		}
		var ts []Tensor
		for _, n := range got.Names() {
			x, _ := got.Tensor(n)
			if len(x.Data) != x.NumElements()*x.DType.Size() {
				t.Fatalf("tensor %q: %d bytes for %s %v", n, len(x.Data), x.DType, x.Shape)
			}
			x.Float32s()
			x.Uint16s()
			ts = append(ts, x)
		}
		var again bytes.Buffer
		if err := Write(&again, ts, got.Metadata); err != nil {
			t.Fatalf("rewriting an accepted file: %v", err)
		}
		back, err := Read(&again)
		if err != nil {
			t.Fatalf("reading a rewritten file: %v", err)
		}
		if d := cmp.Diff(byName(ts), tensorsOf(t, back.Names(), back.Tensor)); d != "" {
			t.Fatalf("rewrite changed the tensors:\n%s", d)
		}
		if len(got.Metadata)+len(back.Metadata) > 0 && !cmp.Equal(got.Metadata, back.Metadata) {
			t.Fatalf("rewrite changed the metadata: %v -> %v", got.Metadata, back.Metadata)
		}
	})
}
