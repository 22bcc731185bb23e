package ensemble

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/troupe-ml/troupe/nn"
	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

// fusionCase is a batch of packed rows (see AttentionModel) for members of
// the given embedding widths. When joint is set, member 0's slot holds a
// raw input that a tanh layer under the scope member0 turns into its
// embedding inside the same graph (joint training).
type fusionCase struct {
	B     int
	dims  []int
	cfg   AttentionConfig
	joint bool
	rows  [][]float32
}

func newFusionCase(B int, dims []int, mask []float64, cfg AttentionConfig, joint bool, seed uint64) *fusionCase {
	rng := rand.New(rand.NewPCG(seed, 1))
	c := &fusionCase{B: B, dims: dims, cfg: cfg, joint: joint}
	M := len(dims)
	for b := 0; b < B; b++ {
		var row []float32
		for _, e := range dims {
			for j := 0; j < e; j++ {
				row = append(row, float32(rng.NormFloat64()))
			}
		}
		for m := 0; m < M; m++ {
			row = append(row, float32(2*rng.NormFloat64()))
		}
		for m := 0; m < M; m++ {
			row = append(row, float32(mask[b*M+m]))
		}
		c.rows = append(c.rows, row)
	}
	return c
}

// model is the case's nn.FeatureModel: the fusion under the scope fusion
// (through AttentionModel unless joint), output [logit | head-mean weights].
func (c *fusionCase) model() nn.FeatureModel {
	if !c.joint {
		m := AttentionModel(c.dims, c.cfg)
		return func(s *nn.Scope, x *G.Node) *G.Node { return m(s.Sub("fusion"), x) }
	}
	return func(s *nn.Scope, x *G.Node) *G.Node {
		M := len(c.dims)
		var embs []*G.Node
		at := 0
		for m, e := range c.dims {
			n := G.Must(G.Slice(x, nil, G.S(at, at+e)))
			if m == 0 {
				n = G.Must(G.Tanh(nn.Linear(s.Sub("member0"), n, e)))
			}
			embs = append(embs, n)
			at += e
		}
		f := Attention(s.Sub("fusion"), embs, G.Must(G.Slice(x, nil, G.S(at, at+M))), G.Must(G.Slice(x, nil, G.S(at+M, at+2*M))), c.cfg)
		return G.Must(G.Concat(1, G.Must(G.Reshape(f.Logit, ts.Shape{c.B, 1})), G.Must(G.Mean(f.Weights, 2))))
	}
}

// params64 copies the store's parameters into float64, by name.
func params64(store *nn.Store) map[string][]float64 {
	out := map[string][]float64{}
	for _, p := range store.Params() {
		for _, v := range p.Data() {
			out[p.Name] = append(out[p.Name], float64(v))
		}
	}
	return out
}

// reference computes the case's outputs in float64 from the formula in
// Attention's documentation and the parameter values params (by name): per
// example the fused logit followed by the head-mean weights.
func (c *fusionCase) reference(params map[string][]float64) [][]float64 {
	par := func(name string) []float64 { return params[name] }
	// affine returns x·W + b for x of width len(x), W (len(x)×out), b nil or (out).
	affine := func(x, w, b []float64, out int) []float64 {
		y := make([]float64, out)
		for j := range y {
			if b != nil {
				y[j] = b[j]
			}
			for i, xi := range x {
				y[j] += xi * w[i*out+j]
			}
		}
		return y
	}
	M, D, H := len(c.dims), c.cfg.Dim, c.cfg.Heads
	dk := D / H
	var res [][]float64
	for _, row := range c.rows {
		x := make([]float64, len(row))
		for i, v := range row {
			x[i] = float64(v)
		}
		z, mask := x[len(x)-2*M:len(x)-M], x[len(x)-M:]
		h := make([][]float64, M)
		at := 0
		for m, e := range c.dims {
			emb := x[at : at+e]
			at += e
			if c.joint && m == 0 {
				emb = affine(emb, par("member0.w"), par("member0.b"), e)
				for i := range emb {
					emb[i] = math.Tanh(emb[i])
				}
			}
			h[m] = affine(emb, par(fmt.Sprintf("fusion.in.%d.w", m)), par(fmt.Sprintf("fusion.in.%d.b", m)), D)
			for i := range h[m] {
				h[m][i] = math.Tanh(h[m][i])
			}
		}
		mean := make([]float64, D)
		var count float64
		for m := range h {
			count += mask[m]
			for i := range mean {
				mean[i] += mask[m] * h[m][i]
			}
		}
		for i := range mean {
			mean[i] /= count
		}
		q := affine(mean, par("fusion.q.w"), nil, D)
		a := make([][]float64, M) // a[m][k]
		for m := range a {
			k := affine(h[m], par("fusion.k.w"), nil, D)
			a[m] = make([]float64, H)
			for hd := 0; hd < H; hd++ {
				var sc float64
				for i := hd * dk; i < (hd+1)*dk; i++ {
					sc += k[i] * q[i]
				}
				a[m][hd] = sc/math.Sqrt(float64(dk)) + (mask[m]-1)*1e9
			}
		}
		for hd := 0; hd < H; hd++ {
			mx := math.Inf(-1)
			for m := range a {
				mx = math.Max(mx, a[m][hd])
			}
			var sum float64
			for m := range a {
				a[m][hd] = math.Exp(a[m][hd] - mx)
				sum += a[m][hd]
			}
			for m := range a {
				a[m][hd] /= sum
			}
		}
		out := make([]float64, 1+M)
		for m := range a {
			for hd := 0; hd < H; hd++ {
				out[1+m] += a[m][hd] / float64(H)
			}
			out[0] += out[1+m] * z[m] * mask[m]
		}
		if !c.cfg.VoteOnly {
			ctx := make([]float64, D)
			for m := range h {
				v := affine(h[m], par("fusion.v.w"), nil, D)
				for i := range ctx {
					ctx[i] += a[m][i/dk] * v[i]
				}
			}
			out[0] += affine(ctx, par("fusion.out.w"), par("fusion.out.b"), 1)[0]
		}
		res = append(res, out)
	}
	return res
}

// roughen moves every parameter off its initial value (out.w and out.b
// start at zero, which would hide the value path's gradients).
func roughen(store *nn.Store, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 9))
	for _, p := range store.Params() {
		for i := range p.Data() {
			p.Data()[i] += float32(0.3 * rng.NormFloat64())
		}
	}
}

func f64s(rows [][]float32) [][]float64 {
	out := make([][]float64, len(rows))
	for i, r := range rows {
		for _, v := range r {
			out[i] = append(out[i], float64(v))
		}
	}
	return out
}

var fusionCases = []struct {
	name  string
	cfg   AttentionConfig
	joint bool
}{
	{"vote", AttentionConfig{Dim: 8, Heads: 2, VoteOnly: true}, false},
	{"context", AttentionConfig{Dim: 8, Heads: 2}, false},
	{"context/joint", AttentionConfig{Dim: 8, Heads: 4}, true},
}

// TestAttentionMatchesReference checks the float32 layer's outputs against
// the float64 reference, with members missing for some examples.
func TestAttentionMatchesReference(t *testing.T) {
	for _, tc := range fusionCases {
		t.Run(tc.name, func(t *testing.T) {
			dims := []int{4, 3, 5}
			mask := []float64{1, 1, 1, 1, 0, 1, 0, 1, 1, 0, 0, 1}
			c := newFusionCase(4, dims, mask, tc.cfg, tc.joint, 11)
			store := nn.NewStore(7)
			tr := nn.NewTrainer(store, c.model(), nn.NewAdam(nn.Constant(1e-3)), nn.TrainConfig{})
			if _, err := tr.Predict(c.rows); err != nil { // creates the parameters
				t.Fatal(err)
			}
			roughen(store, 3)
			got, err := tr.Predict(c.rows)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.reference(params64(store)), f64s(got), cmpopts.EquateApprox(1e-5, 1e-6)); diff != "" {
				t.Errorf("outputs differ from the float64 reference (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAttentionGradient compares the gradients nn.Trainer accumulates for
// every parameter (the fusion's and, jointly trained, the member's) with
// central finite differences of the float64 reference.
func TestAttentionGradient(t *testing.T) {
	for _, tc := range fusionCases {
		t.Run(tc.name, func(t *testing.T) {
			dims := []int{4, 3, 5}
			mask := []float64{1, 1, 1, 1, 0, 1, 0, 1, 1}
			c := newFusionCase(3, dims, mask, tc.cfg, tc.joint, 5)
			store := nn.NewStore(2)
			tr := nn.NewTrainer(store, c.model(), nn.NewAdam(nn.Constant(1e-3)), nn.TrainConfig{})
			if _, err := tr.Predict(c.rows); err != nil {
				t.Fatal(err)
			}
			roughen(store, 4)
			// A loss that weighs every output (logit and weights) at random.
			rng := rand.New(rand.NewPCG(6, 6))
			coef := make([][]float64, c.B)
			for b := range coef {
				for range 1 + len(dims) {
					coef[b] = append(coef[b], rng.NormFloat64())
				}
			}
			loss := func(out [][]float64) float64 {
				var l float64
				for b, r := range out {
					for j, v := range r {
						l += coef[b][j] * v
					}
				}
				return l
			}
			store.ZeroGrad()
			if _, err := tr.ForwardBackward(c.rows, func(out [][]float32) (float64, [][]float32) {
				g := make([][]float32, len(out))
				for b, r := range out {
					for j := range r {
						g[b] = append(g[b], float32(coef[b][j]))
					}
				}
				return loss(f64s(out)), g
			}); err != nil {
				t.Fatal(err)
			}
			want := []string{"fusion.in.0.w", "fusion.in.2.b", "fusion.q.w", "fusion.k.w"}
			if !tc.cfg.VoteOnly {
				want = append(want, "fusion.v.w", "fusion.out.w", "fusion.out.b")
			}
			if tc.joint {
				want = append(want, "member0.w", "member0.b")
			}
			for _, n := range want {
				if store.Param(n) == nil {
					t.Fatalf("no parameter %s in %v", n, store.Names())
				}
			}
			if tc.cfg.VoteOnly && store.Param("fusion.v.w") != nil {
				t.Errorf("VoteOnly built the value projection: %v", store.Names())
			}
			checked := 0
			p64 := params64(store)
			for _, p := range store.Params() {
				for i, old := range p64[p.Name] {
					const h = 1e-6
					p64[p.Name][i] = old + h
					up := loss(c.reference(p64))
					p64[p.Name][i] = old - h
					down := loss(c.reference(p64))
					p64[p.Name][i] = old
					num := (up - down) / (2 * h)
					if g := float64(p.Grad[i]); math.Abs(g-num) > 1e-4*math.Max(1, math.Abs(num)) {
						t.Errorf("%s[%d]: gradient %.7g, finite difference %.7g", p.Name, i, g, num)
					}
					checked++
				}
			}
			if checked < 100 {
				t.Fatalf("only %d entries checked", checked)
			}
		})
	}
}

// TestAttentionMasking checks that a missing member gets weight exactly 0
// and cannot move the output, that the weights of the present members sum
// to 1, and that examples are fused independently.
func TestAttentionMasking(t *testing.T) {
	dims := []int{3, 2, 4}
	M := len(dims)
	mask := []float64{1, 1, 1, 1, 0, 1, 0, 1, 1, 0, 0, 1}
	c := newFusionCase(4, dims, mask, AttentionConfig{Dim: 8, Heads: 2}, false, 5)
	store := nn.NewStore(1)
	tr := nn.NewTrainer(store, c.model(), nn.NewAdam(nn.Constant(1e-3)), nn.TrainConfig{})
	if _, err := tr.Predict(c.rows); err != nil {
		t.Fatal(err)
	}
	roughen(store, 2)
	// The head-mean weights are checked here; each head's weights are
	// checked through a model that returns them all.
	g := G.NewGraph()
	s := nn.NewScope(store, g)
	x := s.Input("x", c.B, len(c.rows[0]))
	var embs []*G.Node
	at := 0
	for _, e := range dims {
		embs = append(embs, G.Must(G.Slice(x, nil, G.S(at, at+e))))
		at += e
	}
	f := Attention(s.Sub("fusion"), embs, G.Must(G.Slice(x, nil, G.S(at, at+M))), G.Must(G.Slice(x, nil, G.S(at+M, at+2*M))), c.cfg)
	var packed []float32
	for _, r := range c.rows {
		packed = append(packed, r...)
	}
	if err := G.Let(x, ts.New(ts.WithShape(c.B, len(c.rows[0])), ts.WithBacking(packed))); err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	w := f.Weights.Value().Data().([]float32) // (B, M, H)
	H := c.cfg.Heads
	for b := 0; b < c.B; b++ {
		for h := 0; h < H; h++ {
			var sum float64
			for m := 0; m < M; m++ {
				v := w[(b*M+m)*H+h]
				if mask[b*M+m] == 0 && v != 0 {
					t.Errorf("example %d member %d missing but weight %g", b, m, v)
				}
				sum += float64(v)
			}
			if math.Abs(sum-1) > 1e-6 {
				t.Errorf("weights of example %d head %d sum to %g", b, h, sum)
			}
		}
	}
	before, err := tr.Predict(c.rows)
	if err != nil {
		t.Fatal(err)
	}
	// Member 1 is missing for example 1: its embedding and logit are ignored.
	for j := dims[0]; j < dims[0]+dims[1]; j++ {
		c.rows[1][j] += 10
	}
	c.rows[1][at+1] += 100
	after, err := tr.Predict(c.rows)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("a missing member's inputs moved the outputs (-before +after):\n%s", diff)
	}
	// A present member's embedding (member 0 of example 0) moves example 0
	// only.
	c.rows[0][0] += 3
	after, err = tr.Predict(c.rows)
	if err != nil {
		t.Fatal(err)
	}
	if after[0][0] == before[0][0] {
		t.Error("a present member's embedding did not move its example's logit")
	}
	if diff := cmp.Diff(before[1:], after[1:]); diff != "" {
		t.Errorf("other examples moved (-before +after):\n%s", diff)
	}
}

// TestAttentionCheckpoint saves the fusion's store with nn.SaveCheckpoint
// mid-training and checks that a fresh store loaded from it predicts the
// same and that both continue training identically.
func TestAttentionCheckpoint(t *testing.T) {
	dims := []int{3, 2}
	mask := []float64{1, 1, 1, 0, 0, 1, 1, 1}
	c := newFusionCase(4, dims, mask, AttentionConfig{Dim: 4, Heads: 2}, false, 8)
	y := []float64{1, 0, 0, 1}
	bce := func(out [][]float32) (float64, [][]float32) {
		var l float64
		g := make([][]float32, len(out))
		for b, r := range out {
			z := float64(r[0])
			l += (math.Log1p(math.Exp(z)) - y[b]*z) / float64(len(out))
			g[b] = make([]float32, len(r))
			g[b][0] = float32((1/(1+math.Exp(-z)) - y[b]) / float64(len(out)))
		}
		return l, g
	}
	train := func(tr *nn.Trainer, steps int) {
		for range steps {
			if _, err := tr.ForwardBackward(c.rows, bce); err != nil {
				t.Fatal(err)
			}
			if _, _, err := tr.Step(); err != nil {
				t.Fatal(err)
			}
		}
	}
	store, opt := nn.NewStore(3), nn.NewAdamW(nn.Constant(1e-2), 0.01)
	tr := nn.NewTrainer(store, c.model(), opt, nn.TrainConfig{ClipNorm: 5})
	train(tr, 5)
	path := t.TempDir() + "/fusion.safetensors"
	if err := nn.SaveCheckpoint(path, store, opt, nil); err != nil {
		t.Fatal(err)
	}
	store2, opt2 := nn.NewStore(99), nn.NewAdamW(nn.Constant(1e-2), 0.01)
	tr2 := nn.NewTrainer(store2, c.model(), opt2, nn.TrainConfig{ClipNorm: 5})
	if _, err := tr2.Predict(c.rows); err != nil { // creates the parameters (other seed)
		t.Fatal(err)
	}
	if _, err := nn.LoadCheckpoint(path, store2, opt2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(store.Names(), store2.Names()); diff != "" {
		t.Fatalf("parameter names differ:\n%s", diff)
	}
	train(tr, 3)
	train(tr2, 3)
	a, err := tr.Predict(c.rows)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr2.Predict(c.rows)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("restored fusion trains differently (-saved +restored):\n%s", diff)
	}
}

// TestAttentionLearnsReliableMember trains the fusion with nn.AdamW on a
// task where member 0's logit is informative for every example and member
// 1's is noise: the vote must shift its weight to member 0.
func TestAttentionLearnsReliableMember(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	dims := []int{2, 2}
	const n = 128
	var rows [][]float32
	var y []float64
	for range n {
		label := float64(rng.IntN(2))
		z0 := float32(3 * (2*label - 1))
		z1 := float32(3 * rng.NormFloat64())
		rows = append(rows, []float32{float32(rng.NormFloat64()), float32(rng.NormFloat64()),
			float32(rng.NormFloat64()), float32(rng.NormFloat64()), z0, z1, 1, 1})
		y = append(y, label)
	}
	store := nn.NewStore(5)
	model := AttentionModel(dims, AttentionConfig{Dim: 8, Heads: 2, VoteOnly: true})
	tr := nn.NewTrainer(store, model, nn.NewAdamW(nn.Constant(3e-2), 0), nn.TrainConfig{})
	bce := func(out [][]float32) (float64, [][]float32) {
		var l float64
		g := make([][]float32, len(out))
		for b, r := range out {
			z := float64(r[0])
			l += (math.Log1p(math.Exp(z)) - y[b]*z) / float64(len(out))
			g[b] = make([]float32, len(r))
			g[b][0] = float32((1/(1+math.Exp(-z)) - y[b]) / float64(len(out)))
		}
		return l, g
	}
	meanW0 := func() float64 {
		out, err := tr.Predict(rows)
		if err != nil {
			t.Fatal(err)
		}
		var s float64
		for _, r := range out {
			s += float64(r[1]) / n
		}
		return s
	}
	w0 := meanW0()
	var first, last float64
	for step := range 150 {
		l, err := tr.ForwardBackward(rows, bce)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := tr.Step(); err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			first = l
		}
		last = l
	}
	w1 := meanW0()
	t.Logf("loss %.4f -> %.4f, mean weight of the reliable member %.3f -> %.3f", first, last, w0, w1)
	if w1 < 0.9 || last > 0.5*first {
		t.Errorf("fusion did not learn to trust member 0: weight %.3f -> %.3f, loss %.4f -> %.4f", w0, w1, first, last)
	}
}

func TestAttentionShapePanics(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(s *nn.Scope)
		want  string
	}{
		{"heads", func(s *nn.Scope) {
			Attention(s, []*G.Node{s.Input("e", 2, 3)}, s.Input("z", 2, 1), s.Input("m", 2, 1), AttentionConfig{Dim: 6, Heads: 4})
		}, "Dim 6"},
		{"logits", func(s *nn.Scope) {
			Attention(s, []*G.Node{s.Input("e", 2, 3)}, s.Input("z", 2, 2), s.Input("m", 2, 1), AttentionConfig{Dim: 4, Heads: 2})
		}, "(2, 2)"},
		{"embedding", func(s *nn.Scope) {
			Attention(s, []*G.Node{s.Input("e0", 2, 3), s.Input("e1", 3, 3)}, s.Input("z", 2, 2), s.Input("m", 2, 2), AttentionConfig{Dim: 4, Heads: 2})
		}, "(3, 3)"},
		{"packed width", func(s *nn.Scope) {
			AttentionModel([]int{3, 2}, AttentionConfig{Dim: 4, Heads: 2})(s, s.Input("x", 2, 8))
		}, "(2, 8)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.Contains(msg, tc.want) {
					t.Errorf("panic %q does not name %q", msg, tc.want)
				}
			}()
			tc.build(nn.NewScope(nn.NewStore(1), G.NewGraph()))
		})
	}
}
