package rl

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestLossGradientFiniteDifference checks ∂L/∂logp and ∂L/∂V of every
// objective against central finite differences of the loss, in float64, at
// points where no clip boundary is within the step.
func TestLossGradientFiniteDifference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, tc := range []struct {
		name string
		sp   pgSpec
	}{
		{"clipped/seq-mean/kl", pgSpec{obj: clippedSurrogate, clipLow: 0.2, clipHigh: 0.28, klCoef: 0.1, agg: SeqMean}},
		{"clipped/seq-mean/entropy", pgSpec{obj: clippedSurrogate, clipLow: 0.2, clipHigh: 0.2, entCoef: 0.3, entBase: -1.1, agg: SeqMean}},
		{"clipped/token-mean/value", pgSpec{obj: clippedSurrogate, clipLow: 0.2, clipHigh: 0.2, agg: TokenMean, vclip: 0.2, vcoef: 0.5}},
		{"clipped/dual/seq-mean", pgSpec{obj: clippedSurrogate, clipLow: 0.2, clipHigh: 0.2, truncIS: 1.3, agg: SeqMean}},
		{"weighted/seq-sum", pgSpec{obj: weightedPG, truncIS: 2, agg: SeqSum}},
		{"weighted/seq-sum/entropy", pgSpec{obj: weightedPG, truncIS: 2, entCoef: 0.2, entBase: -0.7, agg: SeqSum}},
		{"weighted/token-mean/kl", pgSpec{obj: weightedPG, truncIS: 1.5, klCoef: 0.3, agg: TokenMean}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := tc.sp
			lens := []int{3, 1, 4}
			logp := make([][]float32, len(lens))
			vals := make([][]float32, len(lens))
			for i, n := range lens {
				var a []float64
				var old, ref []float32
				var ret, v0 []float64
				for k := 0; k < n; k++ {
					l := -0.2 - 2*rng.Float64()
					logp[i] = append(logp[i], float32(l))
					// ratios spread over [0.5, 1.6] so both clip branches occur
					old = append(old, float32(l-math.Log(0.5+1.1*rng.Float64())))
					ref = append(ref, float32(l+0.5*rng.NormFloat64()))
					a = append(a, rng.NormFloat64())
					v := rng.NormFloat64()
					vals[i] = append(vals[i], float32(v))
					v0 = append(v0, v+0.4*rng.NormFloat64())
					ret = append(ret, rng.NormFloat64())
				}
				sp.adv = append(sp.adv, a)
				sp.old = append(sp.old, old)
				sp.ref = append(sp.ref, ref)
				sp.returns = append(sp.returns, ret)
				sp.oldValue = append(sp.oldValue, v0)
			}
			if sp.klCoef == 0 {
				sp.ref = nil
			}
			if sp.vcoef == 0 {
				sp.returns, sp.oldValue = nil, nil
			}
			idx := []int{0, 1, 2}
			lf, st := sp.lossFor(idx)
			_, dl, dv := lf(logp, vals)
			if st.clipFrac == 0 && sp.obj == clippedSurrogate {
				t.Log("note: no token clipped")
			}
			const h = 1e-3
			eval := func() float64 { l, _, _ := lf(logp, vals); return l }
			check := func(what string, x [][]float32, g [][]float32) {
				for i := range x {
					for k := range x[i] {
						o := x[i][k]
						x[i][k] = o + h
						lp := eval()
						x[i][k] = o - h
						lm := eval()
						x[i][k] = o
						num := (lp - lm) / (2 * h)
						if math.Abs(num-float64(g[i][k])) > 2e-3*math.Max(1, math.Abs(num)) {
							t.Errorf("%s[%d][%d]: analytic %.6g numeric %.6g", what, i, k, g[i][k], num)
						}
					}
				}
			}
			check("dlogp", logp, dl)
			if sp.returns != nil {
				check("dvalue", vals, dv)
			}
		})
	}
}

func TestGAE(t *testing.T) {
	r := []float64{0, 1, 0, 2}
	v := []float64{0.5, -0.2, 0.3, 1}
	g, l := 0.9, 0.8
	adv, ret := GAE(r, v, g, l)
	for t0 := range r {
		// direct sum Σ_l (γλ)^l δ_{t+l}
		var want float64
		for k := t0; k < len(r); k++ {
			next := 0.0
			if k+1 < len(r) {
				next = v[k+1]
			}
			delta := r[k] + g*next - v[k]
			want += math.Pow(g*l, float64(k-t0)) * delta
		}
		if math.Abs(adv[t0]-want) > 1e-12 || math.Abs(ret[t0]-(want+v[t0])) > 1e-12 {
			t.Errorf("t=%d: adv %.6g want %.6g", t0, adv[t0], want)
		}
	}
	// λ=1: advantage is the discounted return minus the value
	adv, _ = GAE(r, v, 1, 1)
	if math.Abs(adv[0]-(3-0.5)) > 1e-12 {
		t.Errorf("λ=1 advantage %.6g, want 2.5", adv[0])
	}
}

// recordingPolicy is a Policy whose log-probs are fixed (−1 per action); it
// records the gradient dL/dlogp that each ForwardBackward receives, keyed by
// the sample's Obs[0].
type recordingPolicy struct {
	version int64
	dlogp   map[float32][]float32
}

func (p *recordingPolicy) logp(batch []Sample) [][]float32 {
	out := make([][]float32, len(batch))
	for i, s := range batch {
		out[i] = make([]float32, len(s.Actions))
		for t := range out[i] {
			out[i][t] = -1
		}
	}
	return out
}

func (p *recordingPolicy) LogProbs(batch []Sample) ([][]float32, error) { return p.logp(batch), nil }

func (p *recordingPolicy) ForwardBackward(batch []Sample, loss LossFunc) error {
	_, d, _ := loss(p.logp(batch), nil)
	for i, s := range batch {
		p.dlogp[s.Obs[0]] = d[i]
	}
	return nil
}

func (p *recordingPolicy) Step() (StepInfo, error) { p.version++; return StepInfo{}, nil }
func (p *recordingPolicy) Version() int64          { return p.version }

// TestGroupAdvantages checks GRPO's advantages (r − mean)/(std+ε) within each
// TaskID through the gradient the policy receives: on-policy (ratio 1, no
// clipping) with single-action samples and SeqMean aggregation,
// dL/dlogp_i = −A_i/N over the N kept samples. Groups of equal rewards are
// skipped when SkipEqualGroups is set.
func TestGroupAdvantages(t *testing.T) {
	groups := map[string][]float64{"a": {1, 3}, "b": {0, 4, 2}, "c": {7, 7}}
	order := []string{"a", "b", "c", "b", "a", "c", "b"} // interleaved TaskIDs
	next := map[string]int{}
	var batch []Sample
	want := map[float32]float64{}
	for i, id := range order {
		r := groups[id][next[id]]
		next[id]++
		batch = append(batch, Sample{TaskID: id, Obs: []float32{float32(i)}, Actions: []int{0}, Reward: r, OnPolicy: true})
		if id == "c" {
			continue
		}
		var m, v float64
		for _, x := range groups[id] {
			m += x / float64(len(groups[id]))
		}
		for _, x := range groups[id] {
			v += (x - m) * (x - m) / float64(len(groups[id]))
		}
		want[float32(i)] = (r - m) / (math.Sqrt(v) + 1e-4)
	}
	p := &recordingPolicy{dlogp: map[float32][]float32{}}
	st, err := NewGRPO(GRPOConfig{SkipEqualGroups: true}).Update(p, batch)
	if err != nil {
		t.Fatal(err)
	}
	if st.SkippedGroups != 1 || st.Samples != 5 || st.Steps != 1 {
		t.Fatalf("skipped %d groups, %d samples, %d steps; want 1, 5, 1", st.SkippedGroups, st.Samples, st.Steps)
	}
	checkAdvantages(t, p, want)
	// groupBy keeps first-seen order.
	g := groupBy(batch)
	if len(g) != 3 || fmt.Sprint(g) != "[[0 4] [1 3 6] [2 5]]" {
		t.Fatalf("groups %v", g)
	}
}

// TestGRPOMaxImportanceWeight: a stale sample (behaviour log-prob −8, now
// −1: ratio e⁷) with a negative advantage pushes with −A·ρ/N unbounded,
// and with MaxImportanceWeight 3 not at all (dual clip); a positive one is
// clipped either way, and an on-policy pair of samples is untouched.
func TestGRPOMaxImportanceWeight(t *testing.T) {
	batch := []Sample{
		{TaskID: "stale", Obs: []float32{0}, Actions: []int{0}, LogProbs: []float32{-8}, Reward: 0},
		{TaskID: "stale", Obs: []float32{1}, Actions: []int{0}, LogProbs: []float32{-8}, Reward: 1},
		{TaskID: "fresh", Obs: []float32{2}, Actions: []int{0}, LogProbs: []float32{-1}, Reward: 0},
		{TaskID: "fresh", Obs: []float32{3}, Actions: []int{0}, LogProbs: []float32{-1}, Reward: 1},
	}
	a := 0.5 / (0.5 + 1e-4) // |advantage| of a two-sample group with rewards 0 and 1
	for _, c := range []float64{0, 3} {
		p := &recordingPolicy{dlogp: map[float32][]float32{}}
		if _, err := NewGRPO(GRPOConfig{MaxImportanceWeight: c}).Update(p, batch); err != nil {
			t.Fatal(err)
		}
		want := map[float32]float64{0: a * math.Exp(7) / 4, 1: 0, 2: a / 4, 3: -a / 4}
		if c > 0 {
			want[0] = 0
		}
		for obs, w := range want {
			if g := float64(p.dlogp[obs][0]); math.Abs(g-w) > 1e-3*math.Max(1, math.Abs(w)) {
				t.Errorf("MaxImportanceWeight %g, sample %v: dL/dlogp %.6g, want %.6g", c, obs, g, w)
			}
		}
	}
}

// TestGroupAdvantagesPositiveOnly checks GRPOConfig.PositiveOnly: only the
// samples above their group's mean reach the policy, with the advantages
// of the full group, and the loss is their mean (dL/dlogp_i = −A_i/N over
// the N kept); a group whose rewards are all equal contributes nothing.
func TestGroupAdvantagesPositiveOnly(t *testing.T) {
	rewards := []float64{1, 3, 0, 4, 2, 7, 7} // groups a: 1 3; b: 0 4 2; c: 7 7
	ids := []string{"a", "a", "b", "b", "b", "c", "c"}
	var batch []Sample
	for i, r := range rewards {
		batch = append(batch, Sample{TaskID: ids[i], Obs: []float32{float32(i)}, Actions: []int{0}, Reward: r, OnPolicy: true})
	}
	sd := math.Sqrt(8.0 / 3) // population std of b
	want := map[float32]float64{
		1: 1 / (1 + 1e-4),  // a: mean 2, std 1
		3: 2 / (sd + 1e-4), // b: mean 2
	}
	p := &recordingPolicy{dlogp: map[float32][]float32{}}
	st, err := NewGRPO(GRPOConfig{PositiveOnly: true}).Update(p, batch)
	if err != nil {
		t.Fatal(err)
	}
	if st.DroppedNegative != 5 || st.Samples != 2 || st.Map()["dropped_negative"] != 5 {
		t.Fatalf("dropped %d negative, %d samples; want 5, 2", st.DroppedNegative, st.Samples)
	}
	checkAdvantages(t, p, want)
}

// TestGroupAdvantagesNoCenter checks GRPOConfig.NoCenter: the rewards are
// the advantages, scaled by the group's root mean square (or not, with
// NoStdScale), and groups whose rewards are all equal but non-zero still
// train.
func TestGroupAdvantagesNoCenter(t *testing.T) {
	rewards := []float64{1, 3, -2, 0.5, 0.5} // groups a: 1 3; b: -2; c: 0.5 0.5
	ids := []string{"a", "a", "b", "c", "c"}
	var batch []Sample
	for i, r := range rewards {
		batch = append(batch, Sample{TaskID: ids[i], Obs: []float32{float32(i)}, Actions: []int{0}, Reward: r, OnPolicy: true})
	}
	for _, tc := range []struct {
		name string
		cfg  GRPOConfig
		want map[float32]float64
	}{
		{"rms", GRPOConfig{NoCenter: true}, map[float32]float64{
			0: 1 / (math.Sqrt(5) + 1e-4), 1: 3 / (math.Sqrt(5) + 1e-4), // a: rms √5
			2: -2 / (2 + 1e-4), 3: 0.5 / (0.5 + 1e-4), 4: 0.5 / (0.5 + 1e-4),
		}},
		{"no-std", GRPOConfig{NoCenter: true, NoStdScale: true}, map[float32]float64{
			0: 1, 1: 3, 2: -2, 3: 0.5, 4: 0.5,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &recordingPolicy{dlogp: map[float32][]float32{}}
			if _, err := NewGRPO(tc.cfg).Update(p, batch); err != nil {
				t.Fatal(err)
			}
			checkAdvantages(t, p, tc.want)
		})
	}
}

// checkAdvantages checks that p was trained on exactly the samples of want
// (keyed by their observation), each with the advantage given: on-policy
// with SeqMean over N single-action samples, dL/dlogp_i = −A_i/N.
func checkAdvantages(t *testing.T, p *recordingPolicy, want map[float32]float64) {
	t.Helper()
	if len(p.dlogp) != len(want) {
		t.Fatalf("policy saw %d samples, want %d", len(p.dlogp), len(want))
	}
	for id, a := range want {
		d, ok := p.dlogp[id]
		if !ok {
			t.Fatalf("sample %g not trained on", id)
		}
		if got := -float64(d[0]) * float64(len(want)); math.Abs(got-a) > 1e-6*math.Max(1, math.Abs(a)) {
			t.Errorf("sample %g: advantage %.7g, want %.7g", id, got, a)
		}
	}
}

// TestMissingLogProbs: a sample without behaviour log-probs is an error
// naming it, unless it is marked OnPolicy, when the current policy's
// log-probs stand in (ratio 1).
func TestMissingLogProbs(t *testing.T) {
	batch := []Sample{
		{TaskID: "q", Obs: []float32{0}, Actions: []int{0}, LogProbs: []float32{-1}, Reward: 1},
		{TaskID: "q", Obs: []float32{1}, Actions: []int{0}, Reward: 0, Version: 3},
	}
	for _, tr := range []Trainer{NewGRPO(GRPOConfig{}), NewRLOO(RLOOConfig{}), NewREINFORCE(REINFORCEConfig{})} {
		_, err := tr.Update(&recordingPolicy{dlogp: map[float32][]float32{}}, batch)
		if !errors.Is(err, ErrNoLogProbs) || !strings.Contains(err.Error(), `sample 1 (task "q", version 3)`) {
			t.Errorf("%T: got %v, want ErrNoLogProbs naming sample 1", tr, err)
		}
	}
	batch[1].OnPolicy = true
	st, err := NewGRPO(GRPOConfig{}).Update(&recordingPolicy{dlogp: map[float32][]float32{}}, batch)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ratio != 1 {
		t.Errorf("ratio %v with on-policy log-probs, want 1", st.Ratio)
	}
}

// TestPolicyLossValue: GRPO's PolicyLoss is the clipped surrogate at the
// step's ratio, here off-policy and non-zero, computed by hand; with
// ScoreAfter, PolicyLossAfter scores the parameters after the step (the
// recording policy's log-probs never change, so it is the same value).
func TestPolicyLossValue(t *testing.T) {
	// The policy scores every action −1: ratios 1.5 and 0.9.
	batch := []Sample{
		{TaskID: "q", Obs: []float32{0}, Actions: []int{0}, LogProbs: []float32{float32(-1 - math.Log(1.5))}, Reward: 1},
		{TaskID: "q", Obs: []float32{1}, Actions: []int{0}, LogProbs: []float32{float32(-1 - math.Log(0.9))}, Reward: 0},
	}
	st, err := NewGRPO(GRPOConfig{Schedule: Schedule{ScoreAfter: true}}).Update(&recordingPolicy{dlogp: map[float32][]float32{}}, batch)
	if err != nil {
		t.Fatal(err)
	}
	A := 0.5 / (0.5 + 1e-4)
	// −min(1.5A, 1.2A) for the first, −min(−0.9A, −0.9A) for the second, each weighing ½.
	want := (-1.2*A + 0.9*A) / 2
	if math.Abs(st.PolicyLoss-want) > 1e-6 || math.Abs(st.Loss-want) > 1e-6 {
		t.Errorf("policy loss %.7g, loss %.7g, want %.7g", st.PolicyLoss, st.Loss, want)
	}
	if math.Abs(st.PolicyLossAfter-want) > 1e-6 || st.Map()["policy_loss_after"] != st.PolicyLossAfter {
		t.Errorf("policy loss after %.7g, want %.7g", st.PolicyLossAfter, want)
	}
}
