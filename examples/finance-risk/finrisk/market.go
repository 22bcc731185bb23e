package finrisk

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"
)

// Market is a daily price series.
type Market struct {
	Dates  []time.Time
	Close  []float64
	Return []float64 // log return from the previous close; Return[0] = 0
}

// LoadMarket reads sp500-2000.csv (date,open,high,low,close,adjclose,volume).
func LoadMarket(path string) (*Market, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load market: %w", err)
	}
	defer f.Close()
	return ReadMarket(f)
}

// ReadMarket parses a CSV with at least the columns date (YYYY-MM-DD) and
// close, in increasing date order.
func ReadMarket(r io.Reader) (*Market, error) {
	cr := csv.NewReader(r)
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("market csv header: %w", err)
	}
	di, ci := -1, -1
	for i, h := range head {
		switch h {
		case "date":
			di = i
		case "close":
			ci = i
		}
	}
	if di < 0 || ci < 0 {
		return nil, fmt.Errorf("market csv: need columns date and close, have %v", head)
	}
	m := &Market{}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("market csv line %d: %w", line, err)
		}
		d, err := time.Parse("2006-01-02", rec[di])
		if err != nil {
			return nil, fmt.Errorf("market csv line %d: %w", line, err)
		}
		c, err := strconv.ParseFloat(rec[ci], 64)
		if err != nil || !(c > 0) || math.IsInf(c, 1) { // also rejects NaN
			return nil, fmt.Errorf("market csv line %d: bad close %q", line, rec[ci])
		}
		if n := len(m.Dates); n > 0 && !d.After(m.Dates[n-1]) {
			return nil, fmt.Errorf("market csv line %d: date %s not after %s", line, rec[di], m.Dates[n-1].Format("2006-01-02"))
		}
		ret := 0.0
		if n := len(m.Close); n > 0 {
			ret = math.Log(c / m.Close[n-1])
		}
		m.Dates, m.Close, m.Return = append(m.Dates, d), append(m.Close, c), append(m.Return, ret)
	}
	if len(m.Dates) < 2 {
		return nil, fmt.Errorf("market csv: fewer than 2 rows")
	}
	return m, nil
}

// RealisedVol is the annualised standard deviation of the log returns of
// days (end-window, end]; NaN when the window is not inside the series.
func (m *Market) RealisedVol(end, window int) float64 {
	if end-window < 0 || end >= len(m.Return) || window < 2 {
		return math.NaN()
	}
	var s, s2 float64
	for _, r := range m.Return[end-window+1 : end+1] {
		s += r
		s2 += r * r
	}
	n := float64(window)
	v := (s2 - s*s/n) / (n - 1)
	return math.Sqrt(math.Max(v, 0) * 252)
}

// Index returns the last trading day on or before t, or -1.
func (m *Market) Index(t time.Time) int {
	lo, hi := 0, len(m.Dates)
	for lo < hi {
		mid := (lo + hi) / 2
		if m.Dates[mid].After(t) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo - 1
}

// Regime of the market on an application date.
type Regime int

const (
	Calm     Regime = iota // realised volatility under 15%
	Normal                 // 15% to 25%
	Stressed               // above 25%
	NumRegimes
)

func (r Regime) String() string { return [...]string{"calm", "normal", "stressed"}[r] }

// RegimeOf classifies an annualised volatility.
func RegimeOf(vol float64) Regime {
	switch {
	case vol < 0.15:
		return Calm
	case vol <= 0.25:
		return Normal
	}
	return Stressed
}

// LossScale is the factor applied to the loss of approving a bad loan in
// each regime: defaults cost more when markets are stressed.
func (r Regime) LossScale() float64 { return [...]float64{0.8, 1.0, 1.5}[r] }

func mustDate(s string) time.Time {
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		panic(err)
	}
	return t
}
