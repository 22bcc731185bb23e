package replay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The service's messages are little-endian binary: a version byte, a
// uvarint count, then fixed-width fields per entry with uvarint-prefixed
// values. Binary rather than JSON because the values are opaque bytes
// (JSON would base64 them) and a sample of a few hundred transitions is
// decoded on the learner's critical path.
const wireVersion = 1

// errShort reports a message that ends inside a field.
var errShort = errors.New("message ends early")

// reader decodes a message, remembering the first error so that callers
// check once at the end.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("byte %d: "+format, append([]any{r.off}, a...)...)
	}
}

func (r *reader) version() {
	if r.err != nil {
		return
	}
	if len(r.b) == 0 {
		r.fail("empty message")
		return
	}
	if r.b[0] != wireVersion {
		r.fail("wire version %d, this service speaks %d", r.b[0], wireVersion)
		return
	}
	r.off = 1
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) u64() uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 8 {
		r.fail("%v", errShort)
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) f64() float64 { return math.Float64frombits(r.u64()) }

// count reads an entry count and checks that the rest of the message can
// hold that many entries of at least minSize bytes each, so that a forged
// count cannot make the decoder allocate more than the message's size.
func (r *reader) count(minSize int) int {
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	if rest := uint64(len(r.b) - r.off); n > rest/uint64(minSize) {
		r.fail("count %d does not fit in the %d bytes left", n, rest)
		return 0
	}
	return int(n)
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.fail("value of %d bytes, %d left", n, len(r.b)-r.off)
		return nil
	}
	v := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return v
}

func (r *reader) end() error {
	if r.err == nil && r.off != len(r.b) {
		r.fail("%d trailing bytes", len(r.b)-r.off)
	}
	return r.err
}

func putU64(b []byte, v uint64) []byte  { return binary.LittleEndian.AppendUint64(b, v) }
func putF64(b []byte, v float64) []byte { return putU64(b, math.Float64bits(v)) }

func putBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// addRequest: version, count, then per item priority f64 and the value.
func encodeAdd(values [][]byte, priorities []float64) []byte {
	n := 10
	for _, v := range values {
		n += 8 + 10 + len(v)
	}
	b := append(make([]byte, 0, n), wireVersion)
	b = binary.AppendUvarint(b, uint64(len(values)))
	for k, v := range values {
		b = putF64(b, priorities[k])
		b = putBytes(b, v)
	}
	return b
}

func decodeAdd(msg []byte) (values [][]byte, priorities []float64, err error) {
	r := &reader{b: msg}
	r.version()
	n := r.count(9)
	values, priorities = make([][]byte, n), make([]float64, n)
	for k := range n {
		priorities[k] = r.f64()
		values[k] = r.bytes()
	}
	if err := r.end(); err != nil {
		return nil, nil, err
	}
	return values, priorities, nil
}

// addResponse: the first ID and the count (the IDs are consecutive).
func encodeAddResponse(first uint64, n int) []byte {
	b := putU64([]byte{wireVersion}, first)
	return binary.AppendUvarint(b, uint64(n))
}

func decodeAddResponse(msg []byte) (first uint64, n int, err error) {
	r := &reader{b: msg}
	r.version()
	first = r.u64()
	c := r.uvarint()
	if err := r.end(); err != nil {
		return 0, 0, err
	}
	if c > math.MaxInt32 {
		return 0, 0, fmt.Errorf("count %d", c)
	}
	return first, int(c), nil
}

// sampleRequest: version, the number of items n and the exponent β.
func encodeSample(n int, beta float64) []byte {
	b := binary.AppendUvarint([]byte{wireVersion}, uint64(n))
	return putF64(b, beta)
}

func decodeSample(msg []byte) (n uint64, beta float64, err error) {
	r := &reader{b: msg}
	r.version()
	n = r.uvarint()
	beta = r.f64()
	return n, beta, r.end()
}

// sampleResponse: version, count, then per item ID, priority, probability
// and weight, and the value.
func encodeSampleResponse(items []Item[[]byte]) []byte {
	n := 10
	for _, it := range items {
		n += 32 + 10 + len(it.Value)
	}
	b := append(make([]byte, 0, n), wireVersion)
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = putU64(b, it.ID)
		b = putF64(b, it.Priority)
		b = putF64(b, it.Prob)
		b = putF64(b, it.Weight)
		b = putBytes(b, it.Value)
	}
	return b
}

func decodeSampleResponse(msg []byte) ([]Item[[]byte], error) {
	r := &reader{b: msg}
	r.version()
	n := r.count(33)
	items := make([]Item[[]byte], n)
	for k := range items {
		it := &items[k]
		it.ID = r.u64()
		it.Priority = r.f64()
		it.Prob = r.f64()
		it.Weight = r.f64()
		it.Value = r.bytes()
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return items, nil
}

// updateRequest: version, count, then per entry the ID and the priority.
func encodeUpdate(ids []uint64, priorities []float64) []byte {
	b := append(make([]byte, 0, 11+16*len(ids)), wireVersion)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for k, id := range ids {
		b = putU64(b, id)
		b = putF64(b, priorities[k])
	}
	return b
}

func decodeUpdate(msg []byte) (ids []uint64, priorities []float64, err error) {
	r := &reader{b: msg}
	r.version()
	n := r.count(16)
	ids, priorities = make([]uint64, n), make([]float64, n)
	for k := range n {
		ids[k] = r.u64()
		priorities[k] = r.f64()
	}
	if err := r.end(); err != nil {
		return nil, nil, err
	}
	return ids, priorities, nil
}
