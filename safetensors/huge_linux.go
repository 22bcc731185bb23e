package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readFile reads a regular file of at least HugeMin bytes into anonymous
// memory that the kernel is asked to back with 2 MiB pages, then makes it
// read-only. A smaller file, or one read when transparent huge pages are
// off or a step fails, is mapped as Open maps it.
func readFile(fh *os.File, st os.FileInfo) (buf []byte, free func() error, ok bool) {
	size := st.Size()
	if st.Mode().IsRegular() && size >= HugeMin && size <= math.MaxInt/2 && hugePagesOn() {
		if buf, free, ok := readHuge(fh, int(size)); ok {
			return buf, free, true
		}
	}
	return mapFile(fh, st)
}

// readHuge reads size bytes of fh into an anonymous mapping advised for
// huge pages (MADV_HUGEPAGE), placed so that the data section starts on a
// 64-byte line. The format pads its header only to 8 bytes, so where a
// mapping leaves every tensor (whose sizes and offsets are mostly whole
// lines) a fixed distance off the lines, each 64-byte vector load of a
// weight row would straddle two lines.
func readHuge(fh *os.File, size int) ([]byte, func() error, bool) {
	const huge, line = 2 << 20, 64
	var hdr [8]byte
	if _, err := fh.ReadAt(hdr[:], 0); err != nil {
		return nil, nil, false
	}
	pad := (line - int((8+binary.LittleEndian.Uint64(hdr[:]))%line)) % line
	n := (pad + size + huge - 1) / huge * huge
	a, err := unix.Mmap(-1, 0, n+huge, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, false
	}
	free := func() error { return unix.Munmap(a) }
	off := 0
	if r := int(uintptr(unsafe.Pointer(&a[0])) % huge); r != 0 {
		off = huge - r
	}
	region := a[off : off+n]
	if unix.Madvise(region, unix.MADV_HUGEPAGE) != nil {
		free()
		return nil, nil, false
	}
	b := region[pad : pad+size : pad+size]
	if _, err := fh.ReadAt(b, 0); err != nil {
		free()
		return nil, nil, false
	}
	if unix.Mprotect(region, unix.PROT_READ) != nil {
		free()
		return nil, nil, false
	}
	return b, free, true
}

// hugePagesOn reports whether the kernel grants huge pages to memory that
// asks for them: transparent_hugepage/enabled is [always] or [madvise].
func hugePagesOn() bool {
	s, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && (bytes.Contains(s, []byte("[always]")) || bytes.Contains(s, []byte("[madvise]")))
}
