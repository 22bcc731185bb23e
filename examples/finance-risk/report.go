package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"

	"examples/finance-risk/finrisk"
	"examples/finance-risk/pipeline"
	"github.com/troupe-ml/troupe/eval"
	rlmetrics "github.com/troupe-ml/troupe/rl/metrics"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var palette = []color.Color{
	color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255},
	color.RGBA{214, 39, 40, 255}, color.RGBA{148, 103, 189, 255}, color.RGBA{140, 86, 75, 255}, color.RGBA{127, 127, 127, 255},
}

// Bars is the bar, evaluated on a result.
type Bars struct {
	BestSingle                          int
	AUCOverBest, AUCOverLR, CostUnderLR bool
	Retention, SpeedUp                  float64
	RetentionOK, SpeedUpOK              bool
}

// CheckBars evaluates the bar on the fold means.
func CheckBars(r *Result) Bars {
	var b Bars
	b.BestSingle = mTF
	for _, m := range []int{mTF, mMLP, mMarket, mRules} {
		if r.Mean[m].AUC > r.Mean[b.BestSingle].AUC {
			b.BestSingle = m
		}
	}
	e := r.Mean[mEnsemble]
	b.AUCOverBest = e.AUC > r.Mean[b.BestSingle].AUC
	b.AUCOverLR = e.AUC > r.Mean[mLR].AUC
	b.CostUnderLR = e.Cost < r.Mean[mLR].Cost
	var ret, sp []float64
	for _, d := range r.Distill {
		ret = append(ret, d.Retention())
		sp = append(sp, d.SpeedUp())
	}
	b.Retention, _ = eval.MeanSD(ret)
	b.SpeedUp, _ = eval.MeanSD(sp)
	b.RetentionOK, b.SpeedUpOK = b.Retention >= 0.97, b.SpeedUp >= 5
	return b
}

func yes(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

func writeReport(r *Result) error {
	if err := os.MkdirAll(r.Opt.Out, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	var b strings.Builder
	mode := "full"
	if r.Opt.Quick {
		mode = "quick"
	}
	fmt.Fprintf(&b, "# Finance risk: heterogeneous ensemble report\n\n")
	fmt.Fprintf(&b, "Run: `go run ./examples/finance-risk%s -seed %d` (%s mode), %d-fold stratified cross-validation, %.1f s wall time.\n\n",
		map[bool]string{true: " -quick", false: ""}[r.Opt.Quick], r.Opt.Seed, mode, len(r.Folds), r.Elapsed.Seconds())
	fmt.Fprintf(&b, "Data: %s. Statlog German Credit from Debian `weka` 3.6.14-3 (credit-g.arff), S&P 500 from npm `vega-datasets` 3.2.1 (sp500-2000.csv).\n\n", r.DataDesc)
	fmt.Fprintf(&b, "Market agent (LSTM over %d daily returns, forecasting the log realised volatility of the next %d days): held-out RMSE %.4f vs %.4f for the naive forecast (trailing volatility), after %s.\n\n",
		pipeline.Window, pipeline.Window, r.Market.RMSE, r.Market.NaiveRMSE, r.Market.SplitDate.Format("2006-01-02"))
	b.WriteString("## Results (mean ± sd over folds)\n\n")
	b.WriteString("Accuracy: p(bad) > 0.5. Cost per applicant: German cost matrix (bad approved 5 × regime loss scale 0.8/1.0/1.5, good rejected 1). ")
	b.WriteString("Decisions: the ensemble's trained policy; every other model the cost-optimal threshold p(bad) > 1/(1+5·scale); the compliance veto applies to all. ")
	b.WriteString("Misjudgment: (bad approved + good rejected)/applicants. Fairness flip: share of applicants whose decision changes when only the sex or only the age group changes.\n\n")
	b.WriteString("| model | params | accuracy | AUC | cost / applicant | misjudgment | fairness flips |\n|---|---|---|---|---|---|---|\n")
	for m := 0; m < numModels; m++ {
		col := func(get func(finrisk.Metrics) float64) string {
			var xs []float64
			for _, fm := range r.Folds {
				xs = append(xs, get(fm[m]))
			}
			mu, sd := eval.MeanSD(xs)
			return fmt.Sprintf("%.4f ± %.4f", mu, sd)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s |\n", modelNames[m], r.Params[m],
			col(func(x finrisk.Metrics) float64 { return x.Accuracy }), col(func(x finrisk.Metrics) float64 { return x.AUC }),
			col(func(x finrisk.Metrics) float64 { return x.Cost }), col(func(x finrisk.Metrics) float64 { return x.Misjudgment }),
			col(func(x finrisk.Metrics) float64 { return x.FairFlip }))
	}
	b.WriteString("\nThe market LSTM has no credit opinion: its AUC is that of its volatility forecast as a default score, and alone it decides with the training base rate.\n\n")
	b.WriteString("### AUC per fold\n\n| model |")
	for f := range r.Folds {
		fmt.Fprintf(&b, " fold %d |", f+1)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(r.Folds)) + "\n")
	for m := 0; m < numModels; m++ {
		fmt.Fprintf(&b, "| %s |", modelNames[m])
		for _, fm := range r.Folds {
			fmt.Fprintf(&b, " %.4f |", fm[m].AUC)
		}
		b.WriteString("\n")
	}
	bars := CheckBars(r)
	b.WriteString("\n## Bar\n\n")
	fmt.Fprintf(&b, "- Ensemble AUC %.4f above the best single member (%s, %.4f): %s\n", r.Mean[mEnsemble].AUC, modelNames[bars.BestSingle], r.Mean[bars.BestSingle].AUC, yes(bars.AUCOverBest))
	fmt.Fprintf(&b, "- Ensemble AUC %.4f above logistic regression %.4f: %s\n", r.Mean[mEnsemble].AUC, r.Mean[mLR].AUC, yes(bars.AUCOverLR))
	fmt.Fprintf(&b, "- Ensemble cost per applicant %.4f below logistic regression %.4f: %s\n", r.Mean[mEnsemble].Cost, r.Mean[mLR].Cost, yes(bars.CostUnderLR))
	fmt.Fprintf(&b, "- Student keeps %.1f%% of the ensemble's AUC (≥ 97%%): %s\n", 100*bars.Retention, yes(bars.RetentionOK))
	fmt.Fprintf(&b, "- Student %.1f× faster at inference (≥ 5×): %s\n\n", bars.SpeedUp, yes(bars.SpeedUpOK))
	b.WriteString("## Distillation per fold\n\n")
	for f, d := range r.Distill {
		fmt.Fprintf(&b, "Fold %d:\n\n%s\n", f+1, d.Markdown())
	}
	// Attention.
	M := pipeline.NumMembers
	var sums [pipeline.NumMembers]float64
	for i := 0; i < len(r.Attention)/M; i++ {
		for m := 0; m < M; m++ {
			sums[m] += float64(r.Attention[i*M+m])
		}
	}
	b.WriteString("## Attention over members\n\nMean attention weight per member over all test applicants (heads averaged; the market member is masked out for applicants dated before it has 20 days of history):\n\n| member | weight |\n|---|---|\n")
	for m := 0; m < M; m++ {
		fmt.Fprintf(&b, "| %s | %.4f |\n", pipeline.MemberNames[m], sums[m]/float64(len(r.Attention)/M))
	}
	b.WriteString("\n![attention](attention.png)\n\n## Decision training (fold 1)\n\n")
	b.WriteString("Three decision agents with roles (optimizer, explorer, validator) reassigned every round; the scheduler divides the round's rollouts by a softmax over the validator's scores (temperature 0.5, floor 10%). ")
	fmt.Fprintf(&b, "%d role changes were logged; the first ones:\n\n", r.History)
	for i, l := range r.RoleLog {
		if i >= 8 {
			break
		}
		fmt.Fprintf(&b, "- %s\n", l)
	}
	b.WriteString("\n![reward](reward.png)\n\n## Calibration\n\n![calibration](calibration.png)\n")
	if err := os.WriteFile(filepath.Join(r.Opt.Out, "report.md"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := plotReward(r, filepath.Join(r.Opt.Out, "reward.png")); err != nil {
		return fmt.Errorf("report: reward.png: %w", err)
	}
	if err := plotAttention(r, filepath.Join(r.Opt.Out, "attention.png")); err != nil {
		return fmt.Errorf("report: attention.png: %w", err)
	}
	if err := plotCalibration(r, filepath.Join(r.Opt.Out, "calibration.png")); err != nil {
		return fmt.Errorf("report: calibration.png: %w", err)
	}
	return nil
}

func line(p *plot.Plot, name string, ys []float64, c color.Color, dashed bool) error {
	pts := make(plotter.XYs, len(ys))
	for i, y := range ys {
		pts[i] = plotter.XY{X: float64(i + 1), Y: y}
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	if len(pts) == 1 { // a line through one point draws nothing
		dot, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		dot.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(3), Shape: draw.CircleGlyph{}}
		p.Add(dot)
	}
	p.Legend.Add(name, l)
	return nil
}

func plotReward(r *Result, path string) error {
	p := plot.New()
	rlmetrics.Style(p)
	p.Title.Text = "Decision training: reward components (solid) and weights (dashed)"
	p.X.Label.Text = "round"
	p.Y.Label.Text = "mean reward component / weight"
	get := func(f func(RoundLog) float64) []float64 {
		out := make([]float64, len(r.Rounds))
		for i, l := range r.Rounds {
			out[i] = f(l)
		}
		return out
	}
	for _, s := range []struct {
		name   string
		f      func(RoundLog) float64
		c      int
		dashed bool
	}{
		{"base (-cost)", func(l RoundLog) float64 { return l.Base }, 0, false},
		{"innovation", func(l RoundLog) float64 { return l.Innov }, 1, false},
		{"safety", func(l RoundLog) float64 { return l.Safety }, 2, false},
		{"w base", func(l RoundLog) float64 { return l.WBase }, 0, true},
		{"w innovation", func(l RoundLog) float64 { return l.WInnov }, 1, true},
		{"w safety", func(l RoundLog) float64 { return l.WSafety }, 2, true},
	} {
		if err := line(p, s.name, get(s.f), palette[s.c], s.dashed); err != nil {
			return err
		}
	}
	// The legend in a column beside the axes, never over the curves.
	return rlmetrics.SavePNG(p, path, 9*vg.Inch, 5*vg.Inch)
}

func plotAttention(r *Result, path string) error {
	M := pipeline.NumMembers
	p := plot.New()
	p.Title.Text = "Mean attention weight per member, by market regime of the application date"
	p.Y.Label.Text = "weight"
	w := vg.Points(14)
	for reg := 0; reg < int(finrisk.NumRegimes); reg++ {
		vals := make(plotter.Values, M)
		n := 0.0
		for i := 0; i < len(r.Attention)/M; i++ {
			if int(r.PoolRegime[i]) != reg {
				continue
			}
			n++
			for m := 0; m < M; m++ {
				vals[m] += float64(r.Attention[i*M+m])
			}
		}
		for m := range vals {
			vals[m] /= max(n, 1)
		}
		bc, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bc.Color = palette[reg]
		bc.LineStyle.Width = 0
		bc.Offset = vg.Length(reg-1) * w
		p.Add(bc)
		p.Legend.Add(finrisk.Regime(reg).String(), bc)
	}
	p.Legend.Top = true
	p.NominalX(pipeline.MemberNames[:]...)
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}

func plotCalibration(r *Result, path string) error {
	p := plot.New()
	p.Title.Text = "Calibration of p(bad) on the pooled test folds"
	p.X.Label.Text = "mean predicted p(bad)"
	p.Y.Label.Text = "observed share of bad"
	diag, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
	diag.Color = color.Gray{160}
	diag.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(diag)
	for k, m := range []int{mLR, mEnsemble, mStudent, mTF} {
		mp, fr, cnt := finrisk.Calibration(r.PoolP[m], r.PoolY, 10)
		var pts plotter.XYs
		for i := range mp {
			if cnt[i] >= 5 {
				pts = append(pts, plotter.XY{X: mp[i], Y: fr[i]})
			}
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, s.Color = palette[k], palette[k]
		p.Add(l, s)
		p.Legend.Add(modelNames[m], l, s)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	return p.Save(6*vg.Inch, 6*vg.Inch, path)
}
