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
func Open(path string) (*File, error) { return open(path, mapFile) }

// Load is Open for tensors that are read over and over: on Linux a file of
// at least HugeMin bytes is read into 2 MiB pages (transparent huge pages,
// where the kernel's setting is madvise or always) instead of mapped. Code
// that streams through every tensor again and again, as decoding does
// through a model's weights, reads them faster from huge pages than from
// the page cache's 4 KiB pages: the translation look-aside buffer then
// covers them, and prefetching is not cut off every 4 KiB. That memory is
// the process's own (processes loading one file each hold a copy),
// read-only, released by Close. Anything else is mapped as Open maps it.
func Load(path string) (*File, error) { return open(path, readFile) }

// HugeMin is the smallest file Load puts into huge pages: below it, the
// pages would be mostly one or two partly filled ones.
const HugeMin = 32 << 20

func open(path string, load func(*os.File, os.FileInfo) ([]byte, func() error, bool)) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	buf, unmap, ok := load(fh, st)
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
