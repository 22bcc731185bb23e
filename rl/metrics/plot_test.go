package metrics

import (
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func TestNiceTicks(t *testing.T) {
	for _, tt := range []struct {
		lo, hi float64
		want   []string // labelled ticks
		minors int
	}{
		{0, 300, []string{"0", "50", "100", "150", "200", "250", "300"}, 24},
		{-0.36, 1.26, []string{"-0.25", "0.00", "0.25", "0.50", "0.75", "1.00", "1.25"}, 26},
		{0, 1, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}, 15},
		{3, 17, []string{"4", "6", "8", "10", "12", "14", "16"}, 22},
		{0, 2.5e7, []string{"0", "5e+06", "1e+07", "1.5e+07", "2e+07", "2.5e+07"}, 20},
		{1e-5, 7e-5, []string{"1e-05", "2e-05", "3e-05", "4e-05", "5e-05", "6e-05", "7e-05"}, 24},
		{1, 5, []string{"1", "2", "3", "4", "5"}, 16},
		{2, 2, []string{"2"}, 0},
	} {
		var labels []string
		minors := 0
		for _, tk := range (NiceTicks{}).Ticks(tt.lo, tt.hi) {
			if tk.Value < tt.lo-1e-12 || tk.Value > tt.hi+1e-12 {
				t.Errorf("[%g, %g]: tick %g outside the range", tt.lo, tt.hi, tk.Value)
			}
			if tk.IsMinor() {
				minors++
			} else {
				labels = append(labels, tk.Label)
			}
		}
		if !cmp.Equal(labels, tt.want) || minors != tt.minors {
			t.Errorf("[%g, %g]: labels %q and %d minor ticks, want %q and %d", tt.lo, tt.hi, labels, minors, tt.want, tt.minors)
		}
	}
}

// TestPlotLegendOutside draws curves that fill the axes and checks that each
// series' legend thumbnail lies wholly right of the x axis's end (in the
// column beside the data, where gonum's own legend overlaps the data area),
// that its curve is drawn over the axes, and that the series' colours are
// distinct.
func TestPlotLegendOutside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	var ss []Series
	for k := range 3 {
		s := Series{Name: []string{"reward", "kl", "entropy"}[k]}
		for i := 0; i <= 50; i++ {
			s.X = append(s.X, float64(i))
			s.Y = append(s.Y, float64(k)+math.Sin(float64(i)/5))
		}
		ss = append(ss, s)
	}
	if err := PlotPNG(path, "t", "step", "", ss...); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, path)
	b := img.Bounds()
	// The x axis is the lowest row with a long run of dark pixels (the
	// line is anti-aliased); its end is that row's rightmost dark pixel.
	axisEnd := -1
	for y := b.Max.Y - 1; y >= b.Min.Y && axisEnd < 0; y-- {
		n, last := 0, -1
		for x := b.Min.X; x < b.Max.X; x++ {
			if r, g, b, _ := img.At(x, y).RGBA(); r>>8 < 100 && g>>8 < 100 && b>>8 < 100 {
				n, last = n+1, x
			}
		}
		if n > b.Dx()/2 {
			axisEnd = last
		}
	}
	if axisEnd < 0 {
		t.Fatal("no x axis found")
	}
	// A legend entry's thumbnail is an 18-point (36-pixel) line: the
	// whole of it must lie right of the axes.
	for k := range ss {
		thumb, left := 0, 0
		for y := b.Min.Y; y < b.Max.Y; y++ {
			right := 0
			for x := b.Min.X; x < b.Max.X; x++ {
				if isColor(img.At(x, y), Palette[k]) {
					if x > axisEnd {
						right++
					} else {
						left++
					}
				}
			}
			thumb = max(thumb, right)
		}
		if thumb < 30 || left == 0 {
			t.Errorf("series %d: a run of %d pixels of its colour right of the axes (want a 36-pixel legend thumbnail), %d over them", k, thumb, left)
		}
	}
	seen := map[color.RGBA]bool{}
	for _, c := range Palette {
		seen[color.RGBAModel.Convert(c).(color.RGBA)] = true
	}
	if len(seen) != len(Palette) {
		t.Error("Palette repeats a colour")
	}
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func isColor(c, want color.Color) bool {
	r, g, b, _ := c.RGBA()
	wr, wg, wb, _ := want.RGBA()
	return r>>8 == wr>>8 && g>>8 == wg>>8 && b>>8 == wb>>8
}

// TestPlotLabels: the y axis is labelled with the series names when the
// caller gives no label, the legend lists several series (one needs none),
// and both axes use NiceTicks.
func TestPlotLabels(t *testing.T) {
	a := Series{Name: "reward", X: []float64{0, 1}, Y: []float64{0, 1}}
	b := Series{Name: "kl", X: []float64{0, 1}, Y: []float64{1, 0}}
	for _, tt := range []struct {
		ylabel string
		series []Series
		want   string
		legend bool
	}{
		{"", []Series{a}, "reward", false},
		{"", []Series{a, b}, "reward, kl", true},
		{"nats", []Series{b}, "nats", false},
	} {
		p, err := linePlot("t", "step", tt.ylabel, tt.series)
		if err != nil {
			t.Fatal(err)
		}
		if p.Y.Label.Text != tt.want {
			t.Errorf("y label %q, want %q", p.Y.Label.Text, tt.want)
		}
		if r := p.Legend.Rectangle(draw.New(vgimg.New(100, 100))); (r.Max.X > r.Min.X) != tt.legend {
			t.Errorf("%d series: legend %v, want %v", len(tt.series), r, tt.legend)
		}
		_, xn := p.X.Tick.Marker.(NiceTicks)
		_, yn := p.Y.Tick.Marker.(NiceTicks)
		if !xn || !yn {
			t.Errorf("tickers %T and %T, want NiceTicks", p.X.Tick.Marker, p.Y.Tick.Marker)
		}
	}
}

// TestPlotOnePoint: a series of a single point (a run of one step) is
// drawn as a dot of its colour, beside a curve of several points.
func TestPlotOnePoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	one := Series{Name: "one step", X: []float64{1}, Y: []float64{0.5}}
	many := Series{Name: "curve", X: []float64{0, 1, 2}, Y: []float64{0, 1, 0.2}}
	if err := PlotPNG(path, "t", "step", "reward", one, many); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, path)
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if isColor(img.At(x, y), Palette[0]) {
				n++
			}
		}
	}
	// A dot of 3 points' radius at 144 dpi is about 110 pixels, drawn
	// twice (the data and the legend).
	if n < 100 {
		t.Errorf("%d pixels of the one-point series' colour, want a dot", n)
	}
}

// TestPlotLongTitle: a title wider than the axes beside the legend column
// is drawn whole, within the image.
func TestPlotLongTitle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	a := Series{Name: "small model (translation quality)", X: []float64{0, 1}, Y: []float64{0, 1}}
	b := Series{Name: "larger model (term detection)", X: []float64{0, 1}, Y: []float64{1, 0}}
	if err := PlotPNG(path, "GRPO training reward per step (each model's own grader)", "step", "reward", a, b); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, path)
	bd := img.Bounds()
	lo, hi := bd.Max.X, -1
	for y := bd.Min.Y; y < bd.Min.Y+35; y++ { // the title's rows
		for x := bd.Min.X; x < bd.Max.X; x++ {
			if r, g, b, _ := img.At(x, y).RGBA(); r>>8 < 100 && g>>8 < 100 && b>>8 < 100 {
				lo, hi = min(lo, x), max(hi, x)
			}
		}
	}
	if hi < 0 || lo < 4 || hi > bd.Max.X-5 || hi-lo < bd.Dx()/2 {
		t.Errorf("title drawn over x in [%d, %d] of an image %d wide, want it whole inside", lo, hi, bd.Dx())
	}
}
