package tensor

import "math"

// Single-precision transcendental functions for the kernels. They avoid the
// float64 round trip of math.Exp/math.Log/math.Tanh, need no branches in the
// common range, and are written so that the Go compiler inlines them into the
// element loops.
//
// exp: x = n·ln2 + r with |r| ≤ ln2/2 (Cody–Waite: ln2 split into a part
// exact in float32 and a correction), exp(r) by its degree-6 Taylor
// polynomial (truncation error below 2e-7 relative on that interval), and 2ⁿ
// assembled in the exponent bits. Measured maximum relative error against
// float64 math.Exp is reported by TestExp32Accuracy (about 2e-7).

const (
	exp32Hi   = 88.0        // exp(88) ≈ 1.65e38 < MaxFloat32
	exp32Lo   = -87.0       // exp(-87) ≈ 1.6e-38 > smallest normal float32
	exp32Zero = -103.972077 // below this exp underflows to 0 even as a subnormal
	log2e32   = 1.44269504088896341
	ln2Hi32   = 0.693359375 // ln2 rounded to 10 significant bits: n·ln2Hi is exact
	ln2Lo32   = -2.12194440e-4
	roundMag  = 12582912.0 // 1.5·2²³: adding it rounds a float32 to an integer
)

// Exp32 returns e**x in single precision, with a relative error of about
// 2e-7 for x in [-87, 88]. Larger x saturate at exp(88); x below -87 return
// 0 (flush to zero instead of a subnormal result). NaN gives NaN.
func Exp32(x float32) float32 {
	y := min(max(x, exp32Lo), exp32Hi)
	t := y*log2e32 + roundMag
	n := math.Float32bits(t) - math.Float32bits(roundMag) // the integer n (two's complement)
	fn := t - roundMag
	r := y - fn*ln2Hi32 - fn*ln2Lo32
	p := 1 + r*(1+r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	p *= math.Float32frombits((n + 127) << 23)
	if x < exp32Lo {
		p = 0
	}
	return p
}

// expm1Neg32 returns e**y - 1 for y ≤ 0, accurate in relative terms also for
// small |y| (where e**y - 1 cancels): e**y - 1 = 2ⁿ·q + (2ⁿ - 1) with
// q = e**r - 1 from its polynomial, exact when n = 0.
func expm1Neg32(y float32) float32 {
	y = max(y, exp32Lo)
	t := y*log2e32 + roundMag
	n := math.Float32bits(t) - math.Float32bits(roundMag)
	fn := t - roundMag
	r := y - fn*ln2Hi32 - fn*ln2Lo32
	q := r * (1 + r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	s := math.Float32frombits((n + 127) << 23)
	return s*q + (s - 1)
}

// Tanh32 returns tanh(x) in single precision (relative error a few ulp),
// using tanh(-|x|) = expm1(-2|x|) / (expm1(-2|x|) + 2).
func Tanh32(x float32) float32 {
	a := math.Float32frombits(math.Float32bits(x) &^ (1 << 31))
	e := expm1Neg32(-2 * a)
	t := e / (e + 2) // tanh(-|x|) ≤ 0
	return math.Float32frombits(math.Float32bits(t) ^ (^math.Float32bits(x) & (1 << 31)))
}

// Sigmoid32 returns 1/(1+e**-x) in single precision.
func Sigmoid32(x float32) float32 {
	return 1 / (1 + Exp32(-x))
}

// Log32 returns the natural logarithm of x in single precision (relative
// error a few ulp). x = m·2ᵉ with m in [√½, √2); log m = 2·atanh(s),
// s = (m-1)/(m+1), |s| < 0.172, by its odd series to s⁹. Zero, negative,
// subnormal, infinite and NaN inputs take the float64 math.Log path.
func Log32(x float32) float32 {
	b := math.Float32bits(x)
	if b-0x00800000 >= 0x7f800000-0x00800000 { // not a positive normal number
		return float32(math.Log(float64(x)))
	}
	// Shift m into [√½, √2): add the bits of (1 - √½) to the mantissa so that
	// mantissas ≥ √2-1 carry into the exponent.
	bb := b + (0x3f800000 - 0x3f3504f3)
	e := int32(bb>>23) - 127
	m := math.Float32frombits((bb & 0x007fffff) + 0x3f3504f3)
	f := m - 1
	s := f / (m + 1)
	z := s * s
	l := 2 * s * (1 + z*(1.0/3+z*(1.0/5+z*(1.0/7+z*(1.0/9)))))
	fe := float32(e)
	return fe*ln2Hi32 + (l + fe*ln2Lo32)
}
