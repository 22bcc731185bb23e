//go:build amd64 && !purego

package tensor

var (
	halfAVX512 = &halfPath{name: "avx512", kern: kernelAVX512, packB: packBHalfGo, gemv: gemvHalfGo, gemvR: 4, gemvM: 4, gemvK: 1, widen: widenGo}
	halfAVX2   = &halfPath{name: "avx2", kern: kernelAVX2, packB: packBHalfGo, gemv: gemvHalfGo, gemvR: 4, gemvM: 4, gemvK: 1, widen: widenGo}
)

// halfPaths lists the GemmHalf implementations of this build, fastest
// first, with whether the running CPU can execute each.
func halfPaths() []halfPathAvail {
	return []halfPathAvail{
		{halfAVX512, hasAVX512},
		{halfAVX2, hasAVX2},
		{halfGo, true},
	}
}
