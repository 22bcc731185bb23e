//go:build unix

package safetensors

import (
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps a regular, non-empty file read-only; ok is false when it
// cannot (the caller then reads the file).
func mapFile(fh *os.File, st os.FileInfo) (buf []byte, unmap func() error, ok bool) {
	size := st.Size()
	if !st.Mode().IsRegular() || size <= 0 || size > math.MaxInt {
		return nil, nil, false
	}
	b, err := unix.Mmap(int(fh.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, false
	}
	return b, func() error { return unix.Munmap(b) }, true
}
