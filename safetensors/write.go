package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Write writes tensors and the string metadata meta (omitted when empty) to
// w in the safetensors format. The data section holds the tensors in name
// order, so a checksum of the concatenated Data of the tensors sorted by
// name is a checksum of the data section. The header is padded with spaces
// to a multiple of 8 bytes, which keeps every tensor of an 8-byte dtype
// aligned in the file. Tensor data are written straight from each Data
// slice, never gathered into one buffer. tensors is not modified.
func Write(w io.Writer, tensors []Tensor, meta map[string]string) error {
	order := make([]int, len(tensors))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(tensors[a].Name, tensors[b].Name) })

	var h bytes.Buffer
	h.WriteByte('{')
	if len(meta) > 0 {
		mb, err := json.Marshal(meta)
		if err != nil {
			return fmt.Errorf("safetensors: metadata: %w", err)
		}
		h.WriteString(`"__metadata__":`)
		h.Write(mb)
	}
	off := 0
	for k, i := range order {
		t := tensors[i]
		if t.Name == metadataKey {
			return fmt.Errorf("safetensors: %q is reserved for the metadata and cannot name a tensor", metadataKey)
		}
		if k > 0 && tensors[order[k-1]].Name == t.Name {
			return fmt.Errorf("safetensors: two tensors are named %q", t.Name)
		}
		if err := t.check(); err != nil {
			return err
		}
		if h.Len() > 1 {
			h.WriteByte(',')
		}
		nb, _ := json.Marshal(t.Name) // a string always marshals
		h.Write(nb)
		h.WriteString(`:{"dtype":`)
		h.WriteString(strconv.Quote(string(t.DType)))
		h.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				h.WriteByte(',')
			}
			h.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&h, `],"data_offsets":[%d,%d]}`, off, off+len(t.Data))
		off += len(t.Data)
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	if h.Len() > maxHeader {
		return fmt.Errorf("safetensors: header of %d bytes exceeds the %d-byte limit readers enforce", h.Len(), maxHeader)
	}

	bw := bufio.NewWriterSize(w, 1<<16)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(h.Len()))
	bw.Write(n[:])
	if _, err := bw.Write(h.Bytes()); err != nil {
		return fmt.Errorf("safetensors: writing the header: %w", err)
	}
	for _, i := range order {
		if _, err := bw.Write(tensors[i].Data); err != nil {
			return fmt.Errorf("safetensors: writing tensor %q: %w", tensors[i].Name, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: writing: %w", err)
	}
	return nil
}
