//go:build unix && !linux

package safetensors

import "os"

// readFile has huge pages only on Linux; elsewhere Load maps the file as
// Open does.
func readFile(fh *os.File, st os.FileInfo) ([]byte, func() error, bool) { return mapFile(fh, st) }
