package rl

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/troupe-ml/troupe/rl/internal/stats"
)

// Trainer updates a policy from a batch of sampled trajectories.
//
// GRPO, PPO, REINFORCE and RLOO implement it. An Update may take several
// optimizer steps (inner epochs and minibatches); the policy's Version grows by
// one per step taken.
type Trainer interface {
	Update(p Policy, batch []Sample) (Stats, error)
}

// Evaluator is an optional interface of policies that can return log-probs
// and value estimates without accumulating gradients. PPO uses it to compute
// GAE targets; without it PPO obtains the values through a ForwardBackward
// call whose loss has zero gradient.
type Evaluator interface {
	Evaluate(batch []Sample) (logp, values [][]float32, err error)
}

// Stats summarises one Update. Averages are over the optimizer steps of the
// update unless stated otherwise.
type Stats struct {
	// Loss is the total loss (policy, value, KL and entropy terms) as each
	// step computed it, before its update.
	Loss float64
	// PolicyLoss is the policy term as each step computed it: GRPO's and
	// PPO's clipped surrogate −agg min(ρA, clip(ρ)A), REINFORCE's and RLOO's
	// −agg f(ρ)A, at the ratio ρ = π/π_old of that step. At a first step
	// on fresh samples ρ is 1, so GRPO's value is −mean(Â), zero up to
	// rounding once the group advantages are centred (with SeqMean): the
	// value that shows what the update did is PolicyLossAfter.
	PolicyLoss float64
	// PolicyLossAfter is the policy term over the whole batch with the
	// parameters after the update (Schedule.ScoreAfter; 0 otherwise): below
	// PolicyLoss when the update raised the surrogate. It costs one more
	// LogProbs pass over the batch.
	PolicyLossAfter float64
	ValueLoss       float64 // PPO value loss (0 for the others)
	KL              float64 // k3 estimate of KL(current‖reference) per token; 0 without a reference
	ClipFrac        float64 // fraction of tokens whose clipped branch was active
	Entropy         float64 // Monte Carlo entropy estimate −mean log π(a) over the sampled actions, first step
	Ratio           float64 // mean importance ratio π/π_old over tokens
	GradNorm        float64 // mean global gradient norm before clipping
	RewardMean      float64 // mean reward of the samples kept
	RewardStd       float64 // population std of the rewards kept
	AdvMean         float64 // mean advantage (per sample, before token broadcast)
	AdvStd          float64
	Staleness       float64 // mean Version lag of the samples kept
	Baseline        float64 // REINFORCE moving-average baseline after the update

	Samples       int // samples used
	Tokens        int // actions/tokens used
	Dropped       int // samples dropped: staler than MaxStaleness, or without actions
	SkippedGroups int // GRPO/RLOO groups skipped (all rewards equal, or singleton)
	// DroppedNegative counts the samples GRPOConfig.PositiveOnly left out
	// (advantage zero or below).
	DroppedNegative int
	Steps           int // optimizer steps taken
	SkippedSteps    int // steps the policy skipped (NaN/Inf gradients)
}

// Map returns the statistics keyed by snake_case names for logging.
func (s Stats) Map() map[string]float64 {
	return map[string]float64{
		"loss":              s.Loss,
		"policy_loss":       s.PolicyLoss,
		"policy_loss_after": s.PolicyLossAfter,
		"value_loss":        s.ValueLoss,
		"kl":                s.KL,
		"clip_frac":         s.ClipFrac,
		"entropy":           s.Entropy,
		"ratio":             s.Ratio,
		"grad_norm":         s.GradNorm,
		"reward_mean":       s.RewardMean,
		"reward_std":        s.RewardStd,
		"adv_mean":          s.AdvMean,
		"adv_std":           s.AdvStd,
		"staleness":         s.Staleness,
		"baseline":          s.Baseline,
		"samples":           float64(s.Samples),
		"tokens":            float64(s.Tokens),
		"dropped":           float64(s.Dropped),
		"skipped_groups":    float64(s.SkippedGroups),
		"dropped_negative":  float64(s.DroppedNegative),
		"steps":             float64(s.Steps),
		"skipped_steps":     float64(s.SkippedSteps),
	}
}

// Aggregation says how per-token loss terms are averaged.
type Aggregation int

const (
	// DefaultAggregation picks the algorithm's default: SeqMean for GRPO,
	// TokenMean for PPO, SeqSum for REINFORCE and RLOO.
	DefaultAggregation Aggregation = iota
	// SeqMean averages over the tokens of each sequence, then over sequences
	// (the GRPO paper's 1/G Σ 1/|o_i| Σ_t). Default of GRPO.
	SeqMean
	// TokenMean averages over all tokens of the minibatch, so long sequences
	// weigh more (DAPO's token-level loss).
	TokenMean
	// SeqSum sums over the tokens of a sequence and averages over sequences:
	// the plain REINFORCE estimator A·Σ_t ∇log π(a_t). Default of REINFORCE
	// and RLOO.
	SeqSum
)

func (a Aggregation) String() string {
	switch a {
	case DefaultAggregation:
		return "default"
	case SeqMean:
		return "seq-mean"
	case TokenMean:
		return "token-mean"
	case SeqSum:
		return "seq-sum"
	}
	return fmt.Sprintf("Aggregation(%d)", int(a))
}

// Schedule holds the options common to every trainer: inner epochs,
// minibatches, off-policy bound and the shuffle seed.
type Schedule struct {
	// Epochs is the number of passes over the batch (default 1).
	Epochs int
	// MiniBatches splits each pass into this many optimizer steps (default 1).
	MiniBatches int
	// MaxStaleness drops samples whose Version lags the policy's Version at
	// the start of the Update by more than this many steps; 0 keeps all.
	// Samples within the bound are corrected by the importance ratio between
	// the current log-probs and the recorded Sample.LogProbs.
	MaxStaleness int64
	// Seed seeds the minibatch shuffle.
	Seed uint64
	// ScoreAfter evaluates the policy term once more after the update's
	// last step, with the updated parameters over the whole batch
	// (Stats.PolicyLossAfter).
	ScoreAfter bool
}

func (s Schedule) epochs() int {
	if s.Epochs <= 0 {
		return 1
	}
	return s.Epochs
}

func (s Schedule) minibatches(n int) int {
	m := s.MiniBatches
	if m <= 0 {
		m = 1
	}
	if m > n {
		m = n
	}
	return m
}

// ErrEmptyBatch is returned when no usable sample remains in a batch.
var ErrEmptyBatch = errors.New("rl: no usable samples in batch")

// prepared is a batch after staleness filtering, with behaviour log-probs
// filled in.
type prepared struct {
	samples []Sample
	old     [][]float32
	dropped int
	stale   float64
	version int64 // policy version at preparation
}

// ErrNoLogProbs is returned for a sample without behaviour log-probs
// (Sample.LogProbs nil) that is not marked Sample.OnPolicy.
var ErrNoLogProbs = errors.New("no behaviour log-probs (Sample.LogProbs is nil; set Sample.OnPolicy to score the actions with the current policy instead)")

// prepareStats is prepare for a trainer's Update: the Stats it starts
// from count the samples prepare dropped, also when it fails.
func prepareStats(p Policy, batch []Sample, maxStale int64) (*prepared, Stats, error) {
	var st Stats
	pr, err := prepare(p, batch, maxStale)
	if pr != nil {
		st.Dropped = pr.dropped
	}
	return pr, st, err
}

// prepare drops stale or malformed samples and fills the behaviour
// log-probs of the samples marked OnPolicy with the current policy's.
func prepare(p Policy, batch []Sample, maxStale int64) (*prepared, error) {
	ver := p.Version()
	pr := &prepared{version: ver}
	var missing []int
	var lag float64
	for k, s := range batch {
		if len(s.Actions) == 0 {
			pr.dropped++
			continue
		}
		if maxStale > 0 && ver-s.Version > maxStale {
			pr.dropped++
			continue
		}
		if s.LogProbs != nil && len(s.LogProbs) != len(s.Actions) {
			return nil, fmt.Errorf("rl: sample %q has %d log-probs for %d actions", s.TaskID, len(s.LogProbs), len(s.Actions))
		}
		if s.StepRewards != nil && len(s.StepRewards) != len(s.Actions) {
			return nil, fmt.Errorf("rl: sample %q has %d step rewards for %d actions", s.TaskID, len(s.StepRewards), len(s.Actions))
		}
		if s.LogProbs == nil {
			if !s.OnPolicy {
				return nil, fmt.Errorf("rl: sample %d (task %q, version %d): %w", k, s.TaskID, s.Version, ErrNoLogProbs)
			}
			missing = append(missing, len(pr.samples))
		}
		lag += float64(ver - s.Version)
		pr.samples = append(pr.samples, s)
		pr.old = append(pr.old, s.LogProbs)
	}
	if len(pr.samples) == 0 {
		return pr, ErrEmptyBatch
	}
	pr.stale = lag / float64(len(pr.samples))
	if len(missing) > 0 {
		sub := make([]Sample, len(missing))
		for i, j := range missing {
			sub[i] = pr.samples[j]
		}
		lp, err := p.LogProbs(sub)
		if err != nil {
			return nil, fmt.Errorf("rl: behaviour log-probs: %w", err)
		}
		for i, j := range missing {
			pr.old[j] = lp[i]
		}
	}
	return pr, nil
}

// groupBy returns the sample indices of each TaskID, in first-seen order.
func groupBy(samples []Sample) [][]int {
	pos := map[string]int{}
	var groups [][]int
	for i, s := range samples {
		g, ok := pos[s.TaskID]
		if !ok {
			g = len(groups)
			pos[s.TaskID] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// objective selects the per-token policy term.
type objective int

const (
	// clipped surrogate −min(r·A, clip(r, 1−ε, 1+ε)·A) of PPO/GRPO.
	clippedSurrogate objective = iota
	// importance-weighted policy gradient, gradient −min(r, c)·A·∇log π.
	weightedPG
)

// pgSpec describes the loss of one update over the prepared samples.
type pgSpec struct {
	obj      objective
	adv      [][]float64 // per sample, per token
	old      [][]float32 // behaviour log-probs
	ref      [][]float32 // reference log-probs, nil without KL
	clipLow  float64
	clipHigh float64
	truncIS  float64 // cap on the importance weight: weightedPG's truncation; clippedSurrogate's dual clip of negative advantages (0: none)
	klCoef   float64
	entCoef  float64 // entropy bonus coefficient c
	entBase  float64 // b: mean behaviour log-prob of the batch
	agg      Aggregation

	// value loss (PPO)
	returns  [][]float64
	oldValue [][]float64
	vclip    float64
	vcoef    float64
}

// mbStats accumulates what one loss evaluation saw.
type mbStats struct {
	loss, policy, value, kl, clipFrac, ratio, entropy float64
	tokens                                            int
}

// lossFor returns the LossFunc of the minibatch made of the prepared samples
// idx, and the statistics it records when called.
func (sp *pgSpec) lossFor(idx []int) (LossFunc, *mbStats) {
	st := &mbStats{}
	return func(logp, values [][]float32) (float64, [][]float32, [][]float32) {
		*st = mbStats{}
		if len(logp) != len(idx) {
			panic(fmt.Sprintf("rl: loss got %d log-prob rows for %d samples", len(logp), len(idx)))
		}
		total := 0
		for _, i := range idx {
			total += len(sp.adv[i])
		}
		dlogp := make([][]float32, len(idx))
		var dvalues [][]float32
		useValue := sp.returns != nil
		if useValue {
			if values == nil {
				panic("rl: PPO needs a policy with a value head (LossFunc got nil values)")
			}
			dvalues = make([][]float32, len(idx))
		}
		var loss, pol, vl, kl, ratioSum, clipped, ent float64
		for r, i := range idx {
			lp := logp[r]
			n := len(sp.adv[i])
			if len(lp) != n {
				panic(fmt.Sprintf("rl: loss got %d log-probs for sample with %d actions", len(lp), n))
			}
			var w float64
			switch sp.agg {
			case TokenMean:
				w = 1 / float64(total)
			case SeqMean:
				w = 1 / (float64(len(idx)) * float64(n))
			default:
				w = 1 / float64(len(idx))
			}
			d := make([]float32, n)
			var dv []float32
			if useValue {
				if len(values[r]) != n {
					panic(fmt.Sprintf("rl: loss got %d values for sample with %d actions", len(values[r]), n))
				}
				dv = make([]float32, n)
				dvalues[r] = dv
			}
			for t := 0; t < n; t++ {
				l := float64(lp[t])
				A := sp.adv[i][t]
				ratio := math.Exp(l - float64(sp.old[i][t]))
				ratioSum += ratio
				ent -= l
				var term, g float64
				switch sp.obj {
				case clippedSurrogate:
					unc := ratio * A
					cr := math.Min(math.Max(ratio, 1-sp.clipLow), 1+sp.clipHigh)
					clp := cr * A
					switch c := sp.truncIS; {
					case c > 0 && A < 0 && ratio > c:
						term, g = -c*A, 0 // dual clip: max(·, cÂ)
						clipped++
					case unc <= clp:
						term, g = -unc, -A*ratio
					default:
						term, g = -clp, 0
						clipped++
					}
				case weightedPG:
					// −A·f(ρ) with f(ρ) = ρ up to the cap c and
					// c·(1 + log(ρ/c)) beyond: its gradient in log π is
					// −min(ρ, c)·A, the truncated importance-weighted
					// REINFORCE gradient, and it is C¹ at the cap.
					c := sp.truncIS
					if c > 0 && ratio > c {
						term, g = -A*c*(1+math.Log(ratio/c)), -A*c
						clipped++
					} else {
						term, g = -A*ratio, -A*ratio
					}
				}
				pol += w * term
				if sp.entCoef != 0 {
					// entropy bonus: (c/2)(log π − b)², whose gradient
					// c(log π − b)∇log π is the score-function estimate of
					// −c∇H on-policy (b a constant baseline).
					e := l - sp.entBase
					term += 0.5 * sp.entCoef * e * e
					g += sp.entCoef * e
				}
				if sp.ref != nil {
					dd := float64(sp.ref[i][t]) - l
					e := math.Exp(dd)
					k3 := e - dd - 1
					kl += k3
					term += sp.klCoef * k3
					g += sp.klCoef * (1 - e)
				}
				loss += w * term
				d[t] = float32(w * g)
				if useValue {
					v := float64(values[r][t])
					R := sp.returns[i][t]
					v0 := sp.oldValue[i][t]
					e1 := (v - R) * (v - R)
					lossV := 0.5 * e1
					gv := v - R
					if sp.vclip > 0 {
						vc := v0 + math.Min(math.Max(v-v0, -sp.vclip), sp.vclip)
						e2 := (vc - R) * (vc - R)
						if e2 > e1 {
							lossV = 0.5 * e2
							if math.Abs(v-v0) < sp.vclip {
								gv = vc - R
							} else {
								gv = 0
							}
						}
					}
					vl += w * lossV
					loss += sp.vcoef * w * lossV
					dv[t] = float32(sp.vcoef * w * gv)
				}
			}
			dlogp[r] = d
		}
		tf := float64(total)
		st.loss, st.policy, st.value = loss, pol, vl
		st.kl, st.ratio, st.clipFrac, st.entropy = kl/tf, ratioSum/tf, clipped/tf, ent/tf
		st.tokens = total
		return loss, dlogp, dvalues
	}, st
}

// run performs the epochs × minibatches optimizer steps of an update and
// fills the loss statistics of s.
func run(p Policy, pr *prepared, sp *pgSpec, sch Schedule, s *Stats) error {
	n := len(pr.samples)
	rng := rand.New(rand.NewPCG(sch.Seed, uint64(p.Version())))
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	mbs := sch.minibatches(n)
	first := true
	for e := 0; e < sch.epochs(); e++ {
		if e > 0 || mbs > 1 {
			rng.Shuffle(n, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		}
		for m := 0; m < mbs; m++ {
			idx := perm[m*n/mbs : (m+1)*n/mbs]
			mb := make([]Sample, len(idx))
			for k, i := range idx {
				mb[k] = pr.samples[i]
			}
			lf, st := sp.lossFor(idx)
			if err := p.ForwardBackward(mb, lf); err != nil {
				return fmt.Errorf("rl: forward-backward: %w", err)
			}
			info, err := p.Step()
			if err != nil {
				return fmt.Errorf("rl: optimizer step: %w", err)
			}
			if first {
				s.Entropy = st.entropy
				first = false
			}
			s.Steps++
			if info.Skipped {
				s.SkippedSteps++
			}
			s.Loss += st.loss
			s.PolicyLoss += st.policy
			s.ValueLoss += st.value
			s.KL += st.kl
			s.ClipFrac += st.clipFrac
			s.Ratio += st.ratio
			s.GradNorm += info.GradNorm
		}
	}
	k := float64(s.Steps)
	if sch.ScoreAfter {
		lp, err := p.LogProbs(pr.samples)
		if err != nil {
			return fmt.Errorf("rl: log-probs after the update: %w", err)
		}
		s.PolicyLossAfter = sp.policyTerm(lp)
	}
	s.Loss /= k
	s.PolicyLoss /= k
	s.ValueLoss /= k
	s.KL /= k
	s.ClipFrac /= k
	s.Ratio /= k
	s.GradNorm /= k
	return nil
}

// policyTerm is the policy term of the loss over all prepared samples at
// log-probs logp, without the value, KL and entropy terms.
func (sp *pgSpec) policyTerm(logp [][]float32) float64 {
	pol := *sp
	pol.ref, pol.returns, pol.oldValue, pol.entCoef = nil, nil, nil, 0
	idx := make([]int, len(logp))
	for i := range idx {
		idx[i] = i
	}
	lf, st := pol.lossFor(idx)
	lf(logp, nil)
	return st.policy
}

// withEntropy sets the entropy bonus coefficient and its baseline.
func (sp *pgSpec) withEntropy(c float64) *pgSpec {
	if c == 0 {
		return sp
	}
	var sum float64
	n := 0
	for _, o := range sp.old {
		for _, l := range o {
			sum += float64(l)
			n++
		}
	}
	sp.entCoef, sp.entBase = c, sum/float64(max(n, 1))
	return sp
}

// broadcast gives every token of sample i the advantage adv[i].
func broadcast(samples []Sample, adv []float64) [][]float64 {
	out := make([][]float64, len(samples))
	for i, s := range samples {
		a := make([]float64, len(s.Actions))
		for t := range a {
			a[t] = adv[i]
		}
		out[i] = a
	}
	return out
}

func rewardStats(s *Stats, samples []Sample, adv []float64) {
	r := make([]float64, len(samples))
	tok := 0
	for i, x := range samples {
		r[i] = x.Reward
		tok += len(x.Actions)
	}
	s.RewardMean, s.RewardStd = stats.MeanStd(r)
	s.AdvMean, s.AdvStd = stats.MeanStd(adv)
	s.Samples = len(samples)
	s.Tokens = tok
}

// subset keeps the prepared samples at idx (sorted) and returns the new
// prepared batch.
func (pr *prepared) subset(keep []int) *prepared {
	sort.Ints(keep)
	out := &prepared{dropped: pr.dropped, stale: pr.stale, version: pr.version}
	var lag float64
	for _, i := range keep {
		out.samples = append(out.samples, pr.samples[i])
		out.old = append(out.old, pr.old[i])
		lag += float64(pr.version - pr.samples[i].Version)
	}
	if len(keep) > 0 {
		out.stale = lag / float64(len(keep))
	}
	return out
}
