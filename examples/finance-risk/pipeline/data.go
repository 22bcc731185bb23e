package pipeline

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"

	"examples/finance-risk/finrisk"
)

// Window is the number of past daily returns the market agent reads.
const Window = 20

// Data is everything the pipeline reads, with per-applicant market context.
type Data struct {
	Credit *finrisk.Credit
	Market *finrisk.Market
	Comp   *finrisk.Compliance
	// Day is each applicant's simulated application date (trading-day index).
	Day []int
	// Regime on that date from the trailing 20-day realised volatility, and
	// the resulting loss scale of approving a bad loan.
	Regime []finrisk.Regime
	Scale  []float64
	// MarketOK is false when the date has too little history for the market
	// agent: its member is then masked out.
	MarketOK []bool
	Folds    [][]int
}

// Load reads the data from dataDir (see finrisk.Fetch) and draws the
// application dates and folds from seed.
func Load(dataDir string, folds int, seed uint64) (*Data, error) {
	c, err := finrisk.LoadCredit(filepath.Join(dataDir, finrisk.CreditFile))
	if err != nil {
		return nil, err
	}
	m, err := finrisk.LoadMarket(filepath.Join(dataDir, finrisk.MarketFile))
	if err != nil {
		return nil, err
	}
	d := &Data{Credit: c, Market: m, Comp: finrisk.NewCompliance(c)}
	rng := rand.New(rand.NewPCG(seed, 0xda7e))
	for range c.Rows {
		// Uniform over all trading days: the first Window days lack history.
		day := rng.IntN(len(m.Dates))
		d.Day = append(d.Day, day)
		ok := day >= Window
		d.MarketOK = append(d.MarketOK, ok)
		vol := m.RealisedVol(day, Window)
		if math.IsNaN(vol) {
			vol = 0.2 // unknown: treat as normal
		}
		r := finrisk.RegimeOf(vol)
		d.Regime = append(d.Regime, r)
		d.Scale = append(d.Scale, r.LossScale())
	}
	d.Folds = finrisk.StratifiedFolds(c.Bad, folds, seed)
	return d, nil
}

// Rows returns the raw rows of idx.
func (d *Data) Rows(idx []int) [][]float64 {
	out := make([][]float64, len(idx))
	for i, j := range idx {
		out[i] = d.Credit.Rows[j]
	}
	return out
}

// Labels returns the labels of idx.
func (d *Data) Labels(idx []int) []int {
	out := make([]int, len(idx))
	for i, j := range idx {
		out[i] = d.Credit.Bad[j]
	}
	return out
}

// Row variants for the fairness rule: the applicant as is, with the sex
// changed, with the age group changed, and with both changed.
const (
	Orig = iota
	SexFlipped
	AgeFlipped
	BothFlipped
	NumVariants
)

// Variant returns the rows of idx as variant v.
func (d *Data) Variant(idx []int, v int) [][]float64 {
	out := make([][]float64, len(idx))
	for i, j := range idx {
		r := d.Credit.Rows[j]
		switch v {
		case SexFlipped:
			r = d.Credit.Counterfactual(r, finrisk.FlipSex)
		case AgeFlipped:
			r = d.Credit.Counterfactual(r, finrisk.FlipAgeGroup)
		case BothFlipped:
			r = d.Credit.Counterfactual(d.Credit.Counterfactual(r, finrisk.FlipSex), finrisk.FlipAgeGroup)
		}
		out[i] = r
	}
	return out
}

// Counterfactuals returns the rows of idx with kind applied (finrisk.FlipSex, FlipAgeGroup).
func (d *Data) Counterfactuals(idx []int, kind int) [][]float64 {
	out := make([][]float64, len(idx))
	for i, j := range idx {
		out[i] = d.Credit.Counterfactual(d.Credit.Rows[j], kind)
	}
	return out
}

func (d *Data) String() string {
	n := [finrisk.NumRegimes]int{}
	for _, r := range d.Regime {
		n[r]++
	}
	return fmt.Sprintf("%d applicants (%d bad), %d trading days %s..%s, regimes calm/normal/stressed %d/%d/%d",
		len(d.Credit.Rows), sum(d.Credit.Bad), len(d.Market.Dates), d.Market.Dates[0].Format("2006-01-02"),
		d.Market.Dates[len(d.Market.Dates)-1].Format("2006-01-02"), n[0], n[1], n[2])
}

func sum(x []int) int {
	s := 0
	for _, v := range x {
		s += v
	}
	return s
}
