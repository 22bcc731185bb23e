package agents

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/examples/finance-risk/finrisk"
)

func TestScratch(t *testing.T) {
	dir, err := finrisk.Fetch("")
	if err != nil {
		t.Skip(err)
	}
	c, _ := finrisk.LoadCredit(filepath.Join(dir, finrisk.CreditFile))
	folds := finrisk.StratifiedFolds(c.Bad, 5, 1)
	test := folds[0]
	train := finrisk.TrainIndices(1000, test)
	pick := func(idx []int) ([][]float64, []float32, []int) {
		var r [][]float64
		var y []float32
		var yi []int
		for _, i := range idx {
			r = append(r, c.Rows[i])
			y = append(y, float32(c.Bad[i]))
			yi = append(yi, c.Bad[i])
		}
		return r, y, yi
	}
	rtr, ytr, _ := pick(train)
	rte, _, yte := pick(test)
	e := finrisk.FitEncoder(c.Attrs, rtr)
	{
		var m finrisk.LogReg
		m.L2 = 1e-2
		_, _, yi := pick(train)
		m.Fit(e.Matrix(rtr), len(train), e.Width, yi)
		t.Logf("LR fold0 AUC %.4f", finrisk.AUC(m.Logit(e.Matrix(rte), len(test)), yte))
	}
	for _, tc := range []struct {
		name string
		net  Net
		x, xt []float32
		epochs int
		lr, l2 float64
	}{
		{"mlp16 l2=1e-2", NewMLP("mlp", e.Width, 16, 1), e.Matrix(rtr), e.Matrix(rte), 40, 3e-3, 1e-2},
		{"mlp32 l2=3e-3", NewMLP("mlp", e.Width, 32, 1), e.Matrix(rtr), e.Matrix(rte), 40, 3e-3, 3e-3},
		{"tf l2=3e-3", NewTokenTransformer("tf", 20, e.Width, 16, 2, 32, 1), e.Tokens(rtr), e.Tokens(rte), 20, 2e-3, 3e-3},
	} {
		st := time.Now()
		tr, err := NewTrainer(tc.net, TrainConfig{Epochs: tc.epochs, Batch: 100, LR: tc.lr, L2: tc.l2, Loss: BCE, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		inf := NewInfer(tc.net, 200)
		for ep := 0; ep < tc.epochs; ep++ {
			l, err := tr.Epoch(tc.x, ytr, len(train), 0)
			if err != nil {
				t.Fatal(err)
			}
			if ep%5 == 4 {
				out, _, _ := inf.Run(tc.xt, len(test))
				s := make([]float64, len(out))
				for i, v := range out {
					s[i] = float64(v)
				}
				t.Logf("%s ep %d loss %.4f test AUC %.4f (%v)", tc.name, ep+1, l, finrisk.AUC(s, yte), time.Since(st))
			}
		}
	}
}
