package rl_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
)

// GRPO on a 4-armed bandit: groups of 8 pulls share a TaskID, the arm paying
// most is learnt.
func ExampleGRPO() {
	payoff := []float64{0.1, 0.7, 0.3, 0.2}
	rng := rand.New(rand.NewPCG(1, 2))
	p := policies.NewSoftmax(policies.SoftmaxConfig{In: 1, Actions: 4, LR: 0.1})
	grpo := rl.NewGRPO(rl.GRPOConfig{SkipEqualGroups: true})
	obs := []float32{1}
	for it := 0; it < 100; it++ {
		var batch []rl.Sample
		for k := 0; k < 8; k++ {
			a, lp := p.Act(obs, rng)
			batch = append(batch, rl.Sample{
				TaskID: fmt.Sprint(it), Obs: obs, Actions: []int{a},
				LogProbs: []float32{lp}, Version: p.Version(),
				Reward: payoff[a] + 0.1*rng.NormFloat64(),
			})
		}
		if _, err := grpo.Update(p, batch); err != nil {
			panic(err)
		}
	}
	fmt.Printf("π(best arm) > 0.9: %v\n", p.Probs(nil, obs)[1] > 0.9)
	// Output: π(best arm) > 0.9: true
}

func ExampleStats_Map() {
	st := rl.Stats{RewardMean: 0.5, Samples: 16}
	m := st.Map()
	fmt.Println(m["reward_mean"], m["samples"])
	// Output: 0.5 16
}

// GAE with λ = 1 and zero values is the discounted return: a reward of 1 at
// the last of three steps, discounted by γ = 0.9, is worth 0.81 at the first.
func ExampleGAE() {
	adv, ret := rl.GAE([]float64{0, 0, 1}, []float64{0, 0, 0}, 0.9, 1)
	fmt.Printf("%.2f %.2f\n", adv, ret)
	// Output: [0.81 0.90 1.00] [0.81 0.90 1.00]
}
