package pipeline

import (
	"math"
	"math/rand/v2"
	"time"

	"examples/finance-risk/agents"
	"examples/finance-risk/finrisk"
)

// MarketAgent is the market-volatility agent: an LSTM over the last Window
// daily returns that forecasts the log realised volatility of the next
// Window days (package agents' nn.LSTM member). It is trained once on the
// market series (chronological split: training up to SplitDate, evaluation
// after) and, per applicant, gives the forecast and its hidden state on the
// application date.
type MarketAgent struct {
	Net       *agents.Net
	Mean, Std float64 // standardisation of the target
	// Forecast quality on the held-out period: RMSE of the log volatility,
	// against the naive forecast (trailing volatility persists).
	RMSE, NaiveRMSE float64
	SplitDate       time.Time
	Out             []float32 // per applicant: standardised forecast
	Emb             []float32 // per applicant: hidden state (Hidden)
}

func marketWindow(m *finrisk.Market, day int, dst []float32) {
	for k := 0; k < Window; k++ {
		dst[k] = float32(100 * m.Return[day-Window+1+k])
	}
}

// TrainMarket trains the LSTM and fills the per-applicant outputs.
func TrainMarket(d *Data, hidden, epochs int, seed uint64, logf func(string, ...any)) (*MarketAgent, error) {
	m := d.Market
	split := time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC)
	ag := &MarketAgent{Net: agents.NewLSTM(Window, hidden, seed, 5e-3), SplitDate: split}
	var xs []float32
	var ys []float64
	var days []int
	for day := Window; day+Window < len(m.Return); day += 2 {
		w := make([]float32, Window)
		marketWindow(m, day, w)
		xs = append(xs, w...)
		ys = append(ys, math.Log(m.RealisedVol(day+Window, Window)))
		days = append(days, day)
	}
	var mean, sq float64
	ntr := 0
	for i, day := range days {
		if m.Dates[day].Before(split) {
			mean += ys[i]
			ntr++
		}
	}
	mean /= float64(ntr)
	for i, day := range days {
		if m.Dates[day].Before(split) {
			sq += (ys[i] - mean) * (ys[i] - mean)
		}
	}
	ag.Mean, ag.Std = mean, math.Sqrt(sq/float64(ntr))
	y := make([]float32, len(ys))
	for i := range ys {
		y[i] = float32((ys[i] - ag.Mean) / ag.Std)
	}
	rng := rand.New(rand.NewPCG(seed, 0x7a11))
	for ep := 0; ep < epochs; ep++ {
		l, err := ag.Net.Epoch(xs[:ntr*Window], y[:ntr], 128, agents.MSE, rng)
		if err != nil {
			return nil, err
		}
		if logf != nil {
			logf("market LSTM epoch %d/%d: train MSE %.4f", ep+1, epochs, l)
		}
	}
	nte := len(days) - ntr
	out, _, err := ag.Net.Run(xs[ntr*Window:], nte)
	if err != nil {
		return nil, err
	}
	var se, seNaive float64
	for i := 0; i < nte; i++ {
		k := ntr + i
		pred := float64(out[i])*ag.Std + ag.Mean
		se += (pred - ys[k]) * (pred - ys[k])
		naive := math.Log(m.RealisedVol(days[k], Window))
		seNaive += (naive - ys[k]) * (naive - ys[k])
	}
	ag.RMSE, ag.NaiveRMSE = math.Sqrt(se/float64(nte)), math.Sqrt(seNaive/float64(nte))
	// Per applicant.
	n := len(d.Day)
	ax := make([]float32, n*Window)
	for i, day := range d.Day {
		if d.MarketOK[i] {
			marketWindow(m, day, ax[i*Window:(i+1)*Window])
		}
	}
	ag.Out, ag.Emb, err = ag.Net.Run(ax, n)
	if err != nil {
		return nil, err
	}
	for i := range d.Day {
		if !d.MarketOK[i] {
			ag.Out[i] = 0
			clear(ag.Emb[i*hidden : (i+1)*hidden])
		}
	}
	return ag, nil
}
