package dashboard

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Palette is the Okabe–Ito palette (Okabe and Ito 2008), which readers with
// any common form of colour blindness can tell apart; series take its
// colours in order. The yellow comes last: on white it is the faintest.
var Palette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442"}

// DefaultMaxPoints is how many points a series draws at most unless
// Chart.MaxPoints says otherwise.
const DefaultMaxPoints = 2000

// Series is one line of a Chart.
type Series struct {
	Name string
	// X and Y are the points; a NaN Y is a gap in the line.
	X, Y []float64
	// Lo and Hi, when set (as long as X), draw a band around the line,
	// such as mean ± standard deviation.
	Lo, Hi []float64
	// BandName names the band in the legend (default "± std").
	BandName string
	// Color is the series' colour (default: Palette by position).
	Color string
}

// Range is an interval of an axis; the zero Range means "from the data".
type Range struct{ Min, Max float64 }

func (r Range) valid() bool { return r.Max > r.Min }

// Chart is a line chart that WriteSVG draws as one <svg> element: a title,
// a legend above the plot area (never over the data), axes with ticks and
// labels, and one <circle> per point carrying the point's x as data-step.
type Chart struct {
	Title          string
	XLabel, YLabel string // axis labels, with units
	// Width and Height are the plot area's size in SVG user units
	// (default 484 × 130); the margins for the title, legend, ticks and
	// labels come on top.
	Width, Height float64
	Series        []Series
	// X and Y fix the axes' ranges (the zero Range: from the data).
	X, Y Range
	// ZeroY makes the Y range include 0.
	ZeroY bool
	// Stacked draws each series on top of those before it, its area
	// filled; the series must share X.
	Stacked bool
	// Agent and Metric become the <svg>'s data-agent and data-metric.
	Agent, Metric string
	// MaxPoints caps the points per series (0: DefaultMaxPoints): longer
	// series are thinned evenly, their first and last points kept.
	MaxPoints int

	// legendRows is the least number of rows the legend takes, so that
	// charts side by side align their plot areas.
	legendRows int
}

// Layout of the margins around the plot area, in SVG user units.
const (
	marginLeft   = 62.0
	marginRight  = 14.0
	marginBottom = 40.0
	titleHeight  = 22.0
	legendRow    = 17.0
	fontSize     = 11.0
	charWidth    = 6.4 // a generous average advance at fontSize
)

// WriteSVG writes the chart as an <svg> element.
func (c *Chart) WriteSVG(w io.Writer) error {
	bw := bufio.NewWriter(w)
	c.write(bw)
	return bw.Flush()
}

// String returns the chart's SVG.
func (c *Chart) String() string {
	var b strings.Builder
	c.write(&b)
	return b.String()
}

type stringWriter interface {
	io.Writer
	WriteString(string) (int, error)
}

func (c *Chart) write(w stringWriter) {
	pw, ph := c.Width, c.Height
	if pw <= 0 {
		pw = 484
	}
	if ph <= 0 {
		ph = 130
	}
	series := c.prepared()
	width := marginLeft + pw + marginRight
	legend := c.legendItems(series)
	rows := max(layoutLegend(legend, width-marginLeft), c.legendRows)
	top := titleHeight + float64(rows)*legendRow + 10
	height := top + ph + marginBottom
	x0, x1, y0, y1 := marginLeft, marginLeft+pw, top+ph, top

	xr, yr := c.ranges(series)
	const inset = 6 // keeps edge markers inside the plot area
	sx := func(x float64) float64 { return x0 + inset + (x-xr.Min)/(xr.Max-xr.Min)*(pw-2*inset) }
	sy := func(y float64) float64 { return y0 - (y-yr.Min)/(yr.Max-yr.Min)*ph }

	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %s %s" role="img" aria-label="%s"`,
		num(width), num(height), esc(c.Title))
	if c.Agent != "" {
		fmt.Fprintf(w, ` data-agent="%s"`, esc(c.Agent))
	}
	if c.Metric != "" {
		fmt.Fprintf(w, ` data-metric="%s"`, esc(c.Metric))
	}
	fmt.Fprintf(w, ` font-family="DejaVu Sans, Verdana, system-ui, sans-serif" font-size="%s">`, num(fontSize))
	fmt.Fprintf(w, `<title>%s</title>`, esc(c.Title))
	fmt.Fprintf(w, `<text x="%s" y="15" font-size="13" font-weight="bold" fill="#222">%s</text>`, num(x0), esc(c.Title))
	c.writeLegend(w, legend, x0, titleHeight+6, width-marginLeft)

	// Grid, ticks and axes.
	w.WriteString(`<g class="axes" stroke="#ccc" stroke-width="1">`)
	yticks := ticks(yr.Min, yr.Max, 5, false)
	for _, t := range yticks {
		fmt.Fprintf(w, `<line x1="%s" x2="%s" y1="%s" y2="%s"/>`, num(x0), num(x1), num(sy(t)), num(sy(t)))
	}
	fmt.Fprintf(w, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#555"/>`, num(x0), num(x1), num(y0), num(y0))
	fmt.Fprintf(w, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#555"/>`, num(x0), num(x0), num(y0), num(y1))
	xticks := ticks(xr.Min, xr.Max, 6, true)
	for _, t := range xticks {
		fmt.Fprintf(w, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#555"/>`, num(sx(t)), num(sx(t)), num(y0), num(y0+4))
	}
	w.WriteString(`</g><g class="ticks" fill="#333">`)
	ystep, xstep := tickStep(yticks), tickStep(xticks)
	for _, t := range yticks {
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`, num(x0-5), num(sy(t)), formatTick(t, ystep))
	}
	for _, t := range xticks {
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle">%s</text>`, num(sx(t)), num(y0+16), formatTick(t, xstep))
	}
	w.WriteString(`</g>`)
	fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle" fill="#333">%s</text>`, num((x0+x1)/2), num(height-6), esc(c.XLabel))
	fmt.Fprintf(w, `<text transform="translate(14 %s) rotate(-90)" text-anchor="middle" fill="#333">%s</text>`, num((y0+y1)/2), esc(c.YLabel))

	// Data: bands and stacked areas first, then lines, then markers, so
	// that no fill hides a line or a marker.
	for _, s := range series {
		if s.lo != nil {
			fmt.Fprintf(w, `<path class="band" d="%s" fill="%s" fill-opacity="%s" stroke="none"/>`,
				areaPath(s.X, s.lo, s.hi, sx, sy), s.Color, num(s.fill))
		}
	}
	for _, s := range series {
		fmt.Fprintf(w, `<path class="line" d="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"/>`,
			linePath(s.X, s.top, sx, sy), s.Color)
	}
	for _, s := range series {
		fmt.Fprintf(w, `<g class="points" data-series="%s" fill="%s">`, esc(s.Name), s.Color)
		for i, x := range s.X {
			if isNaN(s.top[i]) {
				continue
			}
			fmt.Fprintf(w, `<circle class="pt" cx="%s" cy="%s" r="3" data-step="%d"><title>step %d · %s %s</title></circle>`,
				num(sx(x)), num(sy(s.top[i])), int64(x), int64(x), esc(s.Name), strconv.FormatFloat(s.Y[i], 'g', 4, 64))
		}
		w.WriteString(`</g>`)
	}
	if !hasPoints(series) {
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle" fill="#666">no data yet</text>`, num((x0+x1)/2), num((y0+y1)/2))
	}
	w.WriteString(`</svg>`)
}

// drawn is a series ready to draw: thinned, its colour set, and for a
// stacked chart its line (top) and area (lo, hi) accumulated.
type drawn struct {
	Series
	top, lo, hi []float64
	fill        float64
}

func (c *Chart) prepared() []drawn {
	maxPts := c.MaxPoints
	if maxPts <= 0 {
		maxPts = DefaultMaxPoints
	}
	out := make([]drawn, len(c.Series))
	var below []float64
	for i, s := range c.Series {
		keep := thinIndex(len(s.X), maxPts)
		s.X, s.Y, s.Lo, s.Hi = pick(s.X, keep), pick(s.Y, keep), pick(s.Lo, keep), pick(s.Hi, keep)
		if s.Color == "" {
			s.Color = Palette[i%len(Palette)]
		}
		d := drawn{Series: s, top: s.Y, fill: 0.18}
		if len(s.Lo) == len(s.X) && len(s.Hi) == len(s.X) {
			d.lo, d.hi = s.Lo, s.Hi
		}
		if c.Stacked {
			// top is the line (a gap where the series has no value); the
			// area spans from the layers below to below + Y.
			if below == nil {
				below = make([]float64, len(s.X))
			}
			d.lo, d.hi, d.top, d.fill = make([]float64, len(s.X)), make([]float64, len(s.X)), nanSlice(len(s.X)), 0.35
			for j := range s.X {
				b := 0.0
				if j < len(below) {
					b = below[j]
				}
				d.lo[j], d.hi[j] = b, b
				if j < len(s.Y) && !isNaN(s.Y[j]) {
					d.hi[j] = b + s.Y[j]
					d.top[j] = d.hi[j]
				}
			}
			below = d.hi
		}
		out[i] = d
	}
	return out
}

// ranges are the axes' ranges: as set, or from the data, with room for a
// flat or one-point series and Y extended to round ticks.
func (c *Chart) ranges(series []drawn) (xr, yr Range) {
	xr, yr = c.X, c.Y
	if !xr.valid() {
		xr = Range{math.Inf(1), math.Inf(-1)}
		for _, s := range series {
			for i, x := range s.X {
				if !isNaN(s.top[i]) {
					xr.Min, xr.Max = min(xr.Min, x), max(xr.Max, x)
				}
			}
		}
		xr = widen(xr, 1)
	}
	if !yr.valid() {
		yr = Range{math.Inf(1), math.Inf(-1)}
		if c.ZeroY {
			yr = Range{0, 0}
		}
		for _, s := range series {
			for _, v := range [][]float64{s.top, s.lo, s.hi} {
				for _, y := range v {
					if !isNaN(y) && !math.IsInf(y, 0) {
						yr.Min, yr.Max = min(yr.Min, y), max(yr.Max, y)
					}
				}
			}
		}
		yr = widen(yr, math.Max(math.Abs(yr.Max), 1)*0.1)
		step := niceStep((yr.Max - yr.Min) / 4)
		yr = Range{math.Floor(yr.Min/step) * step, math.Ceil(yr.Max/step) * step}
	}
	return xr, yr
}

// legendHeight is how many rows the chart's legend needs.
func (c *Chart) legendHeight() int {
	pw := c.Width
	if pw <= 0 {
		pw = 484
	}
	return layoutLegend(c.legendItems(c.prepared()), pw+marginRight)
}

// widen makes an empty or one-value range d wide on each side.
func widen(r Range, d float64) Range {
	switch {
	case math.IsInf(r.Min, 1):
		return Range{0, 1}
	case r.Max <= r.Min:
		return Range{r.Min - d, r.Max + d}
	}
	return r
}

// legendItem is one entry of the legend: a line or a band swatch.
type legendItem struct {
	label, color string
	band         bool
	fill         float64
	empty        bool // the series has no point in this chart
}

func (c *Chart) legendItems(series []drawn) []legendItem {
	var items []legendItem
	for _, s := range series {
		empty := !hasPoints([]drawn{s})
		label := s.Name
		if empty {
			label += " (none)"
		}
		if c.Stacked {
			items = append(items, legendItem{label: label, color: s.Color, band: true, fill: 0.6, empty: empty})
			continue
		}
		items = append(items, legendItem{label: label, color: s.Color, empty: empty})
		if s.lo != nil {
			name := s.BandName
			if name == "" {
				name = "± std"
			}
			items = append(items, legendItem{label: name, color: s.Color, band: true, fill: 0.25})
		}
	}
	if len(items) == 1 && !items[0].band && len(c.Series) == 1 {
		return nil // one plain line: the title says what it is
	}
	return items
}

// itemWidth is the room a legend entry takes: its swatch, text and gap.
func itemWidth(it legendItem) float64 {
	w := float64(len([]rune(it.label)))*charWidth + 14
	if !it.empty {
		w += 22
	}
	return w
}

// layoutLegend is how many rows the legend takes in width.
func layoutLegend(items []legendItem, width float64) int {
	if len(items) == 0 {
		return 0
	}
	rows, x := 1, 0.0
	for _, it := range items {
		if x > 0 && x+itemWidth(it) > width {
			rows, x = rows+1, 0
		}
		x += itemWidth(it)
	}
	return rows
}

func (c *Chart) writeLegend(w stringWriter, items []legendItem, left, top, width float64) {
	if len(items) == 0 {
		return
	}
	w.WriteString(`<g class="legend" fill="#222">`)
	x, y := 0.0, top+legendRow/2
	for _, it := range items {
		if x > 0 && x+itemWidth(it) > width {
			x, y = 0, y+legendRow
		}
		if it.empty {
			// A series that other agents' charts have: its colour stays
			// reserved, its entry says it has no points here.
			fmt.Fprintf(w, `<text x="%s" y="%s" dominant-baseline="middle" fill="#777">%s</text>`, num(left+x), num(y), esc(it.label))
			x += itemWidth(it)
			continue
		}
		if it.band {
			fmt.Fprintf(w, `<rect x="%s" y="%s" width="18" height="10" fill="%s" fill-opacity="%s"/>`, num(left+x), num(y-5), it.color, num(it.fill))
		} else {
			fmt.Fprintf(w, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s" stroke-width="2"/><circle cx="%s" cy="%s" r="3" fill="%s"/>`,
				num(left+x), num(left+x+18), num(y), num(y), it.color, num(left+x+9), num(y), it.color)
		}
		fmt.Fprintf(w, `<text x="%s" y="%s" dominant-baseline="middle">%s</text>`, num(left+x+22), num(y), esc(it.label))
		x += itemWidth(it)
	}
	w.WriteString(`</g>`)
}

// linePath is the path of y over x, broken at NaNs.
func linePath(x, y []float64, sx, sy func(float64) float64) string {
	var b strings.Builder
	pen := false
	for i := range x {
		if i >= len(y) || isNaN(y[i]) {
			pen = false
			continue
		}
		if pen {
			b.WriteString("L")
		} else {
			b.WriteString("M")
		}
		b.WriteString(num(sx(x[i])) + " " + num(sy(y[i])))
		pen = true
	}
	return b.String()
}

// areaPath is the filled area between lo and hi, one closed path per run
// of points where both are set.
func areaPath(x, lo, hi []float64, sx, sy func(float64) float64) string {
	var b strings.Builder
	for i := 0; i < len(x); {
		if isNaN(lo[i]) || isNaN(hi[i]) {
			i++
			continue
		}
		j := i
		for j < len(x) && !isNaN(lo[j]) && !isNaN(hi[j]) {
			j++
		}
		for k := i; k < j; k++ {
			cmd := "L"
			if k == i {
				cmd = "M"
			}
			b.WriteString(cmd + num(sx(x[k])) + " " + num(sy(hi[k])))
		}
		for k := j - 1; k >= i; k-- {
			b.WriteString("L" + num(sx(x[k])) + " " + num(sy(lo[k])))
		}
		b.WriteString("Z")
		i = j
	}
	return b.String()
}

// thinIndex picks at most m of n indices, evenly spaced, the first and
// last included; nil means all.
func thinIndex(n, m int) []int {
	if n <= m || m < 2 {
		return nil
	}
	keep := make([]int, m)
	for i := range keep {
		keep[i] = int(math.Round(float64(i) * float64(n-1) / float64(m-1)))
	}
	return keep
}

func pick(v []float64, keep []int) []float64 {
	if keep == nil || len(v) == 0 {
		return v
	}
	out := make([]float64, len(keep))
	for i, k := range keep {
		out[i] = v[k]
	}
	return out
}

// niceStep is the 1, 2 or 5 × 10ᵏ nearest above x.
func niceStep(x float64) float64 {
	if x <= 0 || isNaN(x) || math.IsInf(x, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	switch f := x / p; {
	case f <= 1:
		return p
	case f <= 2:
		return 2 * p
	case f <= 5:
		return 5 * p
	}
	return 10 * p
}

// ticks are about n round values in [lo, hi]; integer ones only when
// integer is set.
func ticks(lo, hi float64, n int, integer bool) []float64 {
	step := niceStep((hi - lo) / float64(n))
	if integer {
		step = math.Max(1, math.Round(step))
	}
	var out []float64
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		t := k * step
		if math.Abs(t) < step*1e-9 {
			t = 0
		}
		out = append(out, t)
	}
	return out
}

func tickStep(t []float64) float64 {
	if len(t) < 2 {
		return 1
	}
	return t[1] - t[0]
}

// formatTick writes a tick value with as many decimals as its step needs,
// in thousands (k) or millions (M) when the step is that coarse.
func formatTick(v, step float64) string {
	if math.Abs(v) < step*1e-9 {
		v = 0 // not "-0.0"
	}
	switch {
	case v == 0 && (step >= 1e3 || step < 1e-4):
		return "0"
	case step >= 1e6:
		return formatTick(v/1e6, step/1e6) + "M"
	case step >= 1e3:
		return formatTick(v/1e3, step/1e3) + "k"
	case step < 1e-4:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	decimals := max(0, int(math.Ceil(-math.Log10(step)-1e-9)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

func hasPoints(series []drawn) bool {
	for _, s := range series {
		for _, y := range s.top {
			if !isNaN(y) {
				return true
			}
		}
	}
	return false
}

func isNaN(x float64) bool { return x != x }

// num writes a coordinate with two decimals at most.
func num(x float64) string {
	return strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64)
}

func esc(s string) string { return html.EscapeString(s) }
