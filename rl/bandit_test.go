package rl_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/policies"
)

// bandit is a contextual Bernoulli bandit: context c (one-hot observation)
// and arm a pay 1 with probability means[c][a]. One context is a plain
// multi-armed bandit.
type bandit struct {
	means [][]float64
}

func (b bandit) obs(c int) []float32 {
	o := make([]float32, len(b.means))
	o[c] = 1
	return o
}

// expected returns the policy's expected reward, the optimum and the
// uniform-policy (chance) value, averaged over contexts.
func (b bandit) expected(p *policies.Softmax) (got, opt, chance float64) {
	for c, m := range b.means {
		pr := p.Probs(nil, b.obs(c))
		best := 0.0
		for a, mu := range m {
			got += pr[a] * mu
			chance += mu / float64(len(m))
			if mu > best {
				best = mu
			}
		}
		opt += best
	}
	n := float64(len(b.means))
	return got / n, opt / n, chance / n
}

// collect samples groups×size single-action samples; each group shares a
// context and a TaskID.
func (b bandit) collect(p *policies.Softmax, rng *rand.Rand, iter, groups, size int) []rl.Sample {
	var out []rl.Sample
	for g := 0; g < groups; g++ {
		c := rng.IntN(len(b.means))
		o := b.obs(c)
		for k := 0; k < size; k++ {
			a, lp := p.Act(o, rng)
			r := 0.0
			if rng.Float64() < b.means[c][a] {
				r = 1
			}
			out = append(out, rl.Sample{
				TaskID: fmt.Sprintf("%d/%d", iter, g), Obs: o,
				Actions: []int{a}, LogProbs: []float32{lp},
				Version: p.Version(), Reward: r,
			})
		}
	}
	return out
}

var (
	multiArmed = bandit{means: [][]float64{{0.2, 0.5, 0.3, 0.9, 0.4, 0.1, 0.6, 0.35}}}
	contextual = bandit{means: [][]float64{
		{0.9, 0.2, 0.3, 0.1},
		{0.1, 0.2, 0.9, 0.3},
		{0.3, 0.9, 0.1, 0.2},
		{0.2, 0.1, 0.3, 0.9},
	}}
)

func newTrainer(name string, seed uint64) rl.Trainer {
	sch := rl.Schedule{Epochs: 2, MiniBatches: 2, Seed: seed}
	switch name {
	case "GRPO":
		return rl.NewGRPO(rl.GRPOConfig{Schedule: sch, SkipEqualGroups: true})
	case "PPO":
		return rl.NewPPO(rl.PPOConfig{Schedule: sch})
	case "REINFORCE":
		return rl.NewREINFORCE(rl.REINFORCEConfig{Schedule: rl.Schedule{Seed: seed}})
	case "RLOO":
		return rl.NewRLOO(rl.RLOOConfig{Schedule: rl.Schedule{Seed: seed}})
	}
	panic(name)
}

// TestBandits checks that every algorithm drives the expected reward of a
// softmax policy to at least 90% of the way from chance to the known optimum
// on a multi-armed and a contextual Bernoulli bandit.
func TestBandits(t *testing.T) {
	for _, env := range []struct {
		name string
		b    bandit
	}{{"multi-armed", multiArmed}, {"contextual", contextual}} {
		for _, alg := range []string{"GRPO", "PPO", "REINFORCE", "RLOO"} {
			t.Run(env.name+"/"+alg, func(t *testing.T) {
				const iters, groups, size = 150, 8, 8
				rng := rand.New(rand.NewPCG(7, 11))
				p := policies.NewSoftmax(policies.SoftmaxConfig{
					In: len(env.b.means), Actions: len(env.b.means[0]),
					Value: alg == "PPO", LR: 0.05, Seed: 1,
				})
				tr := newTrainer(alg, 3)
				_, opt, chance := env.b.expected(p)
				for it := 0; it < iters; it++ {
					batch := env.b.collect(p, rng, it, groups, size)
					if _, err := tr.Update(p, batch); err != nil {
						t.Fatal(err)
					}
				}
				got, _, _ := env.b.expected(p)
				frac := (got - chance) / (opt - chance)
				t.Logf("expected reward %.3f (chance %.3f, optimum %.3f): %.1f%% of the gap closed", got, chance, opt, 100*frac)
				if frac < 0.9 {
					t.Errorf("%s closed only %.1f%% of the gap to the optimum", alg, 100*frac)
				}
			})
		}
	}
}

// TestStaleSamplesDropped mixes samples from several versions and checks that
// those beyond MaxStaleness are dropped and counted.
func TestStaleSamplesDropped(t *testing.T) {
	p := policies.NewSoftmax(policies.SoftmaxConfig{In: 1, Actions: 2, Seed: 1})
	for i := 0; i < 10; i++ { // advance the version to 10
		p.Step()
	}
	var batch []rl.Sample
	for v := int64(0); v <= 10; v++ {
		for k := 0; k < 2; k++ {
			batch = append(batch, rl.Sample{TaskID: "t", Obs: []float32{1}, Actions: []int{k}, LogProbs: []float32{-0.69}, Version: v, Reward: float64(k)})
		}
	}
	for _, alg := range []string{"GRPO", "REINFORCE", "RLOO"} {
		var tr rl.Trainer
		sch := rl.Schedule{MaxStaleness: 3}
		switch alg {
		case "GRPO":
			tr = rl.NewGRPO(rl.GRPOConfig{Schedule: sch})
		case "REINFORCE":
			tr = rl.NewREINFORCE(rl.REINFORCEConfig{Schedule: sch})
		case "RLOO":
			tr = rl.NewRLOO(rl.RLOOConfig{Schedule: sch})
		}
		v0 := p.Version()
		st, err := tr.Update(p, batch)
		if err != nil {
			t.Fatal(err)
		}
		// versions v0-3..v0 are kept: 4 versions × 2 samples
		kept := 0
		for _, s := range batch {
			if v0-s.Version <= 3 {
				kept++
			}
		}
		if st.Dropped != len(batch)-kept || st.Samples != kept {
			t.Errorf("%s: dropped %d kept %d, want %d and %d", alg, st.Dropped, st.Samples, len(batch)-kept, kept)
		}
	}
	st, err := rl.NewGRPO(rl.GRPOConfig{Schedule: rl.Schedule{MaxStaleness: 1}}).Update(p, batch[:4])
	if err != rl.ErrEmptyBatch || st.Dropped != 4 {
		t.Errorf("all-stale batch: err %v dropped %d", err, st.Dropped)
	}
}

// TestGRPOKLToReference checks that the KL penalty holds the policy near a
// frozen reference: with a large β the policy moves less than without.
func TestGRPOKLToReference(t *testing.T) {
	run := func(beta float64) (kl float64, got float64) {
		rng := rand.New(rand.NewPCG(5, 5))
		p := policies.NewSoftmax(policies.SoftmaxConfig{In: 1, Actions: 8, LR: 0.05, Seed: 1})
		ref := p.Clone()
		tr := rl.NewGRPO(rl.GRPOConfig{KLPenalty: rl.KLPenalty{Ref: ref, KLCoef: beta}})
		var st rl.Stats
		for it := 0; it < 100; it++ {
			batch := multiArmed.collect(p, rng, it, 4, 8)
			var err error
			if st, err = tr.Update(p, batch); err != nil {
				t.Fatal(err)
			}
		}
		got, _, _ = multiArmed.expected(p)
		return st.KL, got
	}
	kl0, r0 := run(0)
	kl1, r1 := run(1)
	t.Logf("β=0: KL %.3f reward %.3f; β=1: KL %.3f reward %.3f", kl0, r0, kl1, r1)
	if !(kl1 < kl0/2) || kl0 <= 0 {
		t.Errorf("KL penalty did not restrain the policy: KL %.3f (β=0) vs %.3f (β=1)", kl0, kl1)
	}
}

// TestPPOCorridor trains PPO with GAE on a multi-step task: a corridor of 6
// cells, start at 0, actions left/right, reward 1 on reaching cell 5 within 12
// steps (episode ends), 0 otherwise. A uniform policy succeeds rarely; the
// optimum goes right in every cell. Each step has its own observation.
func TestPPOCorridor(t *testing.T) {
	const cells, horizon = 6, 12
	rng := rand.New(rand.NewPCG(3, 4))
	p := policies.NewSoftmax(policies.SoftmaxConfig{In: cells, Actions: 2, Value: true, LR: 0.03, Seed: 2})
	tr := rl.NewPPO(rl.PPOConfig{Schedule: rl.Schedule{Epochs: 4, MiniBatches: 2, Seed: 1}, Gamma: 0.95, Lambda: 0.9})
	episode := func() (rl.Sample, bool) {
		var s rl.Sample
		pos := 0
		for k := 0; k < horizon; k++ {
			o := make([]float32, cells)
			o[pos] = 1
			a, lp := p.Act(o, rng)
			s.Obs = append(s.Obs, o...)
			s.Actions = append(s.Actions, a)
			s.LogProbs = append(s.LogProbs, lp)
			if a == 1 {
				pos++
			} else if pos > 0 {
				pos--
			}
			if pos == cells-1 {
				s.Reward = 1
				break
			}
		}
		s.Version = p.Version()
		return s, s.Reward == 1
	}
	success := func(n int) float64 {
		ok := 0
		for i := 0; i < n; i++ {
			if _, w := episode(); w {
				ok++
			}
		}
		return float64(ok) / float64(n)
	}
	before := success(400)
	for it := 0; it < 60; it++ {
		var batch []rl.Sample
		for i := 0; i < 32; i++ {
			s, _ := episode()
			batch = append(batch, s)
		}
		if _, err := tr.Update(p, batch); err != nil {
			t.Fatal(err)
		}
	}
	after := success(400)
	right := 1.0
	for c := 0; c < cells-1; c++ {
		o := make([]float32, cells)
		o[c] = 1
		right = min(right, p.Probs(nil, o)[1])
	}
	t.Logf("success rate %.3f → %.3f; min π(right|cell) %.3f", before, after, right)
	if after < 0.95 || right < 0.9 {
		t.Errorf("PPO did not learn the corridor: success %.3f, min π(right) %.3f", after, right)
	}
}

// TestEntropyBonus: with an entropy bonus the policy stays more stochastic
// than without, on the same bandit and seed.
func TestEntropyBonus(t *testing.T) {
	run := func(c float64) float64 {
		rng := rand.New(rand.NewPCG(8, 8))
		p := policies.NewSoftmax(policies.SoftmaxConfig{In: 1, Actions: 8, LR: 0.05, Seed: 1})
		tr := rl.NewGRPO(rl.GRPOConfig{EntropyCoef: c})
		for it := 0; it < 100; it++ {
			if _, err := tr.Update(p, multiArmed.collect(p, rng, it, 4, 8)); err != nil {
				t.Fatal(err)
			}
		}
		var h float64
		for _, q := range p.Probs(nil, []float32{1}) {
			if q > 0 {
				h -= q * math.Log(q)
			}
		}
		return h
	}
	h0, h1 := run(0), run(0.5)
	t.Logf("entropy after training: %.3f without bonus, %.3f with c=0.5", h0, h1)
	if !(h1 > h0+0.2) {
		t.Errorf("entropy bonus did not keep the policy stochastic: %.3f vs %.3f", h1, h0)
	}
}

// TestAsyncActorsOffPolicy simulates asynchronous actors: each batch mixes
// samples from the current policy and from snapshots 1–4 updates old. With
// MaxStaleness 2 the oldest are dropped; the rest are importance-corrected,
// and GRPO still solves the contextual bandit.
func TestAsyncActorsOffPolicy(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	p := policies.NewSoftmax(policies.SoftmaxConfig{In: 4, Actions: 4, LR: 0.05, Seed: 1})
	tr := rl.NewGRPO(rl.GRPOConfig{Schedule: rl.Schedule{MaxStaleness: 2, Seed: 1}})
	snaps := []*policies.Softmax{p.Clone()} // snaps[k] is k updates old
	var dropped, kept int
	var ratioDev float64
	for it := 0; it < 200; it++ {
		var batch []rl.Sample
		for g := 0; g < 8; g++ {
			actor := snaps[rng.IntN(len(snaps))]
			batch = append(batch, contextual.collect(actor, rng, it*8+g, 1, 8)...)
		}
		st, err := tr.Update(p, batch)
		if err != nil {
			t.Fatal(err)
		}
		dropped += st.Dropped
		kept += st.Samples
		ratioDev = max(ratioDev, math.Abs(st.Ratio-1))
		snaps = append([]*policies.Softmax{p.Clone()}, snaps...)
		if len(snaps) > 5 {
			snaps = snaps[:5]
		}
	}
	got, opt, chance := contextual.expected(p)
	frac := (got - chance) / (opt - chance)
	t.Logf("kept %d, dropped %d stale samples; max |mean ratio − 1| %.3f; %.1f%% of the gap closed", kept, dropped, ratioDev, 100*frac)
	if dropped == 0 || kept == 0 || ratioDev == 0 {
		t.Errorf("expected both dropped and importance-corrected samples")
	}
	if frac < 0.9 {
		t.Errorf("off-policy GRPO closed only %.1f%% of the gap", 100*frac)
	}
}

// TestPPOValuesWithoutEvaluator: PPO gets the same update whether values come
// from rl.Evaluator or from the zero-gradient ForwardBackward fallback.
func TestPPOValuesWithoutEvaluator(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	a := policies.NewSoftmax(policies.SoftmaxConfig{In: 4, Actions: 4, Value: true, Seed: 3})
	for i := range a.Params() {
		a.Params()[i] = 0.3 * rng.NormFloat64()
	}
	b := a.Clone()
	batch := contextual.collect(a, rng, 0, 4, 8)
	cfg := rl.PPOConfig{Schedule: rl.Schedule{Epochs: 2, MiniBatches: 2, Seed: 4}}
	sa, err := rl.NewPPO(cfg).Update(a, batch)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := rl.NewPPO(cfg).Update(struct{ rl.Policy }{b}, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Params() {
		if a.Params()[i] != b.Params()[i] {
			t.Fatalf("param %d differs: %g vs %g", i, a.Params()[i], b.Params()[i])
		}
	}
	if sa.ValueLoss != sb.ValueLoss || sa.ValueLoss == 0 {
		t.Errorf("value loss %g vs %g", sa.ValueLoss, sb.ValueLoss)
	}
	if _, err := rl.NewPPO(cfg).Update(policies.NewSoftmax(policies.SoftmaxConfig{In: 4, Actions: 4}), batch); err == nil {
		t.Error("PPO accepted a policy without a value head")
	}
}

// TestPolicyLossAfter: one on-policy GRPO step. Its PolicyLoss, at ratio 1
// with centred advantages, is zero up to rounding; PolicyLossAfter, the
// surrogate with the updated parameters, is clearly below it.
func TestPolicyLossAfter(t *testing.T) {
	p := policies.NewSoftmax(policies.SoftmaxConfig{In: 1, Actions: 8, LR: 0.05, Seed: 1})
	rng := rand.New(rand.NewPCG(3, 3))
	batch := multiArmed.collect(p, rng, 0, 8, 8)
	st, err := rl.NewGRPO(rl.GRPOConfig{Schedule: rl.Schedule{ScoreAfter: true}}).Update(p, batch)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("policy loss %.3g, after the step %.4g", st.PolicyLoss, st.PolicyLossAfter)
	if math.Abs(st.PolicyLoss) > 1e-6 {
		t.Errorf("policy loss %g on-policy, want 0", st.PolicyLoss)
	}
	if !(st.PolicyLossAfter < -1e-3) {
		t.Errorf("policy loss after the step %g, want below -0.001", st.PolicyLossAfter)
	}
}
