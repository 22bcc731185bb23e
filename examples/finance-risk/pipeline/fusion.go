package pipeline

import (
	"fmt"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/ensemble"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Fusion is the trained attention fusion over the members (frozen members:
// their outputs are inputs of the fusion graph).
type Fusion struct {
	Att    *ensemble.Attention
	Losses []float64 // training loss per epoch
	inf    *fusionGraph
	vm     G.VM
}

// Close releases the inference machine.
func (fu *Fusion) Close() {
	if fu.vm != nil {
		fu.vm.Close()
		fu.vm = nil
	}
}

// FusionConfig configures TrainFusion.
type FusionConfig struct {
	Dim, Heads, Epochs, Batch int
	LR, L2                    float64
	Seed                      uint64
	VoteOnly                  bool
}

// DefaultFusionConfig is used by the example.
func DefaultFusionConfig() FusionConfig {
	return FusionConfig{Dim: 16, Heads: 4, Epochs: 60, Batch: 100, LR: 3e-3, L2: 1e-3, Seed: 3}
}

type fusionGraph struct {
	g      *G.ExprGraph
	embs   []*G.Node
	logits *G.Node
	mask   *G.Node
	fused  *ensemble.Fused
}

func buildFusion(att *ensemble.Attention, dims []int, B int) (*fusionGraph, error) {
	g := G.NewGraph()
	if att.Config().Dim == 0 {
		return nil, fmt.Errorf("pipeline: empty attention")
	}
	a := att.In(g)
	f := &fusionGraph{g: g}
	for m, e := range dims {
		f.embs = append(f.embs, G.NewMatrix(g, tensor.Float32, G.WithShape(B, e), G.WithName(fmt.Sprintf("emb%d", m)), G.WithInit(G.Zeroes())))
	}
	M := len(dims)
	f.logits = G.NewMatrix(g, tensor.Float32, G.WithShape(B, M), G.WithName("logits"), G.WithInit(G.Zeroes()))
	f.mask = G.NewMatrix(g, tensor.Float32, G.WithShape(B, M), G.WithName("mask"), G.WithInit(G.Zeroes()))
	var err error
	if f.fused, err = a.Fuse(f.embs, f.logits, f.mask); err != nil {
		return nil, err
	}
	return f, nil
}

// fill copies examples idx[start:start+B] of o into the graph's inputs
// (padding with a present-but-zero first member).
func (f *fusionGraph) fill(o *Outputs, idx []int, B int) int {
	M := NumMembers
	lv := f.logits.Value().Data().([]float32)
	mv := f.mask.Value().Data().([]float32)
	clear(lv)
	clear(mv)
	for m := 0; m < M; m++ {
		clear(f.embs[m].Value().Data().([]float32))
	}
	for k := 0; k < B; k++ {
		if k >= len(idx) {
			mv[k*M] = 1 // padding row: one present member, zero weight in the loss
			continue
		}
		i := idx[k]
		for m := 0; m < M; m++ {
			E := o.EmbDim[m]
			copy(f.embs[m].Value().Data().([]float32)[k*E:(k+1)*E], o.Emb[m][i*E:(i+1)*E])
			lv[k*M+m] = o.Logit[m][i]
			mv[k*M+m] = o.Mask[i*M+m]
		}
	}
	return min(B, len(idx))
}

// TrainFusion trains the attention fusion on member outputs o and labels y.
func TrainFusion(o *Outputs, y []int, cfg FusionConfig) (*Fusion, error) {
	g0 := G.NewGraph()
	att := ensemble.NewAttention(g0, ensemble.AttentionConfig{EmbDims: o.EmbDims(), Dim: cfg.Dim, Heads: cfg.Heads, Seed: cfg.Seed, VoteOnly: cfg.VoteOnly})
	B := cfg.Batch
	f, err := buildFusion(att, o.EmbDims(), B)
	if err != nil {
		return nil, err
	}
	g := f.g
	yn := G.NewVector(g, tensor.Float32, G.WithShape(B), G.WithName("y"), G.WithInit(G.Zeroes()))
	wn := G.NewVector(g, tensor.Float32, G.WithShape(B), G.WithName("w"), G.WithInit(G.Zeroes()))
	z := f.fused.Logit
	per := G.Must(G.Sub(G.Must(G.Softplus(z)), G.Must(G.HadamardProd(yn, z))))
	loss := G.Must(G.Mean(G.Must(G.HadamardProd(per, wn))))
	params := G.Nodes{}
	// The parameters of this graph are the nodes bound by In: find them by name.
	names := map[string]bool{}
	for _, p := range att.Learnables() {
		names[p.Name()] = true
	}
	for _, n := range g.AllNodes() {
		if names[n.Name()] && n.IsVar() {
			params = append(params, n)
		}
	}
	cost := loss
	for _, p := range params {
		cost = G.Must(G.Add(cost, G.Must(G.Mul(G.Must(G.Sum(G.Must(G.Square(p)))), G.NewConstant(float32(cfg.L2))))))
	}
	if _, err := G.Grad(cost, params...); err != nil {
		return nil, err
	}
	vm := G.NewTapeMachine(g, G.BindDualValues(params...))
	defer vm.Close()
	solver := G.NewAdamSolver(G.WithLearnRate(cfg.LR), G.WithClip(5))
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xf05e))
	fu := &Fusion{Att: att}
	for ep := 0; ep < cfg.Epochs; ep++ {
		perm := rng.Perm(o.N)
		var tot float64
		nb := 0
		for start := 0; start < o.N; start += B {
			idx := perm[start:min(start+B, o.N)]
			f.fill(o, idx, B)
			yv, wv := yn.Value().Data().([]float32), wn.Value().Data().([]float32)
			for k := 0; k < B; k++ {
				yv[k], wv[k] = 0, 0
				if k < len(idx) {
					yv[k], wv[k] = float32(y[idx[k]]), 1
				}
			}
			if err := vm.RunAll(); err != nil {
				return nil, err
			}
			tot += float64(loss.Value().Data().(float32))
			nb++
			if err := solver.Step(G.NodesToValueGrads(params)); err != nil {
				return nil, err
			}
			vm.Reset()
		}
		fu.Losses = append(fu.Losses, tot/float64(nb))
	}
	return fu, nil
}

// Predict returns the fused logits (n) and the attention weights averaged
// over heads (n, M) of the examples of o.
func (fu *Fusion) Predict(o *Outputs) (logit []float32, weights []float32, err error) {
	B := 200
	if fu.vm == nil {
		if fu.inf, err = buildFusion(fu.Att, o.EmbDims(), B); err != nil {
			return nil, nil, err
		}
		fu.vm = G.NewTapeMachine(fu.inf.g)
	}
	f, vm := fu.inf, fu.vm
	M, H := NumMembers, fu.Att.Config().Heads
	logit, weights = make([]float32, o.N), make([]float32, o.N*M)
	idx := make([]int, o.N)
	for i := range idx {
		idx[i] = i
	}
	for start := 0; start < o.N; start += B {
		n := f.fill(o, idx[start:min(start+B, o.N)], B)
		if err := vm.RunAll(); err != nil {
			return nil, nil, err
		}
		copy(logit[start:start+n], f.fused.Logit.Value().Data().([]float32)[:n])
		w := f.fused.Weights.Value().Data().([]float32) // (B, M, H)
		for k := 0; k < n; k++ {
			for m := 0; m < M; m++ {
				var s float32
				for h := 0; h < H; h++ {
					s += w[(k*M+m)*H+h]
				}
				weights[(start+k)*M+m] = s / float32(H)
			}
		}
		vm.Reset()
	}
	return logit, weights, nil
}

// PredictAll fuses each member set's outputs and averages the fused
// logits and the attention weights.
func (fu *Fusion) PredictAll(os []*Outputs) (logit []float32, weights []float32, err error) {
	for k, o := range os {
		z, w, err := fu.Predict(o)
		if err != nil {
			return nil, nil, err
		}
		if k == 0 {
			logit, weights = make([]float32, len(z)), make([]float32, len(w))
		}
		for i := range z {
			logit[i] += z[i] / float32(len(os))
		}
		for i := range w {
			weights[i] += w[i] / float32(len(os))
		}
	}
	return logit, weights, nil
}

// ParamCount is the number of fusion parameters.
func (fu *Fusion) ParamCount() int {
	n := 0
	for _, p := range fu.Att.Learnables() {
		n += p.Shape().TotalSize()
	}
	return n
}
