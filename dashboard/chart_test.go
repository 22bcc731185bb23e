package dashboard

import (
	"encoding/xml"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// svgDoc is what the tests read back of a chart's SVG.
type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	Agent   string   `xml:"data-agent,attr"`
	Metric  string   `xml:"data-metric,attr"`
	Texts   []svgText
	Groups  []struct {
		Class   string      `xml:"class,attr"`
		Series  string      `xml:"data-series,attr"`
		Circles []svgCircle `xml:"circle"`
		Texts   []svgText   `xml:"text"`
		Lines   []struct {
			Y1 float64 `xml:"y1,attr"`
		} `xml:"line"`
	} `xml:"g"`
	Paths []struct {
		Class string `xml:"class,attr"`
		D     string `xml:"d,attr"`
	} `xml:"path"`
}

type svgText struct {
	X    float64 `xml:"x,attr"`
	Y    float64 `xml:"y,attr"`
	Text string  `xml:",chardata"`
}

type svgCircle struct {
	Step string  `xml:"data-step,attr"`
	CY   float64 `xml:"cy,attr"`
}

func parseSVG(t *testing.T, c *Chart) svgDoc {
	t.Helper()
	var d svgDoc
	s := c.String()
	if err := xml.Unmarshal([]byte(s), &d); err != nil {
		t.Fatalf("the chart is not well-formed XML: %v\n%s", err, s)
	}
	return d
}

// markers are the data-step values of the chart's markers, by series.
func (d svgDoc) markers() map[string][]string {
	out := make(map[string][]string)
	for _, g := range d.Groups {
		if g.Class == "points" {
			for _, c := range g.Circles {
				out[g.Series] = append(out[g.Series], c.Step)
			}
		}
	}
	return out
}

func steps(n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(i + 1)
	}
	return x
}

func TestChartMarkers(t *testing.T) {
	nan := math.NaN()
	many := steps(5000)
	for _, tc := range []struct {
		name   string
		chart  Chart
		want   map[string]int // markers per series
		breaks int            // "M" commands of the first line
	}{
		{name: "one point", chart: Chart{Series: []Series{{Name: "mean", X: []float64{7}, Y: []float64{0.5}}}},
			want: map[string]int{"mean": 1}, breaks: 1},
		{name: "a gap", chart: Chart{Series: []Series{{Name: "kl", X: steps(5), Y: []float64{1, 2, nan, 4, 5}}}},
			want: map[string]int{"kl": 4}, breaks: 2},
		{name: "two series", chart: Chart{Series: []Series{{Name: "a", X: steps(3), Y: []float64{1, 2, 3}}, {Name: "b", X: steps(3), Y: []float64{nan, nan, nan}}}},
			want: map[string]int{"a": 3}, breaks: 1},
		{name: "thinned", chart: Chart{Series: []Series{{Name: "r", X: many, Y: many}}},
			want: map[string]int{"r": DefaultMaxPoints}, breaks: 1},
		{name: "thinned to a cap", chart: Chart{MaxPoints: 10, Series: []Series{{Name: "r", X: many, Y: many}}},
			want: map[string]int{"r": 10}, breaks: 1},
		{name: "stacked", chart: Chart{Stacked: true, Series: []Series{{Name: "rollout", X: steps(3), Y: []float64{1, 1, 1}}, {Name: "train", X: steps(3), Y: []float64{2, nan, 2}}}},
			want: map[string]int{"rollout": 3, "train": 2}, breaks: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := parseSVG(t, &tc.chart)
			got := d.markers()
			for name, n := range tc.want {
				if len(got[name]) != n {
					t.Errorf("series %s: %d markers, want %d", name, len(got[name]), n)
				}
			}
			for name, m := range got {
				if len(m) > 0 && tc.want[name] == 0 {
					t.Errorf("series %s has %d markers, want none", name, len(m))
				}
			}
			var line string
			for _, p := range d.Paths {
				if p.Class == "line" {
					line = p.D
					break
				}
			}
			if n := strings.Count(line, "M"); n != tc.breaks {
				t.Errorf("the line has %d parts, want %d: %s", n, tc.breaks, line)
			}
		})
	}
}

func TestChartThinKeepsEnds(t *testing.T) {
	x := steps(5000)
	d := parseSVG(t, &Chart{MaxPoints: 7, Series: []Series{{Name: "r", X: x, Y: x}}})
	m := d.markers()["r"]
	if m[0] != "1" || m[len(m)-1] != "5000" {
		t.Errorf("thinned markers %v, want the first and last steps kept", m)
	}
}

// TestChartLegendOutsidePlot checks that the legend sits above the plot
// area, whatever the number of entries, and that the attributes and text
// are escaped.
func TestChartLegendOutsidePlot(t *testing.T) {
	var series []Series
	for i := range 12 {
		series = append(series, Series{Name: "component <" + strconv.Itoa(i) + "> & \"x\"", X: steps(3), Y: []float64{1, 2, 3}})
	}
	c := &Chart{Title: "a & b", Agent: `pl"anner`, Metric: "reward_components", Series: series}
	d := parseSVG(t, c)
	if d.Agent != `pl"anner` || d.Metric != "reward_components" {
		t.Errorf("data-agent %q, data-metric %q", d.Agent, d.Metric)
	}
	legendBottom, plotTop := 0.0, math.Inf(1)
	for _, g := range d.Groups {
		switch g.Class {
		case "legend":
			if len(g.Texts) != 12 {
				t.Errorf("%d legend entries, want 12", len(g.Texts))
			}
			for _, tx := range g.Texts {
				legendBottom = max(legendBottom, tx.Y+fontSize/2)
			}
		case "axes":
			for _, l := range g.Lines {
				plotTop = min(plotTop, l.Y1)
			}
		case "points":
			for _, c := range g.Circles {
				plotTop = min(plotTop, c.CY-3)
			}
		}
	}
	if legendBottom == 0 || legendBottom >= plotTop {
		t.Errorf("legend reaches y=%v, the plot area starts at y=%v", legendBottom, plotTop)
	}
	if strings.Contains(c.String(), "<0>") {
		t.Error("a series name is not escaped")
	}
}

func TestChartAxes(t *testing.T) {
	c := &Chart{Title: "KL", XLabel: "global step", YLabel: "nats per token",
		Series: []Series{{Name: "kl", X: []float64{1, 2, 3}, Y: []float64{0.001, 0.002, 0.004}}}}
	s := c.String()
	for _, want := range []string{">global step<", ">nats per token<", ">KL<", `<circle class="pt"`, `data-step="3"`} {
		if !strings.Contains(s, want) {
			t.Errorf("the chart lacks %s", want)
		}
	}
	// X ticks are whole steps.
	ticks := regexp.MustCompile(`text-anchor="middle">([^<]*)</text>`).FindAllStringSubmatch(s, -1)
	for _, m := range ticks {
		if m[1] == "global step" {
			continue
		}
		if _, err := strconv.Atoi(m[1]); err != nil {
			t.Errorf("x tick %q is not a whole step", m[1])
		}
	}
	empty := (&Chart{Title: "nothing"}).String()
	if !strings.Contains(empty, "no data yet") {
		t.Error("an empty chart does not say so")
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi  float64
		n       int
		integer bool
		want    string
	}{
		{0, 1, 5, false, "0.0 0.2 0.4 0.6 0.8 1.0"},
		{-0.5, 1.5, 5, false, "-0.5 0.0 0.5 1.0 1.5"},
		{0.0011, 0.0049, 4, false, "0.002 0.003 0.004"},
		{1, 12, 6, true, "2 4 6 8 10 12"},
		{0, 3, 6, true, "0 1 2 3"},
		{0, 250000, 5, false, "0 50k 100k 150k 200k 250k"},
		{0, 3e-5, 3, false, "0 1e-05 2e-05 3e-05"},
	} {
		ts := ticks(tc.lo, tc.hi, tc.n, tc.integer)
		var got []string
		for _, v := range ts {
			got = append(got, formatTick(v, tickStep(ts)))
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("ticks(%v, %v, %d) = %s, want %s", tc.lo, tc.hi, tc.n, g, tc.want)
		}
	}
}
