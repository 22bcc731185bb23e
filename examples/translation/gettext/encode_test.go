package gettext

import (
	"bytes"
	"encoding/binary"
	"strings"
)

// Encode writes messages as a .mo file in the given byte order (without a
// hash table, which readers do not need). Messages are sorted by their key
// as msgfmt does. The tests build their catalogues with it (and
// corpus/testdata's).
func Encode(header string, msgs []Message, bo binary.ByteOrder) []byte {
	type kv struct{ k, v string }
	entries := []kv{{"", header}}
	for _, m := range msgs {
		k := m.ID
		if m.IDPlural != "" {
			k += "\x00" + m.IDPlural
		}
		if m.Context != "" {
			k = m.Context + "\x04" + k
		}
		entries = append(entries, kv{k, strings.Join(m.Str, "\x00")})
	}
	// Insertion sort by key (small inputs).
	for i := 1; i < len(entries); i++ {
		for j := i; j > 0 && entries[j].k < entries[j-1].k; j-- {
			entries[j], entries[j-1] = entries[j-1], entries[j]
		}
	}
	n := uint32(len(entries))
	origOff := uint32(28)
	transOff := origOff + 8*n
	dataOff := transOff + 8*n
	var head, tables, data bytes.Buffer
	w32 := func(buf *bytes.Buffer, v uint32) {
		var x [4]byte
		bo.PutUint32(x[:], v)
		buf.Write(x[:])
	}
	for _, h := range []uint32{Magic, 0, n, origOff, transOff, 0, dataOff} {
		w32(&head, h)
	}
	var origT, transT bytes.Buffer
	off := dataOff
	for _, e := range entries {
		w32(&origT, uint32(len(e.k)))
		w32(&origT, off)
		data.WriteString(e.k)
		data.WriteByte(0)
		off += uint32(len(e.k)) + 1
	}
	for _, e := range entries {
		w32(&transT, uint32(len(e.v)))
		w32(&transT, off)
		data.WriteString(e.v)
		data.WriteByte(0)
		off += uint32(len(e.v)) + 1
	}
	tables.Write(origT.Bytes())
	tables.Write(transT.Bytes())
	return append(append(head.Bytes(), tables.Bytes()...), data.Bytes()...)
}
