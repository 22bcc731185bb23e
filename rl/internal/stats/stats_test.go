package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestMeanStd(t *testing.T) {
	if m, s := MeanStd(nil); m != 0 || s != 0 {
		t.Fatalf("empty: %g %g", m, s)
	}
	// Population std of {2,4,4,4,5,5,7,9} is exactly 2.
	if m, s := MeanStd([]float64{2, 4, 4, 4, 5, 5, 7, 9}); m != 5 || s != 2 {
		t.Fatalf("got %g %g, want 5 2", m, s)
	}
	// Shift invariance of the std and equivariance of the mean, on random data.
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float64, 100)
	y := make([]float64, len(x))
	for i := range x {
		x[i] = rng.NormFloat64()
		y[i] = 3*x[i] + 1e3
	}
	mx, sx := MeanStd(x)
	my, sy := MeanStd(y)
	if math.Abs(my-(3*mx+1e3)) > 1e-9 || math.Abs(sy-3*sx) > 1e-9 {
		t.Fatalf("affine: mean %g→%g, std %g→%g", mx, my, sx, sy)
	}
}
