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
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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
// whole batch over the whole time, prefill included; decode-tokens/s the
// 31 tokens after the prefill's over the time they took. threads=2 runs
// the same on two threads (tensor.SetThreads).
func BenchmarkHFDecode(b *testing.B) {
	for _, shape := range []string{"qwen2-0.5b"} {
		for _, c := range []struct{ batch, threads int }{{1, 1}, {8, 1}, {1, 2}, {8, 2}} {
			batch := c.batch
			name := shape + "/batch=" + strconv.Itoa(batch)
			if c.threads > 1 {
				name += "/threads=" + strconv.Itoa(c.threads)
			}
			b.Run(name, func(b *testing.B) {
				m := hfModel(b, shape)
				prev := kern.SetThreads(c.threads)
				b.Cleanup(func() { kern.SetThreads(prev) })
				prompts := hfPrompts(m, batch)
				var decode time.Duration
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					decode += hfGenerate(b, m, prompts)
				}
				b.ReportMetric(float64(batch*32*b.N)/b.Elapsed().Seconds(), "tokens/s")
				b.ReportMetric(float64(batch*31*b.N)/decode.Seconds(), "decode-tokens/s")
			})
		}
	}
}

// BenchmarkHFPrefill: the forward pass of 8 prompts of 128 tokens (the
// prefill of a batch), logits of their last positions included, on one and
// two threads.
func BenchmarkHFPrefill(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run("qwen2-0.5b/batch=8/threads="+strconv.Itoa(threads), func(b *testing.B) {
			m := hfModel(b, "qwen2-0.5b")
			prev := kern.SetThreads(threads)
			b.Cleanup(func() { kern.SetThreads(prev) })
			b.ResetTimer()
			for range b.N {
				hfPrefill(b, m)
			}
			b.ReportMetric(float64(8*128*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkHFThreads: what a second thread buys, measured as one run so
// that the machine's drift falls on both sides. Each iteration runs the
// work once on one thread and once on two (tensor.SetThreads), in turn
// first; speedup is the one-thread time over the two-thread time, summed
// over the iterations. decode is BenchmarkHFDecode's work timed from the
// batch's first tokens; prefill BenchmarkHFPrefill's.
//
//	GOMAXPROCS=2 go test ./benchmarks -run '^$' -bench HFThreads -benchtime 8x
func BenchmarkHFThreads(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs GOMAXPROCS ≥ 2")
	}
	type work struct {
		name   string
		tokens int
		run    func(m *hf.Model) time.Duration // the time to count
	}
	decode := func(batch int) work {
		return work{"decode/batch=" + strconv.Itoa(batch), batch * 31, func(m *hf.Model) time.Duration {
			return hfGenerate(b, m, hfPrompts(m, batch))
		}}
	}
	prefill := work{"prefill/batch=8", 8 * 128, func(m *hf.Model) time.Duration {
		start := time.Now()
		hfPrefill(b, m)
		return time.Since(start)
	}}
	for _, w := range []work{decode(1), decode(8), prefill} {
		b.Run("qwen2-0.5b/"+w.name, func(b *testing.B) {
			m := hfModel(b, "qwen2-0.5b")
			prev := kern.SetThreads(1)
			b.Cleanup(func() { kern.SetThreads(prev) })
			var t [3]time.Duration // by thread count
			for i := range b.N {
				for j := range 2 {
					threads := 1 + (i+j)%2
					kern.SetThreads(threads)
					t[threads] += w.run(m)
				}
			}
			b.ReportMetric(float64(w.tokens*b.N)/t[1].Seconds(), "tokens/s-1")
			b.ReportMetric(float64(w.tokens*b.N)/t[2].Seconds(), "tokens/s-2")
			b.ReportMetric(t[1].Seconds()/t[2].Seconds(), "speedup")
		})
	}
}

// hfPrompts is BenchmarkHFDecode's batch of 32-token prompts.
func hfPrompts(m *hf.Model, batch int) [][]int {
	rng := rand.New(rand.NewPCG(1, 2))
	prompts := make([][]int, batch)
	for i := range prompts {
		for range 32 {
			prompts[i] = append(prompts[i], rng.IntN(m.Config.Vocab))
		}
	}
	return prompts
}

// hfGenerate generates 32 greedy tokens for every prompt and returns the
// time of the decoding steps alone: from the batch's first tokens (the
// prefill's) to its last, as the llama.cpp anchor counts its decode
// figure.
func hfGenerate(b *testing.B, m *hf.Model, prompts [][]int) time.Duration {
	start := time.Now()
	var first time.Time
	events := 0
	emit := func(textgen.TokenEvent) {
		if events++; events == len(prompts) {
			first = time.Now()
		}
	}
	gens, err := m.Generate(context.Background(), nil, prompts, textgen.GenerateOptions{MaxTokens: 32}, emit)
	if err != nil {
		b.Fatal(err)
	}
	if len(gens[0].Tokens) != 32 {
		b.Fatalf("generated %d tokens, want 32", len(gens[0].Tokens))
	}
	if first.IsZero() {
		first = start
	}
	return time.Since(first)
}

// hfPrefill runs BenchmarkHFPrefill's forward pass once: 8 prompts of 128
// tokens into new caches, logits of their last positions included.
func hfPrefill(b *testing.B, m *hf.Model) {
	dec := m.Decoder()
	rng := rand.New(rand.NewPCG(5, 6))
	batch := make([]textgen.Input, 8)
	for i := range batch {
		for range 128 {
			batch[i].Tokens = append(batch[i].Tokens, rng.IntN(m.Config.Vocab))
		}
		batch[i].Logits, batch[i].Cache = true, dec.NewCache(128)
	}
	if err := dec.Step(batch, make([]float32, 8*m.Config.Vocab)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMemoryBandwidth: the machine's memory bandwidth, the ceiling of
// batch-1 decoding, which reads every weight once per token. copy moves
// 512 MiB (runtime memmove; bytes read plus written per second, one
// thread); read sums 1 GiB of float32 (tensor.VecSum, bytes read per
// second) on one and two threads, as decoding reads its weights.
func BenchmarkMemoryBandwidth(b *testing.B) {
	b.Run("copy", func(b *testing.B) {
		const n = 512 << 20
		src, dst := make([]byte, n), make([]byte, n)
		for i := range src {
			src[i] = byte(i)
		}
		copy(dst, src)
		b.ResetTimer()
		for range b.N {
			copy(dst, src)
		}
		b.ReportMetric(float64(2*n*b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	})
	x := make([]float32, 256<<20)
	for i := range x {
		x[i] = float32(i & 7)
	}
	for _, threads := range []int{1, 2} {
		b.Run("read/threads="+strconv.Itoa(threads), func(b *testing.B) {
			prev := kern.SetThreads(threads)
			defer kern.SetThreads(prev)
			var sink atomic.Int64
			b.ResetTimer()
			for range b.N {
				kern.ParallelFor(len(x), 1<<20, func(lo, hi int) { sink.Add(int64(kern.VecSum(x[lo:hi]))) })
			}
			b.ReportMetric(float64(4*len(x)*b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
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
