package policies

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/troupe-ml/troupe/rl"
)

// TestTabularGradient checks ForwardBackward against central finite
// differences of loss = Σ c_it · log p(a_it) for both context orders.
func TestTabularGradient(t *testing.T) {
	for _, cfg := range []TabularConfig{
		{Name: "o1", Order: 1, Optimizer: "sgd", LR: 1, InitScale: 0.5, Seed: 7},
		{Name: "o2", Order: 2, Rows: 31, Optimizer: "sgd", LR: 1, InitScale: 0.5, Seed: 8},
	} {
		t.Run(cfg.Name, func(t *testing.T) {
			p := NewTabular(cfg)
			r := rand.New(rand.NewPCG(1, 2))
			batch := make([]rl.Sample, 3)
			coef := make([][]float32, len(batch))
			for i := range batch {
				for j := 0; j < 4; j++ {
					batch[i].Prompt = append(batch[i].Prompt, r.IntN(4)+'a')
				}
				for j := 0; j < 5; j++ {
					batch[i].Actions = append(batch[i].Actions, r.IntN(5)+'a')
					coef[i] = append(coef[i], float32(r.NormFloat64()))
				}
			}
			lossOf := func() float64 {
				lp, err := p.LogProbs(batch)
				if err != nil {
					t.Fatal(err)
				}
				var l float64
				for i := range lp {
					for j := range lp[i] {
						l += float64(coef[i][j]) * float64(lp[i][j])
					}
				}
				return l
			}
			err := p.ForwardBackward(batch, func(logp, _ [][]float32) (float64, [][]float32, [][]float32) {
				return 0, coef, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got := append([]float64(nil), p.grad...)
			want := make([]float64, len(got))
			const h = 1e-2
			check := func(k int) bool { // the tokens used plus a sample of the rest
				tok := k % ByteVocab
				if testing.Short() {
					return tok >= 'a' && tok <= 'e' || k%997 == 0
				}
				return (tok >= 'a'-1 && tok <= 'f') || k%97 == 0
			}
			for k := range p.W {
				if !check(k) {
					continue
				}
				w0 := p.W[k]
				p.W[k] = w0 + h
				lp := lossOf()
				p.W[k] = w0 - h
				lm := lossOf()
				p.W[k] = w0
				want[k] = (lp - lm) / (2 * h)
			}
			for k := range got {
				if !check(k) {
					got[k] = 0
				}
			}
			if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 2e-3)); d != "" {
				t.Errorf("gradient mismatch (-fd +analytic):\n%s", d)
			}
		})
	}
}
