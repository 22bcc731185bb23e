package hf

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/tensor"
)

// WriteOptions controls how a model directory is written.
type WriteOptions struct {
	// DType of the matrices and vectors: safetensors.BF16 (default), F16
	// or F32.
	DType safetensors.DType
	// InitStd is WriteRandom's standard deviation of matrix entries
	// (default 0.02, Hugging Face's initializer_range). Tests of tiny
	// models raise it so that logits and attention vary enough for a wrong
	// equation to show.
	InitStd float64
	// Shards, when above 1, splits the weights over that many files listed
	// in model.safetensors.index.json, as large checkpoints are published.
	Shards int
}

// Export writes the model, with the adapter (may be nil) merged into its
// weights (W + s·B·A, and its copies of the modules to save in place of
// the base's), as a Hugging Face model directory: config.json and
// model.safetensors. transformers and Load read it back. An adapter that
// unties a tied base's embeddings (a copy of one of them) is written as
// an untied model, with lm_head.weight and tie_word_embeddings false.
func (m *Model) Export(dir string, ad *LoRA, opt WriteOptions) error {
	c := m.Config
	if ad.unties() {
		c.Tied = false
	}
	named := weights{}
	named.add("model.embed_tokens.weight", m.embedMatrix(ad).Float32s(), c.Vocab, c.Hidden)
	named.add("model.norm.weight", m.norm, c.Hidden)
	if !c.Tied {
		named.add("lm_head.weight", m.headMatrix(ad).Float32s(), c.Vocab, c.Hidden)
	}
	for l := range m.layers {
		L := &m.layers[l]
		pre := "model.layers." + strconv.Itoa(l) + "."
		named.add(pre+"input_layernorm.weight", L.inNorm, c.Hidden)
		named.add(pre+"post_attention_layernorm.weight", L.postNorm, c.Hidden)
		if c.QKNorm {
			named.add(pre+"self_attn.q_norm.weight", L.qNorm, c.HeadDim)
			named.add(pre+"self_attn.k_norm.weight", L.kNorm, c.HeadDim)
		}
		for p := Proj(0); p < numProj; p++ {
			w := L.proj[p].Float32s()
			out, in := c.projShape(p)
			if mod := ad.module(l, p); mod != nil {
				tensor.Gemm(false, false, out, in, ad.Config.Rank, ad.scale, mod.B.Data(), ad.Config.Rank, mod.A.Data(), in, 1, w, in)
			}
			named.add(pre+projModules[p]+".weight", w, out, in)
			if b := L.bias[p]; b != nil {
				named.add(pre+projModules[p]+".bias", b, out)
			}
		}
	}
	return writeModel(dir, c, named, opt)
}

// WriteRandom writes a model directory with weights drawn from seed, for
// tests and benchmarks (no weights can be downloaded where they run):
// matrices and biases N(0, InitStd²) (Hugging Face's initialisation),
// norm weights near one.
func WriteRandom(dir string, c Config, seed uint64, opt WriteOptions) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	std := opt.InitStd
	if std == 0 {
		std = 0.02
	}
	normal := func(n int, mean, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(mean + std*rng.NormFloat64())
		}
		return v
	}
	named := weights{}
	named.add("model.embed_tokens.weight", normal(c.Vocab*c.Hidden, 0, std), c.Vocab, c.Hidden)
	named.add("model.norm.weight", normal(c.Hidden, 1, 0.1), c.Hidden)
	if !c.Tied {
		named.add("lm_head.weight", normal(c.Vocab*c.Hidden, 0, std), c.Vocab, c.Hidden)
	}
	for l := 0; l < c.Layers; l++ {
		pre := "model.layers." + strconv.Itoa(l) + "."
		named.add(pre+"input_layernorm.weight", normal(c.Hidden, 1, 0.1), c.Hidden)
		named.add(pre+"post_attention_layernorm.weight", normal(c.Hidden, 1, 0.1), c.Hidden)
		if c.QKNorm {
			named.add(pre+"self_attn.q_norm.weight", normal(c.HeadDim, 1, 0.1), c.HeadDim)
			named.add(pre+"self_attn.k_norm.weight", normal(c.HeadDim, 1, 0.1), c.HeadDim)
		}
		for p := Proj(0); p < numProj; p++ {
			out, in := c.projShape(p)
			named.add(pre+projModules[p]+".weight", normal(out*in, 0, std), out, in)
			if c.hasBias(p) {
				named.add(pre+projModules[p]+".bias", normal(out, 0, std), out)
			}
		}
	}
	return writeModel(dir, c, named, opt)
}

// writeModel writes config.json and the named weights.
// weights are named weights with their shapes, as they are written.
type weights map[string]weight

type weight struct {
	shape []int
	data  []float32
}

func (w weights) add(name string, data []float32, shape ...int) { w[name] = weight{shape, data} }

func writeModel(dir string, c Config, named weights, opt WriteOptions) error {
	if opt.DType == "" {
		opt.DType = safetensors.BF16
	}
	switch opt.DType {
	case safetensors.BF16, safetensors.F16, safetensors.F32:
	default:
		return fmt.Errorf("hf: cannot write weights as %s (want BF16, F16 or F32)", opt.DType)
	}
	c.DType = map[safetensors.DType]string{safetensors.BF16: "bfloat16", safetensors.F16: "float16", safetensors.F32: "float32"}[opt.DType]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), c); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	var tensors []safetensors.Tensor
	for name, w := range named {
		shape, v := w.shape, w.data
		switch opt.DType {
		case safetensors.F32:
			tensors = append(tensors, safetensors.FromFloat32(name, shape, v))
		case safetensors.BF16:
			h := make([]uint16, len(v))
			tensor.Float32sToBF16(h, v)
			tensors = append(tensors, safetensors.FromHalf(name, opt.DType, shape, h))
		case safetensors.F16:
			h := make([]uint16, len(v))
			tensor.Float32sToF16(h, v)
			tensors = append(tensors, safetensors.FromHalf(name, opt.DType, shape, h))
		}
	}
	meta := map[string]string{"format": "pt"}
	if opt.Shards <= 1 {
		return writeTensors(filepath.Join(dir, "model.safetensors"), tensors, meta)
	}
	// Shards: tensors dealt round-robin in name order, and the index.
	slices.SortFunc(tensors, func(a, b safetensors.Tensor) int { return strings.Compare(a.Name, b.Name) })
	weightMap := map[string]string{}
	var total int
	for s := 0; s < opt.Shards; s++ {
		file := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, opt.Shards)
		var part []safetensors.Tensor
		for i := s; i < len(tensors); i += opt.Shards {
			part = append(part, tensors[i])
			weightMap[tensors[i].Name] = file
			total += len(tensors[i].Data)
		}
		if err := writeTensors(filepath.Join(dir, file), part, meta); err != nil {
			return err
		}
	}
	return writeJSON(filepath.Join(dir, "model.safetensors.index.json"), map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap})
}

func writeTensors(path string, tensors []safetensors.Tensor, meta map[string]string) error {
	if err := writeFileAtomic(path, func(f *os.File) error { return safetensors.Write(f, tensors, meta) }); err != nil {
		return fmt.Errorf("hf: writing %s: %w", path, err)
	}
	return nil
}
