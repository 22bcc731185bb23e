package textgen

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTopLogProbsTies(t *testing.T) {
	got := TopLogProbs([]float32{-1, -3, -1, -0.5, -3, -2}, 4)
	want := []TokenLogProb{{Token: 3, LogProb: -0.5}, {Token: 0, LogProb: -1}, {Token: 2, LogProb: -1}, {Token: 5, LogProb: -2}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestSampleTokenOnePass: the one-pass sampler draws from softmax(logp/T):
// empirical frequencies over many draws match the probabilities.
func TestSampleTokenOnePass(t *testing.T) {
	logp := []float32{-0.5, -2, -1.2, -4, -0.9}
	const temp = 0.7
	want := make([]float64, len(logp))
	var z float64
	for i, v := range logp {
		want[i] = math.Exp(float64(v) / temp)
		z += want[i]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	got := make([]float64, len(logp))
	for i := 0; i < n; i++ {
		got[SampleTokenOnePass(logp, GenerateOptions{Temperature: temp}, rng)]++
	}
	for i := range got {
		p := want[i] / z
		if d := math.Abs(got[i]/n - p); d > 4*math.Sqrt(p*(1-p)/n) {
			t.Errorf("token %d drawn %.4f of the time, want %.4f", i, got[i]/n, p)
		}
	}
	if SampleTokenOnePass(logp, GenerateOptions{}, rng) != 0 {
		t.Error("temperature 0 does not take the argmax")
	}
}
