package metrics

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot draws the named metrics against the step into a PNG file (relative
// paths are under Dir). The y axis is labelled with the metric names.
func (l *Logger) Plot(path, title string, keys ...string) error {
	if !filepath.IsAbs(path) && l.opt.Dir != "" {
		path = filepath.Join(l.opt.Dir, path)
	}
	var series []Series
	for _, k := range keys {
		x, y := l.Series(k)
		series = append(series, Series{Name: k, X: x, Y: y})
	}
	return PlotPNG(path, title, "step", strings.Join(keys, ", "), series...)
}

// Series is one named curve.
type Series struct {
	Name string
	X, Y []float64
}

// PlotPNG draws curves into a 16×10 cm PNG: each series in its own Palette
// colour, the legend beside the axes rather than over the curves, and
// NiceTicks on both axes. An empty ylabel is the series' names. NaN and
// ±Inf points are left out; a series of one point is drawn as a dot.
func PlotPNG(path, title, xlabel, ylabel string, series ...Series) error {
	p, err := linePlot(title, xlabel, ylabel, series)
	if err != nil {
		return err
	}
	return SavePNG(p, path, 16*vg.Centimeter, 10*vg.Centimeter)
}

// linePlot builds PlotPNG's plot.
func linePlot(title, xlabel, ylabel string, series []Series) (*plot.Plot, error) {
	p := plot.New()
	Style(p)
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	if ylabel == "" {
		var names []string
		for _, s := range series {
			names = append(names, s.Name)
		}
		p.Y.Label.Text = strings.Join(names, ", ")
	}
	p.Add(plotter.NewGrid())
	for i, s := range series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("metrics: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		xy := make(plotter.XYs, 0, len(s.X))
		for i := range s.X {
			if math.IsNaN(s.Y[i]) || math.IsInf(s.Y[i], 0) || math.IsNaN(s.X[i]) || math.IsInf(s.X[i], 0) {
				continue
			}
			xy = append(xy, plotter.XY{X: s.X[i], Y: s.Y[i]})
		}
		if len(xy) == 0 {
			continue
		}
		line, err := plotter.NewLine(xy)
		if err != nil {
			return nil, fmt.Errorf("metrics: plot %q: %w", s.Name, err)
		}
		StyleLine(&line.LineStyle, i)
		p.Add(line)
		var thumb plot.Thumbnailer = line
		if len(xy) == 1 {
			// A line through one point draws nothing: a dot marks it.
			dot, err := plotter.NewScatter(xy)
			if err != nil {
				return nil, fmt.Errorf("metrics: plot %q: %w", s.Name, err)
			}
			dot.GlyphStyle = draw.GlyphStyle{Color: Palette[i%len(Palette)], Radius: vg.Points(3), Shape: draw.CircleGlyph{}}
			p.Add(dot)
			thumb = dot
		}
		if len(series) > 1 {
			p.Legend.Add(s.Name, thumb)
		}
	}
	return p, nil
}

// Palette holds the colours of successive series: Tableau 10, ten hues
// chosen to stay apart from each other on white, in print and for most
// readers with a colour-vision deficiency.
var Palette = []color.Color{
	color.RGBA{0x4e, 0x79, 0xa7, 0xff}, // blue
	color.RGBA{0xf2, 0x8e, 0x2b, 0xff}, // orange
	color.RGBA{0xe1, 0x57, 0x59, 0xff}, // red
	color.RGBA{0x76, 0xb7, 0xb2, 0xff}, // teal
	color.RGBA{0x59, 0xa1, 0x4f, 0xff}, // green
	color.RGBA{0xed, 0xc9, 0x48, 0xff}, // yellow
	color.RGBA{0xb0, 0x7a, 0xa1, 0xff}, // purple
	color.RGBA{0xff, 0x9d, 0xa7, 0xff}, // pink
	color.RGBA{0x9c, 0x75, 0x5f, 0xff}, // brown
	color.RGBA{0xba, 0xb0, 0xac, 0xff}, // grey
}

// dashes tell apart series that share a colour, beyond len(Palette).
var dashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(8), vg.Points(3), vg.Points(2), vg.Points(3)}}

// StyleLine gives series i its colour (Palette[i mod 10]), a solid line for
// the first ten and dashes after, and a width that reads at report size.
func StyleLine(s *draw.LineStyle, i int) {
	s.Color = Palette[i%len(Palette)]
	s.Dashes = dashes[(i/len(Palette))%len(dashes)]
	s.Width = vg.Points(1.5)
}

// Style sets the fonts, the NiceTicks tickers and a light grid colour of p,
// the look every plot of the repository shares.
func Style(p *plot.Plot) {
	p.Title.TextStyle.Font.Size = 13
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle.Font.Size = 11
		ax.Tick.Label.Font.Size = 10
		ax.Tick.Marker = NiceTicks{}
	}
	p.Legend.TextStyle.Font.Size = 10
	p.Legend.ThumbnailWidth = vg.Points(18)
	p.Legend.Padding = vg.Points(3)
}

// SavePNG writes p as a w×h PNG at 144 dots per inch. The legend, when p
// has one, is drawn in a column to the right of the plot, outside the
// data, with its entries at the top; the title is then centred over the
// whole image.
func SavePNG(p *plot.Plot, path string, w, h vg.Length) error {
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(144))
	dc := draw.New(img)
	legend := p.Legend
	r := legend.Rectangle(dc)
	if width := r.Max.X - r.Min.X; width > 0 {
		pad := vg.Points(8)
		p.Legend = plot.NewLegend() // p.Draw draws no legend
		area := dc
		if title := p.Title.Text; title != "" {
			// The title is centred over the whole image, legend column
			// included, so that a long one is not cut at the left.
			size := p.Title.TextStyle.Rectangle(title).Size()
			x := max(dc.Center().X, dc.Min.X+size.X/2+pad)
			dc.FillText(p.Title.TextStyle, vg.Point{X: x, Y: dc.Max.Y + p.Title.TextStyle.FontExtents().Descent}, title)
			area = draw.Crop(dc, 0, 0, 0, -(size.Y + p.Title.Padding))
			p.Title.Text = ""
			defer func() { p.Title.Text = title }()
		}
		p.Draw(draw.Crop(area, 0, -(width + 2*pad), 0, 0))
		p.Legend = legend
		legend.Top, legend.Left = true, true
		strip := draw.Crop(area, w-width-pad, -pad, 0, -pad)
		legend.Draw(strip)
	} else {
		p.Draw(dc)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("metrics: save %s: %w", path, err)
	}
	return nil
}

// NiceTicks is a plot.Ticker that labels about N (6 when zero) round
// values, 1, 2, 2.5 or 5 times a power of ten apart, each with the decimals
// the spacing needs and no more, and puts unlabelled minor ticks between
// them. (gonum's DefaultTicks aims at three labels.)
type NiceTicks struct{ N int }

// Ticks implements plot.Ticker.
func (t NiceTicks) Ticks(lo, hi float64) []plot.Tick {
	n := t.N
	if n <= 0 {
		n = 6
	}
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return []plot.Tick{{Value: lo, Label: tickLabel(lo, 0, false)}}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	// the round step whose label count is nearest n
	var step float64
	var minor int
	best := math.Inf(1)
	for _, c := range []struct {
		f     float64
		minor int
	}{{1, 5}, {2, 4}, {2.5, 5}, {5, 5}, {10, 5}} {
		st := c.f * mag
		d := math.Abs((hi-lo)/st - float64(n))
		if c.f == 2.5 {
			d++ // its labels need a digit more (5.0, 7.5): only when clearly nearer n
		}
		if d <= best { // a tie goes to the larger step: fewer labels and decimals
			best, step, minor = d, st, c.minor
		}
	}
	e := int(math.Floor(math.Log10(step) + 1e-9))
	extra := 0
	if frac := step / math.Pow(10, float64(e)); math.Abs(frac-math.Round(frac)) > 1e-9 {
		extra = 1 // 2.5 × 10^e needs a digit more than 10^e
	}
	decimals := max(0, extra-e)
	big := math.Max(math.Abs(lo), math.Abs(hi)) >= 1e6 || step < 1e-4
	first := math.Ceil(lo/step - 1e-9)
	var ticks []plot.Tick
	for k := first; ; k++ {
		v := k * step
		if v > hi+step*1e-9 {
			break
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: tickLabel(v, decimals, big)})
	}
	ms := step / float64(minor)
	for k := math.Ceil(lo/ms - 1e-9); ; k++ {
		v := k * ms
		if v > hi+ms*1e-9 {
			break
		}
		if r := math.Mod(math.Abs(k), float64(minor)); r > 1e-9 && math.Abs(r-float64(minor)) > 1e-9 {
			ticks = append(ticks, plot.Tick{Value: v})
		}
	}
	return ticks
}

func tickLabel(v float64, decimals int, big bool) string {
	if v == 0 {
		v = 0 // never "-0"
	}
	if big {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

var _ plot.Ticker = NiceTicks{}
