package safetensors

import (
	"fmt"
	"io"
	"os"
)

// Open maps the file at path read-only into memory (reading it instead
// where mapping is unavailable) and validates it. Tensors are views of the
// mapping, so opening a multi-gigabyte checkpoint costs no copy; the file
// must not be truncated while it is open. Errors name path and are
// *FormatError for a malformed file.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	buf, unmap, ok := mapFile(fh, st)
	if !ok {
		if buf, err = readAll(fh, st); err != nil {
			return nil, fmt.Errorf("safetensors: reading %s: %w", path, err)
		}
	}
	f, err := parse(path, buf)
	if err != nil {
		if unmap != nil {
			unmap()
		}
		return nil, err
	}
	f.unmap = unmap
	return f, nil
}

// readAll reads the file whole: a regular file in one read of its known
// size, anything else (a pipe) to its end.
func readAll(fh *os.File, st os.FileInfo) ([]byte, error) {
	if st.Mode().IsRegular() {
		buf := make([]byte, st.Size())
		_, err := io.ReadFull(fh, buf)
		return buf, err
	}
	return io.ReadAll(fh)
}
