package pipeline

import (
	"testing"
	"time"

	"github.com/troupe-ml/troupe/examples/finance-risk/finrisk"
)

func aucOf(z []float32, y []int) float64 {
	s := make([]float64, len(z))
	for i, v := range z {
		s[i] = float64(v)
	}
	return finrisk.AUC(s, y)
}

func TestScratchPipeline(t *testing.T) {
	dir, err := finrisk.Fetch("")
	if err != nil {
		t.Skip(err)
	}
	d, err := Load(dir, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(d)
	st := time.Now()
	mk, err := TrainMarket(d, 16, 3, 1, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("market RMSE %.4f naive %.4f (%v)", mk.RMSE, mk.NaiveRMSE, time.Since(st))
	cfg := DefaultConfig()
	for f := 0; f < 2; f++ {
		test := d.Folds[f]
		train := finrisk.TrainIndices(1000, test)
		st = time.Now()
		cr, err := CrossFit(d, mk, train, 3, cfg, 10)
		if err != nil {
			t.Fatal(err)
		}
		oof := cr.OOF[Orig]
		ots, err := cr.Outputs(d.Rows(test), test)
		if err != nil {
			t.Fatal(err)
		}
		ot := ots[0]
		ms := cr.Parts[0]
		t.Logf("members (%v)", time.Since(st))
		yte := d.Labels(test)
		for m := 0; m < NumMembers; m++ {
			t.Logf("%s: OOF AUC %.4f test AUC %.4f", MemberNames[m], aucOf(oof.Logit[m], d.Labels(train)), aucOf(MeanLogit(ots, m), yte))
		}
		for _, fc := range []FusionConfig{
			{Dim: 16, Heads: 4, Epochs: 60, Batch: 100, LR: 3e-3, L2: 1e-3, Seed: 3, VoteOnly: true},
			{Dim: 16, Heads: 4, Epochs: 60, Batch: 100, LR: 1e-2, L2: 1e-3, Seed: 3, VoteOnly: true},
			{Dim: 16, Heads: 4, Epochs: 30, Batch: 100, LR: 3e-3, L2: 3e-2, Seed: 3},
			{Dim: 8, Heads: 2, Epochs: 30, Batch: 100, LR: 3e-3, L2: 1e-1, Seed: 3},
		} {
			fu, err := TrainFusion(oof, d.Labels(train), fc)
			if err != nil {
				t.Fatal(err)
			}
			z, w, err := fu.PredictAll(ots)
			if err != nil {
				t.Fatal(err)
			}
			var mw [NumMembers]float64
			for i := 0; i < ot.N; i++ {
				for m := 0; m < NumMembers; m++ {
					mw[m] += float64(w[i*NumMembers+m]) / float64(ot.N)
				}
			}
			mean := make([]float32, ot.N)
			for i := range mean {
				mean[i] = (MeanLogit(ots, 0)[i] + MeanLogit(ots, 1)[i] + MeanLogit(ots, 3)[i]) / 3
			}
			enc := ms.Enc
			var lr finrisk.LogReg
			lr.L2 = 1e-2
			lr.Fit(enc.Matrix(d.Rows(train)), len(train), enc.Width, d.Labels(train))
			t.Logf("fusion loss %.4f -> %.4f; test AUC fused %.4f mean %.4f LR %.4f weights %.3f (%v)", fu.Losses[0], fu.Losses[len(fu.Losses)-1],
				aucOf(z, yte), aucOf(mean, yte), finrisk.AUC(lr.Logit(enc.Matrix(d.Rows(test)), len(test)), yte), mw, time.Since(st))
		}
	}
}
