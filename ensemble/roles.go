package ensemble

import (
	"fmt"
	"sort"
)

// Role is the part an agent plays in a round.
type Role int

const (
	// Optimizer exploits the current best: low temperature, small steps.
	Optimizer Role = iota
	// Explorer uses a high-entropy, high-variance policy: high temperature,
	// larger steps, to find what the others miss.
	Explorer
	// Validator does not train in the round; it scores the others' outputs.
	Validator
)

func (r Role) String() string { return [...]string{"optimizer", "explorer", "validator"}[r] }

// RoleParams are the settings an agent uses in a role.
type RoleParams struct {
	Temperature float64 // sampling temperature of the agent's policy
	LRScale     float64 // multiplier of the agent's learning rate
	Train       bool    // whether the agent trains in the round
}

// DefaultRoleParams maps each role to its settings.
var DefaultRoleParams = map[Role]RoleParams{
	Optimizer: {Temperature: 0.5, LRScale: 1, Train: true},
	Explorer:  {Temperature: 2, LRScale: 2, Train: true},
	Validator: {Temperature: 1, LRScale: 0, Train: false},
}

// Assignment is one logged role change.
type Assignment struct {
	Round    int
	Agent    int
	From, To Role
	Reason   string
}

// Roles reassigns roles each round from the recent task difficulty and each
// agent's contribution: agents are ranked by their moving-average
// contribution; the best is an optimizer, the one after it validates (when
// there are at least three agents), and of the rest the weakest become
// explorers, their number growing with the difficulty (in [0, 1]: 0 easy, 1
// hard): round(difficulty·rest), at least one while difficulty > 0.
// Every change is appended to History.
type Roles struct {
	Decay   float64 // weight of the past in the contribution average
	Current []Role
	History []Assignment

	contrib    []float64
	difficulty float64
	round      int
}

// NewRoles starts n agents as optimizers.
func NewRoles(n int, decay float64) *Roles {
	return &Roles{Decay: decay, Current: make([]Role, n), contrib: make([]float64, n)}
}

// Observe records agent i's contribution in the current round.
func (r *Roles) Observe(i int, contribution float64) {
	if r.round == 0 {
		r.contrib[i] = contribution
		return
	}
	r.contrib[i] = r.Decay*r.contrib[i] + (1-r.Decay)*contribution
}

// Reassign closes the round with the observed task difficulty and returns
// the new roles.
func (r *Roles) Reassign(difficulty float64) []Role {
	if difficulty < 0 || difficulty > 1 {
		panic(fmt.Sprintf("ensemble: difficulty %g outside [0,1]", difficulty))
	}
	r.round++
	r.difficulty = difficulty
	n := len(r.Current)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return r.contrib[order[a]] > r.contrib[order[b]] })
	next := make([]Role, n)
	reason := make([]string, n)
	for k, i := range order {
		next[i], reason[i] = Optimizer, fmt.Sprintf("rank %d of %d by contribution %.4g", k+1, n, r.contrib[i])
	}
	rest := order[1:]
	if n >= 3 {
		next[order[1]] = Validator
		reason[order[1]] += "; second best validates"
		rest = order[2:]
	}
	nexp := int(difficulty*float64(len(rest)) + 0.5)
	if difficulty > 0 && nexp == 0 && len(rest) > 0 {
		nexp = 1
	}
	for k := 0; k < nexp; k++ {
		i := rest[len(rest)-1-k]
		next[i] = Explorer
		reason[i] += fmt.Sprintf("; difficulty %.2f: weakest explore", difficulty)
	}
	for i := range next {
		if next[i] != r.Current[i] {
			r.History = append(r.History, Assignment{Round: r.round, Agent: i, From: r.Current[i], To: next[i], Reason: reason[i]})
		}
	}
	r.Current = next
	return append([]Role(nil), next...)
}
