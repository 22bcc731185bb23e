package rl_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
)

// BenchmarkUpdate measures trainer overhead plus a small softmax policy's
// forward/backward, reporting tokens/s, for batches of sequences.
func BenchmarkUpdate(b *testing.B) {
	for _, seqLen := range []int{1, 16} {
		for _, alg := range []string{"GRPO", "PPO", "REINFORCE", "RLOO"} {
			b.Run(fmt.Sprintf("%s/len=%d", alg, seqLen), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 1))
				p := policies.NewSoftmax(policies.SoftmaxConfig{In: 16, Hidden: 32, Actions: 16, Value: true, Seed: 1})
				tr := newTrainer(alg, 1)
				var batch []rl.Sample
				for g := 0; g < 8; g++ {
					for k := 0; k < 8; k++ {
						s := rl.Sample{TaskID: fmt.Sprint(g), Reward: rng.Float64()}
						for t := 0; t < seqLen; t++ {
							for j := 0; j < 16; j++ {
								s.Obs = append(s.Obs, float32(rng.NormFloat64()))
							}
							s.Actions = append(s.Actions, rng.IntN(16))
						}
						batch = append(batch, s)
					}
				}
				lp, _ := p.LogProbs(batch)
				for i := range batch {
					batch[i].LogProbs = lp[i]
				}
				for b.Loop() {
					for i := range batch {
						batch[i].Version = p.Version()
					}
					if _, err := tr.Update(p, batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(64*seqLen*b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}
