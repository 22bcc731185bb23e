package main

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestPairedBootstrap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	noise := make([]float64, 400)
	for i := range noise {
		noise[i] = r.NormFloat64()
	}
	shifted := func(c float64) []float64 {
		out := make([]float64, len(noise))
		for i, x := range noise {
			out[i] = x + c
		}
		return out
	}
	// A difference whose sentences disagree in sign: d[i] = ±1 with mean 0.
	alt := make([]float64, 400)
	for i := range alt {
		alt[i] = float64(1 - 2*(i%2))
	}
	for _, tc := range []struct {
		name         string
		a, b         []float64
		mean         float64
		excludesZero bool
		maxWidth     float64
	}{
		{"identical", noise, noise, 0, false, 1e-12},
		// Pairing removes the shared noise: a constant shift is exact.
		{"constant shift", shifted(0.25), noise, 0.25, true, 1e-12},
		// ±1 differences: standard error 1/√400 = 0.05, interval ≈ ±0.098.
		{"sign-mixed", alt, make([]float64, 400), 0, false, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := pairedBootstrap(tc.a, tc.b, bootstrapResamples, 1)
			if math.Abs(d.Mean-tc.mean) > 1e-12 {
				t.Errorf("mean %g, want %g", d.Mean, tc.mean)
			}
			if d.Lo > d.Mean || d.Hi < d.Mean {
				t.Errorf("interval [%g, %g] does not contain the mean %g", d.Lo, d.Hi, d.Mean)
			}
			if got := d.Lo > 0 || d.Hi < 0; got != tc.excludesZero {
				t.Errorf("interval [%g, %g] excludes 0: %v, want %v", d.Lo, d.Hi, got, tc.excludesZero)
			}
			if d.Hi-d.Lo > tc.maxWidth {
				t.Errorf("interval width %g > %g", d.Hi-d.Lo, tc.maxWidth)
			}
		})
	}
	// The ±1 case's interval is the normal one, ±1.96 standard errors,
	// within the bootstrap's own resampling error.
	d := pairedBootstrap(alt, make([]float64, 400), bootstrapResamples, 1)
	if w := (d.Hi - d.Lo) / 2; math.Abs(w-1.96*0.05) > 0.015 {
		t.Errorf("half width %g, want about %g", w, 1.96*0.05)
	}
	// Seeded: the same seed gives the same interval.
	if e := pairedBootstrap(alt, make([]float64, 400), bootstrapResamples, 1); e != d {
		t.Errorf("not reproducible: %v then %v", d, e)
	}
	if z := pairedBootstrap(nil, nil, 10, 1); z != (diffCI{}) {
		t.Errorf("empty input: %v", z)
	}
}

func TestPairedBootstrapLengthMismatchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for scores of different lengths")
		}
	}()
	pairedBootstrap([]float64{1, 2}, []float64{1}, 10, 1)
}
