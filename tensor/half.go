package tensor

import "math"

// 16-bit floating-point storage formats. Pretrained checkpoints store their
// weights as bfloat16 (the upper half of an IEEE float32: 8 exponent bits, 7
// mantissa bits) or IEEE 754 binary16 (5 exponent bits, 10 mantissa bits);
// troupe keeps such weights 16-bit in memory and widens them to float32
// where a kernel reads them. Values are carried as raw uint16 bit patterns.

// BF16ToFloat32 widens a bfloat16 bit pattern exactly.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBF16 rounds f to the nearest bfloat16, ties to even; NaN stays a
// (quiet) NaN and infinities stay infinite.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep the sign, force a quiet payload
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToFloat32 widens an IEEE 754 binary16 bit pattern exactly (subnormals,
// infinities and NaN included).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0: // ±0
		return math.Float32frombits(sign)
	}
	// Subnormal: normalise the mantissa.
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// Float32ToF16 rounds f to the nearest binary16, ties to even; values beyond
// the largest finite binary16 (65504) become infinite, NaN stays NaN.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 { // subnormal or zero in binary16
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := man >> shift
		rem := man & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to infinity: still correct
	}
	return sign | uint16(r)
}

// BF16sToFloat32 widens src into dst (len(dst) ≥ len(src)).
func BF16sToFloat32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = BF16ToFloat32(h)
	}
}

// F16sToFloat32 widens src into dst (len(dst) ≥ len(src)).
func F16sToFloat32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = F16ToFloat32(h)
	}
}

// Float32sToBF16 rounds src into dst (len(dst) ≥ len(src)).
func Float32sToBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = Float32ToBF16(f)
	}
}

// Float32sToF16 rounds src into dst (len(dst) ≥ len(src)).
func Float32sToF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = Float32ToF16(f)
	}
}
