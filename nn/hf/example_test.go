package hf_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/textgen"
)

// writeTinyModel writes a random checkpoint of shape qwen3-byte (two
// layers over the 259 ids of tokenizer.ByteChatML: the bytes,
// <|endoftext|>, <|im_start|>, <|im_end|>) with its tokenizer into a new
// temporary directory: a complete Hugging Face model directory, as a
// downloaded one would be.
func writeTinyModel(seed uint64) string {
	dir, err := os.MkdirTemp("", "hf-example")
	if err != nil {
		panic(err)
	}
	if err := hf.WriteRandom(dir, hf.Shapes["qwen3-byte"], seed, hf.WriteOptions{DType: "F32", InitStd: 0.1}); err != nil {
		panic(err)
	}
	if err := tokenizer.ByteChatML().WriteDir(dir); err != nil {
		panic(err)
	}
	return dir
}

// loadTiny loads the model and the tokenizer of writeTinyModel(seed).
func loadTiny(seed uint64) (*hf.Model, *hf.Tokenizer, func()) {
	dir := writeTinyModel(seed)
	m, tok, err := hf.Open(dir)
	if err != nil {
		panic(err)
	}
	return m, tok, func() { m.Close(); os.RemoveAll(dir) }
}

// sft trains ad for steps supervised steps to answer every prompt with
// reply (the stop token appended): a LoRA fine-tune with ForwardBackward
// and the adapter's own optimizer.
func sft(m *hf.Model, tok *hf.Tokenizer, ad *hf.LoRA, prompts [][]int, reply string, steps int) (first, last float64) {
	target := append(tok.Encode(reply), tok.StopTokens()...)
	seqs := make([]hf.Seq, len(prompts))
	for i, p := range prompts {
		seqs[i] = hf.Seq{Prompt: p, Target: target}
	}
	opt := nn.NewAdamW(nn.Constant(1e-2), 0)
	for s := 0; s < steps; s++ {
		loss, err := m.ForwardBackward(ad, seqs, hf.CrossEntropy)
		if err != nil {
			panic(err)
		}
		opt.Update(ad.Params())
		ad.Store.ZeroGrad()
		if s == 0 {
			first = loss
		}
		last = loss
	}
	return first, last
}

// greeter is a new adapter of m trained for steps supervised steps to
// answer the conversation "Greet me." with "hi", with the conversation and
// its prompt.
func greeter(m *hf.Model, tok *hf.Tokenizer, steps int) (*hf.LoRA, []hf.Message, []int) {
	ad, err := hf.NewLoRA(m, hf.LoRAConfig{Rank: 8, Seed: 1})
	if err != nil {
		panic(err)
	}
	conv := []hf.Message{{Role: "user", Content: "Greet me."}}
	prompt, err := tok.ApplyChatTemplate(conv, true)
	if err != nil {
		panic(err)
	}
	sft(m, tok, ad, [][]int{prompt}, "hi", steps)
	return ad, conv, prompt
}

// A prompt from messages is one call: the model's chat template renders
// them and the tokenizer encodes the text. StopTokens are the ids that
// end the assistant's turn, which Generate needs in its options.
func ExampleTokenizer_ApplyChatTemplate() {
	dir := writeTinyModel(1)
	defer os.RemoveAll(dir)
	tok, err := hf.LoadTokenizer(dir)
	if err != nil {
		panic(err)
	}
	ids, err := tok.ApplyChatTemplate([]hf.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Hi!"},
	}, true)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d ids: %q\n", len(ids), tok.Decode(ids, false))
	fmt.Println("stop tokens:", tok.StopTokens())
	// Output:
	// 41 ids: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
	// stop tokens: [258]
}

// Generate samples continuations of token prompts and records the
// log-probability of every sampled token, the behaviour log-probabilities
// RL needs; TokenLogProbs scores the same tokens again.
func ExampleModel_Generate() {
	m, tok, done := loadTiny(1)
	defer done()
	prompt, err := tok.ApplyChatTemplate([]hf.Message{{Role: "user", Content: "Count to three."}}, true)
	if err != nil {
		panic(err)
	}
	gens, err := m.Generate(context.Background(), nil, [][]int{prompt, prompt},
		textgen.GenerateOptions{Temperature: 1, MaxTokens: 12, Seed: 7, StopTokens: tok.StopTokens()}, nil)
	if err != nil {
		panic(err)
	}
	for i, g := range gens {
		scored, err := m.TokenLogProbs(nil, []hf.Seq{{Prompt: prompt, Target: g.Tokens}})
		if err != nil {
			panic(err)
		}
		agree := len(g.LogProbs) == len(g.Tokens)
		for j := range g.Tokens {
			agree = agree && math.Abs(float64(g.LogProbs[j]-scored[0][j])) < 1e-4
		}
		fmt.Printf("generation %d: at most 12 tokens: %v, log-probs agree with TokenLogProbs: %v\n", i, len(g.Tokens) <= 12, agree)
	}
	// Output:
	// generation 0: at most 12 tokens: true, log-probs agree with TokenLogProbs: true
	// generation 1: at most 12 tokens: true, log-probs agree with TokenLogProbs: true
}

// One supervised LoRA step: ForwardBackward scores the target tokens,
// hands their log-probabilities to the loss (here CrossEntropy) and
// accumulates the loss's gradient into the adapter's matrices; the
// adapter's optimizer applies it. The base is never written. A GRPO step
// is the same with rl's loss (package rl/policies.LoRA wraps these calls
// as an rl.Policy); both may train one adapter, each step's gradients
// cleared by ZeroGrad before the next.
func ExampleModel_ForwardBackward() {
	m, tok, done := loadTiny(1)
	defer done()
	ad, err := hf.NewLoRA(m, hf.LoRAConfig{Rank: 8, Seed: 1})
	if err != nil {
		panic(err)
	}
	prompt, err := tok.ApplyChatTemplate([]hf.Message{{Role: "user", Content: "Greet me."}}, true)
	if err != nil {
		panic(err)
	}
	seqs := []hf.Seq{{Prompt: prompt, Target: append(tok.Encode("hi"), tok.StopTokens()...)}}
	before := m.Checksum()
	opt := nn.NewAdamW(nn.Constant(1e-2), 0)
	loss0, err := m.ForwardBackward(ad, seqs, hf.CrossEntropy)
	if err != nil {
		panic(err)
	}
	opt.Update(ad.Params())
	ad.Store.ZeroGrad()
	logp, err := m.TokenLogProbs(ad, seqs)
	if err != nil {
		panic(err)
	}
	loss1, _ := hf.CrossEntropy(logp)
	fmt.Printf("loss %.1f (a uniform guess: ln 259 = %.1f)\n", loss0, math.Log(259))
	fmt.Println("lower after one step:", loss1 < loss0)
	fmt.Println("base unchanged:", m.Checksum() == before)
	// Output:
	// loss 6.5 (a uniform guess: ln 259 = 5.6)
	// lower after one step: true
	// base unchanged: true
}

// Chat renders each conversation with the chat template, generates with
// the adapter until a stop token of the tokenizer, and decodes the
// answer. Here a LoRA adapter is first taught to answer "hi" (greeter:
// supervised steps as in the ForwardBackward example).
func ExampleModel_Chat() {
	m, tok, done := loadTiny(1)
	defer done()
	ad, conv, _ := greeter(m, tok, 80)
	replies, err := m.Chat(context.Background(), tok, ad, [][]hf.Message{conv}, textgen.GenerateOptions{MaxTokens: 16})
	if err != nil {
		panic(err)
	}
	r := replies[0]
	fmt.Printf("%q, finish reason %s, %d tokens (the last is <|im_end|>: %v)\n", r.Text, r.FinishReason, len(r.Tokens), r.Tokens[len(r.Tokens)-1] == 258)
	// Output:
	// "hi", finish reason stop, 3 tokens (the last is <|im_end|>: true)
}

// Save writes an adapter in PEFT's layout (adapter_config.json and
// adapter_model.safetensors, which PEFT's PeftModel.from_pretrained
// reads); LoadLoRA reads it back onto the same base, with the same
// log-probabilities bit for bit.
func ExampleLoRA_Save() {
	m, tok, done := loadTiny(1)
	defer done()
	ad, _, prompt := greeter(m, tok, 3)
	dir, err := os.MkdirTemp("", "adapter")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	if err := ad.Save(dir, "tiny-qwen3"); err != nil {
		panic(err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, n := range names {
		fmt.Println(filepath.Base(n))
	}
	back, err := hf.LoadLoRA(m, dir)
	if err != nil {
		panic(err)
	}
	seqs := []hf.Seq{{Prompt: prompt, Target: tok.Encode("hello")}}
	a, _ := m.TokenLogProbs(ad, seqs)
	b, _ := m.TokenLogProbs(back, seqs)
	same := true
	for i := range a[0] {
		same = same && a[0][i] == b[0][i]
	}
	fmt.Println("rank", back.Config.Rank, "- identical log-probs:", same)
	// Output:
	// adapter_config.json
	// adapter_model.safetensors
	// rank 8 - identical log-probs: true
}
