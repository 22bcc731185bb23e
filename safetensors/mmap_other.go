//go:build !unix

package safetensors

import "os"

// mapFile never maps off unix; Open reads the file instead.
func mapFile(*os.File, os.FileInfo) ([]byte, func() error, bool) { return nil, nil, false }

// readFile has no huge pages to offer off unix; Open reads the file instead.
func readFile(*os.File, os.FileInfo) ([]byte, func() error, bool) { return nil, nil, false }
