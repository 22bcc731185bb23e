package grader

import "unicode"

// ChrF is the character n-gram F-score of Popović, "chrF: character n-gram
// F-score for automatic MT evaluation" (WMT 2015), with n-grams up to 6 and
// β = 2 (recall weighted twice as much as precision), in [0, 1].
func ChrF(hyp, ref string) float64 { return ChrFN(hyp, ref, 6, 2) }

// ChrFN is chrF with maximum n-gram order maxN and weight beta. As in the
// paper, white space is removed, characters are Unicode code points, the
// n-gram precision chrP and recall chrR are averaged arithmetically over the
// orders n = 1…maxN, and
//
//	chrF_β = (1+β²)·chrP·chrR / (β²·chrP + chrR).
//
// Orders for which the reference has no n-gram are left out of the averages
// (a short reference cannot have long n-grams); an order for which only the
// hypothesis is too short has precision 0 and recall 0. Two empty strings
// score 1; an empty hypothesis against a non-empty reference scores 0.
func ChrFN(hyp, ref string, maxN int, beta float64) float64 {
	h := stripSpace(hyp)
	r := stripSpace(ref)
	if len(r) == 0 {
		if len(h) == 0 {
			return 1
		}
		return 0
	}
	var sumP, sumR float64
	orders := 0
	for n := 1; n <= maxN; n++ {
		if len(r) < n {
			break
		}
		orders++
		if len(h) < n {
			continue
		}
		hc := ngrams(h, n)
		rc := ngrams(r, n)
		match := 0
		for g, c := range hc {
			match += min(c, rc[g])
		}
		sumP += float64(match) / float64(len(h)-n+1)
		sumR += float64(match) / float64(len(r)-n+1)
	}
	p := sumP / float64(orders)
	rec := sumR / float64(orders)
	b2 := beta * beta
	if p+rec == 0 {
		return 0
	}
	return (1 + b2) * p * rec / (b2*p + rec)
}

func stripSpace(s string) []rune {
	out := make([]rune, 0, len(s))
	for _, c := range s {
		if !unicode.IsSpace(c) {
			out = append(out, c)
		}
	}
	return out
}

func ngrams(s []rune, n int) map[string]int {
	m := make(map[string]int, len(s))
	for i := 0; i+n <= len(s); i++ {
		m[string(s[i:i+n])]++
	}
	return m
}
