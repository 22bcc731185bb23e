package main

import (
	"testing"
	"time"

	"examples/finance-risk/finrisk"
	"examples/finance-risk/pipeline"
	"github.com/troupe-ml/troupe/distill"
)

// BenchmarkInference measures the inference of the whole ensemble (every
// cross-fitted member set, rules, market lookup, attention fusion, policy)
// against the distilled student on one test fold of 200 applicants, side by
// side, and reports applicants/s of each and the student's speed-up. Speed
// does not depend on the weights, so the members are trained for one epoch
// only (the sizes are the full run's).
//
//	go test ./examples/finance-risk -run '^$' -bench Inference -benchtime 20x
func BenchmarkInference(b *testing.B) {
	dir, err := finrisk.Fetch("")
	if err != nil {
		b.Skip(err)
	}
	d, err := pipeline.Load(dir, 5, 1)
	if err != nil {
		b.Fatal(err)
	}
	cfg := pipeline.DefaultConfig()
	cfg.TFEpochs, cfg.MLPEpochs = 1, 1
	mk, err := pipeline.TrainMarket(d, 16, 0, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	test := d.Folds[0]
	train := finrisk.TrainIndices(len(d.Credit.Rows), test)
	cr, err := pipeline.CrossFit(d, mk, train, 3, cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	fc := pipeline.DefaultFusionConfig()
	fc.VoteOnly, fc.Epochs = true, 1
	fu, err := pipeline.TrainFusion(cr.OOF[pipeline.Orig], d.Labels(train), fc)
	if err != nil {
		b.Fatal(err)
	}
	enc := finrisk.FitEncoder(d.Credit.Attrs, d.Rows(train))
	z, _, _ := fu.Predict(cr.OOF[pipeline.Orig])
	st, err := trainStudent(enc.Matrix(d.Rows(train)), enc.Width, z, d.Labels(train), 8, 1, distill.Options{Temperature: 2, Alpha: 0.7, IgnoreIndex: -1}, 1)
	if err != nil {
		b.Fatal(err)
	}
	pol := NewLinearPolicy(0)
	rows := d.Rows(test)
	// Warm up: compile the batch-200 graphs of both paths.
	if _, err := st.Logits(enc.Matrix(rows)); err != nil {
		b.Fatal(err)
	}
	if outs, err := cr.Outputs(rows, test); err != nil {
		b.Fatal(err)
	} else if _, _, err := fu.PredictAll(outs); err != nil {
		b.Fatal(err)
	}
	var tEns, tSt time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		outs, err := cr.Outputs(rows, test)
		if err != nil {
			b.Fatal(err)
		}
		zz, _, err := fu.PredictAll(outs)
		if err != nil {
			b.Fatal(err)
		}
		for k, j := range test {
			pol.Greedy(observation(float64(zz[k]), float64(zz[k]), d.Regime[j], false))
		}
		t1 := time.Now()
		if _, err := st.Logits(enc.Matrix(rows)); err != nil {
			b.Fatal(err)
		}
		tEns += t1.Sub(t0)
		tSt += time.Since(t1)
	}
	n := float64(b.N * len(test))
	b.ReportMetric(n/tEns.Seconds(), "ensemble-applicants/s")
	b.ReportMetric(n/tSt.Seconds(), "student-applicants/s")
	b.ReportMetric(tEns.Seconds()/tSt.Seconds(), "speedup")
}
