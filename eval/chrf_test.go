package eval

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestChrF checks ChrF against values derived by hand from sacreBLEU's
// definition (per-order clipped matches, precision and recall averaged
// over the orders both strings have, F with β = 2); the derivations are in
// the comments.
func TestChrF(t *testing.T) {
	for _, tc := range []struct {
		name, hyp, ref string
		want           float64
	}{
		{"identical", "abc", "abc", 1},
		// n=1: P 2/2, R 2/3; n=2: P 1/1, R 1/2; no trigram in hyp.
		// P = 1, R = 7/12: F = 5·(7/12) / (4 + 7/12) = 7/11.
		{"short hypothesis", "ab", "abc", 7.0 / 11},
		// "thecat" against "thehat": matches 5/6, 3/5, 1/4, 0, 0, 0 of
		// six n-grams, five, four, ... on both sides, so P = R = F =
		// (5/6 + 3/5 + 1/4)/6 = 101/360; spaces do not count.
		{"white space removed", "the cat", "the  hat", 101.0 / 360},
		// Code points, not bytes: n=1 P 1 R 3/6, n=2 P 1 R 2/5, n=3 P 1
		// R 1/4: R = 23/60, F = 5·(23/60) / (4 + 23/60) = 115/263.
		{"Chinese", "自由度", "自由度的矩阵", 115.0 / 263},
		// Clipping: n=1 P 2/4 R 1; n=2 P 1/3 R 1. P = 5/12:
		// F = 5·(5/12) / (4·5/12 + 1) = 25/32.
		{"repeated n-grams clipped", "aaaa", "aa", 25.0 / 32},
		{"disjoint", "abc", "xyz", 0},
		{"empty hypothesis", "", "abc", 0},
		{"both empty", "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ChrF(tc.hyp, tc.ref)
			if !cmp.Equal(got, tc.want, cmpopts.EquateApprox(0, 1e-12)) {
				t.Errorf("ChrF(%q, %q) = %.12f, want %.12f", tc.hyp, tc.ref, got, tc.want)
			}
		})
	}
}

// TestChrFNBeta checks the weighting: β = 1 is the harmonic mean of P and
// R. "ab" against "abc" (P = 1, R = 7/12) gives 2·(7/12)/(1 + 7/12) = 14/19.
func TestChrFNBeta(t *testing.T) {
	if got, want := ChrFN("ab", "abc", 6, 1), 14.0/19; !cmp.Equal(got, want, cmpopts.EquateApprox(0, 1e-12)) {
		t.Errorf("ChrFN β=1 = %v, want %v", got, want)
	}
	// Orders up to 1 only: P 2/2, R 2/3: F2 = 5·(2/3)/(4 + 2/3) = 5/7.
	if got, want := ChrFN("ab", "abc", 1, 2), 5.0/7; !cmp.Equal(got, want, cmpopts.EquateApprox(0, 1e-12)) {
		t.Errorf("ChrFN n≤1 = %v, want %v", got, want)
	}
}

func ExampleChrF() {
	fmt.Printf("%.4f\n", ChrF("the cat sat", "the cat sat"))
	fmt.Printf("%.4f\n", ChrF("自由度", "自由度的矩阵"))
	// Output:
	// 1.0000
	// 0.4373
}
