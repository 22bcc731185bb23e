//go:build troupecuda

package cuda

// GPU test of nn's dispatch: nn's fused ops in a Gorgonia graph whose
// machine has the device engine, with inputs on the device, against the
// same graph on the host; and nn's optimizers on device parameters against
// the host. (nn's own tests check the same dispatch on a host-memory
// stand-in device; this one runs the real kernels.)

import (
	"fmt"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/tensor"
)

// nnRun builds LayerNorm(GELU(Linear(x)) + Linear(x)) → LogSoftmaxGather over a 6-word
// vocabulary with the ExternalLoss Σ r·out, on e when e is non-nil, and
// returns the output and the gradients of x, w, b, gamma and beta on the
// host.
func nnRun(t *testing.T, e *Engine, ins []*gt.Dense, r []float32) [][]float32 {
	t.Helper()
	g := G.NewGraph()
	nodes := make([]*G.Node, len(ins))
	for i, h := range ins {
		v := h.Clone().(*gt.Dense)
		if e != nil {
			v = denseUp(t, e, h)
		}
		nodes[i] = G.NewTensor(g, gt.Float32, h.Dims(), G.WithShape(h.Shape().Clone()...), G.WithValue(v), G.WithName(fmt.Sprintf("in%d", i)))
	}
	// lin feeds two ops, so Gorgonia sums its gradient with its own Add,
	// which the machine runs through Engine's gorgonia.org/tensor methods.
	lin := nn.LinearOp(nodes[0], nodes[1], nodes[2])
	h := nn.LayerNormOp(nn.AddOp(nn.GELUOp(lin), lin), nodes[3], nodes[4], 1e-5)
	out := nn.LogSoftmaxGatherOp(h, nodes[5])
	lf := nn.LossFunc(func(v []float32) (float64, []float32) {
		var s float64
		for i, x := range v {
			s += float64(r[i] * x)
		}
		return s, append([]float32(nil), r...)
	})
	grads, err := G.Grad(nn.ExternalLoss(out, &lf), nodes[:5]...)
	if err != nil {
		t.Fatal(err)
	}
	var opts []G.VMOpt
	if e != nil {
		opts = append(opts, G.WithEngine(e))
	}
	vm := G.NewTapeMachine(g, opts...)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatalf("RunAll (device %v): %v", e != nil, err)
	}
	read := func(v G.Value) []float32 {
		d := v.(*gt.Dense)
		if e != nil {
			return denseDown(t, e, d)
		}
		return append([]float32(nil), tensor.Data(d)...)
	}
	res := [][]float32{read(out.Value())}
	for _, gn := range grads {
		res = append(res, read(gn.Value()))
	}
	return res
}

func TestDeviceNNDispatch(t *testing.T) {
	e := newTestEngine(t, false)
	rng := rand.New(rand.NewPCG(13, 1))
	const B, T, In, V = 3, 5, 16, 6
	tg := tensor.Zeros(B, T)
	for i := range tensor.Data(tg) {
		tensor.Data(tg)[i] = float32(rng.IntN(V+1) - 1) // −1: padding
	}
	ins := []*gt.Dense{tensor.RandN(rng, B, T, In), tensor.RandN(rng, In, V), tensor.RandN(rng, V),
		tensor.RandN(rng, V), tensor.RandN(rng, V), tg}
	r := make([]float32, B*T)
	for i := range r {
		r[i] = float32(rng.NormFloat64())
	}
	want, got := nnRun(t, nil, ins, r), nnRun(t, e, ins, r)
	for i, name := range []string{"output", "dx", "dw", "db", "dgamma", "dbeta"} {
		approx(t, "nn "+name, got[i], want[i], 1e-4, 1e-5)
	}

	for _, mk := range []func() nn.Optimizer{
		func() nn.Optimizer { return nn.NewAdamW(nn.Constant(0.01), 0.1) },
		func() nn.Optimizer { return nn.NewSGD(nn.Constant(0.05), 0.9) },
	} {
		var host, dev []*nn.Param
		for i := 0; i < 3; i++ {
			v, g := tensor.RandN(rng, 7, 5), tensor.Data(tensor.RandN(rng, 7, 5))
			host = append(host, &nn.Param{Name: fmt.Sprint(i), Value: v.Clone().(*gt.Dense), Grad: append([]float32(nil), g...)})
			dev = append(dev, &nn.Param{Name: fmt.Sprint(i), Value: denseUp(t, e, v), Grad: append([]float32(nil), g...)})
		}
		ho, do := mk(), mk()
		for step := 0; step < 3; step++ {
			ho.Update(host)
			do.Update(dev)
		}
		for i := range host {
			approx(t, fmt.Sprintf("%T param %d", ho, i), denseDown(t, e, dev[i].Value), tensor.Data(host[i].Value), 1e-5, 1e-6)
		}
	}
}
