package swarm

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/rl"
)

// Trainer performs one optimisation step of a policy on a batch of samples.
// It mirrors rl.Trainer; GRPO below is swarm's own until package rl's lands.
type Trainer interface {
	Update(p rl.Policy, batch []rl.Sample) (map[string]float64, error)
}

// GRPO is Group Relative Policy Optimization (Shao et al. 2024,
// "DeepSeekMath", arXiv:2402.03300) without the KL term: samples are grouped
// by TaskID, each sample's advantage is its reward standardised within its
// group, A = (r − mean) / (std + 1e-6) (zero for a group of one or of equal
// rewards), and the loss is the PPO clipped surrogate (Schulman et al. 2017)
//
//	L = −(1/G) Σ_i (1/|o_i|) Σ_t min(ρ_it A_i, clip(ρ_it, 1−ε, 1+ε) A_i),
//	ρ_it = exp(log π(o_it) − log π_old(o_it)),
//
// where π_old are the behaviour log-probabilities recorded at sampling time.
// One Update is one optimizer step.
type GRPO struct {
	// Clip is ε of the clipped surrogate (0.2 when zero).
	Clip float64
}

// Advantages returns the group-standardised advantage of each sample.
func Advantages(batch []rl.Sample) []float64 {
	type acc struct{ n, s, s2 float64 }
	groups := map[string]*acc{}
	for _, s := range batch {
		g := groups[s.TaskID]
		if g == nil {
			g = &acc{}
			groups[s.TaskID] = g
		}
		g.n++
		g.s += s.Reward
		g.s2 += s.Reward * s.Reward
	}
	adv := make([]float64, len(batch))
	for i, s := range batch {
		g := groups[s.TaskID]
		if g.n < 2 {
			continue
		}
		mean := g.s / g.n
		v := g.s2/g.n - mean*mean
		if v < 1e-12 {
			continue
		}
		adv[i] = (s.Reward - mean) / (math.Sqrt(v) + 1e-6)
	}
	return adv
}

// Update implements Trainer.
func (g *GRPO) Update(p rl.Policy, batch []rl.Sample) (map[string]float64, error) {
	eps := g.Clip
	if eps == 0 {
		eps = 0.2
	}
	for i, s := range batch {
		if math.IsNaN(s.Reward) || math.IsInf(s.Reward, 0) {
			return nil, fmt.Errorf("swarm: GRPO: sample %d has non-finite reward %v", i, s.Reward)
		}
		if len(s.LogProbs) != len(s.Actions) {
			return nil, fmt.Errorf("swarm: GRPO: sample %d has %d log-probs for %d actions", i, len(s.LogProbs), len(s.Actions))
		}
	}
	adv := Advantages(batch)
	stats := map[string]float64{"samples": float64(len(batch))}
	var lossVal, clipped, tokens, rsum float64
	for _, s := range batch {
		rsum += s.Reward
	}
	loss := func(logp, _ [][]float32) (float64, [][]float32, [][]float32) {
		d := make([][]float32, len(logp))
		G := float64(len(logp))
		for i, lp := range logp {
			d[i] = make([]float32, len(lp))
			if len(lp) == 0 {
				continue
			}
			a := adv[i]
			inv := 1 / (G * float64(len(lp)))
			for t, l := range lp {
				ratio := math.Exp(float64(l) - float64(batch[i].LogProbs[t]))
				unc := ratio * a
				cl := math.Max(math.Min(ratio, 1+eps), 1-eps) * a
				tokens++
				if cl < unc { // the clipped branch is active: zero gradient
					lossVal -= cl * inv
					clipped++
					continue
				}
				lossVal -= unc * inv
				// d(−ρA·inv)/d logp = −ρA·inv
				d[i][t] = float32(-unc * inv)
			}
		}
		return lossVal, d, nil
	}
	if err := p.ForwardBackward(batch, loss); err != nil {
		return nil, fmt.Errorf("swarm: GRPO forward/backward: %w", err)
	}
	info, err := p.Step()
	if err != nil {
		return nil, fmt.Errorf("swarm: GRPO step: %w", err)
	}
	stats["loss"] = lossVal
	stats["grad_norm"] = info.GradNorm
	if info.Skipped {
		stats["skipped"] = 1
	}
	if tokens > 0 {
		stats["clip_frac"] = clipped / tokens
	}
	if len(batch) > 0 {
		stats["reward_mean"] = rsum / float64(len(batch))
	}
	return stats, nil
}
