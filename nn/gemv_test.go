package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	kern "github.com/troupe-ml/troupe/tensor"
	"github.com/troupe-ml/troupe/textgen"
)

// TestGEMVMatchesGemm checks the decoding matrix-vector path against a
// float64 reference and against tensor.Gemm, with and without accumulation,
// for row counts around the default threshold and odd sizes.
func TestGEMVMatchesGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1))
	for _, sz := range [][3]int{{1, 128, 384}, {1, 37, 19}, {2, 64, 256}, {4, 33, 65}, {3, 1, 9}, {2, 17, 64 + 13}, {1, 5, 200}} {
		rows, in, out := sz[0], sz[1], sz[2]
		t.Run(fmt.Sprintf("%dx%dx%d", rows, in, out), func(t *testing.T) {
			x, w, y0 := make([]float32, rows*in), make([]float32, in*out), make([]float32, rows*out)
			for _, s := range [][]float32{x, w, y0} {
				for i := range s {
					s[i] = float32(rng.NormFloat64())
				}
			}
			x[0] = 0 // the zero-skip branch
			for _, acc := range []bool{false, true} {
				ref := make([]float64, rows*out)
				for r := 0; r < rows; r++ {
					for j := 0; j < out; j++ {
						var s float64
						if acc {
							s = float64(y0[r*out+j])
						}
						for i := 0; i < in; i++ {
							s += float64(x[r*in+i]) * float64(w[i*out+j])
						}
						ref[r*out+j] = s
					}
				}
				got := append([]float32(nil), y0...)
				gemvRows(got, x, w, rows, in, out, acc)
				gemm := append([]float32(nil), y0...)
				beta := float32(0)
				if acc {
					beta = 1
				}
				kern.Gemm(false, false, rows, out, in, 1, x, in, w, out, beta, gemm, out)
				got64 := make([]float64, len(got))
				for i, v := range got {
					got64[i] = float64(v)
				}
				if d := cmp.Diff(ref, got64, cmpopts.EquateApprox(1e-5, 1e-4)); d != "" {
					t.Errorf("accumulate=%v: gemv vs float64 reference:\n%s", acc, d)
				}
				if d := cmp.Diff(gemm, got, cmpopts.EquateApprox(1e-5, 1e-4)); d != "" {
					t.Errorf("accumulate=%v: gemv vs Gemm:\n%s", acc, d)
				}
			}
		})
	}
}

// TestGenerateGEMVMatchesGemm: generation with the matrix-vector decode
// path (default) and with it disabled (all Gemm) give the same tokens and
// log-probabilities, at batch 1 and batch 3, learned and rotary positions.
func TestGenerateGEMVMatchesGemm(t *testing.T) {
	for _, pos := range []Positions{Learned, Rotary} {
		cfg := LMConfig{Vocab: 29, Dim: 16, Layers: 2, Heads: 2, MaxLen: 24, Positions: pos}
		store := NewStore(11)
		m := NewLM(store, cfg)
		roughen(store, 0.3, 12)
		for _, prompts := range [][][]int{{{3, 1, 4}}, {{1, 5}, {9}, {2, 6, 5, 3}}} {
			opts := textgen.GenerateOptions{Temperature: 1, MaxTokens: 10, Seed: 5, TopLogProbs: 3}
			prev := SetDecodeGEMVRows(-1)
			a, err := m.Generate(prompts, opts)
			SetDecodeGEMVRows(0)
			b, err2 := m.Generate(prompts, opts)
			SetDecodeGEMVRows(prev)
			if err != nil || err2 != nil {
				t.Fatal(err, err2)
			}
			if d := cmp.Diff(b, a, cmpopts.EquateApprox(0, 1e-4)); d != "" {
				t.Errorf("positions %v, %d prompts: gemv vs Gemm generation (-gemm +gemv):\n%s", pos, len(prompts), d)
			}
		}
	}
}

// BenchmarkDecodeGEMV compares the decode matrix-vector path with
// tensor.Gemm for the few-row products of LM decoding (D=128 model:
// qkv 128→384, fc2 512→128, head 128→256).
func BenchmarkDecodeGEMV(b *testing.B) {
	for _, sz := range [][3]int{{1, 128, 384}, {1, 512, 128}, {1, 128, 256}, {4, 128, 384}, {8, 128, 384}, {16, 128, 384}} {
		rows, in, out := sz[0], sz[1], sz[2]
		x, w, y := make([]float32, rows*in), make([]float32, in*out), make([]float32, rows*out)
		for i := range x {
			x[i] = 1
		}
		flops := float64(2 * rows * in * out)
		b.Run(fmt.Sprintf("gemv/%dx%dx%d", rows, in, out), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				gemvRows(y, x, w, rows, in, out, true)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run(fmt.Sprintf("gemm/%dx%dx%d", rows, in, out), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				kern.Gemm(false, false, rows, out, in, 1, x, in, w, out, 1, y, out)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
