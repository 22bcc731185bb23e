//go:build !unix

package safetensors

import "os"

// mapFile never maps off unix; Open reads the file instead.
func mapFile(*os.File, os.FileInfo) ([]byte, func() error, bool) { return nil, nil, false }
