package main

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestFoldPlot draws the report's per-fold plot from made-up fold results
// (a NaN among them, as a failed Platt fit gives) and checks that a PNG of
// report size comes out. The sweep itself trains the finance-risk members
// and is run by hand.
func TestFoldPlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auc.png")
	vals := [][]float64{{0.78, 0.74, 0.80}, {0.77, 0.75, 0.79}, {0.76, math.NaN(), 0.81}, {0.79, 0.73, 0.78}}
	if err := foldPlot(path, "AUC per test fold", "AUC", vals); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 500 {
		t.Errorf("image of %v, want 16 x 10 cm at 144 dpi", b)
	}
	if err := foldPlot(filepath.Join(t.TempDir(), "no", "dir", "x.png"), "t", "y", vals); err != nil {
		t.Errorf("missing output folders are created: %v", err)
	}
}
