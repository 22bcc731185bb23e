package pipeline

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"examples/finance-risk/agents"
	"examples/finance-risk/finrisk"
)

// newTinyLSTM is a small market network (Hidden 4) for the tests.
func newTinyLSTM() *agents.Net { return agents.NewLSTM(Window, 4, 1, 1e-2) }

var data *Data

func TestMain(m *testing.M) {
	dir, err := finrisk.Fetch("")
	switch {
	case errors.Is(err, finrisk.ErrFetch):
		fmt.Fprintf(os.Stderr, "pipeline: real data unavailable, tests skip: %v\n", err)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	default:
		if data, err = Load(dir, 5, 1); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func TestLoadDatesAndRegimes(t *testing.T) {
	if data == nil {
		t.Skip("no data (network)")
	}
	n := len(data.Credit.Rows)
	if len(data.Day) != n || len(data.Folds) != 5 {
		t.Fatal("sizes")
	}
	for i, day := range data.Day {
		if data.MarketOK[i] != (day >= Window) {
			t.Fatalf("applicant %d day %d MarketOK %v", i, day, data.MarketOK[i])
		}
		if data.Scale[i] != data.Regime[i].LossScale() {
			t.Fatal("scale")
		}
	}
	d2, _ := Load(mustFetch(t), 5, 1)
	if fmt.Sprint(d2.Day[:20]) != fmt.Sprint(data.Day[:20]) {
		t.Fatal("dates not reproducible for a seed")
	}
	// Variants change only the protected attributes.
	rows := data.Variant([]int{0, 1}, BothFlipped)
	if data.Credit.Female(rows[0]) == data.Credit.Female(data.Credit.Rows[0]) {
		t.Fatal("sex not flipped")
	}
}

func mustFetch(t *testing.T) string {
	dir, err := finrisk.Fetch("")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCrossFitOrder checks that out-of-fold outputs come back in the order
// of the training indices (the rule features are a fixed function of the row).
func TestCrossFitOrder(t *testing.T) {
	if data == nil {
		t.Skip("no data (network)")
	}
	idx := data.Folds[0][:60]
	cfg := QuickConfig()
	cfg.TFEpochs, cfg.MLPEpochs, cfg.TFDim = 1, 1, 8
	mk := &MarketAgent{Net: nil}
	mk.Out = make([]float32, len(data.Day))
	mk.Emb = make([]float32, len(data.Day)*4)
	mk.Net = newTinyLSTM()
	cr, err := CrossFit(data, mk, idx, 2, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	o := cr.OOF[Orig]
	nf := o.EmbDim[Rules]
	for i, j := range idx {
		want := data.Comp.Features(data.Credit.Rows[j])
		for k, v := range want {
			if o.Emb[Rules][i*nf+k] != v {
				t.Fatalf("OOF example %d is not applicant %d", i, j)
			}
		}
		if o.Mask[i*NumMembers+Market] != map[bool]float32{true: 1, false: 0}[data.MarketOK[j]] {
			t.Fatal("market mask")
		}
	}
	outs, err := cr.Outputs(data.Rows(idx[:5]), idx[:5])
	if err != nil || len(outs) != 2 {
		t.Fatal(err, len(outs))
	}
	fu, err := TrainFusion(o, data.Labels(idx), FusionConfig{Dim: 8, Heads: 2, Epochs: 3, Batch: 32, LR: 1e-2, WeightDecay: 1e-2, Seed: 1, VoteOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	z, w, err := fu.PredictAll(outs)
	if err != nil || len(z) != 5 || len(w) != 5*NumMembers {
		t.Fatal(err)
	}
	// The fusion reads each example's packed row on its own: a permutation
	// of the examples permutes the outputs (and fixes the packing order).
	z0, w0, err := fu.Predict(o)
	if err != nil {
		t.Fatal(err)
	}
	perm := rand.New(rand.NewPCG(2, 2)).Perm(o.N)
	zp, wp, err := fu.Predict(o.Permute(perm))
	if err != nil {
		t.Fatal(err)
	}
	M := NumMembers
	for i, j := range perm {
		if math.Abs(float64(zp[i]-z0[j])) > 1e-5 {
			t.Fatalf("permuted example %d: logit %g, unpermuted %g", i, zp[i], z0[j])
		}
		var sum float64
		for m := 0; m < M; m++ {
			sum += float64(wp[i*M+m])
			if math.Abs(float64(wp[i*M+m]-w0[j*M+m])) > 1e-5 {
				t.Fatalf("permuted example %d member %d: weight %g, unpermuted %g", i, m, wp[i*M+m], w0[j*M+m])
			}
		}
		if math.Abs(sum-1) > 1e-5 || (o.Mask[j*M+Market] == 0 && w0[j*M+Market] != 0) {
			t.Fatalf("example %d: weights %v for mask %v", j, w0[j*M:(j+1)*M], o.Mask[j*M:(j+1)*M])
		}
	}
	if fu.ParamCount() != fu.Store.NumParams() || fu.Store.Param("fusion.q.w") == nil {
		t.Errorf("fusion parameters %v", fu.Store.Names())
	}
}
