package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// sentScore is one sentence's figures in an evaluation: what the paired
// bootstrap resamples.
type sentScore struct {
	ChrF      float64 // chrF against the reference
	Quality   float64 // TranslationQualityGrader, normalised (the small model's reward)
	Detection float64 // ProperNounDetectionGrader, normalised (workflow rows only)
	// Agent3ChrF and GuardChrF are the workflow's chrF with agent 3's
	// final translation as written and with the client's guard on it
	// (guardFinal); workflow rows only. ChrF is one of them.
	Agent3ChrF, GuardChrF float64
}

// diffCI is a paired difference of means with its bootstrap interval.
type diffCI struct{ Mean, Lo, Hi float64 }

// String writes the difference with its 95 % interval, "+0.0043 [−0.0012, +0.0101]".
func (d diffCI) String() string {
	return fmt.Sprintf("%+.4f [%+.4f, %+.4f]", d.Mean, d.Lo, d.Hi)
}

// bootstrapResamples is the number of resamples behind every interval of
// the report.
const bootstrapResamples = 2000

// pairedBootstrap is the mean over sentences of a[i] − b[i] with its 95 %
// percentile interval from the paired bootstrap: n resamples of the
// sentences with replacement, each scored by the mean difference, the
// interval being their 2.5th and 97.5th percentiles (Efron and Tibshirani,
// "An Introduction to the Bootstrap", 1993; for MT evaluation, Koehn,
// "Statistical Significance Tests for Machine Translation Evaluation",
// EMNLP 2004). Pairing resamples the same sentences for both systems, so
// that the spread of sentence difficulty, which both share, does not enter.
// An interval that contains 0 means the test set cannot tell the two apart
// at this level. The resampling is seeded, so a report is reproducible.
//
// a and b must have the same length (a programmer error otherwise);
// empty input gives the zero diffCI.
func pairedBootstrap(a, b []float64, n int, seed uint64) diffCI {
	if len(a) != len(b) {
		panic(fmt.Sprintf("translation: pairedBootstrap: %d scores against %d", len(a), len(b)))
	}
	m := len(a)
	if m == 0 {
		return diffCI{}
	}
	d := make([]float64, m)
	var sum float64
	for i := range a {
		d[i] = a[i] - b[i]
		sum += d[i]
	}
	out := diffCI{Mean: sum / float64(m)}
	if n <= 0 {
		out.Lo, out.Hi = out.Mean, out.Mean
		return out
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	means := make([]float64, n)
	for k := range means {
		var s float64
		for range m {
			s += d[r.IntN(m)]
		}
		means[k] = s / float64(m)
	}
	slices.Sort(means)
	out.Lo = means[int(0.025*float64(n-1)+0.5)]
	out.Hi = means[int(0.975*float64(n-1)+0.5)]
	return out
}

// field picks one figure of each sentence.
func field(s []sentScore, f func(sentScore) float64) []float64 {
	out := make([]float64, len(s))
	for i, x := range s {
		out[i] = f(x)
	}
	return out
}

func chrfOf(s sentScore) float64    { return s.ChrF }
func qualityOf(s sentScore) float64 { return s.Quality }
func detOf(s sentScore) float64     { return s.Detection }
func guardOf(s sentScore) float64   { return s.GuardChrF }
func agent3Of(s sentScore) float64  { return s.Agent3ChrF }
