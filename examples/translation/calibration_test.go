package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/troupe-ml/troupe/examples/translation/corpus"
)

// TestCalRows checks the curves against a float64 reference that applies
// the bias to explicit first-token distributions: three first tokens (0 is
// "[]") with given logits per prompt, renormalised at each temperature
// after the bias, instead of calRows' closed form from p_τ("[]") alone.
func TestCalRows(t *testing.T) {
	logits := [][]float64{{0.3, 0.9, -1}, {1.2, 0.1, 0.4}, {-0.5, -0.2, -0.4}}
	gEmpty, gList := []float64{1, 0, 0.5}, []float64{0, 0.75, 0.2}
	temps := []float64{1, 0.5, 0.1}
	biases := []float64{-1, -0.3, 0, 0.25, 0.7, 2}
	r0 := [][]float64{{0.9, 0, 0.5}, {1, 0.1, 0.4}, {1, 0, 0.5}}
	r1 := [][]float64{{0.1, 0.6, 0.3}, {0, 0.7, 0.1}, {0, 0.75, 0.2}}
	softmax := func(l []float64, tau, b float64) []float64 {
		out := make([]float64, len(l))
		var z float64
		for i, v := range l {
			if i == 0 {
				v += b
			}
			out[i] = math.Exp(v / tau)
			z += out[i]
		}
		for i := range out {
			out[i] /= z
		}
		return out
	}
	n := len(logits)
	lp0, lp1 := make([]float64, n), make([]float64, n)
	q := make([][]float64, len(temps))
	for i, l := range logits {
		p := softmax(l, 1, 0)
		lp0[i], lp1[i] = math.Log(p[0]), math.Log(max(p[1], p[2]))
	}
	for k, tau := range temps {
		for _, l := range logits {
			q[k] = append(q[k], softmax(l, tau, 0)[0])
		}
	}
	var want []calRow
	for _, b := range biases {
		row := calRow{Bias: b, Sampled: make([]float64, len(temps)), Branch: make([]float64, len(temps))}
		for i, l := range logits {
			if l[0]+b > max(l[1], l[2]) {
				row.Greedy += gEmpty[i] / float64(n)
				row.SaysEmpty++
			} else {
				row.Greedy += gList[i] / float64(n)
			}
			for k, tau := range temps {
				qb := softmax(l, tau, b)[0]
				row.Sampled[k] += (qb*r0[k][i] + (1-qb)*r1[k][i]) / float64(n)
				// The two-way choice between "[]" and the best other token
				// at τ, the bias on "[]".
				two := softmax([]float64{l[0], max(l[1], l[2])}, tau, b)[0]
				row.Branch[k] += (two*gEmpty[i] + (1-two)*gList[i]) / float64(n)
			}
		}
		want = append(want, row)
	}
	got := calRows(lp0, lp1, gEmpty, gList, q, r0, r1, biases, temps)
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("calRows (-reference +got):\n%s", d)
	}
	if got[0].SaysEmpty >= got[len(got)-1].SaysEmpty {
		t.Errorf("the bias changes no greedy decision (%d vs %d): the test means nothing", got[0].SaysEmpty, got[len(got)-1].SaysEmpty)
	}
}

// TestQuickRunCalibration runs -quick with -calibration: the report has the
// section and its plot, the greedy decisions grow with the bias, and at
// bias 0 the greedy curve is the report's own detection reward on the same
// inputs (the warm start's, and the detector after RL on them): the
// calibration decodes each prompt with the budget the evaluation gives it.
// (The -quick detector rarely writes valid JSON, so that check is weak
// here; on the validation split's full run the two agree exactly,
// 0.6530 and 0.6607, notes/translation.md R22.)
func TestQuickRunCalibration(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	out := t.TempDir()
	rep, err := run(quickOptions(t, out, "-calibration"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*calibration{rep.calBefore, rep.calAfter} {
		if c == nil || len(c.Rows) != len(calBiases) || c.N != rep.nTest {
			t.Fatalf("calibration %+v, want %d rows over %d prompts", c, len(calBiases), rep.nTest)
		}
		for i := 1; i < len(c.Rows); i++ {
			if c.Rows[i].SaysEmpty < c.Rows[i-1].SaysEmpty {
				t.Errorf("bias %v: %d prompts answer [], fewer than %d at bias %v", c.Rows[i].Bias, c.Rows[i].SaysEmpty, c.Rows[i-1].SaysEmpty, c.Rows[i-1].Bias)
			}
			for _, s := range c.Rows[i].Sampled {
				if !(s >= 0 && s <= 1) {
					t.Errorf("bias %v: sampled reward %v outside [0, 1]", c.Rows[i].Bias, s)
				}
			}
		}
	}
	at0 := func(c *calibration) float64 {
		for _, r := range c.Rows {
			if r.Bias == 0 {
				return r.Greedy
			}
		}
		t.Fatal("no bias 0 in the grid")
		return 0
	}
	if g, w := at0(rep.calBefore), rep.flowBefore.Detection; math.Abs(g-w) > 1e-12 {
		t.Errorf("warm start: greedy reward at bias 0 is %v, the report's detection reward %v", g, w)
	}
	if g, w := at0(rep.calAfter), rep.detFixed.Detection; math.Abs(g-w) > 1e-12 {
		t.Errorf("after RL: greedy reward at bias 0 is %v, the report's detection reward on fixed inputs %v", g, w)
	}
	if st, err := os.Stat(filepath.Join(out, "calibration.png")); err != nil || st.Size() == 0 {
		t.Errorf("calibration.png missing: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(b), "## Agent 2's first decision (-calibration)") || !strings.Contains(string(b), "### after RL") {
		t.Error("report lacks the calibration section")
	}
}
