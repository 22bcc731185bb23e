package main

import (
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/rl/metrics"
)

// Made-up fold results (a NaN among them, as a failed Platt fit gives).
// The sweep itself trains the finance-risk members and is run by hand.
var (
	madeUpAUC  = [][]float64{{0.78, 0.74, 0.80}, {0.77, 0.75, 0.79}, {0.76, math.NaN(), 0.81}, {0.79, 0.76, 0.78}}
	madeUpCost = [][]float64{{0.55, 0.60, 0.50}, {0.56, 0.58, 0.52}, {0.60, 0.61, 0.57}, {0.54, 0.59, 0.53}}
)

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 500 {
		t.Errorf("%s: image of %v, want 16 x 10 cm at 144 dpi", path, b)
	}
	return img
}

// TestResults checks the Results cell: every plot it links is written into
// the output folder (created when missing), each method's row is there,
// and the best method is the one with the highest mean AUC.
func TestResults(t *testing.T) {
	out := filepath.Join(t.TempDir(), "new", "dir")
	md, best, err := results(out, madeUpAUC, madeUpCost)
	if err != nil {
		t.Fatal(err)
	}
	links := regexp.MustCompile(`!\[[^]]*\]\(([^)]+)\)`).FindAllStringSubmatch(md, -1)
	if len(links) != 2 {
		t.Fatalf("%d plots linked, want auc.png and cost.png:\n%s", len(links), md)
	}
	for _, l := range links {
		decodePNG(t, filepath.Join(out, l[1]))
	}
	for _, m := range methods {
		if !strings.Contains(md, "| "+m+" |") {
			t.Errorf("no row for %s:\n%s", m, md)
		}
	}
	// Means of the AUCs: 0.7733, 0.77, NaN, 0.7767. A NaN never wins.
	if methods[best] != "stacking" {
		t.Errorf("best method %q, want stacking", methods[best])
	}
}

// TestFoldPlot checks the plot itself: the y axis is labelled, and each
// method's line is drawn in its own colour (metrics.Palette, in method
// order), all of them present in the image.
func TestFoldPlot(t *testing.T) {
	p, err := newFoldPlot("AUC per test fold", "AUC", madeUpAUC)
	if err != nil {
		t.Fatal(err)
	}
	if p.Y.Label.Text != "AUC" || p.X.Label.Text == "" {
		t.Errorf("axis labels x %q y %q", p.X.Label.Text, p.Y.Label.Text)
	}
	path := filepath.Join(t.TempDir(), "auc.png")
	if err := foldPlot(path, "AUC per test fold", "AUC", madeUpAUC); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, path)
	seen := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}]++
		}
	}
	for k := range methods {
		c := color.RGBAModel.Convert(metrics.Palette[k]).(color.RGBA)
		if seen[c] < 50 {
			t.Errorf("method %d (%s): colour %v drawn on %d pixels", k, methods[k], c, seen[c])
		}
	}
}
