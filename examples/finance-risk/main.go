package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"examples/finance-risk/finrisk"
	"examples/finance-risk/pipeline"
	"github.com/troupe-ml/troupe/distill"
)

// Options of a run.
type Options struct {
	Quick bool
	Seed  uint64
	Out   string
	Data  string
	Folds int
}

func main() {
	var o Options
	flag.BoolVar(&o.Quick, "quick", false, "small, fast run (fewer epochs, rounds and folds)")
	flag.Uint64Var(&o.Seed, "seed", 1, "seed of every random choice (folds, dates, initialisation, sampling)")
	flag.StringVar(&o.Out, "out", "", "output directory for report.md and the plots (default out/finance-risk, or out/finance-risk-quick with -quick)")
	flag.StringVar(&o.Data, "data", "", "data directory (default <repo>/data; fetched when missing)")
	flag.IntVar(&o.Folds, "folds", 0, "cross-validation folds (default 5, 3 with -quick)")
	flag.Parse()
	if o.Out == "" {
		o.Out = "out/finance-risk"
		if o.Quick {
			o.Out += "-quick"
		}
	}
	if o.Quick {
		fmt.Printf("finance-risk: smoke test (-quick): fewer epochs, rounds and folds check that the pipeline runs and learns; its figures say little about the models (report in %s)\n", o.Out)
	}
	if _, err := Run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "finance-risk:", err)
		os.Exit(1)
	}
}

// Model names in the report, in table order.
var modelNames = []string{"logistic regression", "credit transformer", "MLP", "market LSTM", "rule engine", "ensemble (attention + policy)", "distilled student"}

const (
	mLR = iota
	mTF
	mMLP
	mMarket
	mRules
	mEnsemble
	mStudent
	numModels
)

// Result is what a run measured.
type Result struct {
	Opt      Options
	DataDesc string
	Folds    [][numModels]finrisk.Metrics
	Mean     [numModels]finrisk.Metrics
	// Pooled test predictions for calibration.
	PoolP      [numModels][]float64
	PoolY      []int
	PoolRegime []finrisk.Regime
	// Attention weights of every test applicant (n, members).
	Attention []float32
	MarketOK  []bool
	Rounds    []RoundLog // fold 0's decision training
	History   int        // role changes logged in fold 0
	RoleLog   []string
	Distill   []distill.Report
	Market    *pipeline.MarketAgent
	Elapsed   time.Duration
	Params    [numModels]int
}

// Run executes the whole example and writes the report.
func Run(o Options, w interface{ Write([]byte) (int, error) }) (*Result, error) {
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(w, "[%6.1fs] ", time.Since(start).Seconds())
		fmt.Fprintf(w, format+"\n", args...)
	}
	if o.Folds == 0 {
		o.Folds = 5
		if o.Quick {
			o.Folds = 3
		}
	}
	dir, err := finrisk.Fetch(o.Data)
	if err != nil {
		return nil, err
	}
	d, err := pipeline.Load(dir, o.Folds, o.Seed)
	if err != nil {
		return nil, err
	}
	res := &Result{Opt: o, DataDesc: d.String()}
	logf("data: %s", d)
	cfg := pipeline.DefaultConfig()
	fcfg := pipeline.DefaultFusionConfig()
	fcfg.VoteOnly = true
	lstmEpochs, crossK, rounds, studentEpochs := 3, 3, 60, 60
	if o.Quick {
		cfg = pipeline.QuickConfig()
		fcfg.Epochs = 20
		lstmEpochs, crossK, rounds, studentEpochs = 1, 2, 25, 25
	}
	cfg.Seed = o.Seed
	mk, err := pipeline.TrainMarket(d, 16, lstmEpochs, o.Seed, logf)
	if err != nil {
		return nil, err
	}
	res.Market = mk
	logf("market agent: held-out (from %s) log-vol RMSE %.4f vs naive %.4f", mk.SplitDate.Format("2006-01-02"), mk.RMSE, mk.NaiveRMSE)
	rw := DefaultReward()
	for f, test := range d.Folds {
		fs := time.Now()
		train := finrisk.TrainIndices(len(d.Credit.Rows), test)
		ytr, yte := d.Labels(train), d.Labels(test)
		var fm [numModels]finrisk.Metrics
		var preds [numModels][]float64
		scaleTe := make([]float64, len(test))
		vetoTe := make([]bool, len(test))
		for i, j := range test {
			scaleTe[i] = d.Scale[j]
			vetoTe[i] = d.Comp.Check(d.Credit.Rows[j]).Veto
		}
		// evalProb scores a probabilistic model with the cost-optimal
		// (Bayes) threshold of each applicant's regime and the veto.
		evalProb := func(p []float64, variants [pipeline.NumVariants][]float64) finrisk.Metrics {
			dec := func(q []float64) []bool {
				out := make([]bool, len(q))
				for i, v := range q {
					out[i] = v <= finrisk.BayesThreshold(scaleTe[i]) && !vetoTe[i]
				}
				return out
			}
			a := dec(p)
			var flips []bool
			if variants[pipeline.SexFlipped] != nil {
				a1, a2 := dec(variants[pipeline.SexFlipped]), dec(variants[pipeline.AgeFlipped])
				flips = make([]bool, len(a))
				for i := range a {
					flips[i] = a1[i] != a[i] || a2[i] != a[i]
				}
			}
			return finrisk.Evaluate(p, a, scaleTe, yte, flips)
		}
		sig := func(z []float32) []float64 {
			out := make([]float64, len(z))
			for i, v := range z {
				out[i] = pipeline.Sigmoid(v)
			}
			return out
		}
		// Logistic regression.
		enc := finrisk.FitEncoder(d.Credit.Attrs, d.Rows(train))
		lr := finrisk.LogReg{L2: 1e-2}
		if err := lr.Fit(enc.Matrix(d.Rows(train)), len(train), enc.Width, ytr); err != nil {
			return nil, err
		}
		var lrV [pipeline.NumVariants][]float64
		for v := 0; v < pipeline.NumVariants; v++ {
			z := lr.Logit(enc.Matrix(d.Variant(test, v)), len(test))
			lrV[v] = make([]float64, len(z))
			for i := range z {
				lrV[v][i] = finrisk.Sigmoid(z[i])
			}
		}
		fm[mLR], preds[mLR] = evalProb(lrV[0], lrV), lrV[0]
		res.Params[mLR] = enc.Width + 1
		// Members, cross-fitted.
		cr, err := pipeline.CrossFit(d, mk, train, crossK, cfg, o.Seed+uint64(1000*f))
		if err != nil {
			return nil, err
		}
		var outs [pipeline.NumVariants][]*pipeline.Outputs
		for v := 0; v < pipeline.NumVariants; v++ {
			if outs[v], err = cr.Outputs(d.Variant(test, v), test); err != nil {
				return nil, err
			}
		}
		for _, mm := range []struct{ model, member int }{{mTF, pipeline.Transformer}, {mMLP, pipeline.MLP}, {mRules, pipeline.Rules}} {
			var pv [pipeline.NumVariants][]float64
			for v := range pv {
				pv[v] = sig(pipeline.MeanLogit(outs[v], mm.member))
			}
			fm[mm.model], preds[mm.model] = evalProb(pv[0], pv), pv[0]
		}
		res.Params[mTF], res.Params[mMLP] = cr.Parts[0].ParamCounts()
		res.Params[mMarket] = mk.Net.ParamCount()
		// Market agent alone: no credit opinion, so it scores with its
		// volatility forecast (AUC) and decides with the training base rate.
		{
			base := 0.0
			for _, y := range ytr {
				base += float64(y) / float64(len(ytr))
			}
			p, score := make([]float64, len(test)), make([]float64, len(test))
			for i, j := range test {
				p[i], score[i] = base, float64(mk.Out[j])
			}
			m := evalProb(p, [pipeline.NumVariants][]float64{nil, p, p, p})
			m.AUC = finrisk.AUC(score, yte)
			fm[mMarket], preds[mMarket] = m, p
		}
		logf("fold %d/%d: members trained (%d-fold cross-fit) in %.1fs; test AUC transformer %.4f MLP %.4f rules %.4f LR %.4f",
			f+1, o.Folds, crossK, time.Since(fs).Seconds(), fm[mTF].AUC, fm[mMLP].AUC, fm[mRules].AUC, fm[mLR].AUC)
		// Attention fusion on the out-of-fold outputs.
		fu, err := pipeline.TrainFusion(cr.OOF[pipeline.Orig], ytr, fcfg)
		if err != nil {
			return nil, err
		}
		var zte [pipeline.NumVariants][]float32
		var att []float32
		for v := 0; v < pipeline.NumVariants; v++ {
			z, wts, err := fu.PredictAll(outs[v])
			if err != nil {
				return nil, err
			}
			zte[v] = z
			if v == 0 {
				att = wts
			}
		}
		var ztr [pipeline.NumVariants][]float32
		for v := 0; v < pipeline.NumVariants; v++ {
			if ztr[v], _, err = fu.Predict(cr.OOF[v]); err != nil {
				return nil, err
			}
		}
		// Platt scaling of the fused logit on the out-of-fold outputs, so
		// that the decision policy starts from the Bayes rule of a
		// calibrated score (monotone: the AUC is unchanged).
		{
			x := make([]float32, len(ztr[pipeline.Orig]))
			copy(x, ztr[pipeline.Orig])
			pl := finrisk.LogReg{L2: 1e-6}
			if err := pl.Fit(x, len(x), 1, ytr); err != nil {
				return nil, err
			}
			for v := 0; v < pipeline.NumVariants; v++ {
				for _, z := range [][]float32{ztr[v], zte[v]} {
					for i := range z {
						z[i] = float32(pl.W[0]*float64(z[i]) + pl.B)
					}
				}
			}
		}
		res.Attention = append(res.Attention, att...)
		for _, j := range test {
			res.MarketOK = append(res.MarketOK, d.MarketOK[j])
		}
		logf("fold %d/%d: fusion loss %.4f -> %.4f, test AUC %.4f", f+1, o.Folds, fu.Losses[0], fu.Losses[len(fu.Losses)-1], finrisk.AUC(sig(zte[0]), yte))
		// Decision policy.
		mkApp := func(z [pipeline.NumVariants][]float32, i, j int) *applicant {
			zf := func(v int) float64 { return float64(z[v][i]) }
			bar := func(a, b, c int) float64 { return (zf(a) + zf(b) + zf(c)) / 3 }
			veto := d.Comp.Check(d.Credit.Rows[j]).Veto
			reg := d.Regime[j]
			return &applicant{
				obs: observation(zf(0), bar(0, 1, 2), reg, veto),
				cf: [2][]float32{observation(zf(1), bar(1, 0, 3), reg, veto),
					observation(zf(2), bar(2, 3, 0), reg, veto)},
				bad: d.Credit.Bad[j] == 1, scale: d.Scale[j], veto: veto,
			}
		}
		var apps []*applicant
		for i, j := range train {
			apps = append(apps, mkApp(ztr, i, j))
		}
		nval := len(apps) / 2 // the validator scores on half: a smaller sample picked poor snapshots
		tr := TrainDecision(apps[nval:], apps[:nval], 3, rounds, 192, 4, rw, o.Seed+uint64(f))
		if f == 0 {
			res.Rounds = tr.Rounds
			res.History = len(tr.History)
			for _, h := range tr.History {
				res.RoleLog = append(res.RoleLog, fmt.Sprintf("round %d: agent %d %v -> %v (%s)", h.Round, h.Agent, h.From, h.To, h.Reason))
			}
		}
		pe := sig(zte[0])
		dec := make([]bool, len(test))
		flips := make([]bool, len(test))
		for i, j := range test {
			ap := mkApp(zte, i, j)
			a := tr.Policy.Greedy(ap.obs)
			if ap.veto {
				a = Reject // the compliance agent's veto
			}
			dec[i] = a == Approve
			for _, cf := range ap.cf {
				b := tr.Policy.Greedy(cf)
				if ap.veto {
					b = Reject
				}
				if b != a {
					flips[i] = true
				}
			}
		}
		fm[mEnsemble], preds[mEnsemble] = finrisk.Evaluate(pe, dec, scaleTe, yte, flips), pe
		res.Params[mEnsemble] = crossK*(res.Params[mTF]+res.Params[mMLP]) + res.Params[mMarket] + fu.ParamCount() + 2*obsDim
		logf("fold %d/%d: decision agents (roles %v, best agent %d): cost/applicant %.4f (LR %.4f), fairness flips %.3f",
			f+1, o.Folds, tr.Rounds[len(tr.Rounds)-1].Roles, tr.Best, fm[mEnsemble].Cost, fm[mLR].Cost, fm[mEnsemble].FairFlip)
		// Distillation into a small MLP on the encoded features.
		xtr := enc.Matrix(d.Rows(train))
		st, err := trainStudent(xtr, enc.Width, ztr[pipeline.Orig], ytr, 8, studentEpochs, distill.Options{Temperature: 2, Alpha: 0.7, IgnoreIndex: -1}, o.Seed+uint64(f))
		if err != nil {
			return nil, err
		}
		var sv [pipeline.NumVariants][]float64
		for v := 0; v < pipeline.NumVariants; v++ {
			z, err := st.Logits(enc.Matrix(d.Variant(test, v)))
			if err != nil {
				return nil, err
			}
			sv[v] = sig(z)
		}
		fm[mStudent], preds[mStudent] = evalProb(sv[0], sv), sv[0]
		res.Params[mStudent] = st.Store.NumParams()
		// Inference time per applicant: the whole ensemble path (every
		// member set, rules, market lookup, fusion, policy) vs the student
		// (encoding included for both).
		rowsTe := d.Rows(test)
		ensTime := timeIt(func() {
			oo, _ := cr.Outputs(rowsTe, test)
			z, _, _ := fu.PredictAll(oo)
			for i, j := range test {
				tr.Policy.Greedy(observation(float64(z[i]), float64(z[i]), d.Regime[j], false))
			}
		}) / time.Duration(len(test))
		stTime := timeIt(func() {
			st.Logits(enc.Matrix(rowsTe))
		}) / time.Duration(len(test))
		rep := distill.Report{Metric: "AUC", TeacherQuality: fm[mEnsemble].AUC, StudentQuality: fm[mStudent].AUC,
			TeacherParams: res.Params[mEnsemble], StudentParams: res.Params[mStudent], TeacherTime: ensTime, StudentTime: stTime}
		res.Distill = append(res.Distill, rep)
		logf("fold %d/%d: student AUC %.4f (%.1f%% of ensemble %.4f), %.1fx faster (%v vs %v per applicant); fold took %.1fs",
			f+1, o.Folds, rep.StudentQuality, 100*rep.Retention(), rep.TeacherQuality, rep.SpeedUp(), stTime, ensTime, time.Since(fs).Seconds())
		res.Folds = append(res.Folds, fm)
		for m := range preds {
			res.PoolP[m] = append(res.PoolP[m], preds[m]...)
		}
		res.PoolY = append(res.PoolY, yte...)
		for _, j := range test {
			res.PoolRegime = append(res.PoolRegime, d.Regime[j])
		}
	}
	for m := 0; m < numModels; m++ {
		var s finrisk.Metrics
		for _, fm := range res.Folds {
			s.Accuracy += fm[m].Accuracy / float64(len(res.Folds))
			s.AUC += fm[m].AUC / float64(len(res.Folds))
			s.Cost += fm[m].Cost / float64(len(res.Folds))
			s.Misjudgment += fm[m].Misjudgment / float64(len(res.Folds))
			s.FairFlip += fm[m].FairFlip / float64(len(res.Folds))
		}
		res.Mean[m] = s
	}
	res.Elapsed = time.Since(start)
	if err := writeReport(res); err != nil {
		return nil, err
	}
	logf("report written to %s/report.md (total %.1fs)", o.Out, res.Elapsed.Seconds())
	return res, nil
}

// timeIt returns the mean duration of f over enough repetitions to take
// at least 100ms (at least 2).
func timeIt(f func()) time.Duration {
	f() // warm up
	n := 0
	st := time.Now()
	for n < 2 || time.Since(st) < 100*time.Millisecond {
		f()
		n++
	}
	return time.Since(st) / time.Duration(n)
}
