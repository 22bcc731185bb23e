package gettext

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
)

// Magic is the .mo magic number.
const Magic = 0x950412de

// Message is one catalogue entry.
type Message struct {
	Context  string   // msgctxt, "" when none
	ID       string   // msgid
	IDPlural string   // msgid_plural, "" for a message without plural forms
	Str      []string // msgstr (one element) or msgstr[0], msgstr[1], …
}

// Catalog is a parsed .mo file.
type Catalog struct {
	Header   map[string]string // the empty msgid's fields ("Content-Type", "Plural-Forms", …)
	Messages []Message         // the other entries in file order (msgfmt sorts them by msgid)
}

// Parse decodes a .mo file; truncated or malformed input is an error, never a panic.
func Parse(b []byte) (*Catalog, error) {
	if len(b) < 28 {
		return nil, fmt.Errorf("gettext: file too short (%d bytes) for a .mo header", len(b))
	}
	var bo binary.ByteOrder
	switch {
	case binary.LittleEndian.Uint32(b) == Magic:
		bo = binary.LittleEndian
	case binary.BigEndian.Uint32(b) == Magic:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("gettext: bad magic %#08x (not a .mo file)", binary.LittleEndian.Uint32(b))
	}
	if major := bo.Uint32(b[4:]) >> 16; major > 1 {
		return nil, fmt.Errorf("gettext: unsupported major revision %d", major)
	}
	n := uint64(bo.Uint32(b[8:]))
	origOff := uint64(bo.Uint32(b[12:]))
	transOff := uint64(bo.Uint32(b[16:]))
	size := uint64(len(b))
	if origOff+8*n > size || transOff+8*n > size {
		return nil, fmt.Errorf("gettext: string tables (%d entries at %d and %d) exceed the file size %d", n, origOff, transOff, size)
	}
	str := func(table uint64, i uint64) (string, error) {
		e := table + 8*i
		l := uint64(bo.Uint32(b[e:]))
		o := uint64(bo.Uint32(b[e+4:]))
		if o+l > size {
			return "", fmt.Errorf("gettext: string %d (offset %d, length %d) exceeds the file size %d", i, o, l, size)
		}
		return string(b[o : o+l]), nil
	}
	c := &Catalog{Header: map[string]string{}}
	for i := uint64(0); i < n; i++ {
		orig, err := str(origOff, i)
		trans, err2 := str(transOff, i)
		if err = cmp.Or(err, err2); err != nil {
			return nil, err
		}
		if orig == "" {
			for _, line := range strings.Split(trans, "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok {
					c.Header[strings.TrimSpace(k)] = strings.TrimSpace(v)
				}
			}
			continue
		}
		var m Message
		if ctx, id, ok := strings.Cut(orig, "\x04"); ok {
			m.Context, orig = ctx, id
		}
		if id, plural, ok := strings.Cut(orig, "\x00"); ok {
			m.ID, m.IDPlural = id, plural
			m.Str = strings.Split(trans, "\x00")
		} else {
			m.ID = orig
			if strings.IndexByte(trans, 0) >= 0 {
				return nil, fmt.Errorf("gettext: message %d %q has plural translations but no msgid_plural", i, orig)
			}
			m.Str = []string{trans}
		}
		c.Messages = append(c.Messages, m)
	}
	return c, nil
}

// ReadFile parses the .mo file at path.
func ReadFile(path string) (*Catalog, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gettext: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return c, nil
}
