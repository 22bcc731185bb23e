// Replay compares prioritized with uniform experience replay for an
// off-policy learner on real data, with the replay buffer shared through
// NATS (rl/replay's Service on an embedded bus).
//
// The task is credit approval as a contextual bandit: applicants of the
// Statlog German Credit data arrive on days of the S&P 500 series; actors
// approve or reject them ε-greedily with the learner's latest Q-network
// (package nn), earning 1 for a good loan approved, −5 × the day's market
// loss scale for a bad one and 0 for a rejection, which reveals nothing.
// The actors send their transitions to the replay service from their own
// NATS connections; the learner samples batches, fits Q(s, a) by
// importance-weighted squared error and returns |TD error| as the new
// priorities. Uniform replay is the same service with α = 0.
//
//	go run ./examples/replay            # 30 seeds
//	go run ./examples/replay -quick     # 5 seeds, half the training
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/eval"
)

// Options choose the experiment's size.
type Options struct {
	Quick   bool
	Seeds   int     // 0: 30, or 5 with Quick
	DataDir string  // "": <repo>/data
	Alpha   float64 // prioritized replay's exponent; 0: 0.6
}

// config is the learner's configuration for a seed. The learning rate,
// width and steps per round were chosen for uniform replay on seeds 101 to
// 108, which the table does not use; prioritized replay takes Schaul et
// al.'s α = 0.6 and β₀ = 0.4 untuned.
func (o Options) config(seed uint64, prioritized bool) Config {
	c := Config{
		Seed: seed, Prioritized: prioritized, Alpha: cmp.Or(o.Alpha, 0.6), Beta0: 0.4,
		Actors: 4, PerActor: 8, Epochs: 6, Batch: 32, Steps: 8, Capacity: 2000,
		Hidden: 16, LR: 1e-3, EpsFloor: 0.05, Checkpoints: 10,
	}
	if o.Quick {
		c.Epochs = 3
	}
	return c
}

// Report holds every run's figures.
type Report struct {
	Alpha                float64 // prioritized replay's exponent
	Seeds                []uint64
	Prioritized, Uniform []result
	// References per seed: reject all, approve all, logistic regression
	// with full feedback.
	RejectAll, ApproveAll, LogReg []float64
	// Local is seed 1's prioritized run with the buffer in the process
	// instead of behind NATS: the same figures, another speed.
	Local result
}

func main() {
	quick := flag.Bool("quick", false, "5 seeds and half the training (under a minute)")
	seeds := flag.Int("seeds", 0, "number of seeds (default 30, or 5 with -quick)")
	data := flag.String("data", "", "data directory (default <repo>/data; fetched when missing)")
	alpha := flag.Float64("alpha", 0.6, "priority exponent α of prioritized replay")
	flag.Parse()
	if !(*alpha > 0 && *alpha <= 1) {
		log.Fatalf("-alpha %g: want 0 < α ≤ 1 (α = 0 is the uniform replay it is compared with)", *alpha)
	}
	if _, err := Run(Options{Quick: *quick, Seeds: *seeds, DataDir: *data, Alpha: *alpha}, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// Run trains both replays on every seed and prints the table to out.
func Run(o Options, out io.Writer) (*Report, error) {
	if o.Seeds <= 0 {
		o.Seeds = 30
		if o.Quick {
			o.Seeds = 5
		}
	}
	t, err := loadTask(o.DataDir)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{Name: "replay-example", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	service := serviceBackend(b)

	rep := &Report{Alpha: o.config(1, true).Alpha}
	for seed := uint64(1); seed <= uint64(o.Seeds); seed++ {
		s := t.newSplit(seed)
		rej, app, lr, err := t.baselines(s)
		if err != nil {
			return nil, fmt.Errorf("seed %d: %w", seed, err)
		}
		rep.Seeds = append(rep.Seeds, seed)
		rep.RejectAll, rep.ApproveAll, rep.LogReg = append(rep.RejectAll, rej), append(rep.ApproveAll, app), append(rep.LogReg, lr)
		for _, prioritized := range []bool{true, false} {
			name := fmt.Sprintf("credit-%d-uniform", seed)
			if prioritized {
				name = fmt.Sprintf("credit-%d-prioritized", seed)
			}
			res, err := train(ctx, t, s, o.config(seed, prioritized), service, name)
			if err != nil {
				return nil, fmt.Errorf("seed %d, %s: %w", seed, name, err)
			}
			if prioritized {
				rep.Prioritized = append(rep.Prioritized, res)
			} else {
				rep.Uniform = append(rep.Uniform, res)
			}
			fmt.Fprintf(out, "seed %2d %-11s test cost %.3f  AUC %.3f  (%.1f s)\n", seed, kind(prioritized), res.Cost, res.AUC, res.Wall.Seconds())
		}
	}
	rep.Local, err = train(ctx, t, t.newSplit(1), o.config(1, true), localBackend, "local")
	if err != nil {
		return nil, fmt.Errorf("local replay: %w", err)
	}
	rep.print(out)
	return rep, nil
}

func kind(prioritized bool) string {
	if prioritized {
		return "prioritized"
	}
	return "uniform"
}

func field(rs []result, f func(result) float64) []float64 {
	out := make([]float64, len(rs))
	for k, r := range rs {
		out[k] = f(r)
	}
	return out
}

func meanSD(xs []float64) string {
	m, sd := eval.MeanSD(xs)
	return fmt.Sprintf("%.3f ± %.3f", m, sd)
}

func (r *Report) print(out io.Writer) {
	cost := func(x result) float64 { return x.Cost }
	curve := func(x result) float64 { return x.MeanCurve() }
	auc := func(x result) float64 { return x.AUC }
	online := func(x result) float64 { return x.Online }
	fmt.Fprintf(out, "\nCredit approval bandit, German Credit + S&P 500 regimes, %d seeds (mean ± sd; cost per applicant, lower is better)\n\n", len(r.Seeds))
	fmt.Fprintf(out, "| replay | final test cost | mean test cost over training | final test AUC | cost per arrival while training |\n|---|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		rs   []result
	}{{fmt.Sprintf("prioritized (α %g, β 0.4→1)", r.Alpha), r.Prioritized}, {"uniform", r.Uniform}} {
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s |\n", row.name, meanSD(field(row.rs, cost)), meanSD(field(row.rs, curve)), meanSD(field(row.rs, auc)), meanSD(field(row.rs, online)))
	}
	diff := func(f func(result) float64) string {
		return eval.PairedBootstrap(field(r.Prioritized, f), field(r.Uniform, f), 10000, 1).String()
	}
	fmt.Fprintf(out, "| prioritized − uniform, paired over seeds [95%% bootstrap] | %s | %s | %s | %s |\n", diff(cost), diff(curve), diff(auc), diff(online))
	for _, row := range []struct {
		name string
		rs   []result
	}{{"prioritized", r.Prioritized}, {"uniform", r.Uniform}} {
		var mix [3]int
		for _, x := range row.rs {
			for k, c := range x.Mix {
				mix[k] += c
			}
		}
		n := float64(mix[0] + mix[1] + mix[2])
		fmt.Fprintf(out, "\n%s replay sampled %.1f%% rejections, %.1f%% good approvals, %.1f%% bad approvals", row.name, 100*float64(mix[0])/n, 100*float64(mix[1])/n, 100*float64(mix[2])/n)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "\nreferences on the same test folds: reject all %s, approve all %s, logistic regression with full feedback %s\n",
		meanSD(r.RejectAll), meanSD(r.ApproveAll), meanSD(r.LogReg))

	var svcTime time.Duration
	svcSampled := 0
	for _, x := range append(append([]result(nil), r.Prioritized...), r.Uniform...) {
		svcTime += x.ReplayTime
		svcSampled += x.Sampled
	}
	p1 := r.Prioritized[0]
	same := p1.Cost == r.Local.Cost && p1.AUC == r.Local.AUC && p1.Online == r.Local.Online
	fmt.Fprintf(out, "\nreplay overhead (learner's sample + update calls, batches of 32): through NATS %.0f samples/s (all runs), local buffer %.0f samples/s (seed 1, prioritized)\n",
		float64(svcSampled)/svcTime.Seconds(), float64(r.Local.Sampled)/r.Local.ReplayTime.Seconds())
	fmt.Fprintf(out, "seed 1 prioritized: run %.1f s through NATS, %.1f s with a local buffer; same figures: %v\n", p1.Wall.Seconds(), r.Local.Wall.Seconds(), same)
}
