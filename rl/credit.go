package rl

import (
	"slices"

	"github.com/troupe-ml/troupe/rl/internal/stats"
)

// ComponentRewards gives the rewards of decoupled, per-component group
// normalization (as GDPO, group reward-decoupled normalization policy
// optimization, proposes for multi-reward RL): each named reward component is normalized within its group,
// (c − mean)/(std + eps), and the normalized components are weighted and
// summed. Summing raw components first lets the one with the largest
// spread decide every advantage; normalizing each first gives every
// component its weight's share whatever its scale.
//
// groups[i] is episode i's group (its task id), comps[i] its components;
// a component an episode lacks counts as 0 for it. weights scales
// components by name; a component not in weights (or a nil map) weighs 1.
// A group whose component is constant contributes 0 for it. The result,
// one reward per episode, is what GRPO then normalizes within the group as
// usual (a monotone rescaling of the sum).
func ComponentRewards(groups []string, comps []map[string]float64, weights map[string]float64, eps float64) []float64 {
	out := make([]float64, len(groups))
	var names []string
	for _, c := range comps {
		for n := range c {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names) // a fixed order of float sums
	members := map[string][]int{}
	var order []string
	for i, g := range groups {
		if _, ok := members[g]; !ok {
			order = append(order, g)
		}
		members[g] = append(members[g], i)
	}
	for _, g := range order {
		idx := members[g]
		x := make([]float64, len(idx))
		for _, n := range names {
			w, ok := weights[n]
			if !ok {
				w = 1
			}
			for k, i := range idx {
				x[k] = comps[i][n]
			}
			m, s := stats.MeanStd(x)
			if s == 0 {
				continue
			}
			for k, i := range idx {
				out[i] += w * (x[k] - m) / (s + eps)
			}
		}
	}
	return out
}
