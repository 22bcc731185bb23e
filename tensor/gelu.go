package tensor

import "math"

// GELU, tanh approximation (Hendrycks & Gimpel 2016):
//
//	gelu(x) = ½x(1 + tanh(u)),  u = √(2/π)(x + 0.044715x³).
//
// Since ½(1 + tanh u) = σ(2u), the kernels compute x·σ(2u) with one Exp32 and
// one division per element, and the derivative as
//
//	gelu'(x) = σ + x·σ(1-σ)·2√(2/π)(1 + 3·0.044715x²),  σ = σ(2u).

const (
	geluK0 = 0.7978845608028654 // √(2/π)
	geluK1 = 0.044715
)

// kGELUChunk writes gelu(src) to dst, Exp32 inlined by hand.
func kGELUChunk(dst, src []float32) {
	src = src[:len(dst)]
	if kUseAVX2 && len(dst) >= 8 {
		kGELUVec(dst, src)
		k := len(dst) &^ 7
		dst, src = dst[k:], src[k:]
	}
	for i, x := range src {
		e := -2 * geluK0 * (x + geluK1*x*x*x)
		y := min(max(e, exp32Lo), exp32Hi)
		t := y*log2e32 + roundMag
		n := math.Float32bits(t) - math.Float32bits(roundMag)
		fn := t - roundMag
		r := y - fn*ln2Hi32 - fn*ln2Lo32
		p := 1 + r*(1+r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
		p *= math.Float32frombits((n + 127) << 23)
		if e < exp32Lo {
			p = 0
		}
		dst[i] = x / (1 + p)
	}
}

func kGELUBackwardChunk(dx, dy, x []float32) {
	dy, x = dy[:len(dx)], x[:len(dx)]
	if kUseAVX2 && len(dx) >= 8 {
		kGELUBackwardVec(dx, dy, x)
		k := len(dx) &^ 7
		dx, dy, x = dx[k:], dy[k:], x[k:]
	}
	for i, xv := range x {
		x2 := xv * xv
		e := -2 * geluK0 * (xv + geluK1*x2*xv)
		y := min(max(e, exp32Lo), exp32Hi)
		t := y*log2e32 + roundMag
		n := math.Float32bits(t) - math.Float32bits(roundMag)
		fn := t - roundMag
		r := y - fn*ln2Hi32 - fn*ln2Lo32
		p := 1 + r*(1+r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
		p *= math.Float32frombits((n + 127) << 23)
		if e < exp32Lo {
			p = 0
		}
		s := 1 / (1 + p)
		d := s + xv*s*(1-s)*(2*geluK0)*(1+3*geluK1*x2)
		dx[i] = dy[i] * d
	}
}
