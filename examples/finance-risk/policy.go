package main

import (
	"fmt"
	"math"
	"math/rand/v2"

	"examples/finance-risk/finrisk"
	"github.com/troupe-ml/troupe/ensemble"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/rl/reward"
)

// Actions of the decision policy.
const (
	Reject  = 0
	Approve = 1
)

// obsDim is the width of the decision policy's observation.
const obsDim = 10

// observation builds the policy input of one applicant: the fused logit z,
// the mean fused logit zbar over the applicant and its sex/age-group
// counterfactuals, the regime one-hot, zbar per regime, the veto flag and a
// bias.
func observation(z, zbar float64, reg finrisk.Regime, veto bool) []float32 {
	o := make([]float32, obsDim)
	o[0], o[1] = float32(z), float32(zbar)
	o[2+int(reg)] = 1
	o[5+int(reg)] = float32(zbar)
	if veto {
		o[8] = 1
	}
	o[9] = 1
	return o
}

// LinearPolicy is a softmax policy over {reject, approve} with logits W·obs
// divided by a temperature (set by the agent's role). It implements
// rl.Policy with its own Adam optimizer. (rl/policies' classic softmax
// policy and rl's GRPO were not on main when this was written; this policy
// and grpoLoss follow the same contracts so they can be swapped in.)
type LinearPolicy struct {
	W, grad, m, v []float64 // (2, obsDim)
	Temp          float64
	LR            float64
	version       int64
	t             int
}

// NewLinearPolicy starts at W = 0 (uniform).
func NewLinearPolicy(lr float64) *LinearPolicy {
	n := 2 * obsDim
	return &LinearPolicy{W: make([]float64, n), grad: make([]float64, n), m: make([]float64, n), v: make([]float64, n), Temp: 1, LR: lr}
}

func (p *LinearPolicy) probs(obs []float32) [2]float64 {
	var l [2]float64
	for a := 0; a < 2; a++ {
		for j, x := range obs {
			l[a] += p.W[a*obsDim+j] * float64(x)
		}
		l[a] /= p.Temp
	}
	mx := math.Max(l[0], l[1])
	e0, e1 := math.Exp(l[0]-mx), math.Exp(l[1]-mx)
	return [2]float64{e0 / (e0 + e1), e1 / (e0 + e1)}
}

// Greedy returns the most probable action.
func (p *LinearPolicy) Greedy(obs []float32) int {
	pr := p.probs(obs)
	if pr[Approve] > pr[Reject] {
		return Approve
	}
	return Reject
}

// Sample draws an action and its log-probability.
func (p *LinearPolicy) Sample(obs []float32, rng *rand.Rand) (int, float32) {
	pr := p.probs(obs)
	a := Reject
	if rng.Float64() < pr[Approve] {
		a = Approve
	}
	return a, float32(math.Log(math.Max(pr[a], 1e-12)))
}

// LogProbs implements rl.Policy.
func (p *LinearPolicy) LogProbs(batch []rl.Sample) ([][]float32, error) {
	out := make([][]float32, len(batch))
	for i, s := range batch {
		if len(s.Obs) != obsDim {
			return nil, fmt.Errorf("policy: observation of %d values, want %d", len(s.Obs), obsDim)
		}
		pr := p.probs(s.Obs)
		for _, a := range s.Actions {
			if a != Reject && a != Approve {
				return nil, fmt.Errorf("policy: action %d out of range", a)
			}
			out[i] = append(out[i], float32(math.Log(math.Max(pr[a], 1e-12))))
		}
	}
	return out, nil
}

// ForwardBackward implements rl.Policy.
func (p *LinearPolicy) ForwardBackward(batch []rl.Sample, loss rl.LossFunc) error {
	logp, err := p.LogProbs(batch)
	if err != nil {
		return err
	}
	_, dlogp, _ := loss(logp, nil)
	for i, s := range batch {
		pr := p.probs(s.Obs)
		for k, a := range s.Actions {
			g := float64(dlogp[i][k])
			// d log pi(a) / d l_b = [a==b] - pi(b); l_b = W_b·obs / T.
			for b := 0; b < 2; b++ {
				ind := 0.0
				if a == b {
					ind = 1
				}
				c := g * (ind - pr[b]) / p.Temp
				for j, x := range s.Obs {
					p.grad[b*obsDim+j] += c * float64(x)
				}
			}
		}
	}
	return nil
}

// Step implements rl.Policy (Adam).
func (p *LinearPolicy) Step() (rl.StepInfo, error) {
	var norm float64
	for _, g := range p.grad {
		norm += g * g
	}
	norm = math.Sqrt(norm)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		clear(p.grad)
		return rl.StepInfo{GradNorm: norm, Skipped: true}, nil
	}
	p.t++
	const b1, b2 = 0.9, 0.999
	for i, g := range p.grad {
		p.m[i] = b1*p.m[i] + (1-b1)*g
		p.v[i] = b2*p.v[i] + (1-b2)*g*g
		mh := p.m[i] / (1 - math.Pow(b1, float64(p.t)))
		vh := p.v[i] / (1 - math.Pow(b2, float64(p.t)))
		p.W[i] -= p.LR * mh / (math.Sqrt(vh) + 1e-8)
	}
	clear(p.grad)
	p.version++
	return rl.StepInfo{GradNorm: norm}, nil
}

// Version implements rl.Policy.
func (p *LinearPolicy) Version() int64 { return p.version }

// DynamicReward is the multi-objective reward of the decision policy with
// weights that move over training from innovation toward stability:
//
//	r = w_base(τ)·base + w_innov(τ)·innovation + w_safety(τ)·safety
//
// with τ in [0,1] the training progress and the weights given by an
// rl/reward schedule (the example uses reward.Cosine from (1, 0.5, 0.05)
// to (1, 0, 0.3)). base is minus the cost of the decision (approving a bad
// loan costs 5 × the market regime's loss scale, rejecting a good one 1);
// innovation is the surprisal -log π(a) of the sampled decision (capped at
// 2), which pays for exploring approval thresholds early; safety is minus
// the number of violations: approving an application the compliance agent
// vetoes, and a decision that differs from the policy's decision on the sex
// or on the age-group counterfactual. The components are combined as they
// are (not normalised per component) so the cost matrix keeps its weight.
type DynamicReward struct {
	Schedule reward.Schedule // weights of (base, innovation, safety)
}

// Weights at progress tau.
func (r DynamicReward) Weights(tau float64) (base, innov, safety float64) {
	w := r.Schedule.Weights(tau)
	return w[0], w[1], w[2]
}

// DefaultReward is the example's schedule.
func DefaultReward() DynamicReward {
	return DynamicReward{Schedule: reward.Cosine([]float64{1, 0.5, 0.05}, []float64{1, 0, 0.3})}
}

// applicant is one training example of the decision policy.
type applicant struct {
	obs   []float32
	cf    [2][]float32 // observations of the sex and age-group counterfactuals
	bad   bool
	scale float64
	veto  bool
}

func baseReward(a int, ap *applicant) float64 {
	switch {
	case a == Approve && ap.bad:
		return -finrisk.CostBadApproved * ap.scale
	case a == Reject && !ap.bad:
		return -finrisk.CostGoodRejected
	}
	return 0
}

func safetyReward(a int, ap *applicant, p *LinearPolicy) float64 {
	s := 0.0
	if a == Approve && ap.veto {
		s--
	}
	for _, cf := range ap.cf {
		if p.Greedy(cf) != a {
			s--
		}
	}
	return s
}

// RoundLog records one training round of the decision agents.
type RoundLog struct {
	Base, Innov, Safety    float64 // mean reward components of the sampled decisions
	WBase, WInnov, WSafety float64
	Roles                  []ensemble.Role
	Rollouts               []int
	Scores                 []float64 // validator's scores of the agents
}

// TrainResult is the outcome of TrainDecision.
type TrainResult struct {
	Policy  *LinearPolicy
	Best    int
	Rounds  []RoundLog
	History []ensemble.Assignment
}

// TrainDecision trains nAgents decision policies with roles and a compute
// scheduler: each round the roles are reassigned from the task difficulty
// (the validation misjudgment rate) and the agents' contributions (their
// validation scores), the scheduler divides the round's rollouts among the
// training agents, each trains with GRPO on its rollouts (groups of G
// decisions per applicant) under the dynamic reward, and the validator
// scores every agent's greedy decisions on a validation sample. The best
// scored snapshot (over agents and rounds) is returned.
func TrainDecision(train, valid []*applicant, nAgents, rounds, rolloutsPerRound, G int, rw DynamicReward, seed uint64) *TrainResult {
	rng := rand.New(rand.NewPCG(seed, 0xdec1))
	pols := make([]*LinearPolicy, nAgents)
	for i := range pols {
		pols[i] = NewLinearPolicy(0.05)
		// Start at (agent 0) or near (the others) the Bayes rule for a
		// calibrated logit: reject iff z + log(5·scale) > 0.
		pols[i].W[Reject*obsDim+0] = 1 + 0.3*float64(i)
		for r := finrisk.Regime(0); r < finrisk.NumRegimes; r++ {
			pols[i].W[Reject*obsDim+2+int(r)] = math.Log(finrisk.CostBadApproved*r.LossScale()/finrisk.CostGoodRejected) - 0.3*float64(i)
		}
	}
	// GRPO (rl) with the Dr. GRPO advantage r - mean(group): dividing by the
	// group's deviation would give a bad applicant's 5-cost mistake the same
	// weight as a good applicant's 1-cost one and wipe out the cost matrix
	// (measured: the policy then approves nearly everyone).
	grpo := rl.NewGRPO(rl.GRPOConfig{NoStdScale: true, SkipEqualGroups: true})
	roles := ensemble.NewRoles(nAgents, 0.5)
	sched := ensemble.NewScheduler(nAgents, 0.5, 0.1, 0.5)
	score := func(p *LinearPolicy) (float64, float64) {
		var s, miss float64
		for _, ap := range valid {
			a := p.Greedy(ap.obs)
			if a == Approve && ap.veto {
				a = Reject
			}
			s += baseReward(a, ap) + safetyReward(a, ap, p)
			if baseReward(a, ap) < 0 {
				miss++
			}
		}
		return s / float64(len(valid)), miss / float64(len(valid))
	}
	res := &TrainResult{}
	scores := make([]float64, nAgents)
	bestScore, bestAgent := math.Inf(-1), 0
	var bestW []float64
	for i, p := range pols {
		scores[i], _ = score(p)
		roles.Observe(i, scores[i])
		sched.Observe(i, scores[i])
		if scores[i] > bestScore {
			bestScore, bestW, bestAgent = scores[i], append([]float64(nil), p.W...), i
		}
	}
	difficulty := 0.5
	for r := 0; r < rounds; r++ {
		tau := float64(r) / float64(max(rounds-1, 1))
		wb, wi, ws := rw.Weights(tau)
		cur := roles.Reassign(difficulty)
		alloc := sched.Allocate(rolloutsPerRound)
		lg := RoundLog{WBase: wb, WInnov: wi, WSafety: ws, Roles: cur, Rollouts: alloc}
		var nsamp float64
		for i, p := range pols {
			rp := ensemble.DefaultRoleParams[cur[i]]
			if !rp.Train || alloc[i] == 0 {
				continue
			}
			p.Temp = rp.Temperature
			lr := p.LR
			p.LR *= rp.LRScale * (1 - 0.8*tau) // decaying step size
			var batch []rl.Sample
			for k := 0; k < alloc[i]; k++ {
				ap := train[rng.IntN(len(train))]
				task := fmt.Sprintf("%p", ap)
				for g := 0; g < G; g++ {
					a, lp := p.Sample(ap.obs, rng)
					base := baseReward(a, ap)
					innov := math.Min(-float64(lp), 2)
					safe := safetyReward(a, ap, p)
					batch = append(batch, rl.Sample{TaskID: task, Obs: ap.obs, Actions: []int{a}, LogProbs: []float32{lp},
						Version: p.Version(), Reward: wb*base + wi*innov + ws*safe})
					lg.Base += base
					lg.Innov += innov
					lg.Safety += safe
					nsamp++
				}
			}
			if _, err := grpo.Update(p, batch); err != nil {
				panic(fmt.Sprintf("finance-risk: GRPO update: %v", err)) // the batch is built here: a bug
			}
			p.LR = lr
			p.Temp = 1
		}
		if nsamp > 0 {
			lg.Base, lg.Innov, lg.Safety = lg.Base/nsamp, lg.Innov/nsamp, lg.Safety/nsamp
		}
		// The validator scores everyone (all agents' contributions).
		var miss float64
		for i, p := range pols {
			s, m := score(p)
			scores[i] = s
			miss += m / float64(nAgents)
			roles.Observe(i, s)
			sched.Observe(i, s)
		}
		difficulty = math.Min(1, miss/0.5)
		for i, p := range pols {
			if scores[i] > bestScore {
				bestScore, bestW, bestAgent = scores[i], append([]float64(nil), p.W...), i
			}
		}
		lg.Scores = append([]float64(nil), scores...)
		res.Rounds = append(res.Rounds, lg)
	}
	// The validator's best snapshot (agent and round) is the result.
	final := NewLinearPolicy(0)
	copy(final.W, bestW)
	res.Policy, res.Best, res.History = final, bestAgent, roles.History
	return res
}
