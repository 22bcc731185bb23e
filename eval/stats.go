package eval

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Interval is an estimate with its 95 % bootstrap interval.
type Interval struct{ Mean, Lo, Hi float64 }

// String writes the interval as "+0.0043 [−0.0012, +0.0101]" (signed, four
// decimals: the form of a difference between two systems).
func (iv Interval) String() string {
	return fmt.Sprintf("%+.4f [%+.4f, %+.4f]", iv.Mean, iv.Lo, iv.Hi)
}

// Excludes0 reports whether the interval lies wholly above or below 0.
func (iv Interval) Excludes0() bool { return iv.Lo > 0 || iv.Hi < 0 }

// PairedBootstrap is the mean over items of a[i] − b[i] with its 95 %
// percentile interval from the paired bootstrap: resamples draws of the
// items with replacement, each scored by its mean difference, the interval
// being their 2.5th and 97.5th percentiles (for MT evaluation: Koehn,
// "Statistical Significance Tests for Machine Translation Evaluation",
// EMNLP 2004). Pairing draws the same items for both systems, so the
// spread of item difficulty, which both share, does not widen the
// interval. An interval containing 0 means the items cannot tell the two
// systems apart at this level.
//
// a and b must have the same length (a programmer error otherwise, which
// panics). Empty input gives the zero Interval; resamples ≤ 0 gives the
// mean with an interval of zero width.
func PairedBootstrap(a, b []float64, resamples int, seed uint64) Interval {
	if len(a) != len(b) {
		panic(fmt.Sprintf("eval: PairedBootstrap: %d scores against %d", len(a), len(b)))
	}
	m := len(a)
	if m == 0 {
		return Interval{}
	}
	d := make([]float64, m)
	var sum float64
	for i := range a {
		d[i] = a[i] - b[i]
		sum += d[i]
	}
	out := Interval{Mean: sum / float64(m)}
	if resamples <= 0 {
		out.Lo, out.Hi = out.Mean, out.Mean
		return out
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	means := make([]float64, resamples)
	for k := range means {
		var s float64
		for range m {
			s += d[r.IntN(m)]
		}
		means[k] = s / float64(m)
	}
	return percentiles(out, means)
}

// TwoLevelBootstrap is the mean of d[run][i] over runs and items with a 95 %
// percentile interval from resampling both: each resample draws the runs
// with replacement and, independently, the items with replacement (the
// same items for every drawn run, so each run's values stay paired by
// item), and scores the mean over the drawn pairs. It is the two-stage
// bootstrap of Davison and Hinkley ("Bootstrap Methods and their
// Application", 1997, §3.8): the interval covers which items were drawn
// and the randomness of the runs (training seeds, say), of which the runs
// are a sample.
//
// Every run must have the same number of items (a programmer error
// otherwise, which panics). No runs or no items give the zero Interval.
func TwoLevelBootstrap(d [][]float64, resamples int, seed uint64) Interval {
	R := len(d)
	if R == 0 || len(d[0]) == 0 {
		return Interval{}
	}
	m := len(d[0])
	var sum float64
	for _, run := range d {
		if len(run) != m {
			panic(fmt.Sprintf("eval: TwoLevelBootstrap: runs of %d and %d items", m, len(run)))
		}
		for _, v := range run {
			sum += v
		}
	}
	out := Interval{Mean: sum / float64(R*m)}
	if resamples <= 0 {
		out.Lo, out.Hi = out.Mean, out.Mean
		return out
	}
	r := rand.New(rand.NewPCG(seed, 0x2b00))
	idx := make([]int, m)
	means := make([]float64, resamples)
	for k := range means {
		for j := range idx {
			idx[j] = r.IntN(m)
		}
		var s float64
		for range R {
			run := d[r.IntN(R)]
			for _, j := range idx {
				s += run[j]
			}
		}
		means[k] = s / float64(R*m)
	}
	return percentiles(out, means)
}

// percentiles sets out's bounds to the 2.5th and 97.5th percentiles of the
// resampled means (nearest rank).
func percentiles(out Interval, means []float64) Interval {
	slices.Sort(means)
	n := len(means)
	out.Lo = means[int(0.025*float64(n-1)+0.5)]
	out.Hi = means[int(0.975*float64(n-1)+0.5)]
	return out
}

// Mean is the arithmetic mean of xs (NaN when xs is empty).
func Mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// MeanSD returns the mean and the sample standard deviation (divisor n − 1)
// of xs: the "mean ± sd" of repeated measurements such as cross-validation
// folds. One value has sd 0; no values give NaN and 0.
func MeanSD(xs []float64) (mean, sd float64) {
	mean = Mean(xs)
	if len(xs) < 2 {
		return mean, 0
	}
	var s float64
	for _, x := range xs {
		s += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(s / float64(len(xs)-1))
}
