package nn

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

// TestMixedFeatureTokensGradients checks MixedFeatureTokensOp's forward
// against a float64 reference and the gradients of x (numeric columns),
// w, table and bias against central finite differences.
func TestMixedFeatureTokensGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 1))
	cats := []int{0, 3, 0, 2} // columns 1 and 3 categorical
	const B, F, D = 3, 4, 5
	x := randIn(rng, 1, true, B, F)
	codes := []float64{2, 1, 0, 1, 1, 0}
	for i := 0; i < B; i++ {
		x.vals[i*F+1], x.vals[i*F+3] = codes[2*i], codes[2*i+1]
	}
	ins := []gcInput{x, randIn(rng, 1, true, 2, D), randIn(rng, 1, true, 5, D), randIn(rng, 1, true, F, D)}
	gradCheck(t, ins,
		func(n []*G.Node) *G.Node { return MixedFeatureTokensOp(n[0], n[1], n[2], n[3], cats) },
		func(v [][]float64) []float64 {
			out := make([]float64, B*F*D)
			numRow := map[int]int{0: 0, 2: 1}
			offset := map[int]int{1: 0, 3: 3}
			for b := 0; b < B; b++ {
				for f := 0; f < F; f++ {
					for d := 0; d < D; d++ {
						o := v[3][f*D+d]
						if cats[f] == 0 {
							o += v[0][b*F+f] * v[1][numRow[f]*D+d]
						} else {
							// Round: finite differences nudge the code by
							// 1e-6, which must not change the category.
							c := int(math.Round(v[0][b*F+f]))
							o += v[2][(offset[f]+c)*D+d]
						}
						out[(b*F+f)*D+d] = o
					}
				}
			}
			return out
		})
}

// TestTokenSetEncoderCategorical: layer-level gradient check of the encoder
// with categorical attributes (like TestLayerGradients), every table row used
// by the batch gets a gradient and unused rows none, and a bad code is an
// error, not a panic.
func TestTokenSetEncoderCategorical(t *testing.T) {
	store := NewStore(8)
	cfg := EncoderConfig{Dim: 8, Layers: 1, Heads: 2, Categories: []int{0, 4, 0, 3}}
	x := denseOf(ts.Shape{3, 4}, func(i int) float32 {
		switch i % 4 {
		case 1:
			return float32(i / 4) // codes 0,1,2 of 4 (3 unused)
		case 3:
			return float32((i/4 + 1) % 3)
		}
		return float32(math.Sin(float64(i)))
	})
	build := func(s *Scope) ([]*G.Node, *G.Node) {
		in := s.Input("x", 3, 4)
		h := TokenSetEncoder(s.Sub("enc"), in, cfg)
		return []*G.Node{in}, ClassificationHead(s.Sub("head"), h, 3)
	}
	layerGradCheck(t, store, []*ts.Dense{x}, build)
	store.ZeroGrad()
	sum := LossFunc(func(v []float32) (float64, []float32) {
		g := make([]float32, len(v))
		for i := range g {
			g[i] = 1 + float32(i%3)
		}
		return 0, g
	})
	if _, _, err := newGraphRun(store, true, build).run([]*ts.Dense{x}, sum); err != nil {
		t.Fatal(err)
	}
	tab := store.Param("enc.tok.table")
	if tab == nil || !tab.Shape().Eq(ts.Shape{7, 8}) {
		t.Fatalf("enc.tok.table: %v", tab)
	}
	for r := 0; r < 7; r++ {
		nz := false
		for _, g := range tab.Grad[r*8 : (r+1)*8] {
			nz = nz || g != 0
		}
		if used := r != 3; nz != used {
			t.Errorf("table row %d: nonzero gradient %v, used by the batch %v", r, nz, used)
		}
	}
	bad := denseOf(ts.Shape{3, 4}, func(i int) float32 {
		if i == 5 {
			return 4 // column 1 has 4 categories: 4 is out of range
		}
		return 0
	})
	r := newGraphRun(store, false, build)
	if _, _, err := r.run([]*ts.Dense{bad}, nil); err == nil || !strings.Contains(err.Error(), "outside [0,4)") {
		t.Errorf("code 4 of 4 categories: err %v", err)
	}
}
