package ensemble

import (
	"fmt"
	"math"
	"sort"
)

// Scheduler divides compute (training steps or rollouts per round) among
// agents by a softmax over their recent reward contributions, with a
// temperature and a floor so that no agent starves:
//
//	share_i = floor + (1 - n·floor) · softmax(c_i / T)_i
//
// where c_i is an exponential moving average of agent i's contributions. A
// high temperature spreads compute evenly; a low one concentrates it on the
// best contributors. The zero value is not usable: use NewScheduler.
type Scheduler struct {
	// Temperature of the softmax (> 0).
	Temperature float64
	// Floor is the minimum share of each agent, 0 <= Floor <= 1/n.
	Floor float64
	// Decay is the weight of the past in the moving average (0: last only).
	Decay float64

	contrib []float64
	seen    []bool
}

// NewScheduler returns a scheduler for n agents.
func NewScheduler(n int, temperature, floor, decay float64) *Scheduler {
	if n <= 0 || temperature <= 0 || floor < 0 || floor*float64(n) > 1 || decay < 0 || decay >= 1 {
		panic(fmt.Sprintf("ensemble: scheduler n=%d temperature=%g floor=%g decay=%g out of range", n, temperature, floor, decay))
	}
	return &Scheduler{Temperature: temperature, Floor: floor, Decay: decay, contrib: make([]float64, n), seen: make([]bool, n)}
}

// Observe records agent i's contribution in the last round.
func (s *Scheduler) Observe(i int, contribution float64) {
	if !s.seen[i] {
		s.contrib[i], s.seen[i] = contribution, true
		return
	}
	s.contrib[i] = s.Decay*s.contrib[i] + (1-s.Decay)*contribution
}

// Contributions returns the moving averages (a copy).
func (s *Scheduler) Contributions() []float64 { return append([]float64(nil), s.contrib...) }

// Shares returns each agent's share of compute; the shares sum to 1 and
// each is at least Floor.
func (s *Scheduler) Shares() []float64 {
	n := len(s.contrib)
	mx := math.Inf(-1)
	for _, c := range s.contrib {
		mx = math.Max(mx, c)
	}
	out := make([]float64, n)
	var z float64
	for i, c := range s.contrib {
		out[i] = math.Exp((c - mx) / s.Temperature)
		z += out[i]
	}
	rest := 1 - float64(n)*s.Floor
	for i := range out {
		out[i] = s.Floor + rest*out[i]/z
	}
	return out
}

// Allocate divides total units (steps, rollouts) by Shares with largest
// remainders; every agent gets at least floor(Floor·total) units and the
// units sum to total.
func (s *Scheduler) Allocate(total int) []int {
	sh := s.Shares()
	out := make([]int, len(sh))
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, len(sh))
	used := 0
	for i, v := range sh {
		x := v * float64(total)
		out[i] = int(math.Floor(x))
		used += out[i]
		rems[i] = rem{i, x - math.Floor(x)}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; used < total; k++ {
		out[rems[k%len(rems)].i]++
		used++
	}
	return out
}
