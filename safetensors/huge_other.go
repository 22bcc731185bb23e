//go:build unix && !linux

package safetensors

import "os"

// readFile has huge pages only on Linux; elsewhere Open reads the file into
// the heap.
func readFile(*os.File, os.FileInfo) ([]byte, func() error, bool) { return nil, nil, false }
