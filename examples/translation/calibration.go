package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/troupe-ml/troupe/examples/translation/grader"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The -calibration grid: biases, temperatures and samples per prompt and
// temperature.
var (
	calBiases  = []float64{-1, -0.8, -0.6, -0.4, -0.2, 0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1, 1.2}
	calTemps   = []float64{1, 0.5, 0.25, 0.1}
	calSamples = 8
)

// calibration measures agent 2's first decision: answer "[]" (no
// terminology error) or open a list. Its first answer token is either the
// tokenizer's "[]" token or another ("[{", …); the rest of the answer
// follows from that choice. For each bias b added to the log-probability
// of "[]" at that first position only, it gives
//
//   - the greedy reward: the detection reward of the answer greedy decoding
//     would give with the bias, decoded exactly (each prompt's two greedy
//     branches, after "[]" and after the best other first token, are
//     decoded once and the bias picks one);
//   - the sampled reward at each temperature τ: the expected detection
//     reward of sampling at τ with the bias, q_b·R₀ + (1−q_b)·R₁, where
//     q_b = q·e^{b/τ}/(q·e^{b/τ}+1−q), q is the probability of "[]" under
//     softmax(logits/τ) at the first position (exact, from the trainer's
//     tempered log-probabilities), and R₀, R₁ are the mean rewards of
//     sampled answers that start with "[]" and with another token. A bias
//     on the first position leaves the distribution of the rest of the
//     answer given its first token unchanged, so this is exact in
//     expectation; R₀ and R₁ are Monte Carlo means, and where no sample
//     took a branch its greedy branch's reward stands in (Fallback counts
//     those).
//
// Bias 0 is the model as it is. A policy-gradient step on samples drawn at
// τ ascends the sampled curve at τ, while the report's figures are the
// greedy curve's: where the two peak at different biases, RL at τ moves
// the first decision away from what greedy decoding needs
// (notes/translation.md R22).
type calibration struct {
	Temps []float64
	Rows  []calRow
	// Fallback[k] counts the prompts whose samples at Temps[k] never took
	// one of the two branches.
	Fallback []int
	// N is the number of prompts.
	N int
}

type calRow struct {
	Bias float64
	// Greedy is the mean greedy reward; SaysEmpty how many prompts answer
	// "[]" greedily with this bias.
	Greedy    float64
	SaysEmpty int
	// Sampled[k] is the expected reward of sampling at Temps[k].
	Sampled []float64
	// Branch[k] is the expected reward of making the first decision alone
	// at Temps[k], between "[]" and the best other token, each branch
	// continued greedily: Σ σ((z+b)/τ)·G₀ + (1−σ)·G₁ over prompts, z the
	// log-probability of "[]" minus the other token's. It is the objective
	// whose gradient -vine-large -vine-temp τ follows; as τ → 0 it becomes
	// the greedy curve.
	Branch []float64
}

// calibrate measures large as agent 2 on tasks with rough translations
// seen, at the given biases and temperatures, with samples answers per
// prompt and temperature (seeded by seed).
func (e *env) calibrate(large *nn.LM, tasks []task, seen []string, biases, temps []float64, samples int, seed uint64) (*calibration, error) {
	if len(seen) != len(tasks) {
		return nil, fmt.Errorf("translation: calibrate: %d inputs for %d tasks", len(seen), len(tasks))
	}
	ids := e.tok.Encode("[]")
	if len(ids) != 1 {
		return nil, fmt.Errorf(`translation: calibrate: "[]" is %d tokens, not one`, len(ids))
	}
	empty, end := ids[0], e.tok.MustSpecialID(tokenizer.End)
	n := len(tasks)
	tr := nn.NewLMTrainer(large, nn.NewSGD(nn.Constant(0), 0), nn.TrainConfig{LenBucket: 32})
	cal := &calibration{Temps: temps, Fallback: make([]int, len(temps)), N: n}
	prompts := make([][]int, n)
	truth := make([][]grader.TermError, n)
	for i, t := range tasks {
		p, err := evalPrompt(large, e.tok, e.hint.msgs(t.En, seen[i]))
		if err != nil {
			return nil, err
		}
		prompts[i] = p
		truth[i] = truthErrors(t, seen[i])
	}
	grade := func(i int, tokens []int) float64 {
		return grader.ProperNounDetectionGrader{}.Grade(strings.ToValidUTF8(e.tok.DecodeSkipSpecial(tokens), "\uFFFD"), truth[i]).Normalised
	}
	budget := func(p []int) int { return max(1, min(e.maxDetTok, large.Config.MaxLen-len(p))) }
	// First position: log p("[]") and the best other token.
	lp0, lp1 := make([]float64, n), make([]float64, n)
	other := make([]int, n)
	for i, p := range prompts {
		g, err := large.Generate([][]int{p}, nn.GenerateOptions{MaxTokens: 1, TopLogProbs: 2})
		if err != nil {
			return nil, err
		}
		lp0[i], lp1[i], other[i] = math.Inf(-1), math.Inf(-1), -1
		for _, c := range g[0].TopLogProbs[0] {
			if c.Token == empty {
				lp0[i] = float64(c.LogProb)
			} else if other[i] < 0 {
				lp1[i], other[i] = float64(c.LogProb), c.Token
			}
		}
		if math.IsInf(lp0[i], -1) { // "[]" is not among the top two
			lp, err := tokenLogProb(tr, p, empty, 0)
			if err != nil {
				return nil, err
			}
			lp0[i] = lp
		}
	}
	// The two greedy branches of every prompt.
	branch := func(first func(i int) int) ([]float64, error) {
		r := make([]float64, n)
		for i, p := range prompts {
			f := first(i)
			q := append(append([]int(nil), p...), f)
			var rest []int
			if f != end && budget(p) > 1 {
				g, err := large.Generate([][]int{q}, nn.GenerateOptions{MaxTokens: budget(p) - 1, StopTokens: []int{end}})
				if err != nil {
					return nil, err
				}
				rest = g[0].Tokens
			}
			r[i] = grade(i, append([]int{f}, rest...))
		}
		return r, nil
	}
	gEmpty, err := branch(func(int) int { return empty })
	if err != nil {
		return nil, err
	}
	gList, err := branch(func(i int) int { return other[i] })
	if err != nil {
		return nil, err
	}
	// Sampled branch means at each temperature, and q = p_τ("[]").
	r0, r1, q := make([][]float64, len(temps)), make([][]float64, len(temps)), make([][]float64, len(temps))
	for k, tau := range temps {
		if !(tau > 0) {
			return nil, fmt.Errorf("translation: calibrate: temperature %v is not positive", tau)
		}
		r0[k], r1[k], q[k] = make([]float64, n), make([]float64, n), make([]float64, n)
		rng := rand.New(rand.NewPCG(seed, uint64(k)))
		for i, p := range prompts {
			lp, err := tokenLogProb(tr, p, empty, tau)
			if err != nil {
				return nil, err
			}
			q[k][i] = math.Exp(lp)
			batch := make([][]int, samples)
			for s := range batch {
				batch[s] = p
			}
			gens, err := large.Generate(batch, nn.GenerateOptions{Temperature: tau, MaxTokens: budget(p), StopTokens: []int{end}, Seed: rng.Uint64()})
			if err != nil {
				return nil, err
			}
			var s0, s1 float64
			var c0, c1 int
			for _, g := range gens {
				if len(g.Tokens) > 0 && g.Tokens[0] == empty {
					s0 += grade(i, g.Tokens)
					c0++
				} else {
					s1 += grade(i, g.Tokens)
					c1++
				}
			}
			r0[k][i], r1[k][i] = gEmpty[i], gList[i]
			if c0 > 0 {
				r0[k][i] = s0 / float64(c0)
			}
			if c1 > 0 {
				r1[k][i] = s1 / float64(c1)
			}
			if c0 == 0 || c1 == 0 {
				cal.Fallback[k]++
			}
		}
	}
	cal.Rows = calRows(lp0, lp1, gEmpty, gList, q, r0, r1, biases, temps)
	return cal, nil
}

// calRows combines the per-prompt measurements into the curves: lp0[i]
// and lp1[i] are the log-probabilities of "[]" and of the best other first
// token, gEmpty[i] and gList[i] the rewards of the two greedy branches,
// q[k][i] the probability of "[]" at temperature temps[k], and r0[k][i],
// r1[k][i] the mean rewards of answers sampled at temps[k] that start with
// "[]" and with another token.
func calRows(lp0, lp1, gEmpty, gList []float64, q, r0, r1 [][]float64, biases, temps []float64) []calRow {
	n := float64(len(lp0))
	var rows []calRow
	for _, b := range biases {
		row := calRow{Bias: b, Sampled: make([]float64, len(temps)), Branch: make([]float64, len(temps))}
		for i := range lp0 {
			if lp0[i]+b > lp1[i] {
				row.Greedy += gEmpty[i]
				row.SaysEmpty++
			} else {
				row.Greedy += gList[i]
			}
			for k, tau := range temps {
				// The bias multiplies p_τ("[]") by e^{b/τ} before
				// renormalising: q_b = q·e^{b/τ} / (q·e^{b/τ} + 1 − q).
				qb := 1 / (1 + (1-q[k][i])/q[k][i]*math.Exp(-b/tau))
				if q[k][i] == 0 {
					qb = 0
				}
				row.Sampled[k] += (qb*r0[k][i] + (1-qb)*r1[k][i]) / n
				// σ((z+b)/τ) for z = lp0 − lp1, written to stay finite.
				s0 := 1 / (1 + math.Exp((lp1[i]-lp0[i]-b)/tau))
				row.Branch[k] += (s0*gEmpty[i] + (1-s0)*gList[i]) / n
			}
		}
		row.Greedy /= n
		rows = append(rows, row)
	}
	return rows
}

// tokenLogProb is log p(tok | prompt) under softmax(logits/temp) (temp 0:
// temperature 1); tr computes log-probabilities of the model only.
func tokenLogProb(tr *nn.LMTrainer, prompt []int, tok int, temp float64) (float64, error) {
	lp, err := tr.TokenLogProbs([]nn.SeqExample{{Prompt: prompt, Target: []int{tok}, Temperature: temp}})
	if err != nil {
		return 0, err
	}
	return float64(lp[0][0]), nil
}

// markdown writes the calibration table of one detector.
func (c *calibration) markdown(b *strings.Builder, title string) {
	fmt.Fprintf(b, "### %s\n\n", title)
	tempHeader(b, []string{`bias on "[]"`, "greedy reward", "prompts answering [] greedily"}, "sampled at τ = %g", c.Temps)
	best := 0 // the best greedy reward; of equals, the smallest |bias|
	for i, r := range c.Rows {
		if d := r.Greedy - c.Rows[best].Greedy; d > 1e-12 || (d > -1e-12 && math.Abs(r.Bias) < math.Abs(c.Rows[best].Bias)) {
			best = i
		}
	}
	for i, r := range c.Rows {
		mark := ""
		if i == best {
			mark = " (greedy's best)"
		}
		fmt.Fprintf(b, "| %+.2f%s | %.4f | %d of %d |", r.Bias, mark, r.Greedy, r.SaysEmpty, c.N)
		for _, s := range r.Sampled {
			fmt.Fprintf(b, " %.4f |", s)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "\nThe first decision alone made at τ, each branch continued greedily (the objective -vine-large -vine-temp τ ascends; τ → 0 is the greedy curve):\n\n")
	tempHeader(b, []string{`bias on "[]"`}, "τ = %g", c.Temps)
	for _, r := range c.Rows {
		fmt.Fprintf(b, "| %+.2f |", r.Bias)
		for _, s := range r.Branch {
			fmt.Fprintf(b, " %.4f |", s)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "\nPrompts whose samples never took one of the two branches (its greedy branch's reward stands in):")
	for k, t := range c.Temps {
		fmt.Fprintf(b, " τ = %g: %d;", t, c.Fallback[k])
	}
	b.WriteString("\n\n")
}

// tempHeader writes a Markdown table's header: the columns named in
// fixed, then one per temperature, named by format.
func tempHeader(b *strings.Builder, fixed []string, format string, temps []float64) {
	b.WriteString("|")
	for _, f := range fixed {
		fmt.Fprintf(b, " %s |", f)
	}
	for _, t := range temps {
		fmt.Fprintf(b, " "+format+" |", t)
	}
	b.WriteString("\n|" + strings.Repeat("---|", len(fixed)+len(temps)) + "\n")
}

// plot draws the greedy curve and the sampled curves of one or more
// detectors against the bias.
func plotCalibration(path string, cals []*calibration, names []string) error {
	p := plot.New()
	p.Title.Text = `Agent 2's first decision: reward against a bias on "[]"`
	p.X.Label.Text = `bias added to log p("[]") at the first answer token`
	p.Y.Label.Text = "detection reward"
	for j, c := range cals {
		g := make(plotter.XYs, len(c.Rows))
		for i, r := range c.Rows {
			g[i] = plotter.XY{X: r.Bias, Y: r.Greedy}
		}
		l, err := plotter.NewLine(g)
		if err != nil {
			return err
		}
		l.Width = vg.Points(2)
		l.Color = plotter.DefaultLineStyle.Color
		if j > 0 {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(names[j]+", greedy", l)
		for k, tau := range c.Temps {
			s := make(plotter.XYs, len(c.Rows))
			for i, r := range c.Rows {
				s[i] = plotter.XY{X: r.Bias, Y: r.Sampled[k]}
			}
			ls, err := plotter.NewLine(s)
			if err != nil {
				return err
			}
			ls.Color = plotutil.Color(k + 1)
			if j > 0 {
				ls.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			}
			p.Add(ls)
			p.Legend.Add(fmt.Sprintf("%s, sampled at τ = %g", names[j], tau), ls)
		}
	}
	// Room below the curves for the legend.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range cals {
		for _, r := range c.Rows {
			for _, v := range append([]float64{r.Greedy}, r.Sampled...) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	p.Y.Min = lo - 1.2*max(hi-lo, 0.01)
	p.Legend.Top = false
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	return p.Save(7*vg.Inch, 5.5*vg.Inch, path)
}
