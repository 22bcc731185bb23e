package nn_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"

	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/textgen"
)

// A language model: build, take supervised steps, score and sample.
func ExampleLMTrainer() {
	store := nn.NewStore(1)
	lm := nn.NewLM(store, nn.LMConfig{Vocab: 8, Dim: 16, Layers: 1, Heads: 2, MaxLen: 16, Positions: nn.Rotary})
	tr := nn.NewLMTrainer(lm, nn.NewAdamW(nn.Constant(1e-2), 0.01), nn.TrainConfig{ClipNorm: 1})
	batch := []nn.SeqExample{{Prompt: []int{1}, Target: []int{2, 3, 4}}, {Prompt: []int{5, 6}, Target: []int{7}}}
	first, _ := tr.SupervisedStep(batch)
	var last float64
	for i := 0; i < 30; i++ {
		last, _ = tr.SupervisedStep(batch)
	}
	fmt.Println("loss fell:", last < first/2)

	logp, _ := tr.TokenLogProbs(batch)
	fmt.Println("log-probs per example:", len(logp[0]), len(logp[1]))

	gens, _ := lm.Generate([][]int{{1}}, textgen.GenerateOptions{Temperature: 1, MaxTokens: 3, Seed: 7})
	fmt.Println(len(gens[0].Tokens), len(gens[0].LogProbs), gens[0].FinishReason)
	// Output:
	// loss fell: true
	// log-probs per example: 3 1
	// 3 3 length
}

// ForwardBackward takes any loss over per-token log-probabilities, such as a
// policy-gradient objective: here REINFORCE with one reward per sequence.
func ExampleLMTrainer_ForwardBackward() {
	store := nn.NewStore(2)
	lm := nn.NewLM(store, nn.LMConfig{Vocab: 8, Dim: 8, Layers: 1, Heads: 2, MaxLen: 8})
	tr := nn.NewLMTrainer(lm, nn.NewAdam(nn.Constant(1e-3)), nn.TrainConfig{})
	batch := []nn.SeqExample{{Prompt: []int{1}, Target: []int{2, 3}}, {Prompt: []int{1}, Target: []int{4}}}
	rewards := []float64{1, -1}
	err := tr.ForwardBackward(batch, func(logp [][]float32) (float64, [][]float32) {
		var loss float64
		grad := make([][]float32, len(logp))
		for i, row := range logp {
			grad[i] = make([]float32, len(row))
			for j, lp := range row {
				loss -= rewards[i] * float64(lp)
				grad[i][j] = float32(-rewards[i])
			}
		}
		return loss, grad
	})
	_, skipped, _ := tr.Step()
	fmt.Println(err, skipped)
	// Output: <nil> false
}

// Layers are functions over a Scope: parameters are named by the scope path
// and live in the store, independent of the graph.
func ExampleScope() {
	store := nn.NewStore(3)
	g := G.NewGraph()
	s := nn.NewScope(store, g)
	x := s.Input("x", 4, 10, 16) // B×T×D
	y := nn.TransformerBlock(s.Sub("blocks").In(0), x, nn.BlockConfig{Heads: 4, Causal: true})
	fmt.Println(y.Shape(), len(store.Params()))
	fmt.Println(store.Names()[:3])
	// Output:
	// (4, 10, 16) 12
	// [blocks.0.attn.out.b blocks.0.attn.out.w blocks.0.attn.qkv.b]
}

// A classifier over tabular features with the token-set encoder.
func ExampleTrainer() {
	store := nn.NewStore(4)
	model := func(s *nn.Scope, x *G.Node) *G.Node {
		h := nn.TokenSetEncoder(s.Sub("enc"), x, nn.EncoderConfig{Dim: 8, Layers: 1, Heads: 2})
		return nn.ClassificationHead(s.Sub("head"), h, 2)
	}
	tr := nn.NewTrainer(store, model, nn.NewAdamW(nn.Constant(1e-2), 0), nn.TrainConfig{})
	x := [][]float32{{1, 2}, {-1, -2}, {2, 1}, {-2, -1}}
	labels := []int{1, 0, 1, 0}
	for i := 0; i < 50; i++ {
		tr.ClassifyStep(x, labels)
	}
	out, _ := tr.Predict(x)
	fmt.Println(out[0][1] > out[0][0], out[1][0] > out[1][1])
	// Output: true true
}

// An LSTM over a padded batch.
func ExampleLSTM() {
	store := nn.NewStore(5)
	g := G.NewGraph()
	s := nn.NewScope(store, g)
	x, mask := s.Input("x", 2, 6, 3), s.Input("mask", 2, 6)
	outs, last := nn.LSTM(s.Sub("lstm"), x, mask, nn.LSTMConfig{Hidden: 8, Layers: 2})
	fmt.Println(outs.Shape(), last.Shape())
	// Output: (2, 6, 8) (2, 8)
}

// Sampling with a KV cache: per-request seeds, stop tokens, and the
// log-probability of every sampled token.
func ExampleLM_Generate() {
	lm := nn.NewLM(nn.NewStore(6), nn.LMConfig{Vocab: 10, Dim: 16, Layers: 2, Heads: 2, MaxLen: 32, Positions: nn.Rotary})
	gens, err := lm.Generate([][]int{{1, 2, 3}, {4}}, textgen.GenerateOptions{
		Temperature: 0.8, TopK: 5, TopP: 0.95, MaxTokens: 6, StopTokens: []int{0}, Seed: 42,
	})
	if err != nil {
		panic(err)
	}
	for _, g := range gens {
		fmt.Println(len(g.Tokens) == len(g.LogProbs), g.FinishReason == "stop" || len(g.Tokens) == 6)
	}
	// Output:
	// true true
	// true true
}

// Checkpoints are safetensors files with a checksum, optimizer state and
// free-form metadata such as a tokenizer.
func ExampleSaveCheckpoint() {
	dir, _ := os.MkdirTemp("", "ck")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")

	store := nn.NewStore(7)
	cfg := nn.LMConfig{Vocab: 10, Dim: 8, Layers: 1, Heads: 2, MaxLen: 16}
	nn.NewLM(store, cfg)
	opt := nn.NewAdamW(nn.Constant(1e-3), 0.01)
	if err := nn.SaveCheckpoint(path, store, opt, map[string]string{"tokenizer": `{"type":"bpe"}`}); err != nil {
		panic(err)
	}

	restored := nn.NewStore(0)
	meta, err := nn.LoadCheckpoint(path, restored, nn.NewAdamW(nn.Constant(1e-3), 0.01))
	fmt.Println(err, meta["tokenizer"], len(restored.Params()) == len(store.Params()))
	// Output: <nil> {"type":"bpe"} true
}

// ExternalLoss lets a loss computed in Go drive Gorgonia's backward pass.
func ExampleExternalLoss() {
	g := G.NewGraph()
	s := nn.NewScope(nn.NewStore(8), g)
	x := s.Input("x", 2, 3)
	y := nn.Linear(s.Sub("lin"), x, 2)
	loss := nn.LossFunc(func(v []float32) (float64, []float32) {
		var l float64
		grad := make([]float32, len(v))
		for i, a := range v { // ½‖y‖²
			l += 0.5 * float64(a*a)
			grad[i] = a
		}
		return l, grad
	})
	cost := nn.ExternalLoss(y, &loss)
	_, params := s.Used()
	grads, err := G.Grad(cost, params...)
	fmt.Println(err, len(grads))
	// Output: <nil> 2
}

// The pointer-generator mixture of CopyMixOp on one sequence of three tokens
// (2, 0, 2) over a vocabulary of four: uniform logits, equal pointer scores
// and a gate of 0 (σ = ½), so at the last position each token gets
// ½·¼ from the vocabulary and ½ times its share of the positions seen.
func ExampleCopyMixOp() {
	g := G.NewGraph()
	zeros := func(name string, shape ...int) *G.Node {
		return G.NewTensor(g, ts.Float32, len(shape), G.WithShape(shape...), G.WithInit(G.Zeroes()), G.WithName(name))
	}
	ids := G.NewMatrix(g, ts.Float32, G.WithShape(1, 3), G.WithName("ids"),
		G.WithValue(ts.New(ts.WithShape(1, 3), ts.WithBacking([]float32{2, 0, 2}))))
	out := nn.CopyMixOp(zeros("logits", 1, 3, 4), zeros("q", 1, 3, 2), zeros("k", 1, 3, 2), zeros("gate", 1, 3, 1), ids)
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		fmt.Println(err)
		return
	}
	logp := out.Value().Data().([]float32)[2*4:]
	for _, lp := range logp {
		fmt.Printf("%.4f ", math.Exp(float64(lp)))
	}
	fmt.Println()
	// Output: 0.2917 0.1250 0.4583 0.1250
}
