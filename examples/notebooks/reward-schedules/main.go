package main

import (
	"flag"
	"fmt"
	"log"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/metrics"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/rl/reward"
)

const (
	seqLen = 6
	vocab  = 8
	batch  = 32
)

var payoff = [vocab]float64{1.0, 0.8, 0.6, 0.45, 0.3, 0.2, 0.1, 0.0}

type schedule struct {
	name string
	desc string
	make func() reward.Schedule
}

func schedules() []schedule {
	start, end := []float64{1, 1, 0.2}, []float64{1, 0.1, 1.5}
	return []schedule{
		{"constant", "w = (1, 0.5, 0.8) throughout", func() reward.Schedule { return reward.Constant{1, 0.5, 0.8} }},
		{"task-only", "w = (1, 0, 0): the unconstrained baseline", func() reward.Schedule { return reward.Constant{1, 0, 0} }},
		{"linear", "(1, 1, 0.2) → (1, 0.1, 1.5) linearly", func() reward.Schedule { return reward.Linear(start, end) }},
		{"cosine", "(1, 1, 0.2) → (1, 0.1, 1.5), cosine", func() reward.Schedule { return reward.Cosine(start, end) }},
		{"step", "(1, 1, 0.2) until 40%, then (1, 0.1, 1.5)", func() reward.Schedule { return reward.NewStep([]float64{0.4}, start, end) }},
		{"adaptive", "from (1, 1, 0.2); 10% of novelty's weight moves to safety per step while the task-reward variance is below half its peak", func() reward.Schedule {
			return &reward.Adaptive{Initial: []float64{1, 1, 0.2}, From: 1, To: 2, Threshold: 0.5, Rate: 0.1, MinFrom: 0.1}
		}},
	}
}

type result struct {
	name, desc                  string
	task, safety, novelty, dist float64 // means over the last 10% of steps
	auc                         float64 // mean task payoff over all steps
	firstSafe                   int     // first step after which the violation rate stays ≤ 5%
	log                         *metrics.Logger
	finalW                      []float64
	seconds                     float64
}

func run(s schedule, steps int, seed uint64, dir string) (*result, error) {
	rng := rand.New(rand.NewPCG(seed, 1))
	pol := policies.NewSoftmax(policies.SoftmaxConfig{In: seqLen, Actions: vocab, LR: 0.05, Seed: seed})
	tr := rl.NewGRPO(rl.GRPOConfig{Schedule: rl.Schedule{Epochs: 1, Seed: seed}})
	nov := reward.NewTextNovelty(2, 64)
	multi := reward.NewMulti(s.make(),
		reward.Component[[]int]{Name: "task", Score: func(x []int) float64 {
			var p float64
			for _, t := range x {
				p += payoff[t]
			}
			return p / float64(len(x))
		}},
		nov.Component("novelty"),
		reward.Component[[]int]{Name: "safety", Score: func(x []int) float64 {
			var v float64
			for _, t := range x {
				if t == 0 {
					v++
				}
			}
			return -v / float64(len(x))
		}},
	)
	lg, err := metrics.New(metrics.Options{Dir: filepath.Join(dir, s.name), Total: steps, Description: s.name})
	if err != nil {
		return nil, err
	}
	obs := make([]float32, seqLen*seqLen)
	for t := 0; t < seqLen; t++ {
		obs[t*seqLen+t] = 1
	}
	res := &result{name: s.name, desc: s.desc, log: lg, firstSafe: -1}
	t0 := time.Now()
	tail := max(1, steps/10)
	for step := 0; step < steps; step++ {
		outs := make([][]int, batch)
		samples := make([]rl.Sample, batch)
		for i := range outs {
			seq := make([]int, seqLen)
			lps := make([]float32, seqLen)
			for t := range seq {
				seq[t], lps[t] = pol.Act(obs[t*seqLen:(t+1)*seqLen], rng)
			}
			outs[i] = seq
			samples[i] = rl.Sample{TaskID: fmt.Sprint(step), Obs: obs, Actions: seq, LogProbs: lps, Version: pol.Version()}
		}
		r, rlog := multi.Score(float64(step)/float64(steps-1), outs)
		for i := range samples {
			samples[i].Reward = r[i]
		}
		st, err := tr.Update(pol, samples)
		if err != nil {
			return nil, fmt.Errorf("%s step %d: %w", s.name, step, err)
		}
		m := st.Map()
		maps.Copy(m, rlog.Map())
		distinct := map[string]bool{}
		for _, o := range outs {
			distinct[fmt.Sprint(o)] = true
		}
		m["distinct"] = float64(len(distinct)) / batch
		m["violations"] = -m["safety_mean"]
		if err := lg.Log(step, m); err != nil {
			return nil, err
		}
		res.auc += m["task_mean"] / float64(steps)
		if step >= steps-tail {
			res.task += m["task_mean"] / float64(tail)
			res.safety += m["violations"] / float64(tail)
			res.novelty += m["novelty_mean"] / float64(tail)
			res.dist += m["distinct"] / float64(tail)
		}
		if m["violations"] > 0.05 {
			res.firstSafe = -1
		} else if res.firstSafe < 0 {
			res.firstSafe = step
		}
		res.finalW = rlog.Weights
	}
	res.seconds = time.Since(t0).Seconds()
	if err := lg.Close(); err != nil {
		return nil, err
	}
	return res, nil
}

func main() {
	out := flag.String("out", "out/notebooks/reward-schedules", "output directory")
	steps := flag.Int("steps", 200, "GRPO steps per run")
	seed := flag.Uint64("seed", 1, "random seed")
	prof := flag.String("profile", "", "profile mode: cpu, mem, … (written under -out)")
	flag.Parse()
	stop, err := metrics.StartProfile(*prof, *out)
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	var results []*result
	for _, s := range schedules() {
		r, err := run(s, *steps, *seed, *out)
		if err != nil {
			log.Fatal(err)
		}
		results = append(results, r)
		fmt.Printf("%-9s task %.3f  violations %.3f  novelty %.3f  distinct %.2f  (%.2fs)\n", r.name, r.task, r.safety, r.novelty, r.dist, r.seconds)
	}
	if err := report(*out, *steps, *seed, results); err != nil {
		log.Fatal(err)
	}
	fmt.Println("report:", filepath.Join(*out, "report.md"))
}

func plotAll(path, title, key string, results []*result) error {
	var ss []metrics.Series
	for _, r := range results {
		x, y := r.log.Series(key)
		ss = append(ss, metrics.Series{Name: r.name, X: x, Y: smooth(y, 5)})
	}
	return metrics.PlotPNG(path, title, "step", key, ss...)
}

// smooth is a trailing moving average over k points.
func smooth(y []float64, k int) []float64 {
	out := make([]float64, len(y))
	var s float64
	for i, v := range y {
		s += v
		if i >= k {
			s -= y[i-k]
		}
		out[i] = s / float64(min(i+1, k))
	}
	return out
}

func report(dir string, steps int, seed uint64, results []*result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Reward schedules on a task with conflicting objectives\n\n")
	fmt.Fprintf(&b, "Generated by `go run ./examples/notebooks/reward-schedules -steps %d -seed %d` on %s.\n\n", steps, seed, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "A softmax policy writes %d tokens from a vocabulary of %d; GRPO, batch %d, %d steps per run. "+
		"Components: **task** (mean token payoff %v; best is token 0), **novelty** (1 − max bigram Jaccard overlap with the last 64 outputs), "+
		"**safety** (−fraction of the risky token 0). Components are normalised by running mean/std before weighting; weights are (task, novelty, safety).\n\n",
		seqLen, vocab, batch, steps, payoff)
	fmt.Fprintf(&b, "The safe optimum repeats token 1 (task 0.80, no violations); the task alone prefers token 0 (task 1.00, all violations).\n\n")
	fmt.Fprintf(&b, "| schedule | weights | task (last 10%%) | violations (last 10%%) | novelty (last 10%%) | distinct outputs | mean task over run | safe from step | final weights |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		safe := "never"
		if r.firstSafe >= 0 {
			safe = fmt.Sprint(r.firstSafe)
		}
		w := make([]string, len(r.finalW))
		for i, x := range r.finalW {
			w[i] = fmt.Sprintf("%.2f", x)
		}
		fmt.Fprintf(&b, "| %s | %s | %.3f | %.3f | %.3f | %.2f | %.3f | %s | (%s) |\n",
			r.name, r.desc, r.task, r.safety, r.novelty, r.dist, r.auc, safe, strings.Join(w, ", "))
	}
	plots := []struct{ file, title, key string }{
		{"task.png", "task payoff (batch mean, 5-step average)", "task_mean"},
		{"violations.png", "safety violations (fraction of token 0)", "violations"},
		{"novelty.png", "novelty (batch mean)", "novelty_mean"},
		{"entropy.png", "policy entropy estimate", "entropy"},
	}
	fmt.Fprintf(&b, "\n## Curves\n\n")
	for _, p := range plots {
		if err := plotAll(filepath.Join(dir, p.file), p.title, p.key, results); err != nil {
			return err
		}
		fmt.Fprintf(&b, "![%s](%s)\n\n", p.title, p.file)
	}
	for _, r := range results {
		if r.name == "adaptive" {
			if err := r.log.Plot("weights.png", "adaptive weights", "w_task", "w_novelty", "w_safety"); err != nil {
				return err
			}
			fmt.Fprintf(&b, "![adaptive weights](adaptive/weights.png)\n\n")
		}
	}
	fmt.Fprintf(&b, "Per-step metrics of every run (all components, weights, KL, clip fraction, entropy, grad norm) are in `<schedule>/metrics.csv` and `.jsonl`.\n")
	if math.IsNaN(results[0].task) {
		return fmt.Errorf("NaN in results")
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}
