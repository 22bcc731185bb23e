package nn

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"

	kern "github.com/troupe-ml/troupe/tensor"
	"github.com/troupe-ml/troupe/textgen"
)

// hostDev stands in for a device engine (package cuda's, under the
// troupecuda tag): a distinct engine type with its own registered backend,
// whose memory is Go memory so the test can read it. Its backend runs the
// CPU kernels and counts calls, so the tests check that the fused ops take
// their devKernel path, and that it computes what the slice path does.
type hostDev struct{ ts.StdEng }

type hostDevBackend struct {
	kern.CPUBackend
	mu    sync.Mutex
	calls int
}

func (b *hostDevBackend) Name() string { return "hostdev" }

func (b *hostDevBackend) count() {
	b.mu.Lock()
	b.calls++
	b.mu.Unlock()
}

func (b *hostDevBackend) MatMul(ta, tb bool, alpha float32, x, y *ts.Dense, beta float32, c *ts.Dense) {
	b.count()
	b.CPUBackend.MatMul(ta, tb, alpha, x, y, beta, c)
}
func (b *hostDevBackend) Softmax(dst, src *ts.Dense, axis int, log bool) {
	b.count()
	b.CPUBackend.Softmax(dst, src, axis, log)
}
func (b *hostDevBackend) LayerNorm(dst, mean, rstd, src, gamma, beta *ts.Dense, eps float32) {
	b.count()
	b.CPUBackend.LayerNorm(dst, mean, rstd, src, gamma, beta, eps)
}
func (b *hostDevBackend) EmbeddingGather(dst, table *ts.Dense, ids []int) {
	b.count()
	b.CPUBackend.EmbeddingGather(dst, table, ids)
}
func (b *hostDevBackend) Unary(op kern.UnaryOp, dst, src *ts.Dense) {
	b.count()
	b.CPUBackend.Unary(op, dst, src)
}
func (b *hostDevBackend) Binary(op kern.BinaryOp, dst, x, y *ts.Dense) {
	b.count()
	b.CPUBackend.Binary(op, dst, x, y)
}
func (b *hostDevBackend) AdamW(param, grad, m, v *ts.Dense, p kern.AdamWParams) {
	b.count()
	b.CPUBackend.AdamW(param, grad, m, v, p)
}

func registerHostDev(t *testing.T) *hostDevBackend {
	t.Helper()
	b := &hostDevBackend{}
	kern.RegisterBackend(hostDev{}, b)
	t.Cleanup(func() { kern.RegisterBackend(hostDev{}, nil) })
	return b
}

// onHostDev copies a host tensor to the stand-in device.
func onHostDev(h *ts.Dense) *ts.Dense {
	d := ts.New(ts.WithShape(h.Shape().Clone()...), ts.Of(ts.Float32), ts.WithEngine(hostDev{}))
	copy(d.Float32s(), h.Float32s())
	return d
}

// runPlaced is runOp (gradcheck_test.go) with the inputs (index inputs
// too: the machine's engine is the device's) on the stand-in device when
// dev is set. It returns the output, the gradients and the engines
// of the output and gradients.
func runPlaced(t *testing.T, dev bool, ins []gcInput, r []float64, build func([]*G.Node) *G.Node) (out []float32, grads [][]float32, engines []string, err error) {
	t.Helper()
	g := G.NewGraph()
	nodes := make([]*G.Node, len(ins))
	var wrt G.Nodes
	for i, in := range ins {
		v := toDense(in.shape, in.vals)
		if dev {
			v = onHostDev(v)
		}
		nodes[i] = G.NewTensor(g, ts.Float32, in.shape.Dims(), G.WithShape(in.shape...), G.WithValue(v), G.WithName(fmt.Sprintf("in%d", i)))
		if in.diff {
			wrt = append(wrt, nodes[i])
		}
	}
	o := build(nodes)
	lf := LossFunc(func(v []float32) (float64, []float32) {
		var s float64
		gr := make([]float32, len(v))
		for i := range v {
			s += r[i] * float64(v[i])
			gr[i] = float32(r[i])
		}
		return s, gr
	})
	cost := ExternalLoss(o, &lf)
	gn, err := G.Grad(cost, wrt...)
	if err != nil {
		t.Fatalf("Grad: %v", err)
	}
	var opts []G.VMOpt
	if dev {
		// A TapeMachine stamps its engine on every value it holds, so a
		// device graph runs on a machine with the device's engine (as
		// graphRun does for parameters on a device).
		opts = append(opts, G.WithEngine(hostDev{}))
	}
	vm := G.NewTapeMachine(g, opts...)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		return nil, nil, nil, err
	}
	engineOf := func(v G.Value) string { return fmt.Sprintf("%T", v.(*ts.Dense).Engine()) }
	out = append(out, f32s(o.Value())...)
	engines = append(engines, engineOf(o.Value()))
	for _, n := range gn {
		grads = append(grads, append([]float32(nil), f32s(n.Value())...))
		engines = append(engines, engineOf(n.Value()))
	}
	return out, grads, engines, nil
}

// TestFusedOpsDeviceDispatch runs every fused op that has a devKernel with
// its inputs on the stand-in device and compares the output and gradients
// with the CPU slice path (itself checked against float64 references by
// the gradient checks).
func TestFusedOpsDeviceDispatch(t *testing.T) {
	be := registerHostDev(t)
	rng := rand.New(rand.NewPCG(11, 3))
	ids := constIn([]float64{2, 0, 4, 2, 1, 3}, 2, 3)
	targets := constIn([]float64{1, -1, 4, 0, 2, 3}, 2, 3)
	cases := []struct {
		name  string
		ins   []gcInput
		build func(n []*G.Node) *G.Node
	}{
		{"Linear 3-D with bias", []gcInput{randIn(rng, 1, true, 2, 3, 4), randIn(rng, 1, true, 4, 5), randIn(rng, 1, true, 5)},
			func(n []*G.Node) *G.Node { return LinearOp(n[0], n[1], n[2]) }},
		{"Linear without bias", []gcInput{randIn(rng, 1, true, 3, 4), randIn(rng, 1, true, 4, 2)},
			func(n []*G.Node) *G.Node { return LinearOp(n[0], n[1], nil) }},
		{"Embedding", []gcInput{randIn(rng, 1, true, 5, 4), ids},
			func(n []*G.Node) *G.Node { return EmbeddingOp(n[0], n[1]) }},
		{"LayerNorm", []gcInput{randIn(rng, 1, true, 2, 3, 6), randIn(rng, 1, true, 6), randIn(rng, 1, true, 6)},
			func(n []*G.Node) *G.Node { return LayerNormOp(n[0], n[1], n[2], 1e-5) }},
		{"GELU", []gcInput{randIn(rng, 2, true, 3, 7)},
			func(n []*G.Node) *G.Node { return GELUOp(n[0]) }},
		{"Add", []gcInput{randIn(rng, 1, true, 3, 4), randIn(rng, 1, true, 3, 4)},
			func(n []*G.Node) *G.Node { return AddOp(n[0], n[1]) }},
		{"LogSoftmaxGather with padding", []gcInput{randIn(rng, 2, true, 2, 3, 5), targets},
			func(n []*G.Node) *G.Node { return LogSoftmaxGatherOp(n[0], n[1]) }},
		{"CrossEntropy with padding", []gcInput{randIn(rng, 2, true, 2, 3, 5), targets},
			func(n []*G.Node) *G.Node { return CrossEntropyOp(n[0], n[1]) }},
		{"shared input (Gorgonia sums its gradients)", []gcInput{randIn(rng, 1, true, 3, 4)},
			func(n []*G.Node) *G.Node { return AddOp(GELUOp(n[0]), n[0]) }},
		{"Linear → GELU → LayerNorm chain", []gcInput{randIn(rng, 1, true, 4, 3), randIn(rng, 1, true, 3, 6), randIn(rng, 1, true, 6), randIn(rng, 1, true, 6)},
			func(n []*G.Node) *G.Node { return LayerNormOp(GELUOp(LinearOp(n[0], n[1], nil)), n[2], n[3], 1e-5) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := make([]float64, 64)
			for i := range r {
				r[i] = rng.NormFloat64()
			}
			wantOut, wantGrads, _, err := runPlaced(t, false, c.ins, r, c.build)
			if err != nil {
				t.Fatalf("CPU: %v", err)
			}
			before := be.calls
			gotOut, gotGrads, engines, err := runPlaced(t, true, c.ins, r, c.build)
			if err != nil {
				t.Fatalf("device: %v", err)
			}
			if be.calls == before {
				t.Errorf("the stand-in device's backend was never called")
			}
			for i, e := range engines {
				if e != "nn.hostDev" {
					t.Errorf("value %d (0: output, then gradients) is on engine %s, want the device's", i, e)
				}
			}
			opt := cmpopts.EquateApprox(1e-5, 1e-5)
			if d := cmp.Diff(wantOut, gotOut, opt); d != "" {
				t.Errorf("output (-cpu +device):\n%s", d)
			}
			if d := cmp.Diff(wantGrads, gotGrads, opt); d != "" {
				t.Errorf("gradients (-cpu +device):\n%s", d)
			}
		})
	}
}

// TestFusedOpsDeviceErrors: an op without a devKernel, and bad index
// inputs, give errors naming the op, not panics.
func TestFusedOpsDeviceErrors(t *testing.T) {
	registerHostDev(t)
	rng := rand.New(rand.NewPCG(12, 3))
	r := make([]float64, 64)
	cases := []struct {
		name, want string
		ins        []gcInput
		build      func(n []*G.Node) *G.Node
	}{
		{"attention", "SelfAttention: no implementation for tensors on backend hostdev",
			[]gcInput{randIn(rng, 1, true, 1, 2, 6)},
			func(n []*G.Node) *G.Node { return SelfAttentionOp(n[0], nil, AttentionOpConfig{Heads: 1}) }},
		{"embedding id", "token id 9 at 1 outside vocabulary [0,5)",
			[]gcInput{randIn(rng, 1, true, 5, 4), constIn([]float64{1, 9}, 2)},
			func(n []*G.Node) *G.Node { return EmbeddingOp(n[0], n[1]) }},
		{"target", "target 5 at row 0 outside vocabulary [0,5)",
			[]gcInput{randIn(rng, 1, true, 2, 5), constIn([]float64{5, 1}, 2)},
			func(n []*G.Node) *G.Node { return LogSoftmaxGatherOp(n[0], n[1]) }},
	}
	for _, c := range cases {
		_, _, _, err := runPlaced(t, true, c.ins, r, c.build)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// devParams returns n parameters with seeded values and gradients, and a
// copy whose values live on the stand-in device.
func devParams(seed uint64, n int) (host, dev []*Param) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i < n; i++ {
		shape := ts.Shape{3, 4}
		if i%2 == 1 {
			shape = ts.Shape{5}
		}
		v := kern.RandN(rng, shape...)
		g := kern.Data(kern.RandN(rng, shape...))
		name := fmt.Sprintf("p%d", i)
		host = append(host, &Param{Name: name, Value: v.Clone().(*ts.Dense), Grad: append([]float32(nil), g...), NoDecay: i%2 == 1})
		dev = append(dev, &Param{Name: name, Value: onHostDev(v), Grad: append([]float32(nil), g...), NoDecay: i%2 == 1})
	}
	return host, dev
}

// TestOptimizersDevice runs Adam, AdamW and SGD on parameters on the
// stand-in device and on the host and compares the parameters and the
// optimizer state, also after a SetState round trip.
func TestOptimizersDevice(t *testing.T) {
	be := registerHostDev(t)
	cases := []struct {
		name string
		opt  func() Optimizer
	}{
		{"AdamW", func() Optimizer { return NewAdamW(WarmupCosine(0.01, 2, 10, 0.001), 0.1) }},
		{"Adam with L2", func() Optimizer { a := NewAdam(Constant(0.01)); a.WeightDecay = 0.05; return a }},
		{"SGD momentum", func() Optimizer { o := NewSGD(Constant(0.05), 0.9); o.WeightDecay = 0.01; return o }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host, dev := devParams(5, 4)
			ho, do := c.opt(), c.opt()
			before := be.calls
			for step := 0; step < 3; step++ {
				ho.Update(host)
				do.Update(dev)
			}
			if be.calls == before {
				t.Errorf("the stand-in device's backend was never called")
			}
			opt := cmpopts.EquateApprox(1e-5, 1e-6)
			for i := range host {
				if d := cmp.Diff(host[i].Value.Float32s(), dev[i].Value.Float32s(), opt); d != "" {
					t.Errorf("%s after 3 steps (-cpu +device):\n%s", host[i].Name, d)
				}
			}
			hs, ds := ho.State(), do.State()
			if d := cmp.Diff(hs, ds, opt); d != "" {
				t.Errorf("State (-cpu +device):\n%s", d)
			}
			// Restore the device optimizer from its own state and go on.
			do2 := c.opt()
			if err := do2.SetState(ds); err != nil {
				t.Fatal(err)
			}
			ho.Update(host)
			do2.Update(dev)
			for i := range host {
				if d := cmp.Diff(host[i].Value.Float32s(), dev[i].Value.Float32s(), opt); d != "" {
					t.Errorf("%s after SetState and a 4th step (-cpu +device):\n%s", host[i].Name, d)
				}
			}
		})
	}
}

// TestLMDevice: Generate with parameters on the stand-in device matches
// the host; a training step reports that self-attention has no device
// implementation (an error, not a crash).
func TestLMDevice(t *testing.T) {
	registerHostDev(t)
	cfg := LMConfig{Vocab: 9, Dim: 8, Layers: 1, Heads: 2, MaxLen: 12}
	host := NewLM(NewStore(3), cfg)
	dev := NewLM(NewStore(3), cfg)
	for _, p := range dev.Store.Params() {
		p.Value = onHostDev(p.Value)
	}
	opts := textgen.GenerateOptions{Temperature: 0.8, MaxTokens: 5, Seed: 4}
	prompts := [][]int{{1, 2, 3}, {4}}
	want, err := host.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dev.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Generate (-cpu +device):\n%s", d)
	}
	tr := NewLMTrainer(dev, NewAdamW(Constant(1e-3), 0), TrainConfig{})
	_, err = tr.SupervisedStep([]SeqExample{{Prompt: []int{1, 2}, Target: []int{3, 4}}})
	if err == nil || !strings.Contains(err.Error(), "SelfAttention: no implementation for tensors on backend hostdev") {
		t.Errorf("SupervisedStep on the device: error %v, want the missing device self-attention", err)
	}
}

// opaqueEng marks its tensors as memory Go cannot read (as a GPU engine
// does) while keeping them in Go memory, so hostFloats and upload take
// their copy-through-the-engine path.
type opaqueEng struct{ ts.StdEng }

func (opaqueEng) AllocAccessible() bool { return false }

func TestHostFloatsUploadThroughEngine(t *testing.T) {
	d := ts.New(ts.WithShape(2, 3), ts.Of(ts.Float32), ts.WithEngine(opaqueEng{}))
	if d.IsNativelyAccessible() {
		t.Fatal("opaqueEng tensor is natively accessible; the test would not take the copy path")
	}
	want := []float32{1, -2, 3.5, 0, 5, -6}
	if err := upload(d, want); err != nil {
		t.Fatal(err)
	}
	got, err := hostFloats(d)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("upload then hostFloats (-want +got):\n%s", d)
	}
	got[0] = 42 // a copy, not the tensor's memory
	if again, _ := hostFloats(d); again[0] != 1 {
		t.Errorf("hostFloats returned the tensor's own memory for an inaccessible tensor")
	}
}
