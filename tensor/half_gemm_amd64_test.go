//go:build amd64 && !purego

package tensor

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPairOrderVec checks the AVX2 reorder against pairOrder: the same
// values moved, bit for bit, for both block sizes the paths use and
// lengths from none to several blocks.
func TestPairOrderVec(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bs := range []int{16, 32, 64} {
		for _, blocks := range []int{0, 1, 2, 7} {
			src := make([]float32, blocks*bs)
			for i := range src {
				src[i] = rng.Float32()
			}
			want, got := make([]float32, len(src)), make([]float32, len(src)+1)
			got[len(src)] = -1 // past the end: left alone
			pairOrder(want, src, bs)
			pairOrderVec(got[:len(src)], src, bs)
			if !slices.Equal(got[:len(src)], want) || got[len(src)] != -1 {
				t.Errorf("bs %d, %d blocks: got %v, want %v", bs, blocks, got, want)
			}
		}
	}
}
