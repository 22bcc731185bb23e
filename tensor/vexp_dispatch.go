package tensor

// Dispatch of the exp-based loops to the widest assembly available: AVX-512
// (16 lanes) for the multiple-of-16 part, then AVX2/FMA (8 lanes) for one
// remaining block of 8. Each returns having processed len &^ 7 elements, or
// nothing when neither is enabled; callers finish the tail in Go.

func kExpShiftSum(dst, src []float32, shift float32) float32 {
	var z float32
	if kUseAVX512 && len(dst) >= 16 {
		z = expShiftSumAVX512(dst, src, shift)
		k := len(dst) &^ 15
		dst, src = dst[k:], src[k:]
	}
	if kUseAVX2 && len(dst) >= 8 {
		z += expShiftSumAVX2(dst, src, shift)
	}
	return z
}

func kGELUVec(dst, src []float32) {
	if kUseAVX512 && len(dst) >= 16 {
		geluAVX512(dst, src)
		k := len(dst) &^ 15
		dst, src = dst[k:], src[k:]
	}
	if kUseAVX2 && len(dst) >= 8 {
		geluAVX2(dst, src)
	}
}

func kGELUBackwardVec(dx, dy, x []float32) {
	if kUseAVX512 && len(dx) >= 16 {
		geluBackwardAVX512(dx, dy, x)
		k := len(dx) &^ 15
		dx, dy, x = dx[k:], dy[k:], x[k:]
	}
	if kUseAVX2 && len(dx) >= 8 {
		geluBackwardAVX2(dx, dy, x)
	}
}

func kSigmoidVec(dst, src []float32) {
	if kUseAVX512 && len(dst) >= 16 {
		sigmoidAVX512(dst, src)
		k := len(dst) &^ 15
		dst, src = dst[k:], src[k:]
	}
	if kUseAVX2 && len(dst) >= 8 {
		sigmoidAVX2(dst, src)
	}
}
