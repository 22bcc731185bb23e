package benchmarks

// Benchmarks of package nn, each beside the same computation composed from
// plain Gorgonia ops (package nn/plain) in the same run. The PyTorch versions
// are in compare/nn.py. Run single-threaded for the PyTorch comparison:
//
//	GOMAXPROCS=1 go test ./benchmarks -run '^$' -bench 'NN' -benchtime 20x

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/plain"
	kern "github.com/troupe-ml/troupe/tensor"
	"github.com/troupe-ml/troupe/textgen"
)

// cpuTime is the process's user+system CPU time. On this shared machine the
// benchmarks also report CPU ms per step: with one thread (GOMAXPROCS=1) it
// is the work done, less sensitive to other processes than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportStep reports wall and CPU milliseconds per iteration since the
// timer reset (cpu0 taken then).
func reportStep(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/step")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e6/float64(b.N), "cpu-ms/step")
}

// installTroupeBLAS makes Gorgonia's own Mul and BatchedMatMul (the plain
// compositions) run on troupe's Gemm for the benchmark, so the comparison is
// of the graphs, not the BLAS; the previous BLAS is restored afterwards.
func installTroupeBLAS(b *testing.B) {
	prevG, prevT := G.WhichBLAS(), ts.WhichBLAS()
	b.Cleanup(func() { G.Use(prevG); ts.Use(prevT) })
	kern.Install()
}

func randDense(rng *rand.Rand, std float64, shape ...int) *ts.Dense {
	d := ts.New(ts.WithShape(shape...), ts.Of(ts.Float32))
	for i := range d.Float32s() {
		d.Float32s()[i] = float32(rng.NormFloat64() * std)
	}
	return d
}

// stepGraph is a compiled training graph over a store: output, scalar cost
// and the parameter gradients.
type stepGraph struct {
	vm     G.VM
	params []*nn.Param
	grads  G.Nodes
	cost   *G.Node
}

// newStepGraph builds out = build(scope) and the cost Σ r·out (r fixed
// random), with the loss formed by the plain Gorgonia ops Sum∘HadamardProd
// (or the fused ExternalLoss when fused is set), and derives the gradients.
func newStepGraph(b *testing.B, store *nn.Store, fused bool, build func(s *nn.Scope) *G.Node) *stepGraph {
	g := G.NewGraph()
	s := nn.NewScope(store, g)
	out := build(s)
	rng := rand.New(rand.NewPCG(9, 9))
	r := randDense(rng, 1, out.Shape()...)
	var cost *G.Node
	if fused {
		rv := r.Float32s()
		lf := nn.LossFunc(func(v []float32) (float64, []float32) {
			var l float64
			for i, x := range v {
				l += float64(rv[i] * x)
			}
			return l, rv
		})
		cost = nn.ExternalLoss(out, &lf)
	} else {
		rn := G.NewTensor(g, ts.Float32, out.Shape().Dims(), G.WithShape(out.Shape()...), G.WithValue(r), G.WithName("r"))
		cost = G.Must(G.Sum(G.Must(G.HadamardProd(out, rn))))
	}
	return newStepFromCost(b, s, cost)
}

func newStepFromCost(b *testing.B, s *nn.Scope, cost *G.Node) *stepGraph {
	params, nodes := s.Used()
	grads, err := G.Grad(cost, nodes...)
	if err != nil {
		b.Fatal(err)
	}
	return &stepGraph{vm: G.NewTapeMachine(s.Graph()), params: params, grads: grads, cost: cost}
}

// step runs forward and backward, copies the gradients into the store and,
// with opt, applies an optimizer step.
func (sg *stepGraph) step(b *testing.B, opt nn.Optimizer) {
	if err := sg.vm.RunAll(); err != nil {
		b.Fatal(err)
	}
	for i, p := range sg.params {
		copy(p.Grad, sg.grads[i].Value().Data().([]float32))
	}
	sg.vm.Reset()
	if opt != nil {
		opt.Update(sg.params)
	}
}

const (
	blockB, blockT, blockD, blockH = 8, 64, 128, 4
)

// BenchmarkNNBlockStep is one pre-LN transformer block training step
// (forward, backward, AdamW) at B=8, T=64, D=128, 4 heads, GELU MLP of 4D.
func BenchmarkNNBlockStep(b *testing.B) {
	installTroupeBLAS(b)
	rng := rand.New(rand.NewPCG(1, 1))
	x := randDense(rng, 1, blockB, blockT, blockD)
	for _, impl := range []string{"troupe", "gorgonia"} {
		b.Run(impl, func(b *testing.B) {
			store := nn.NewStore(1)
			var sg *stepGraph
			if impl == "troupe" {
				sg = newStepGraph(b, store, true, func(s *nn.Scope) *G.Node {
					xn := G.NewTensor(s.Graph(), ts.Float32, 3, G.WithShape(blockB, blockT, blockD), G.WithValue(x), G.WithName("x"))
					return nn.TransformerBlock(s.Sub("block"), xn, nn.BlockConfig{Heads: blockH, Causal: true})
				})
			} else {
				x2 := x.Clone().(*ts.Dense)
				x2.Reshape(blockB*blockT, blockD)
				sg = newStepGraph(b, store, false, func(s *nn.Scope) *G.Node {
					xn := G.NewMatrix(s.Graph(), ts.Float32, G.WithShape(blockB*blockT, blockD), G.WithValue(x2), G.WithName("x"))
					return plain.TransformerBlock(s.Sub("block"), xn, blockB, blockT, blockH)
				})
			}
			opt := nn.NewAdamW(nn.Constant(1e-4), 0.01)
			sg.step(b, opt)
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				sg.step(b, opt)
			}
			reportStep(b, cpu0)
		})
	}
}

var lmBenchConfig = nn.LMConfig{Vocab: 256, Dim: 128, Layers: 4, Heads: 4, MaxLen: 64, Positions: nn.Learned}

func randomBatch(rng *rand.Rand, b, t, vocab int) []nn.SeqExample {
	batch := make([]nn.SeqExample, b)
	for i := range batch {
		seq := make([]int, t+1)
		for j := range seq {
			seq[j] = rng.IntN(vocab)
		}
		batch[i] = nn.SeqExample{Prompt: seq[:1], Target: seq[1:]}
	}
	return batch
}

// benchLMSteps times supervised steps (AdamW) of an LM of configuration cfg
// on batch, after one untimed step.
func benchLMSteps(b *testing.B, cfg nn.LMConfig, batch []nn.SeqExample) {
	lm := nn.NewLM(nn.NewStore(1), cfg)
	tr := nn.NewLMTrainer(lm, nn.NewAdamW(nn.Constant(1e-4), 0.01), nn.TrainConfig{})
	if _, err := tr.SupervisedStep(batch); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := tr.SupervisedStep(batch); err != nil {
			b.Fatal(err)
		}
	}
	reportStep(b, cpu0)
}

// BenchmarkNNLMStep is one supervised training step (mean token
// cross-entropy, forward, backward, AdamW) of the small LM: 4 layers,
// D=128, 4 heads, vocabulary 256, B=8 sequences of T=64 positions.
func BenchmarkNNLMStep(b *testing.B) {
	installTroupeBLAS(b)
	cfg := lmBenchConfig
	const B, T = 8, 64
	rng := rand.New(rand.NewPCG(2, 2))
	batch := randomBatch(rng, B, T, cfg.Vocab)
	b.Run("troupe", func(b *testing.B) { benchLMSteps(b, cfg, batch) })
	b.Run("troupe-copy32", func(b *testing.B) {
		// The same model with a pointer head (nn.LMConfig.CopyDim = 32):
		// the cost of copying, beside the plain step in one run.
		c := cfg
		c.CopyDim = 32
		benchLMSteps(b, c, batch)
	})
	b.Run("gorgonia", func(b *testing.B) {
		store := nn.NewStore(1)
		oh := ts.New(ts.WithShape(B*T, cfg.Vocab), ts.Of(ts.Float32))
		ph := ts.New(ts.WithShape(B*T, cfg.MaxLen), ts.Of(ts.Float32))
		th := ts.New(ts.WithShape(B*T, cfg.Vocab), ts.Of(ts.Float32))
		for i, ex := range batch {
			seq := append(append([]int(nil), ex.Prompt...), ex.Target...)
			for t := 0; t < T; t++ {
				r := i*T + t
				oh.Float32s()[r*cfg.Vocab+seq[t]] = 1
				ph.Float32s()[r*cfg.MaxLen+t] = 1
				th.Float32s()[r*cfg.Vocab+seq[t+1]] = -1 / float32(B*T)
			}
		}
		g := G.NewGraph()
		s := nn.NewScope(store, g)
		on := G.NewMatrix(g, ts.Float32, G.WithShape(B*T, cfg.Vocab), G.WithValue(oh), G.WithName("oh"))
		pn := G.NewMatrix(g, ts.Float32, G.WithShape(B*T, cfg.MaxLen), G.WithValue(ph), G.WithName("ph"))
		tn := G.NewMatrix(g, ts.Float32, G.WithShape(B*T, cfg.Vocab), G.WithValue(th), G.WithName("targets"))
		logits := plain.LMLogits(s, cfg, on, pn, B, T)
		cost := G.Must(G.Sum(G.Must(G.HadamardProd(G.Must(G.LogSoftMax(logits)), tn))))
		sg := newStepFromCost(b, s, cost)
		opt := nn.NewAdamW(nn.Constant(1e-4), 0.01)
		sg.step(b, opt)
		b.ResetTimer()
		cpu0 := cpuTime()
		for i := 0; i < b.N; i++ {
			sg.step(b, opt)
		}
		reportStep(b, cpu0)
	})
}

// BenchmarkNNLSTM is the forward and backward pass of a one-layer LSTM with
// B=32, T=32, input and hidden width 128 (loss Σ r·outputs).
func BenchmarkNNLSTM(b *testing.B) {
	installTroupeBLAS(b)
	const B, T, H = 32, 32, 128
	rng := rand.New(rand.NewPCG(3, 3))
	x := randDense(rng, 1, B, T, H)
	for _, impl := range []string{"troupe", "gorgonia"} {
		b.Run(impl, func(b *testing.B) {
			store := nn.NewStore(1)
			var sg *stepGraph
			if impl == "troupe" {
				sg = newStepGraph(b, store, true, func(s *nn.Scope) *G.Node {
					xn := G.NewTensor(s.Graph(), ts.Float32, 3, G.WithShape(B, T, H), G.WithValue(x), G.WithName("x"))
					outs, _ := nn.LSTM(s.Sub("lstm"), xn, nil, nn.LSTMConfig{Hidden: H, Layers: 1})
					return outs
				})
			} else {
				sg = newStepGraph(b, store, false, func(s *nn.Scope) *G.Node {
					var xs []*G.Node
					for t := 0; t < T; t++ {
						st := ts.New(ts.WithShape(B, H), ts.Of(ts.Float32))
						for i := 0; i < B; i++ {
							copy(st.Float32s()[i*H:(i+1)*H], x.Float32s()[(i*T+t)*H:(i*T+t+1)*H])
						}
						xs = append(xs, G.NewMatrix(s.Graph(), ts.Float32, G.WithShape(B, H), G.WithValue(st), G.WithName(fmt.Sprintf("x%d", t))))
					}
					return G.Must(G.Concat(1, plain.LSTM(s.Sub("lstm"), xs, H)...))
				})
			}
			sg.step(b, nil)
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				sg.step(b, nil)
			}
			reportStep(b, cpu0)
		})
	}
}

// BenchmarkNNGenerate measures generated tokens per second of the small LM
// (as in BenchmarkNNLMStep) from 16-token prompts, 16 new tokens each, at
// batch 1 and 16: troupe's batched KV-cache generation against re-running a
// plain Gorgonia forward graph over the whole sequence for every new token
// (greedy decoding in both).
func BenchmarkNNGenerate(b *testing.B) {
	installTroupeBLAS(b)
	cfg := lmBenchConfig
	const prompt, gen = 16, 16
	for _, batch := range []int{1, 16} {
		rng := rand.New(rand.NewPCG(4, uint64(batch)))
		prompts := make([][]int, batch)
		for i := range prompts {
			for j := 0; j < prompt; j++ {
				prompts[i] = append(prompts[i], rng.IntN(cfg.Vocab))
			}
		}
		// troupe-kvcache uses the default decode path (matrix-vector
		// products for steps of at most 4 rows); troupe-kvcache-gemm turns
		// that path off (every product through tensor.Gemm) for comparison.
		for _, v := range []struct {
			name string
			rows int
		}{{"troupe-kvcache", -1}, {"troupe-kvcache-gemm", 0}} {
			b.Run(fmt.Sprintf("%s/batch=%d", v.name, batch), func(b *testing.B) {
				prev := nn.SetDecodeGEMVRows(v.rows)
				defer nn.SetDecodeGEMVRows(prev)
				lm := nn.NewLM(nn.NewStore(1), cfg)
				start, cpu0 := time.Now(), cpuTime()
				for i := 0; i < b.N; i++ {
					if _, err := lm.Generate(prompts, textgen.GenerateOptions{MaxTokens: gen}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(batch*gen*b.N)/time.Since(start).Seconds(), "tokens/s")
				b.ReportMetric(float64(batch*gen*b.N)/(cpuTime()-cpu0).Seconds(), "tokens/cpu-s")
			})
		}
		b.Run(fmt.Sprintf("gorgonia-recompute/batch=%d", batch), func(b *testing.B) {
			store := nn.NewStore(1)
			const T = prompt + gen
			g := G.NewGraph()
			s := nn.NewScope(store, g)
			oh := ts.New(ts.WithShape(batch*T, cfg.Vocab), ts.Of(ts.Float32))
			ph := ts.New(ts.WithShape(batch*T, cfg.MaxLen), ts.Of(ts.Float32))
			for r := 0; r < batch*T; r++ {
				ph.Float32s()[r*cfg.MaxLen+r%T] = 1
			}
			on := G.NewMatrix(g, ts.Float32, G.WithShape(batch*T, cfg.Vocab), G.WithValue(oh), G.WithName("oh"))
			pn := G.NewMatrix(g, ts.Float32, G.WithShape(batch*T, cfg.MaxLen), G.WithValue(ph), G.WithName("ph"))
			logits := plain.LMLogits(s, cfg, on, pn, batch, T)
			vm := G.NewTapeMachine(g)
			start, cpu0 := time.Now(), cpuTime()
			for i := 0; i < b.N; i++ {
				seqs := make([][]int, batch)
				for k := range seqs {
					seqs[k] = append([]int(nil), prompts[k]...)
				}
				for step := 0; step < gen; step++ {
					o := oh.Float32s()
					clear(o)
					for k, sq := range seqs {
						for t, tok := range sq {
							o[(k*T+t)*cfg.Vocab+tok] = 1
						}
					}
					if err := vm.RunAll(); err != nil {
						b.Fatal(err)
					}
					lg := logits.Value().Data().([]float32)
					for k := range seqs {
						row := lg[(k*T+len(seqs[k])-1)*cfg.Vocab : (k*T+len(seqs[k]))*cfg.Vocab]
						best := 0
						for j, v := range row {
							if v > row[best] {
								best = j
							}
						}
						seqs[k] = append(seqs[k], best)
					}
					vm.Reset()
				}
			}
			b.ReportMetric(float64(batch*gen*b.N)/time.Since(start).Seconds(), "tokens/s")
			b.ReportMetric(float64(batch*gen*b.N)/(cpuTime()-cpu0).Seconds(), "tokens/cpu-s")
		})
	}
}
