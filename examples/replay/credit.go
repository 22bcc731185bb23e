package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"

	"examples/finance-risk/finrisk"
)

// marketWindow is the trailing window, in trading days, of the realised
// volatility that sets an application day's market regime.
const marketWindow = 20

// task is the credit-approval bandit: an applicant of the German Credit
// data arrives on a trading day of the S&P 500 series; approving a good
// risk earns 1, approving a bad one loses 5 times the day's regime loss
// scale, rejecting earns 0 and reveals nothing (the cost matrix of
// finrisk, which is this reward shifted per applicant).
type task struct {
	credit  *finrisk.Credit
	regimes []finrisk.Regime // per trading day with a full volatility window
}

// loadTask reads the credit and market files under dataDir (fetching them
// when missing, see finrisk.Fetch).
func loadTask(dataDir string) (*task, error) {
	dir, err := finrisk.Fetch(dataDir)
	if err != nil {
		return nil, err
	}
	credit, err := finrisk.LoadCredit(filepath.Join(dir, finrisk.CreditFile))
	if err != nil {
		return nil, err
	}
	market, err := finrisk.LoadMarket(filepath.Join(dir, finrisk.MarketFile))
	if err != nil {
		return nil, err
	}
	t := &task{credit: credit}
	for end := marketWindow; end < len(market.Return); end++ {
		t.regimes = append(t.regimes, finrisk.RegimeOf(market.RealisedVol(end, marketWindow)))
	}
	if len(t.regimes) == 0 {
		return nil, fmt.Errorf("market series of %d days is shorter than the %d-day volatility window", len(market.Return), marketWindow)
	}
	return t, nil
}

// randomRegime is the regime of a trading day drawn uniformly.
func (t *task) randomRegime(rng *rand.Rand) finrisk.Regime {
	return t.regimes[rng.IntN(len(t.regimes))]
}

// reward of a decision on applicant i in regime r.
func (t *task) reward(i int, approve bool, r finrisk.Regime) float64 {
	switch {
	case !approve:
		return 0
	case t.credit.Bad[i] == 1:
		return -finrisk.CostBadApproved * r.LossScale()
	}
	return finrisk.CostGoodRejected
}

// split is one seed's train/test partition with the encoder fitted on the
// training applicants.
type split struct {
	train, test []int
	testRegime  []finrisk.Regime // each test applicant's application regime
	enc         *finrisk.Encoder
	width       int // features per observation: encoded applicant + regime one-hot
}

// newSplit holds out one stratified fifth of the applicants (the fold
// chosen by seed) and draws the test applicants' application days.
func (t *task) newSplit(seed uint64) *split {
	folds := finrisk.StratifiedFolds(t.credit.Bad, 5, seed)
	test := folds[seed%5]
	s := &split{train: finrisk.TrainIndices(len(t.credit.Bad), test), test: test}
	rows := make([][]float64, len(s.train))
	for k, i := range s.train {
		rows[k] = t.credit.Rows[i]
	}
	s.enc = finrisk.FitEncoder(t.credit.Attrs, rows)
	s.width = s.enc.Width + int(finrisk.NumRegimes)
	rng := rand.New(rand.NewPCG(seed, 2))
	for range test {
		s.testRegime = append(s.testRegime, t.randomRegime(rng))
	}
	return s
}

// observe writes applicant i's observation in regime r into dst.
func (t *task) observe(dst []float32, s *split, i int, r finrisk.Regime) []float32 {
	if dst == nil {
		dst = make([]float32, s.width)
	}
	s.enc.Encode(dst[:s.enc.Width], t.credit.Rows[i])
	for k := range int(finrisk.NumRegimes) {
		dst[s.enc.Width+k] = 0
	}
	dst[s.enc.Width+int(r)] = 1
	return dst
}

// testCost is the cost per test applicant (finrisk's cost matrix, the bad
// approvals scaled by the regime) of the decisions approve, and the AUC of
// risk (higher: more likely bad).
func (t *task) testCost(s *split, approve []bool, risk []float64) (cost, auc float64) {
	bad := make([]int, len(s.test))
	scale := make([]float64, len(s.test))
	for k, i := range s.test {
		bad[k] = t.credit.Bad[i]
		scale[k] = s.testRegime[k].LossScale()
	}
	m := finrisk.Evaluate(risk, approve, scale, bad, nil)
	return m.Cost, m.AUC
}

// baselines are the costs of rejecting everyone, approving everyone, and
// of logistic regression trained with full feedback (every training
// applicant's label, which the bandit never sees for those it rejects),
// deciding by the Bayes threshold of the regime.
func (t *task) baselines(s *split) (rejectAll, approveAll, logreg float64, err error) {
	n := len(s.test)
	no, yes := make([]bool, n), make([]bool, n)
	zero := make([]float64, n)
	for k := range yes {
		yes[k] = true
	}
	rejectAll, _ = t.testCost(s, no, zero)
	approveAll, _ = t.testCost(s, yes, zero)

	rows := func(idx []int) [][]float64 {
		out := make([][]float64, len(idx))
		for k, i := range idx {
			out[k] = t.credit.Rows[i]
		}
		return out
	}
	y := make([]int, len(s.train))
	for k, i := range s.train {
		y[k] = t.credit.Bad[i]
	}
	lr := finrisk.LogReg{L2: 1e-2}
	if err := lr.Fit(s.enc.Matrix(rows(s.train)), len(s.train), s.enc.Width, y); err != nil {
		return 0, 0, 0, fmt.Errorf("logistic regression baseline: %w", err)
	}
	logit := lr.Logit(s.enc.Matrix(rows(s.test)), n)
	dec := make([]bool, n)
	for k, z := range logit {
		dec[k] = finrisk.Sigmoid(z) < finrisk.BayesThreshold(s.testRegime[k].LossScale())
	}
	logreg, _ = t.testCost(s, dec, logit)
	if math.IsNaN(logreg) {
		return 0, 0, 0, fmt.Errorf("logistic regression baseline: NaN cost")
	}
	return rejectAll, approveAll, logreg, nil
}
