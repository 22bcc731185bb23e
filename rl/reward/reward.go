package reward

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/rl/internal/stats"
)

// Schedule gives the weight vector at training progress p ∈ [0, 1].
type Schedule interface {
	Weights(p float64) []float64
}

// Observer is implemented by schedules that adapt to the reward: Multi calls
// Observe after every scored batch with the batch variance of the raw
// adaptation signal (see Multi.Signal).
type Observer interface {
	Observe(variance float64)
}

// Constant is a fixed weight vector.
type Constant []float64

// Weights implements Schedule.
func (c Constant) Weights(float64) []float64 { return append([]float64(nil), c...) }

// Interp interpolates between Start (p = 0) and End (p = 1). Build it with
// Linear or Cosine.
type Interp struct {
	Start, End []float64
	cosine     bool
}

// Linear returns w(p) = start + p·(end − start). It panics when the
// lengths differ.
func Linear(start, end []float64) *Interp {
	if len(start) != len(end) {
		panic(fmt.Sprintf("reward: Linear: %d start weights, %d end weights", len(start), len(end)))
	}
	return &Interp{Start: start, End: end}
}

// Cosine returns w(p) = end + (start − end)·(1 + cos πp)/2: flat at both ends,
// fastest change in the middle (the cosine annealing of Loshchilov & Hutter
// 2017, applied to weights).
func Cosine(start, end []float64) *Interp {
	s := Linear(start, end)
	s.cosine = true
	return s
}

// Weights implements Schedule.
func (s *Interp) Weights(p float64) []float64 {
	p = math.Min(math.Max(p, 0), 1)
	f := p
	if s.cosine {
		f = (1 - math.Cos(math.Pi*p)) / 2
	}
	w := make([]float64, len(s.Start))
	for i := range w {
		w[i] = s.Start[i] + f*(s.End[i]-s.Start[i])
	}
	return w
}

// Step is piecewise constant: Values[i] applies while p < Boundaries[i],
// the last Values entry from the last boundary on. len(Values) must be
// len(Boundaries)+1 and Boundaries increasing.
type Step struct {
	Boundaries []float64
	Values     [][]float64
}

// NewStep returns a Step schedule. It panics on inconsistent lengths.
func NewStep(boundaries []float64, weights ...[]float64) *Step {
	if len(weights) != len(boundaries)+1 {
		panic(fmt.Sprintf("reward: NewStep: %d weight vectors for %d boundaries", len(weights), len(boundaries)))
	}
	return &Step{Boundaries: boundaries, Values: weights}
}

// Weights implements Schedule.
func (s *Step) Weights(p float64) []float64 {
	i := 0
	for i < len(s.Boundaries) && p >= s.Boundaries[i] {
		i++
	}
	return append([]float64(nil), s.Values[i]...)
}

// Adaptive starts from Initial and, whenever the smoothed variance of the
// adaptation signal falls below Threshold times its running peak, moves the
// fraction Rate of component From's weight to component To (never leaving
// less than MinFrom on From). The smoothing is an exponential moving average
// with decay Decay (default 0.9). It ignores progress.
type Adaptive struct {
	Initial   []float64
	From, To  int
	Threshold float64 // default 0.5
	Rate      float64 // default 0.05
	MinFrom   float64
	Decay     float64

	w         []float64
	ema, peak float64
	n         int
	// Shifted counts the observations that moved weight.
	Shifted int
}

// Weights implements Schedule.
func (a *Adaptive) Weights(float64) []float64 {
	if a.w == nil {
		a.w = append([]float64(nil), a.Initial...)
	}
	return append([]float64(nil), a.w...)
}

// Observe implements Observer.
func (a *Adaptive) Observe(v float64) {
	if a.w == nil {
		a.w = append([]float64(nil), a.Initial...)
	}
	d, th, rate := a.Decay, a.Threshold, a.Rate
	if d == 0 {
		d = 0.9
	}
	if th == 0 {
		th = 0.5
	}
	if rate == 0 {
		rate = 0.05
	}
	if a.n == 0 {
		a.ema = v
	} else {
		a.ema = d*a.ema + (1-d)*v
	}
	a.n++
	a.peak = math.Max(a.peak, a.ema)
	if a.n > 1 && a.ema < th*a.peak {
		move := math.Min(rate*a.w[a.From], a.w[a.From]-a.MinFrom)
		if move > 0 {
			a.w[a.From] -= move
			a.w[a.To] += move
			a.Shifted++
		}
	}
}

// Welford keeps a running mean and variance (Welford 1962).
type Welford struct {
	N    int
	Mean float64
	m2   float64
}

// Add adds one observation.
func (w *Welford) Add(x float64) {
	w.N++
	d := x - w.Mean
	w.Mean += d / float64(w.N)
	w.m2 += d * (x - w.Mean)
}

// Var is the population variance (0 with fewer than two observations).
func (w *Welford) Var() float64 {
	if w.N < 2 {
		return 0
	}
	return w.m2 / float64(w.N)
}

// Std is the population standard deviation.
func (w *Welford) Std() float64 { return math.Sqrt(w.Var()) }

// Component is a named reward term over outputs of type T. After, when set,
// is called with each scored batch (novelty components remember it).
type Component[T any] struct {
	Name  string
	Score func(T) float64
	After func([]T)
}

// Multi is a weighted, normalised multi-objective reward.
type Multi[T any] struct {
	comps []Component[T]
	sched Schedule
	stats []Welford
	// NoNormalize disables the running mean/std normalisation.
	NoNormalize bool
	// Eps is added to the std before dividing (default 1e-8); Clip bounds
	// normalised values to ±Clip (default 5; negative: no bound).
	Eps, Clip float64
	// Signal is the component whose raw batch variance is passed to
	// Observer schedules; −1 uses the combined reward's variance.
	Signal int
}

// NewMulti returns a multi-objective reward with the given weight schedule
// and components (one weight per component). The adaptation signal defaults
// to component 0.
func NewMulti[T any](sched Schedule, comps ...Component[T]) *Multi[T] {
	return &Multi[T]{comps: comps, sched: sched, stats: make([]Welford, len(comps))}
}

// Names returns the component names.
func (m *Multi[T]) Names() []string {
	n := make([]string, len(m.comps))
	for i, c := range m.comps {
		n[i] = c.Name
	}
	return n
}

// Log records one scored batch.
type Log struct {
	Progress float64
	Names    []string
	Weights  []float64
	RawMean  []float64 // per component, raw batch mean
	RawStd   []float64 // per component, raw batch std
	NormMean []float64 // per component, normalised batch mean
	Mean     float64   // combined reward, batch mean
	Std      float64
}

// Map returns the log keyed "w_<name>", "<name>_mean", "<name>_std",
// "<name>_norm", "reward", "reward_std", "progress".
func (l Log) Map() map[string]float64 {
	out := map[string]float64{"progress": l.Progress, "reward": l.Mean, "reward_std": l.Std}
	for i, n := range l.Names {
		out["w_"+n] = l.Weights[i]
		out[n+"_mean"] = l.RawMean[i]
		out[n+"_std"] = l.RawStd[i]
		out[n+"_norm"] = l.NormMean[i]
	}
	return out
}

// Score returns the combined reward of every output at training progress p
// and the log of the batch. It updates the running statistics and, for
// adaptive schedules, the weights for the next batch.
func (m *Multi[T]) Score(p float64, outs []T) ([]float64, Log) {
	raw := make([][]float64, len(outs))
	for i, o := range outs {
		raw[i] = make([]float64, len(m.comps))
		for k, c := range m.comps {
			raw[i][k] = c.Score(o)
		}
	}
	for _, c := range m.comps {
		if c.After != nil {
			c.After(outs)
		}
	}
	return m.Combine(p, raw)
}

// Combine is Score for components computed elsewhere: raw[i][k] is
// component k of output i. It panics when a row has the wrong length.
func (m *Multi[T]) Combine(p float64, raw [][]float64) ([]float64, Log) {
	K := len(m.comps)
	w := m.sched.Weights(p)
	if len(w) != K {
		panic(fmt.Sprintf("reward: schedule gives %d weights for %d components", len(w), K))
	}
	lg := Log{Progress: p, Names: m.Names(), Weights: w,
		RawMean: make([]float64, K), RawStd: make([]float64, K), NormMean: make([]float64, K)}
	for _, r := range raw {
		if len(r) != K {
			panic(fmt.Sprintf("reward: %d component values for %d components", len(r), K))
		}
		for k, x := range r {
			m.stats[k].Add(x)
		}
	}
	eps, clip := m.Eps, m.Clip
	if eps == 0 {
		eps = 1e-8
	}
	if clip == 0 {
		clip = 5
	}
	total := make([]float64, len(raw))
	col := make([]float64, len(raw))
	for k := 0; k < K; k++ {
		for i, r := range raw {
			col[i] = r[k]
		}
		lg.RawMean[k], lg.RawStd[k] = stats.MeanStd(col)
		mu, sd := m.stats[k].Mean, m.stats[k].Std()
		var nm float64
		for i, x := range col {
			z := x
			if !m.NoNormalize {
				z = (x - mu) / (sd + eps)
				if clip > 0 {
					z = math.Min(math.Max(z, -clip), clip)
				}
			}
			nm += z
			total[i] += w[k] * z
		}
		if len(raw) > 0 {
			lg.NormMean[k] = nm / float64(len(raw))
		}
	}
	lg.Mean, lg.Std = stats.MeanStd(total)
	if o, ok := m.sched.(Observer); ok {
		v := lg.Std * lg.Std
		if m.Signal >= 0 && m.Signal < K {
			v = lg.RawStd[m.Signal] * lg.RawStd[m.Signal]
		}
		o.Observe(v)
	}
	return total, lg
}
