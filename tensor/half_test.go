package tensor

import (
	"math"
	"math/big"
	"testing"
)

// nearest16 rounds f exactly (big.Float, ties to even) to a float format with
// the given exponent and mantissa widths, returning the rounded value as a
// float64; the independent reference for both 16-bit conversions.
func nearest16(f float32, expBits, manBits int) float64 {
	x := float64(f)
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return x
	}
	bias := 1<<(expBits-1) - 1
	maxExp := bias // largest unbiased exponent of a finite value
	minExp := 1 - bias
	// Quantum at x's binade (or the subnormal quantum below minExp).
	e := math.Ilogb(x)
	if e < minExp {
		e = minExp
	}
	q := new(big.Float).SetMantExp(big.NewFloat(1), e-manBits)
	v := new(big.Float).Quo(big.NewFloat(x), q)
	// Round v to the nearest integer, ties to even.
	fl, _ := v.Int(nil)
	frac := new(big.Float).Sub(v, new(big.Float).SetInt(fl))
	if v.Sign() < 0 {
		frac.Neg(frac)
	}
	c := frac.Cmp(big.NewFloat(0.5))
	if c > 0 || (c == 0 && fl.Bit(0) == 1) {
		if v.Sign() < 0 {
			fl.Sub(fl, big.NewInt(1))
		} else {
			fl.Add(fl, big.NewInt(1))
		}
	}
	r, _ := new(big.Float).Mul(new(big.Float).SetInt(fl), q).Float64()
	maxFinite := (2 - math.Ldexp(1, -manBits)) * math.Ldexp(1, maxExp)
	if math.Abs(r) > maxFinite {
		return math.Copysign(math.Inf(1), r)
	}
	return r
}

func TestHalfRoundTrip(t *testing.T) {
	// Every 16-bit pattern widens and narrows back to itself (NaNs stay NaN).
	for h := 0; h < 1<<16; h++ {
		u := uint16(h)
		if f := BF16ToFloat32(u); math.IsNaN(float64(f)) {
			if g := BF16ToFloat32(Float32ToBF16(f)); !math.IsNaN(float64(g)) {
				t.Fatalf("bf16 %#04x: NaN narrowed to %v", u, g)
			}
		} else if got := Float32ToBF16(f); got != u {
			t.Fatalf("bf16 %#04x -> %v -> %#04x", u, f, got)
		}
		if f := F16ToFloat32(u); math.IsNaN(float64(f)) {
			if g := F16ToFloat32(Float32ToF16(f)); !math.IsNaN(float64(g)) {
				t.Fatalf("f16 %#04x: NaN narrowed to %v", u, g)
			}
		} else if got := Float32ToF16(f); got != u {
			t.Fatalf("f16 %#04x -> %v -> %#04x", u, f, got)
		}
	}
}

func TestHalfRounding(t *testing.T) {
	vals := []float32{1, -1, 0.1, 1.0 / 3, 65504, 65519.99, 65520, 1e-5, 6e-8, 3e-8, 2.9e-8, 1e30, -2.5e-39, 3.14159265,
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.Float32frombits(0x3f80c000)}
	// Plus a deterministic sweep of bit patterns.
	for b := uint32(0x00000001); b < 0x7f800000; b += 0x00fff3a7 {
		vals = append(vals, math.Float32frombits(b), -math.Float32frombits(b))
	}
	for _, f := range vals {
		if want, got := nearest16(f, 8, 7), float64(BF16ToFloat32(Float32ToBF16(f))); want != got {
			t.Errorf("bf16(%g) = %g, want %g", f, got, want)
		}
		if want, got := nearest16(f, 5, 10), float64(F16ToFloat32(Float32ToF16(f))); want != got {
			t.Errorf("f16(%g) = %g, want %g", f, got, want)
		}
	}
}
