package main

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"examples/finance-risk/finrisk"

	"github.com/google/go-cmp/cmp"
)

func needTask(t *testing.T) *task {
	t.Helper()
	tk, err := loadTask("")
	if errors.Is(err, finrisk.ErrFetch) {
		t.Skipf("data fetch failed for lack of network: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestQuick runs the -quick path end to end through the NATS service and
// checks that both replays learned (they beat rejecting and approving
// everyone on every seed's test fold), that the table is printed, and that
// the run with a local buffer reproduces the service's run exactly.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run (about 15 s) skipped in -short mode")
	}
	needTask(t)
	var out bytes.Buffer
	rep, err := Run(Options{Quick: true}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if len(rep.Seeds) != 5 || len(rep.Prioritized) != 5 || len(rep.Uniform) != 5 {
		t.Fatalf("%d seeds, %d prioritized and %d uniform runs", len(rep.Seeds), len(rep.Prioritized), len(rep.Uniform))
	}
	for k := range rep.Seeds {
		for _, r := range []result{rep.Prioritized[k], rep.Uniform[k]} {
			if !(r.Cost < rep.RejectAll[k] && r.Cost < rep.ApproveAll[k]) || r.AUC < 0.6 || len(r.Curve) != 10 {
				t.Errorf("seed %d: cost %.3f (reject all %.3f, approve all %.3f), AUC %.3f, %d checkpoints",
					rep.Seeds[k], r.Cost, rep.RejectAll[k], rep.ApproveAll[k], r.AUC, len(r.Curve))
			}
		}
	}
	p, l := rep.Prioritized[0], rep.Local
	if diff := cmp.Diff([]any{p.Cost, p.AUC, p.Online, p.Curve, p.Mix}, []any{l.Cost, l.AUC, l.Online, l.Curve, l.Mix}); diff != "" {
		t.Errorf("the run through NATS and the local run differ (-nats +local):\n%s", diff)
	}
	// Prioritized replay must sample differently: fewer rejections, whose
	// TD errors vanish once Q(s, reject) ≈ 0.
	if pm, um := rep.Prioritized[0].Mix, rep.Uniform[0].Mix; pm[0] >= um[0] {
		t.Errorf("prioritized replay sampled %d rejections, uniform %d", pm[0], um[0])
	}
	for _, s := range []string{"| prioritized (α 0.6", "| uniform |", "paired over seeds", "samples/s", "same figures: true"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q", s)
		}
	}
}

// TestRewardIsTheCostMatrix checks the bandit's reward against finrisk's
// cost: for any decisions, mean(1[good] − reward) is finrisk.Evaluate's
// cost per applicant.
func TestRewardIsTheCostMatrix(t *testing.T) {
	tk := needTask(t)
	s := tk.newSplit(3)
	rng := rand.New(rand.NewPCG(1, 2))
	dec := make([]bool, len(s.test))
	var sum float64
	for k, i := range s.test {
		dec[k] = rng.IntN(2) == 1
		sum += float64(1-tk.credit.Bad[i]) - tk.reward(i, dec[k], s.testRegime[k])
	}
	cost, _ := tk.testCost(s, dec, make([]float64, len(dec)))
	if math.Abs(sum/float64(len(dec))-cost) > 1e-12 {
		t.Errorf("mean cost from rewards %.6f, finrisk %.6f", sum/float64(len(dec)), cost)
	}
	if len(s.train)+len(s.test) != 1000 || len(s.test) != 200 {
		t.Errorf("split %d + %d", len(s.train), len(s.test))
	}
}

func TestTransitionEncoding(t *testing.T) {
	tr := transition{obs: []float32{1.5, -2, 0, float32(math.Inf(1))}, action: approve, reward: -7.5}
	got, err := decodeTransition(tr.encode(), 4)
	if err != nil || !cmp.Equal(got, tr, cmp.AllowUnexported(transition{})) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, tr.encode()[:10], append(tr.encode(), 0)} {
		if _, err := decodeTransition(bad, 4); err == nil {
			t.Errorf("decoded %d bytes", len(bad))
		}
	}
	b := tr.encode()
	b[16] = 7 // the action byte
	if _, err := decodeTransition(b, 4); err == nil {
		t.Error("decoded action 7")
	}
}
