//go:build !amd64 || purego

package tensor

// halfPaths lists the GemmHalf implementations of this build: with the
// purego build tag, or off amd64, only the portable one.
func halfPaths() []halfPathAvail {
	return []halfPathAvail{{halfGo, true}}
}
