package benchmarks

// Benchmarks of pretrained Hugging Face decoders (package nn/hf) at
// Qwen2.5-0.5B's shapes with random bf16 weights (none can be downloaded
// where they run), one thread. The PyTorch eager float32 versions of the
// same computations are compare/hf.py's bench-decode and bench-lora;
// compare/run.sh puts them side by side.
//
//	go test ./benchmarks -run '^$' -bench 'HF' -benchtime 2x

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/rl/policies"
	kern "github.com/troupe-ml/troupe/tensor"
	"github.com/troupe-ml/troupe/textgen"
)

// hfModel loads a random bf16 checkpoint of the named shape, written once
// into the temporary directory and reused by later runs (about 1 GB).
func hfModel(b *testing.B, shape string) *hf.Model {
	b.Helper()
	dir := filepath.Join(os.TempDir(), "troupe-bench", shape+"-bf16")
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		b.Logf("writing a random %s checkpoint to %s (once)", shape, dir)
		if err := hf.WriteRandom(dir, hf.Shapes[shape], 1, hf.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	m, err := hf.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

func oneThread(b *testing.B) {
	prev := kern.SetThreads(1)
	b.Cleanup(func() { kern.SetThreads(prev) })
}

// BenchmarkHFDecode: a 32-token prompt per request, then 32 greedy tokens
// with the key/value cache; tokens/s counts the generated tokens of the
// whole batch over the whole time, prefill included.
func BenchmarkHFDecode(b *testing.B) {
	for _, shape := range []string{"qwen2-0.5b"} {
		for _, batch := range []int{1, 8} {
			b.Run(shape+"/batch="+strconv.Itoa(batch), func(b *testing.B) {
				m := hfModel(b, shape)
				oneThread(b)
				rng := rand.New(rand.NewPCG(1, 2))
				prompts := make([][]int, batch)
				for i := range prompts {
					for j := 0; j < 32; j++ {
						prompts[i] = append(prompts[i], rng.IntN(m.Config.Vocab))
					}
				}
				opts := textgen.GenerateOptions{MaxTokens: 32}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					gens, err := m.Generate(context.Background(), nil, prompts, opts, nil)
					if err != nil {
						b.Fatal(err)
					}
					if len(gens[0].Tokens) != 32 {
						b.Fatalf("generated %d tokens, want 32", len(gens[0].Tokens))
					}
				}
				b.ReportMetric(float64(batch*32*b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// BenchmarkHFLoRAStep: one supervised step of a rank-16 LoRA (alpha 32) on
// the seven projections of every layer, 2 sequences × 64 tokens,
// cross-entropy on every next token, AdamW over the adapter only.
func BenchmarkHFLoRAStep(b *testing.B) {
	for _, shape := range []string{"qwen2-0.5b"} {
		b.Run(shape, func(b *testing.B) {
			m := hfModel(b, shape)
			oneThread(b)
			ad, err := hf.NewLoRA(m, hf.LoRAConfig{Rank: 16, Alpha: 32, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			pol := policies.NewLoRA(ad, nn.NewAdamW(nn.Constant(1e-4), 0.01), 0)
			rng := rand.New(rand.NewPCG(3, 4))
			seqs := make([]hf.Seq, 2)
			for i := range seqs {
				ids := make([]int, 65)
				for j := range ids {
					ids[j] = rng.IntN(m.Config.Vocab)
				}
				seqs[i] = hf.Seq{Prompt: ids[:1], Target: ids[1:]}
			}
			step := func() {
				if _, err := m.ForwardBackward(ad, seqs, hf.CrossEntropy); err != nil {
					b.Fatal(err)
				}
				if _, err := pol.Step(); err != nil {
					b.Fatal(err)
				}
			}
			// One untimed step first, as compare/hf.py's PyTorch side has:
			// it touches the memory-mapped weights and sizes the buffers.
			step()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := m.ForwardBackward(ad, seqs, hf.CrossEntropy); err != nil {
					b.Fatal(err)
				}
				if _, err := pol.Step(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/step")
		})
	}
}
