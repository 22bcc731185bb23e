package cuda

import "math/rand/v2"

// BlockConfig sizes a pre-LN transformer block: batch B, sequence T, model
// width D, H heads (D divisible by H, D/H ≤ 128), MLP width 4·D.
type BlockConfig struct {
	B, T, D, H int
	Eps        float32 // layer-norm epsilon (0: 1e-5)
}

// BlockParamShapes lists the block's parameters in storage order.
func BlockParamShapes(D int) []struct {
	Name string
	Len  int
} {
	F := 4 * D
	return []struct {
		Name string
		Len  int
	}{
		{"ln1.g", D}, {"ln1.b", D}, {"wqkv", D * 3 * D}, {"bqkv", 3 * D}, {"wo", D * D}, {"bo", D},
		{"ln2.g", D}, {"ln2.b", D}, {"w1", D * F}, {"b1", F}, {"w2", F * D}, {"b2", D},
	}
}

// BlockInit returns the initial parameters (flat, storage order) for seed:
// weights N(0, 0.02²), biases 0, layer-norm gains 1.
func BlockInit(D int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x7b10c))
	var p []float32
	for _, s := range BlockParamShapes(D) {
		for i := 0; i < s.Len; i++ {
			var v float32
			switch s.Name[0] {
			case 'w':
				v = float32(0.02 * r.NormFloat64())
			case 'l':
				if s.Name[len(s.Name)-1] == 'g' {
					v = 1
				}
			}
			p = append(p, v)
		}
	}
	return p
}
