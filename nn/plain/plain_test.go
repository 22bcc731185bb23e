package plain

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/nn"
	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

func rnd(rng *rand.Rand, shape ...int) *ts.Dense {
	d := ts.New(ts.WithShape(shape...), ts.Of(ts.Float32))
	for i := range d.Float32s() {
		d.Float32s()[i] = float32(rng.NormFloat64())
	}
	return d
}

// run builds a graph with build, loss Σ r·out, and returns the output and
// the gradient of every parameter by name.
func run(t *testing.T, store *nn.Store, build func(s *nn.Scope) *G.Node) ([]float32, map[string][]float32) {
	t.Helper()
	g := G.NewGraph()
	s := nn.NewScope(store, g)
	out := build(s)
	n := out.Shape().TotalSize()
	rng := rand.New(rand.NewPCG(1, 1))
	r := ts.New(ts.WithShape(out.Shape()...), ts.Of(ts.Float32))
	for i := 0; i < n; i++ {
		r.Float32s()[i] = float32(rng.NormFloat64())
	}
	rn := G.NewTensor(g, ts.Float32, out.Shape().Dims(), G.WithShape(out.Shape()...), G.WithValue(r), G.WithName("r"))
	cost := G.Must(G.Sum(G.Must(G.HadamardProd(out, rn))))
	params, nodes := s.Used()
	grads, err := G.Grad(cost, nodes...)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	gm := map[string][]float32{}
	for i, p := range params {
		gm[p.Name] = append([]float32(nil), grads[i].Value().Data().([]float32)...)
	}
	return append([]float32(nil), out.Value().Data().([]float32)...), gm
}

func close(t *testing.T, what string, a, b []float32, tol float64) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: lengths %d vs %d", what, len(a), len(b))
	}
	scale := 1e-3
	for _, v := range b {
		scale = max(scale, math.Abs(float64(v)))
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > tol*scale {
			t.Fatalf("%s[%d]: fused %v, plain Gorgonia %v", what, i, a[i], b[i])
		}
	}
}

func TestBlockMatchesFused(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	B, T, D, H := 2, 5, 8, 2
	x := rnd(rng, B, T, D)
	store := nn.NewStore(3)
	fo, fg := run(t, store, func(s *nn.Scope) *G.Node {
		xn := G.NewTensor(s.Graph(), ts.Float32, 3, G.WithShape(B, T, D), G.WithValue(x), G.WithName("x"))
		return nn.TransformerBlock(s.Sub("b"), xn, nn.BlockConfig{Heads: H, Causal: true})
	})
	x2 := x.Clone().(*ts.Dense)
	x2.Reshape(B*T, D)
	po, pg := run(t, store, func(s *nn.Scope) *G.Node {
		xn := G.NewMatrix(s.Graph(), ts.Float32, G.WithShape(B*T, D), G.WithValue(x2), G.WithName("x"))
		return TransformerBlock(s.Sub("b"), xn, B, T, H)
	})
	close(t, "output", fo, po, 1e-5)
	if len(fg) != len(pg) || len(fg) != 12 {
		t.Fatalf("%d fused vs %d plain parameter gradients", len(fg), len(pg))
	}
	for n, g := range fg {
		close(t, n, g, pg[n], 1e-4)
	}
}

func TestLMMatchesFused(t *testing.T) {
	B, T := 2, 6
	cfg := nn.LMConfig{Vocab: 11, Dim: 8, Layers: 2, Heads: 2, MaxLen: 6}
	store := nn.NewStore(4)
	lm := nn.NewLM(store, cfg)
	ids := ts.New(ts.WithShape(B, T), ts.Of(ts.Float32))
	oh := ts.New(ts.WithShape(B*T, cfg.Vocab), ts.Of(ts.Float32))
	ph := ts.New(ts.WithShape(B*T, cfg.MaxLen), ts.Of(ts.Float32))
	for i := 0; i < B*T; i++ {
		id := (i * 7) % cfg.Vocab
		ids.Float32s()[i] = float32(id)
		oh.Float32s()[i*cfg.Vocab+id] = 1
		ph.Float32s()[i*cfg.MaxLen+i%T] = 1
	}
	fo, fg := run(t, store, func(s *nn.Scope) *G.Node {
		n := G.NewMatrix(s.Graph(), ts.Float32, G.WithShape(B, T), G.WithValue(ids), G.WithName("ids"))
		return lm.Logits(s, n)
	})
	po, pg := run(t, store, func(s *nn.Scope) *G.Node {
		a := G.NewMatrix(s.Graph(), ts.Float32, G.WithShape(B*T, cfg.Vocab), G.WithValue(oh), G.WithName("oh"))
		p := G.NewMatrix(s.Graph(), ts.Float32, G.WithShape(B*T, cfg.MaxLen), G.WithValue(ph), G.WithName("ph"))
		return LMLogits(s, cfg, a, p, B, T)
	})
	close(t, "logits", fo, po, 1e-4)
	for n, g := range fg {
		close(t, n, g, pg[n], 1e-3)
	}
}

func TestLSTMMatchesFused(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	B, T, In, H := 3, 4, 5, 6
	x := rnd(rng, B, T, In)
	store := nn.NewStore(6)
	fo, fg := run(t, store, func(s *nn.Scope) *G.Node {
		xn := G.NewTensor(s.Graph(), ts.Float32, 3, G.WithShape(B, T, In), G.WithValue(x), G.WithName("x"))
		outs, _ := nn.LSTM(s.Sub("lstm"), xn, nil, nn.LSTMConfig{Hidden: H, Layers: 1})
		return outs
	})
	po, pg := run(t, store, func(s *nn.Scope) *G.Node {
		var xs []*G.Node
		for ti := 0; ti < T; ti++ {
			st := ts.New(ts.WithShape(B, In), ts.Of(ts.Float32))
			for b := 0; b < B; b++ {
				copy(st.Float32s()[b*In:(b+1)*In], x.Float32s()[(b*T+ti)*In:(b*T+ti+1)*In])
			}
			xs = append(xs, G.NewMatrix(s.Graph(), ts.Float32, G.WithShape(B, In), G.WithValue(st), G.WithName("x"+string(rune('a'+ti)))))
		}
		outs := LSTM(s.Sub("lstm"), xs, H)
		// B×T×H like the fused output.
		st := G.Must(G.Concat(1, outs...)) // B×(T·H)
		return G.Must(G.Reshape(st, ts.Shape{B, T, H}))
	})
	close(t, "outputs", fo, po, 1e-5)
	for n, g := range fg {
		close(t, n, g, pg[n], 1e-4)
	}
}
