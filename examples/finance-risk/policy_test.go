package main

import (
	"math"
	"math/rand/v2"
	"testing"

	"examples/finance-risk/finrisk"
)

// synthApplicants draws applicants whose fused logit z is calibrated:
// P(bad) = sigmoid(z).
func synthApplicants(n int, seed uint64) []*applicant {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]*applicant, n)
	for i := range out {
		z := rng.NormFloat64()*1.2 - 1
		reg := finrisk.Regime(rng.IntN(3))
		bad := rng.Float64() < finrisk.Sigmoid(z)
		o := observation(z, z, reg, false)
		out[i] = &applicant{obs: o, cf: [2][]float32{o, o}, bad: bad, scale: reg.LossScale()}
	}
	return out
}

func meanCost(apps []*applicant, decide func(*applicant) int) float64 {
	var c float64
	for _, ap := range apps {
		c -= baseReward(decide(ap), ap)
	}
	return c / float64(len(apps))
}

func TestTrainDecisionApproachesBayes(t *testing.T) {
	train, valid, test := synthApplicants(1500, 1), synthApplicants(300, 2), synthApplicants(3000, 3)
	bayes := meanCost(test, func(ap *applicant) int {
		z := float64(ap.obs[0])
		if finrisk.Sigmoid(z) > finrisk.BayesThreshold(ap.scale) {
			return Reject
		}
		return Approve
	})
	res := TrainDecision(train, valid, 3, 40, 192, 4, DefaultReward(), 7)
	got := meanCost(test, func(ap *applicant) int { return res.Policy.Greedy(ap.obs) })
	rejectAll := meanCost(test, func(*applicant) int { return Reject })
	t.Logf("policy cost %.4f, Bayes %.4f, reject-all %.4f, W %v", got, bayes, rejectAll, res.Policy.W)
	// The policy is noisy (small validation sample picks the snapshot): it
	// must come within 0.07 of the Bayes rule and beat rejecting everyone.
	if got > bayes+0.07 || got >= rejectAll {
		t.Fatalf("policy cost %.4f, Bayes rule %.4f", got, bayes)
	}
	if len(res.Rounds) != 40 || len(res.History) == 0 {
		t.Fatalf("%d rounds, %d role changes", len(res.Rounds), len(res.History))
	}
	for _, r := range res.Rounds {
		tot := 0
		for _, a := range r.Rollouts {
			tot += a
		}
		if tot != 192 {
			t.Fatalf("rollouts %v", r.Rollouts)
		}
	}
	// The weights move from innovation to safety.
	first, last := res.Rounds[0], res.Rounds[len(res.Rounds)-1]
	if !(first.WInnov > last.WInnov && first.WSafety < last.WSafety && math.Abs(last.WInnov) < 1e-12) {
		t.Fatalf("weights %+v -> %+v", first, last)
	}
}
