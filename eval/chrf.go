package eval

import "unicode"

// ChrF is the character n-gram F-score of Popović ("chrF: character n-gram
// F-score for automatic MT evaluation", WMT 2015) as sacreBLEU computes it
// for one sentence with its defaults (chrF2): character n-grams of orders
// 1 to 6, β = 2 (recall weighs twice as much as precision), white space
// removed. The score is in [0, 1] (sacreBLEU prints it times 100).
func ChrF(hyp, ref string) float64 { return ChrFN(hyp, ref, 6, 2) }

// ChrFN is chrF with n-gram orders 1 to maxN and weight beta. Characters
// are Unicode code points; white space (unicode.IsSpace) is removed first.
// For each order n it counts the hypothesis's n-grams, the reference's and
// their clipped matches; precision and recall are averaged arithmetically
// over the orders for which both strings have n-grams (sacreBLEU's
// "effective order": a short sentence is not penalised for lacking long
// n-grams), and
//
//	chrF_β = (1+β²)·P·R / (β²·P + R).
//
// When no order has n-grams on both sides (an empty string) the score is 0.
func ChrFN(hyp, ref string, maxN int, beta float64) float64 {
	h, r := stripSpace(hyp), stripSpace(ref)
	var sumP, sumR float64
	orders := 0
	for n := 1; n <= maxN; n++ {
		if len(h) < n || len(r) < n {
			break // no longer n-grams on one side either
		}
		hc, rc := ngrams(h, n), ngrams(r, n)
		match := 0
		for g, c := range hc {
			match += min(c, rc[g])
		}
		sumP += float64(match) / float64(len(h)-n+1)
		sumR += float64(match) / float64(len(r)-n+1)
		orders++
	}
	if orders == 0 {
		return 0
	}
	p, rec := sumP/float64(orders), sumR/float64(orders)
	if p+rec == 0 {
		return 0
	}
	b2 := beta * beta
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

// ngrams counts the n-grams of s, keyed by their text.
func ngrams(s []rune, n int) map[string]int {
	m := make(map[string]int, len(s))
	for i := 0; i+n <= len(s); i++ {
		m[string(s[i:i+n])]++
	}
	return m
}
