package rl

import (
	"cmp"
	"fmt"
	"math"
	"sort"

	"github.com/troupe-ml/troupe/rl/internal/stats"
)

// KLPenalty keeps GRPO and PPO near a frozen reference policy: with Ref
// set, the k3 estimate of KL(π‖π_ref) is reported and, scaled by KLCoef,
// added to the loss (see GRPO).
type KLPenalty struct {
	// Ref is the frozen reference policy (nil: no penalty).
	Ref Policy
	// KLCoef is the β of the penalty (the GRPO paper uses 0.04).
	KLCoef float64
}

// set gives sp the penalty's coefficient and the reference's log-probs of
// samples.
func (k KLPenalty) set(sp *pgSpec, samples []Sample) error {
	sp.klCoef = k.KLCoef
	if k.Ref == nil {
		return nil
	}
	ref, err := k.Ref.LogProbs(samples)
	if err != nil {
		return fmt.Errorf("rl: reference log-probs: %w", err)
	}
	sp.ref = ref
	return nil
}

// GRPOConfig configures Group Relative Policy Optimization.
type GRPOConfig struct {
	Schedule
	KLPenalty
	// EntropyCoef c adds an entropy bonus estimated from the sampled
	// actions: the per-token term (c/2)(log π(a) − b)², b the batch mean of
	// the behaviour log-probs, has gradient c(log π(a) − b)∇log π(a), an
	// unbiased on-policy estimate of −c∇H(π) (the score-function form of
	// the entropy bonus of Mnih et al. 2016 / Schulman et al. 2017). It
	// keeps policies from collapsing onto a wrong action before it is
	// explored (0: off).
	EntropyCoef float64
	// ClipEps is the PPO clip range ε of the importance ratio (default 0.2).
	ClipEps float64
	// ClipEpsHigh is the upper clip range (default ClipEps); a larger value
	// is DAPO's "clip-higher".
	ClipEpsHigh float64
	// MaxImportanceWeight c > 1 bounds the importance ratio where the clip
	// does not: for a negative advantage the surrogate is
	// max(min(ρÂ, clip(ρ)Â), cÂ), dual-clip PPO (Ye et al. 2020, "Mastering
	// Complex Control in MOBA Games with Deep Reinforcement Learning",
	// arXiv:1912.09729), so that a stale sample whose action the policy has
	// since made far likelier cannot scale its gradient without bound
	// (0: off).
	MaxImportanceWeight float64
	// StdEps is the ε of (r − mean)/(std + ε) (default 1e-4).
	StdEps float64
	// SkipEqualGroups drops groups whose rewards are all equal: their
	// advantages are zero, so they only dilute the loss. Skipped groups are
	// counted in Stats.SkippedGroups.
	SkipEqualGroups bool
	// NoStdScale uses r − mean without dividing by the group std (the
	// "Dr. GRPO" variant of Liu et al. 2025).
	NoStdScale bool
	// PositiveOnly keeps only the samples whose advantage is positive:
	// each group's above-mean answers are reinforced and the others are
	// dropped from the loss instead of being pushed down (counted in
	// Stats.DroppedNegative). It is the reward-ranked fine-tuning of RAFT
	// (Dong et al. 2023, arXiv:2304.06767) with GRPO's advantages as the
	// weights; Xiong et al. 2025 ("A Minimalist Approach to LLM Reasoning:
	// from Rejection Sampling to Reinforce", arXiv:2504.11343) found the
	// positive samples carry most of GRPO's gain, while the negative ones
	// mainly keep the entropy up.
	PositiveOnly bool
	// NoCenter does not subtract the group mean: the rewards arrive with
	// their baseline already removed, and the advantage is r_i divided by
	// the group's root mean square √(mean r²), their spread about that
	// baseline (not divided with NoStdScale). It is for baselines the trainer
	// cannot compute, such as self-critical sequence training's (Rennie et
	// al. 2017, "Self-critical Sequence Training for Image Captioning",
	// arXiv:1612.00563), where the reward of a sample is its score minus
	// that of the greedy answer to the same prompt, so that the policy
	// moves toward samples that beat its own test-time (greedy) output.
	// Within a group whose samples share one prompt, centering would
	// cancel such a baseline.
	NoCenter bool
	// Aggregation of the token terms (default SeqMean, as in the paper).
	Aggregation Aggregation
}

// GRPO is Group Relative Policy Optimization (Shao et al. 2024, "DeepSeekMath:
// Pushing the Limits of Mathematical Reasoning in Open Language Models",
// arXiv:2402.03300).
//
// Samples are grouped by TaskID; the advantage of sample i of a group is
// Â_i = (r_i − mean(r)) / (std(r) + ε), broadcast to all its tokens. The loss is
// PPO's clipped surrogate (Schulman et al. 2017)
//
//	L = −agg_t min(ρ_t Â, clip(ρ_t, 1−ε, 1+ε_high) Â) + β·agg_t k3_t,
//	ρ_t = π(a_t)/π_old(a_t),  k3_t = π_ref/π − log(π_ref/π) − 1,
//
// where π_old is the sampling policy whose log-probs are recorded in
// Sample.LogProbs (so stale samples are importance-corrected) and k3 is
// Schulman's unbiased, always positive KL estimator ("Approximating KL
// Divergence", 2020) used by the paper.
type GRPO struct {
	cfg GRPOConfig
}

// NewGRPO returns a GRPO trainer.
func NewGRPO(cfg GRPOConfig) *GRPO {
	cfg.ClipEps = cmp.Or(cfg.ClipEps, 0.2)
	cfg.ClipEpsHigh = cmp.Or(cfg.ClipEpsHigh, cfg.ClipEps)
	cfg.StdEps = cmp.Or(cfg.StdEps, 1e-4)
	cfg.Aggregation = cmp.Or(cfg.Aggregation, SeqMean)
	return &GRPO{cfg: cfg}
}

// Update implements Trainer.
func (g *GRPO) Update(p Policy, batch []Sample) (Stats, error) {
	pr, st, err := prepareStats(p, batch, g.cfg.MaxStaleness)
	if err != nil {
		return st, err
	}
	adv := make([]float64, len(pr.samples))
	var keep []int
	for _, grp := range groupBy(pr.samples) {
		r := make([]float64, len(grp))
		equal := true
		for k, i := range grp {
			r[k] = pr.samples[i].Reward
			if r[k] != r[0] {
				equal = false
			}
		}
		if equal && g.cfg.SkipEqualGroups {
			st.SkippedGroups++
			continue
		}
		var m, s float64
		if g.cfg.NoCenter {
			s = rms(r)
		} else {
			m, s = stats.MeanStd(r)
		}
		for k, i := range grp {
			if g.cfg.NoStdScale {
				adv[i] = r[k] - m
			} else {
				adv[i] = (r[k] - m) / (s + g.cfg.StdEps)
			}
			if g.cfg.PositiveOnly && !(adv[i] > 0) {
				st.DroppedNegative++
				continue
			}
			keep = append(keep, i)
		}
	}
	if len(keep) == 0 {
		rewardStats(&st, pr.samples, adv)
		st.Samples = 0
		return st, nil // nothing to learn from; not an error
	}
	if len(keep) < len(pr.samples) {
		a2 := make([]float64, 0, len(keep))
		for _, i := range sortedCopy(keep) {
			a2 = append(a2, adv[i])
		}
		pr = pr.subset(keep)
		adv = a2
	}
	st.Staleness = pr.stale
	rewardStats(&st, pr.samples, adv)
	sp := &pgSpec{
		obj: clippedSurrogate, adv: broadcast(pr.samples, adv), old: pr.old, agg: g.cfg.Aggregation,
		clipLow: g.cfg.ClipEps, clipHigh: g.cfg.ClipEpsHigh, truncIS: g.cfg.MaxImportanceWeight,
	}
	sp.withEntropy(g.cfg.EntropyCoef)
	if err := g.cfg.KLPenalty.set(sp, pr.samples); err != nil {
		return st, err
	}
	err = run(p, pr, sp, g.cfg.Schedule, &st)
	return st, err
}

// rms is the root mean square of x.
func rms(x []float64) float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	return math.Sqrt(ss / float64(len(x)))
}

func sortedCopy(x []int) []int {
	c := append([]int(nil), x...)
	sort.Ints(c)
	return c
}

// PPOConfig configures Proximal Policy Optimization with a value head.
type PPOConfig struct {
	Schedule
	KLPenalty
	// EntropyCoef adds the entropy bonus of GRPOConfig.EntropyCoef (0: off).
	EntropyCoef float64
	// ClipEps is the clip range of the importance ratio (default 0.2).
	ClipEps float64
	// Aggregation of the token terms (default TokenMean).
	Aggregation Aggregation
	// Gamma is the discount (default 0.99) and Lambda the GAE λ
	// (default 0.95). Use a tiny positive value for 0.
	Gamma, Lambda float64
	// ValueCoef weighs the value loss (default 0.5).
	ValueCoef float64
	// ValueClip clips the new value to within ±ValueClip of the value at
	// sampling time (default 0.2; negative disables).
	ValueClip float64
	// NoAdvNorm disables normalising the advantages of the batch to zero
	// mean and unit std.
	NoAdvNorm bool
}

// PPO is Proximal Policy Optimization (Schulman et al. 2017, "Proximal Policy
// Optimization Algorithms", arXiv:1707.06347) with a learned value head and
// generalized advantage estimation (Schulman et al. 2016, "High-Dimensional
// Continuous Control Using Generalized Advantage Estimation", ICLR).
//
// Each Sample is a complete episode: per-step rewards are Sample.StepRewards,
// or Sample.Reward on the last action; the value after the last action is 0.
// With V the values at sampling time,
//
//	δ_t = r_t + γV_{t+1} − V_t,  Â_t = Σ_l (γλ)^l δ_{t+l},  R_t = Â_t + V_t,
//
// and the loss is the clipped surrogate plus c_v·½max((V−R)², (V_clip−R)²) with
// V_clip = V_old + clip(V − V_old, −ε_v, ε_v). The policy must return values
// through LossFunc (a value head).
type PPO struct {
	cfg PPOConfig
}

// NewPPO returns a PPO trainer.
func NewPPO(cfg PPOConfig) *PPO {
	cfg.ClipEps = cmp.Or(cfg.ClipEps, 0.2)
	cfg.Gamma = cmp.Or(cfg.Gamma, 0.99)
	cfg.Lambda = cmp.Or(cfg.Lambda, 0.95)
	cfg.ValueCoef = cmp.Or(cfg.ValueCoef, 0.5)
	cfg.ValueClip = cmp.Or(cfg.ValueClip, 0.2)
	if cfg.ValueClip < 0 {
		cfg.ValueClip = 0
	}
	cfg.Aggregation = cmp.Or(cfg.Aggregation, TokenMean)
	return &PPO{cfg: cfg}
}

// GAE computes generalized advantages and returns of one episode whose value
// after the last step is 0: adv and ret get len(rewards) entries.
func GAE(rewards, values []float64, gamma, lambda float64) (adv, ret []float64) {
	n := len(rewards)
	adv = make([]float64, n)
	ret = make([]float64, n)
	var next, a float64
	for t := n - 1; t >= 0; t-- {
		delta := rewards[t] + gamma*next - values[t]
		a = delta + gamma*lambda*a
		adv[t] = a
		ret[t] = a + values[t]
		next = values[t]
	}
	return adv, ret
}

// Update implements Trainer.
func (pp *PPO) Update(p Policy, batch []Sample) (Stats, error) {
	pr, st, err := prepareStats(p, batch, pp.cfg.MaxStaleness)
	if err != nil {
		return st, err
	}
	values, err := evalValues(p, pr.samples)
	if err != nil {
		return st, err
	}
	advs := make([][]float64, len(pr.samples))
	rets := make([][]float64, len(pr.samples))
	olds := make([][]float64, len(pr.samples))
	var flat []float64
	seqAdv := make([]float64, len(pr.samples))
	for i, s := range pr.samples {
		n := len(s.Actions)
		r := make([]float64, n)
		if s.StepRewards != nil {
			copy(r, s.StepRewards)
		} else {
			r[n-1] = s.Reward
		}
		v := make([]float64, n)
		for t := range v {
			v[t] = float64(values[i][t])
		}
		advs[i], rets[i] = GAE(r, v, pp.cfg.Gamma, pp.cfg.Lambda)
		olds[i] = v
		flat = append(flat, advs[i]...)
		seqAdv[i] = advs[i][0]
	}
	if !pp.cfg.NoAdvNorm {
		m, s := stats.MeanStd(flat)
		for _, a := range advs {
			for t := range a {
				a[t] = (a[t] - m) / (s + 1e-8)
			}
		}
	}
	st.Staleness = pr.stale
	rewardStats(&st, pr.samples, seqAdv)
	sp := &pgSpec{
		obj: clippedSurrogate, adv: advs, old: pr.old, agg: pp.cfg.Aggregation,
		clipLow: pp.cfg.ClipEps, clipHigh: pp.cfg.ClipEps,
		returns: rets, oldValue: olds, vclip: pp.cfg.ValueClip, vcoef: pp.cfg.ValueCoef,
	}
	sp.withEntropy(pp.cfg.EntropyCoef)
	if err := pp.cfg.KLPenalty.set(sp, pr.samples); err != nil {
		return st, err
	}
	err = run(p, pr, sp, pp.cfg.Schedule, &st)
	return st, err
}

// evalValues returns the value estimates of the current policy.
func evalValues(p Policy, samples []Sample) ([][]float32, error) {
	if ev, ok := p.(Evaluator); ok {
		_, v, err := ev.Evaluate(samples)
		if err != nil {
			return nil, fmt.Errorf("rl: evaluate values: %w", err)
		}
		if v == nil {
			return nil, fmt.Errorf("rl: PPO needs a policy with a value head")
		}
		return v, nil
	}
	var vals [][]float32
	zero := func(logp, values [][]float32) (float64, [][]float32, [][]float32) {
		if values == nil {
			return 0, nil, nil
		}
		vals = make([][]float32, len(values))
		for i := range values {
			vals[i] = append([]float32(nil), values[i]...)
		}
		d := make([][]float32, len(logp))
		for i := range logp {
			d[i] = make([]float32, len(logp[i]))
		}
		return 0, d, nil
	}
	if err := p.ForwardBackward(samples, zero); err != nil {
		return nil, fmt.Errorf("rl: evaluate values: %w", err)
	}
	if vals == nil {
		return nil, fmt.Errorf("rl: PPO needs a policy with a value head")
	}
	return vals, nil
}

// REINFORCEConfig configures REINFORCE with a moving-average baseline.
type REINFORCEConfig struct {
	Schedule
	// EntropyCoef adds the entropy bonus of GRPOConfig.EntropyCoef (0: off).
	EntropyCoef float64
	// BaselineDecay d of the baseline b ← d·b + (1−d)·mean(r) (default 0.9).
	BaselineDecay float64
	// NoBaseline uses the raw reward as advantage.
	NoBaseline bool
	// TruncIS caps the importance weight π/π_old of off-policy samples
	// (default 2).
	TruncIS float64
	// Aggregation of the token terms (default SeqSum).
	Aggregation Aggregation
}

// REINFORCE is Williams's likelihood-ratio policy gradient (Williams 1992,
// "Simple Statistical Gradient-Following Algorithms for Connectionist
// Reinforcement Learning", Machine Learning 8) with a moving-average baseline:
//
//	∇L = −agg_t min(ρ_t, c)·(r − b)·∇log π(a_t),
//
// where b is the exponential moving average of past batch mean rewards (the
// first batch uses its own mean), ρ_t corrects stale samples and is 1 on-policy.
type REINFORCE struct {
	cfg      REINFORCEConfig
	baseline float64
	init     bool
}

// NewREINFORCE returns a REINFORCE trainer.
func NewREINFORCE(cfg REINFORCEConfig) *REINFORCE {
	cfg.BaselineDecay = cmp.Or(cfg.BaselineDecay, 0.9)
	cfg.TruncIS = cmp.Or(cfg.TruncIS, 2)
	cfg.Aggregation = cmp.Or(cfg.Aggregation, SeqSum)
	return &REINFORCE{cfg: cfg}
}

// Baseline returns the current moving-average baseline.
func (r *REINFORCE) Baseline() float64 { return r.baseline }

// Update implements Trainer.
func (r *REINFORCE) Update(p Policy, batch []Sample) (Stats, error) {
	pr, st, err := prepareStats(p, batch, r.cfg.MaxStaleness)
	if err != nil {
		return st, err
	}
	rew := make([]float64, len(pr.samples))
	for i, s := range pr.samples {
		rew[i] = s.Reward
	}
	m, _ := stats.MeanStd(rew)
	if !r.init {
		r.baseline, r.init = m, true
	}
	adv := make([]float64, len(rew))
	for i := range rew {
		adv[i] = rew[i]
		if !r.cfg.NoBaseline {
			adv[i] -= r.baseline
		}
	}
	r.baseline = r.cfg.BaselineDecay*r.baseline + (1-r.cfg.BaselineDecay)*m
	st.Baseline = r.baseline
	st.Staleness = pr.stale
	rewardStats(&st, pr.samples, adv)
	sp := &pgSpec{obj: weightedPG, adv: broadcast(pr.samples, adv), old: pr.old, truncIS: r.cfg.TruncIS, agg: r.cfg.Aggregation}
	sp.withEntropy(r.cfg.EntropyCoef)
	err = run(p, pr, sp, r.cfg.Schedule, &st)
	return st, err
}

// RLOOConfig configures REINFORCE Leave-One-Out.
type RLOOConfig struct {
	Schedule
	// EntropyCoef adds the entropy bonus of GRPOConfig.EntropyCoef (0: off).
	EntropyCoef float64
	// TruncIS caps the importance weight of off-policy samples (default 2).
	TruncIS float64
	// Aggregation of the token terms (default SeqSum).
	Aggregation Aggregation
}

// RLOO is REINFORCE with the leave-one-out baseline (Kool et al. 2019;
// Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style
// Optimization for Learning from Human Feedback in LLMs", arXiv:2402.14740).
// Samples are grouped by TaskID and sample i of a group of k gets
//
//	Â_i = r_i − 1/(k−1) Σ_{j≠i} r_j,
//
// an unbiased baseline. Groups of one sample have no baseline and are skipped
// (Stats.SkippedGroups). The loss is REINFORCE's, with truncated importance
// weights for stale samples.
type RLOO struct {
	cfg RLOOConfig
}

// NewRLOO returns an RLOO trainer.
func NewRLOO(cfg RLOOConfig) *RLOO {
	cfg.TruncIS = cmp.Or(cfg.TruncIS, 2)
	cfg.Aggregation = cmp.Or(cfg.Aggregation, SeqSum)
	return &RLOO{cfg: cfg}
}

// Update implements Trainer.
func (r *RLOO) Update(p Policy, batch []Sample) (Stats, error) {
	pr, st, err := prepareStats(p, batch, r.cfg.MaxStaleness)
	if err != nil {
		return st, err
	}
	adv := make([]float64, len(pr.samples))
	var keep []int
	for _, grp := range groupBy(pr.samples) {
		k := len(grp)
		if k < 2 {
			st.SkippedGroups++
			continue
		}
		var sum float64
		for _, i := range grp {
			sum += pr.samples[i].Reward
		}
		for _, i := range grp {
			ri := pr.samples[i].Reward
			adv[i] = ri - (sum-ri)/float64(k-1)
			keep = append(keep, i)
		}
	}
	if len(keep) == 0 {
		return st, nil
	}
	if len(keep) < len(pr.samples) {
		a2 := make([]float64, 0, len(keep))
		for _, i := range sortedCopy(keep) {
			a2 = append(a2, adv[i])
		}
		pr = pr.subset(keep)
		adv = a2
	}
	st.Staleness = pr.stale
	rewardStats(&st, pr.samples, adv)
	sp := &pgSpec{obj: weightedPG, adv: broadcast(pr.samples, adv), old: pr.old, truncIS: r.cfg.TruncIS, agg: r.cfg.Aggregation}
	sp.withEntropy(r.cfg.EntropyCoef)
	err = run(p, pr, sp, r.cfg.Schedule, &st)
	return st, err
}

var (
	_ Trainer = (*GRPO)(nil)
	_ Trainer = (*PPO)(nil)
	_ Trainer = (*REINFORCE)(nil)
	_ Trainer = (*RLOO)(nil)
)
