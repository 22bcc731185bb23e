package dashboard

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
)

// maxLine bounds one JSON line; a longer line is skipped as bad.
const maxLine = 16 << 20

// tail reads a JSON-lines file that another process appends to. Each read
// returns the complete lines written since the last one; a line still being
// written (no newline yet) is left for the next read. The file is opened
// read-only for the length of one read, so the writer is never blocked.
type tail struct {
	path string
	off  int64       // bytes consumed: the start of the first unread line
	info fs.FileInfo // the file read last, to notice a replaced file
	// skipping is set while the bytes at off belong to an over-long line
	// whose newline has not been read yet.
	skipping bool
	// limit, when positive, bounds the bytes one read takes.
	limit int64
}

// read calls line for each new complete line (without its newline) and
// returns how many lines were over maxLine and skipped. When the file
// shrank, was replaced or removed since the last read, read first calls
// reset: what was read before is void, and the lines that follow start at
// the file's beginning. A missing file is no error.
func (t *tail) read(reset func(), line func([]byte)) (long int, err error) {
	f, err := os.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		if t.info != nil {
			reset()
		}
		t.off, t.info, t.skipping = 0, nil, false
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if t.info != nil && (!os.SameFile(t.info, fi) || fi.Size() < t.off) {
		reset()
		t.off, t.skipping = 0, false
	}
	t.info = fi
	if fi.Size() == t.off {
		return 0, nil
	}
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return 0, err
	}
	// Read up to the size seen now, not on after a writer that keeps going.
	n := fi.Size() - t.off
	if t.limit > 0 {
		n = min(n, t.limit)
	}
	r := bufio.NewReaderSize(io.LimitReader(f, n), 64<<10)
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		switch {
		case err == nil: // a complete line
			t.off += int64(len(buf) + len(chunk))
			if t.skipping || len(buf)+len(chunk) > maxLine {
				long++
			} else if l := bytes.TrimSpace(append(buf, chunk...)); len(l) > 0 {
				line(l)
			}
			buf, t.skipping = buf[:0], false
		case errors.Is(err, bufio.ErrBufferFull), errors.Is(err, io.EOF):
			if t.skipping || len(buf)+len(chunk) > maxLine {
				// An over-long line: count its bytes as read, keep none.
				t.off += int64(len(buf) + len(chunk))
				buf, t.skipping = buf[:0], true
			} else {
				buf = append(buf, chunk...)
			}
			if errors.Is(err, io.EOF) {
				// An unfinished line is read again once its newline is there.
				return long, nil
			}
		default:
			return long, err
		}
	}
}
