package nn

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"

	kern "github.com/troupe-ml/troupe/tensor"
)

// MixedFeatureTokensOp turns a batch of F tabular features x (B×F) with
// numeric and categorical columns into B×F×D tokens, one per column, in
// column order — the feature tokenizer of the FT-Transformer (Gorishniy et
// al. 2021, "Revisiting Deep Learning Models for Tabular Data", §3.3):
//
//   - numeric column f (categories[f] == 0): x[b,f]·w[n(f)] + bias[f], where
//     n(f) counts the numeric columns before f (w is Fnum×D);
//   - categorical column f with categories[f] = C > 0: x[b,f] holds an
//     integer code c in [0, C) and the token is table[offset(f)+c] + bias[f],
//     where offset(f) is the sum of the category counts of the categorical
//     columns before f (table is ΣC×D: every attribute has its own rows).
//
// bias is F×D. A code that is not an integer in [0, C) is a data error: the
// graph run fails with an error naming the row, column and code. Gradients
// flow to w, table, bias and the numeric columns of x (categorical columns
// get zero gradient).
func MixedFeatureTokensOp(x, w, table, bias *G.Node, categories []int) *G.Node {
	xs, wsh, tsh := x.Shape(), w.Shape(), table.Shape()
	if xs.Dims() != 2 || len(categories) != xs[1] {
		panic(fmt.Sprintf("nn: MixedFeatureTokensOp: x %v with %d category counts", xs, len(categories)))
	}
	b, f := xs[0], xs[1]
	nNum, nRows := 0, 0
	idx := make([]int, f) // numeric: row of w; categorical: offset into table
	for j, c := range categories {
		switch {
		case c < 0:
			panic(fmt.Sprintf("nn: MixedFeatureTokensOp: column %d has %d categories", j, c))
		case c == 0:
			idx[j] = nNum
			nNum++
		default:
			idx[j] = nRows
			nRows += c
		}
	}
	d := bias.Shape()[bias.Shape().Dims()-1]
	if !bias.Shape().Eq(ts.Shape{f, d}) || !wsh.Eq(ts.Shape{max(nNum, 1), d}) || !tsh.Eq(ts.Shape{max(nRows, 1), d}) {
		panic(fmt.Sprintf("nn: MixedFeatureTokensOp: x %v (%d numeric, %d category rows), w %v, table %v, bias %v; want w %v, table %v, bias %v",
			xs, nNum, nRows, wsh, tsh, bias.Shape(), ts.Shape{max(nNum, 1), d}, ts.Shape{max(nRows, 1), d}, ts.Shape{f, d}))
	}
	cats := append([]int(nil), categories...)
	k := &kernel{name: "MixedFeatureTokens", diff: []bool{true, true, true, true}}
	k.fwd = func(v [][]float32, y []float32) error {
		for i := 0; i < b; i++ {
			copy(y[i*f*d:(i+1)*f*d], v[3])
			for j := 0; j < f; j++ {
				yr, xv := y[(i*f+j)*d:(i*f+j+1)*d], v[0][i*f+j]
				if cats[j] == 0 {
					kern.Axpy(xv, v[1][idx[j]*d:(idx[j]+1)*d], yr)
					continue
				}
				if xv != float32(math.Trunc(float64(xv))) || xv < 0 || int(xv) >= cats[j] {
					return fmt.Errorf("nn: MixedFeatureTokens: row %d, column %d: category code %v outside [0,%d)", i, j, xv, cats[j])
				}
				r := idx[j] + int(xv)
				kern.Axpy(1, v[2][r*d:(r+1)*d], yr)
			}
		}
		return nil
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		for i := 0; i < b; i++ {
			for j := 0; j < f; j++ {
				row := dy[(i*f+j)*d : (i*f+j+1)*d]
				kern.Axpy(1, row, g[3][j*d:(j+1)*d])
				xv := v[0][i*f+j]
				if cats[j] == 0 {
					w := v[1][idx[j]*d : (idx[j]+1)*d]
					var s float32
					for e, dv := range row {
						s += dv * w[e]
					}
					g[0][i*f+j] = s
					kern.Axpy(xv, row, g[1][idx[j]*d:(idx[j]+1)*d])
					continue
				}
				r := idx[j] + int(xv)
				kern.Axpy(1, row, g[2][r*d:(r+1)*d])
			}
		}
	}
	return applyFused(k, ts.Shape{b, f, d}, x, w, table, bias)
}
