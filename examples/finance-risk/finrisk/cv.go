package finrisk

import (
	"math"
	"math/rand/v2"
	"sort"
)

// StratifiedFolds splits indices 0..len(y)-1 into k folds with the class
// proportions of y preserved, shuffled with the given seed. It returns the
// test indices of each fold, sorted.
func StratifiedFolds(y []int, k int, seed uint64) [][]int {
	rng := rand.New(rand.NewPCG(seed, 0x5f1d))
	byClass := map[int][]int{}
	var classes []int
	for i, c := range y {
		if _, ok := byClass[c]; !ok {
			classes = append(classes, c)
		}
		byClass[c] = append(byClass[c], i)
	}
	sort.Ints(classes)
	folds := make([][]int, k)
	next := 0
	for _, c := range classes {
		idx := byClass[c]
		rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		for _, i := range idx {
			folds[next%k] = append(folds[next%k], i)
			next++
		}
	}
	for _, f := range folds {
		sort.Ints(f)
	}
	return folds
}

// TrainIndices returns the indices in 0..n-1 not in test (sorted).
func TrainIndices(n int, test []int) []int {
	in := make([]bool, n)
	for _, i := range test {
		in[i] = true
	}
	var out []int
	for i := 0; i < n; i++ {
		if !in[i] {
			out = append(out, i)
		}
	}
	return out
}

// AUC is the area under the ROC curve of score for the positive class
// (label 1): the probability that a random positive scores above a random
// negative, ties counting half. NaN when a class is absent.
func AUC(score []float64, label []int) float64 {
	idx := make([]int, len(score))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return score[idx[a]] < score[idx[b]] })
	var pos, neg, rankSum float64
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && score[idx[j]] == score[idx[i]] {
			j++
		}
		avg := float64(i+j+1) / 2 // mean 1-based rank of the tie group
		for _, k := range idx[i:j] {
			if label[k] == 1 {
				rankSum += avg
				pos++
			} else {
				neg++
			}
		}
		i = j
	}
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return (rankSum - pos*(pos+1)/2) / (pos * neg)
}

// Cost matrix of the Statlog German Credit data: approving a bad applicant
// costs CostBadApproved, rejecting a good one CostGoodRejected.
const (
	CostBadApproved  = 5.0
	CostGoodRejected = 1.0
)

// BayesThreshold is the probability of default above which rejecting
// costs less than approving, for a loss scale on bad approvals.
func BayesThreshold(lossScale float64) float64 {
	return CostGoodRejected / (CostGoodRejected + CostBadApproved*lossScale)
}

// Metrics are the evaluation figures of a credit model on a set of applicants.
type Metrics struct {
	Accuracy    float64 // classification accuracy with p(bad) > 0.5 meaning bad
	AUC         float64 // ROC AUC of p(bad) for bad
	Cost        float64 // cost per applicant of the approve/reject decisions (cost matrix)
	Misjudgment float64 // (bad approved + good rejected) / applicants
	FairFlip    float64 // share of applicants whose decision flips when only sex or age group changes
}

// Evaluate computes Metrics from probabilities of default, approve
// decisions, the cost scale applied to each applicant's bad-approved loss,
// and per-applicant fairness flips (nil: 0).
func Evaluate(pBad []float64, approve []bool, lossScale []float64, bad []int, flip []bool) Metrics {
	var m Metrics
	n := float64(len(bad))
	for i, y := range bad {
		if (pBad[i] > 0.5) == (y == 1) {
			m.Accuracy++
		}
		switch {
		case approve[i] && y == 1:
			m.Misjudgment++
			s := 1.0
			if lossScale != nil {
				s = lossScale[i]
			}
			m.Cost += CostBadApproved * s
		case !approve[i] && y == 0:
			m.Misjudgment++
			m.Cost += CostGoodRejected
		}
		if flip != nil && flip[i] {
			m.FairFlip++
		}
	}
	m.Accuracy /= n
	m.Cost /= n
	m.Misjudgment /= n
	m.FairFlip /= n
	m.AUC = AUC(pBad, bad)
	return m
}

// Calibration bins p into nbins equal-width bins and returns, per bin, the
// mean predicted probability, the observed frequency of label 1 and the count.
func Calibration(p []float64, label []int, nbins int) (meanP, freq []float64, count []int) {
	meanP, freq, count = make([]float64, nbins), make([]float64, nbins), make([]int, nbins)
	for i, v := range p {
		b := int(v * float64(nbins))
		b = min(max(b, 0), nbins-1)
		meanP[b] += v
		freq[b] += float64(label[i])
		count[b]++
	}
	for b := range meanP {
		if count[b] > 0 {
			meanP[b] /= float64(count[b])
			freq[b] /= float64(count[b])
		}
	}
	return meanP, freq, count
}
