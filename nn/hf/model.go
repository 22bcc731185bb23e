package hf

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"
	"unsafe"

	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/tensor"
)

// Matrix is a frozen weight of Rows×Cols (a Linear weight is out×in, as
// Hugging Face stores it), kept in its checkpoint's storage format: 16-bit
// weights stay 16-bit (often a view into the memory-mapped file) and the
// kernels widen them while they read them.
type Matrix struct {
	Rows, Cols int
	// Half holds the bit patterns of a BF16 or F16 weight (Format); F32 a
	// float32 weight. Exactly one is set.
	Half   []uint16
	Format tensor.Half
	F32    []float32
}

// MulT computes y = x·Wᵀ + beta·y for the m rows of x (m×Cols): the
// Linear layer's forward product.
func (w *Matrix) MulT(y, x []float32, m int, beta float32) {
	if w.F32 != nil {
		tensor.Gemm(false, true, m, w.Rows, w.Cols, 1, x, w.Cols, w.F32, w.Cols, beta, y, w.Rows)
		return
	}
	tensor.GemmHalf(true, m, w.Rows, w.Cols, 1, x, w.Cols, w.Half, w.Cols, w.Format, beta, y, w.Rows)
}

// Mul computes dx = dy·W + beta·dx for the m rows of dy (m×Rows): the
// gradient of MulT with respect to its input.
func (w *Matrix) Mul(dx, dy []float32, m int, beta float32) {
	if w.F32 != nil {
		tensor.Gemm(false, false, m, w.Cols, w.Rows, 1, dy, w.Rows, w.F32, w.Cols, beta, dx, w.Cols)
		return
	}
	tensor.GemmHalf(false, m, w.Cols, w.Rows, 1, dy, w.Rows, w.Half, w.Cols, w.Format, beta, dx, w.Cols)
}

// Row widens row i into dst (len Cols): an embedding lookup.
func (w *Matrix) Row(dst []float32, i int) {
	if w.F32 != nil {
		copy(dst, w.F32[i*w.Cols:(i+1)*w.Cols])
		return
	}
	tensor.HalfToFloat32(dst[:w.Cols], w.Half[i*w.Cols:(i+1)*w.Cols], w.Format)
}

// Float32s returns the weight widened to float32 (a copy).
func (w *Matrix) Float32s() []float32 {
	if w.F32 != nil {
		return append([]float32(nil), w.F32...)
	}
	out := make([]float32, len(w.Half))
	tensor.HalfToFloat32(out, w.Half, w.Format)
	return out
}

// Proj names the seven projections of a decoder block, the modules that
// LoRA adapts.
type Proj int

// The projections, in the order of a block's forward pass.
const (
	QProj Proj = iota
	KProj
	VProj
	OProj
	GateProj
	UpProj
	DownProj
	numProj
)

// projModules are the module paths of the projections inside a layer.
var projModules = [numProj]string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}

// String is the module name PEFT's target_modules use (q_proj, ...).
func (p Proj) String() string {
	if p < 0 || p >= numProj {
		return "Proj(" + strconv.Itoa(int(p)) + ")"
	}
	m := projModules[p]
	for i := len(m) - 1; i >= 0; i-- {
		if m[i] == '.' {
			return m[i+1:]
		}
	}
	return m
}

// shape returns a projection's out×in shape.
func (c Config) projShape(p Proj) (out, in int) {
	switch p {
	case QProj:
		return c.QDim(), c.Hidden
	case KProj, VProj:
		return c.KVDim(), c.Hidden
	case OProj:
		return c.Hidden, c.QDim()
	case GateProj, UpProj:
		return c.Intermediate, c.Hidden
	default:
		return c.Hidden, c.Intermediate
	}
}

// hasBias reports whether the architecture gives projection p a bias.
func (c Config) hasBias(p Proj) bool {
	switch p {
	case QProj, KProj, VProj:
		return c.QKVBias
	case OProj:
		return c.OBias
	default:
		return c.MLPBias
	}
}

type layer struct {
	inNorm, postNorm []float32
	qNorm, kNorm     []float32 // QKNorm only
	proj             [numProj]Matrix
	bias             [numProj][]float32 // nil where the architecture has none
}

// Model is a pretrained decoder-only language model (Qwen2, Qwen3, Llama,
// Mistral) with frozen weights. It is safe for concurrent use: generation
// and training keep their state outside it, and several LoRA adapters can
// share one Model.
type Model struct {
	Config Config
	embed  Matrix
	norm   []float32
	head   *Matrix // &embed when tied
	layers []layer
	rope   *rope
	closer io.Closer
}

// Load loads a Hugging Face model directory: config.json and
// model.safetensors, or the shards of model.safetensors.index.json. 16-bit
// weights stay 16-bit, read into memory as safetensors.LoadDir does (into
// 2 MiB pages on Linux, which decoding, a pass over every weight per
// token, streams faster than the page cache's 4 KiB pages); norms and
// biases are widened to float32. A missing tensor, or one whose shape or
// dtype does not fit the config, is an error naming it and both shapes.
// The config is compared with the shapes in the weights' headers before
// anything is made to its size, so a config.json that disagrees with its
// weights (num_hidden_layers 1e8 beside two layers) is an error naming the
// field, its value and what the weights hold, not an out-of-memory crash.
func Load(dir string) (*Model, error) {
	c, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	st, err := safetensors.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	m, err := fromTensors(c, st)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("hf: %s: %w", dir, err)
	}
	m.closer = st
	return m, nil
}

// Close releases the memory-mapped weights; the Model must not be used
// afterwards.
func (m *Model) Close() error {
	if m.closer == nil {
		return nil
	}
	err := m.closer.Close()
	m.closer = nil
	return err
}

// tensorSource is what fromTensors reads: a safetensors directory.
type tensorSource interface {
	Tensor(name string) (safetensors.Tensor, bool)
	Names() []string
}

// checkWeights compares the config with the weights' shapes, as their
// headers declare them: the embedding's rows and columns, the number of
// layers, and the widths of the first layer's projections and norms. A
// tensor that is missing is left for fromTensors to report.
func checkWeights(c Config, st tensorSource) error {
	const embed = "model.embed_tokens.weight"
	t, ok := st.Tensor(embed)
	if !ok {
		return fmt.Errorf("%w %s (want shape [%d %d])", errMissing, embed, c.Vocab, c.Hidden)
	}
	if len(t.Shape) != 2 {
		return fmt.Errorf("tensor %s has shape %v, want [vocab_size hidden_size] = [%d %d]", embed, t.Shape, c.Vocab, c.Hidden)
	}
	if t.Shape[0] != c.Vocab {
		return fmt.Errorf("config.json: vocab_size is %d, but %s has %d rows (shape %v)", c.Vocab, embed, t.Shape[0], t.Shape)
	}
	if t.Shape[1] != c.Hidden {
		return fmt.Errorf("config.json: hidden_size is %d, but %s has %d columns (shape %v)", c.Hidden, embed, t.Shape[1], t.Shape)
	}
	seen := map[int]bool{}
	last := -1
	for _, name := range st.Names() {
		rest, ok := strings.CutPrefix(name, "model.layers.")
		if !ok {
			continue
		}
		idx, _, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(idx)
		if err != nil || n < 0 || strconv.Itoa(n) != idx {
			return fmt.Errorf("tensor %s: layer index %q is not a number", name, idx)
		}
		seen[n] = true
		last = max(last, n)
	}
	if len(seen) != c.Layers || last != c.Layers-1 {
		return fmt.Errorf("config.json: num_hidden_layers is %d, but the weights hold %d layers, numbered up to %d", c.Layers, len(seen), last)
	}
	rows := func(name string) (int, bool) {
		t, ok := st.Tensor("model.layers.0." + name)
		if !ok || len(t.Shape) == 0 {
			return 0, false
		}
		return t.Shape[0], true
	}
	if n, ok := rows("self_attn.q_proj.weight"); ok && n != c.QDim() {
		return fmt.Errorf("config.json: num_attention_heads %d × head_dim %d is %d, but model.layers.0.self_attn.q_proj.weight has %d rows", c.Heads, c.HeadDim, c.QDim(), n)
	}
	if n, ok := rows("self_attn.k_proj.weight"); ok && n != c.KVDim() {
		return fmt.Errorf("config.json: num_key_value_heads %d × head_dim %d is %d, but model.layers.0.self_attn.k_proj.weight has %d rows", c.KVHeads, c.HeadDim, c.KVDim(), n)
	}
	if n, ok := rows("mlp.gate_proj.weight"); ok && n != c.Intermediate {
		return fmt.Errorf("config.json: intermediate_size is %d, but model.layers.0.mlp.gate_proj.weight has %d rows", c.Intermediate, n)
	}
	if n, ok := rows("self_attn.q_norm.weight"); ok && c.QKNorm && n != c.HeadDim {
		return fmt.Errorf("config.json: head_dim is %d, but model.layers.0.self_attn.q_norm.weight has %d entries", c.HeadDim, n)
	}
	return nil
}

func fromTensors(c Config, st tensorSource) (*Model, error) {
	if err := checkWeights(c, st); err != nil {
		return nil, err
	}
	m := &Model{Config: c, layers: make([]layer, c.Layers)}
	var err error
	if m.embed, err = matrix(st, "model.embed_tokens.weight", c.Vocab, c.Hidden); err != nil {
		return nil, err
	}
	if m.norm, err = vector(st, "model.norm.weight", c.Hidden); err != nil {
		return nil, err
	}
	if c.Tied {
		m.head = &m.embed
	} else {
		h, err := matrix(st, "lm_head.weight", c.Vocab, c.Hidden)
		if err != nil {
			return nil, err
		}
		m.head = &h
	}
	for i := range m.layers {
		L := &m.layers[i]
		pre := "model.layers." + strconv.Itoa(i) + "."
		if L.inNorm, err = vector(st, pre+"input_layernorm.weight", c.Hidden); err != nil {
			return nil, err
		}
		if L.postNorm, err = vector(st, pre+"post_attention_layernorm.weight", c.Hidden); err != nil {
			return nil, err
		}
		if c.QKNorm {
			if L.qNorm, err = vector(st, pre+"self_attn.q_norm.weight", c.HeadDim); err != nil {
				return nil, err
			}
			if L.kNorm, err = vector(st, pre+"self_attn.k_norm.weight", c.HeadDim); err != nil {
				return nil, err
			}
		}
		for p := Proj(0); p < numProj; p++ {
			out, in := c.projShape(p)
			if L.proj[p], err = matrix(st, pre+projModules[p]+".weight", out, in); err != nil {
				return nil, err
			}
			if c.hasBias(p) {
				if L.bias[p], err = vector(st, pre+projModules[p]+".bias", out); err != nil {
					return nil, err
				}
			}
		}
	}
	// Last, once head_dim has been checked against the weights.
	m.rope = newRope(c)
	return m, nil
}

var errMissing = errors.New("missing tensor")

func lookup(st tensorSource, name string, shape ...int) (safetensors.Tensor, error) {
	t, ok := st.Tensor(name)
	if !ok {
		return t, fmt.Errorf("%w %s (want shape %v)", errMissing, name, shape)
	}
	if len(t.Shape) != len(shape) {
		return t, fmt.Errorf("tensor %s has shape %v, want %v", name, t.Shape, shape)
	}
	for i := range shape {
		if t.Shape[i] != shape[i] {
			return t, fmt.Errorf("tensor %s has shape %v, want %v", name, t.Shape, shape)
		}
	}
	return t, nil
}

func matrix(st tensorSource, name string, rows, cols int) (Matrix, error) {
	t, err := lookup(st, name, rows, cols)
	if err != nil {
		return Matrix{}, err
	}
	w := Matrix{Rows: rows, Cols: cols}
	switch t.DType {
	case safetensors.BF16, safetensors.F16:
		w.Format = tensor.BF16
		if t.DType == safetensors.F16 {
			w.Format = tensor.F16
		}
		w.Half, err = t.Uint16s()
	case safetensors.F32:
		w.F32, err = t.Float32s()
	default:
		return w, fmt.Errorf("tensor %s has dtype %s, want BF16, F16 or F32", name, t.DType)
	}
	if err != nil {
		return w, fmt.Errorf("tensor %s: %w", name, err)
	}
	return w, nil
}

func vector(st tensorSource, name string, n int) ([]float32, error) {
	t, err := lookup(st, name, n)
	if err != nil {
		return nil, err
	}
	switch t.DType {
	case safetensors.BF16, safetensors.F16, safetensors.F32:
	default:
		return nil, fmt.Errorf("tensor %s has dtype %s, want BF16, F16 or F32", name, t.DType)
	}
	v, err := t.Float32s()
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return v, nil
}

// Checksum is an FNV-1a hash of every weight of the model, bit for bit:
// equal before and after training shows that the base was not written.
func (m *Model) Checksum() uint64 {
	h := fnv.New64a()
	floats := func(v []float32) {
		if len(v) > 0 {
			h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
		}
	}
	mat := func(w *Matrix) {
		if w.F32 != nil {
			floats(w.F32)
		} else if len(w.Half) > 0 {
			h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&w.Half[0])), 2*len(w.Half)))
		}
	}
	mat(&m.embed)
	mat(m.head)
	floats(m.norm)
	for l := range m.layers {
		L := &m.layers[l]
		floats(L.inNorm)
		floats(L.postNorm)
		floats(L.qNorm)
		floats(L.kNorm)
		for p := range L.proj {
			mat(&L.proj[p])
			floats(L.bias[p])
		}
	}
	return h.Sum64()
}
