package hf

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Architectures maps the `architectures` names of config.json that troupe
// loads to its own short names. They share one decoder: pre-norm blocks of
// RMSNorm, grouped-query attention with rotary positions and a SwiGLU MLP;
// they differ only in the switches of Config (biases, per-head q/k norms,
// head width, RoPE scaling, sliding window).
var Architectures = map[string]string{
	"Qwen2ForCausalLM":   "qwen2",
	"Qwen3ForCausalLM":   "qwen3",
	"LlamaForCausalLM":   "llama",
	"MistralForCausalLM": "mistral",
}

// RopeScaling is config.json's rope_scaling for the kinds troupe supports:
// "llama3" (Llama 3.1's frequency-dependent interpolation) and "linear"
// (positions divided by Factor).
type RopeScaling struct {
	Type                          string  `json:"rope_type"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor                float64 `json:"high_freq_factor,omitempty"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings,omitempty"`
}

// Config is the shape of a decoder-only Hugging Face language model, read
// from its config.json.
type Config struct {
	// Arch is the short architecture name: qwen2, qwen3, llama or mistral.
	Arch         string
	Vocab        int
	Hidden       int
	Layers       int
	Heads        int
	KVHeads      int
	HeadDim      int
	Intermediate int
	MaxPos       int
	RMSEps       float64
	RopeTheta    float64
	RopeScaling  *RopeScaling
	// Tied: the output projection is the token embedding (no lm_head.weight).
	Tied bool
	// QKVBias: q_proj, k_proj and v_proj have biases (Qwen2 always; Llama
	// and Qwen3 with attention_bias, which also gives o_proj one).
	QKVBias bool
	OBias   bool
	// MLPBias: gate, up and down projections have biases (Llama mlp_bias).
	MLPBias bool
	// QKNorm: per-head RMSNorm of queries and keys before RoPE (Qwen3).
	QKNorm bool
	// SlidingWindow, when positive, limits attention to the last
	// SlidingWindow positions (Mistral).
	SlidingWindow int
	BOS, EOS      []int
	// DType is torch_dtype as written in config.json ("bfloat16", ...).
	DType string
}

// rawConfig is config.json as Hugging Face's configuration classes write it.
// The integer fields are read by intField, which takes an integral float
// (24.0, 1e3, as Python may write one) and refuses any other.
type rawConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type,omitempty"`
	VocabSize             json.RawMessage `json:"vocab_size"`
	HiddenSize            json.RawMessage `json:"hidden_size"`
	IntermediateSize      json.RawMessage `json:"intermediate_size"`
	NumHiddenLayers       json.RawMessage `json:"num_hidden_layers"`
	NumAttentionHeads     json.RawMessage `json:"num_attention_heads"`
	NumKeyValueHeads      json.RawMessage `json:"num_key_value_heads,omitempty"`
	HeadDim               json.RawMessage `json:"head_dim,omitempty"`
	MaxPositionEmbeddings json.RawMessage `json:"max_position_embeddings"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeTheta             float64         `json:"rope_theta,omitempty"`
	RopeScaling           json.RawMessage `json:"rope_scaling,omitempty"`
	RopeParameters        json.RawMessage `json:"rope_parameters,omitempty"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings,omitempty"`
	AttentionBias         bool            `json:"attention_bias,omitempty"`
	MLPBias               bool            `json:"mlp_bias,omitempty"`
	HiddenAct             string          `json:"hidden_act,omitempty"`
	UseSlidingWindow      *bool           `json:"use_sliding_window,omitempty"`
	SlidingWindow         json.RawMessage `json:"sliding_window,omitempty"`
	BOSTokenID            json.RawMessage `json:"bos_token_id,omitempty"`
	EOSTokenID            json.RawMessage `json:"eos_token_id,omitempty"`
	TorchDType            string          `json:"torch_dtype,omitempty"`
	DType                 string          `json:"dtype,omitempty"`
}

// Bounds on config.json, far beyond any real model (Llama 3.1 405B has
// 126 layers, hidden_size 16384, intermediate_size 53248, 128 heads; the
// largest vocabularies are about 262,000 tokens; the longest contexts
// about ten million positions) and low enough that nothing sized by them
// exhausts memory before the weights are compared with them.
const (
	maxConfigFile = 16 << 20 // bytes of config.json or generation_config.json
	maxVocab      = 1 << 24
	maxHidden     = 1 << 17
	maxLayers     = 1 << 12
	maxHeads      = 1 << 12
	maxHeadDim    = 1 << 14
	maxPositions  = 1 << 28
	maxTokenIDs   = 1 << 10 // ids in bos_token_id or eos_token_id
)

// readConfigFile reads a JSON file of the model directory, refusing one
// larger than maxConfigFile without reading it.
func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxConfigFile {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a configuration file may have", path, st.Size(), maxConfigFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfigFile {
		return nil, fmt.Errorf("%s is more than the %d bytes a configuration file may have", path, maxConfigFile)
	}
	return b, nil
}

// intField reads the integer field name of config.json: absent or null is
// 0 when optional and an error otherwise; a number must be an integer
// (written as one or as an integral float, 24.0) in [lo, hi].
func intField(name string, raw json.RawMessage, optional bool, lo, hi int64) (int, error) {
	text := strings.TrimSpace(string(raw))
	if text == "" || text == "null" {
		if optional {
			return 0, nil
		}
		return 0, fmt.Errorf("config.json: %s is missing", name)
	}
	shown := text
	if len(shown) > 40 {
		shown = shown[:40] + "…"
	}
	if !isJSONNumber(text) {
		return 0, fmt.Errorf("config.json: %s is %s, not a number", name, shown)
	}
	var v int64
	if strings.ContainsAny(text, ".eE") {
		f, err := strconv.ParseFloat(text, 64)
		switch {
		case err != nil || math.IsInf(f, 0):
			return 0, fmt.Errorf("config.json: %s is %s, more than %d", name, shown, hi)
		case f != math.Trunc(f):
			return 0, fmt.Errorf("config.json: %s is %s, not an integer", name, shown)
		case f > float64(hi) || f < float64(lo):
			return 0, fmt.Errorf("config.json: %s is %s, outside [%d, %d]", name, shown, lo, hi)
		}
		v = int64(f)
	} else {
		var err error
		if v, err = strconv.ParseInt(text, 10, 64); err != nil {
			return 0, fmt.Errorf("config.json: %s is %s, outside [%d, %d]", name, shown, lo, hi)
		}
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("config.json: %s is %d, outside [%d, %d]", name, v, lo, hi)
	}
	return int(v), nil
}

// isJSONNumber reports whether s is one JSON number.
func isJSONNumber(s string) bool {
	var v any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return false
	}
	_, ok := v.(json.Number)
	return ok && !d.More()
}

// LoadConfig reads dir/config.json.
func LoadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	b, err := readConfigFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("hf: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("hf: %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a config.json. An unsupported architecture, activation
// or RoPE scaling is an error naming it, and so is a field that is not an
// integer where one is expected or is beyond what any model has (the
// bounds above): the file may come from anyone, and nothing is sized by
// it before it is checked.
func ParseConfig(b []byte) (Config, error) {
	if len(b) > maxConfigFile {
		return Config{}, fmt.Errorf("config.json is %d bytes, more than %d", len(b), maxConfigFile)
	}
	var r rawConfig
	if err := json.Unmarshal(b, &r); err != nil {
		return Config{}, fmt.Errorf("parsing config.json: %w", err)
	}
	if len(r.Architectures) != 1 {
		return Config{}, fmt.Errorf("config.json: want one entry in architectures, got %q", r.Architectures)
	}
	arch, ok := Architectures[r.Architectures[0]]
	if !ok {
		return Config{}, fmt.Errorf("config.json: unsupported architecture %q (supported: Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM, MistralForCausalLM)", r.Architectures[0])
	}
	if r.HiddenAct != "" && r.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("config.json: unsupported hidden_act %q (want silu)", r.HiddenAct)
	}
	c := Config{Arch: arch, RMSEps: r.RMSNormEps, RopeTheta: r.RopeTheta, MLPBias: r.MLPBias, DType: r.TorchDType}
	for _, f := range []struct {
		name     string
		raw      json.RawMessage
		dst      *int
		optional bool
		hi       int64
	}{
		{"vocab_size", r.VocabSize, &c.Vocab, false, maxVocab},
		{"hidden_size", r.HiddenSize, &c.Hidden, false, maxHidden},
		{"intermediate_size", r.IntermediateSize, &c.Intermediate, false, maxHidden * 16},
		{"num_hidden_layers", r.NumHiddenLayers, &c.Layers, false, maxLayers},
		{"num_attention_heads", r.NumAttentionHeads, &c.Heads, false, maxHeads},
		{"num_key_value_heads", r.NumKeyValueHeads, &c.KVHeads, true, maxHeads},
		{"head_dim", r.HeadDim, &c.HeadDim, true, maxHeadDim},
		{"max_position_embeddings", r.MaxPositionEmbeddings, &c.MaxPos, false, maxPositions},
	} {
		lo := int64(1)
		if f.optional {
			lo = 0
		}
		v, err := intField(f.name, f.raw, f.optional, lo, f.hi)
		if err != nil {
			return Config{}, err
		}
		*f.dst = v
	}
	window, err := intField("sliding_window", r.SlidingWindow, true, 0, maxPositions)
	if err != nil {
		return Config{}, err
	}
	// Without head_dim the heads split hidden_size evenly, and must.
	if c.HeadDim == 0 && c.Hidden%c.Heads != 0 {
		return Config{}, fmt.Errorf("config.json: num_attention_heads %d does not divide hidden_size %d (and there is no head_dim)", c.Heads, c.Hidden)
	}
	if c.DType == "" {
		c.DType = r.DType
	}
	// Newer transformers releases write rope_theta and the scaling together
	// as rope_parameters.
	if len(r.RopeParameters) > 0 && string(r.RopeParameters) != "null" {
		var rp struct {
			RopeTheta float64 `json:"rope_theta"`
		}
		if err := json.Unmarshal(r.RopeParameters, &rp); err != nil {
			return Config{}, fmt.Errorf("config.json: rope_parameters: %w", err)
		}
		if rp.RopeTheta > 0 {
			c.RopeTheta = rp.RopeTheta
		}
		if len(r.RopeScaling) == 0 || string(r.RopeScaling) == "null" {
			r.RopeScaling = r.RopeParameters
		}
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.RMSEps == 0 {
		c.RMSEps = 1e-6
	}
	// Hugging Face's defaults for tie_word_embeddings differ by class;
	// every supported class defaults to false.
	if r.TieWordEmbeddings != nil {
		c.Tied = *r.TieWordEmbeddings
	}
	switch arch {
	case "qwen2":
		c.QKVBias = true // Qwen2Attention builds q/k/v with bias=True
		if r.UseSlidingWindow != nil && *r.UseSlidingWindow {
			c.SlidingWindow = window
		}
	case "qwen3":
		c.QKNorm = true
		c.QKVBias, c.OBias = r.AttentionBias, r.AttentionBias
		if r.UseSlidingWindow != nil && *r.UseSlidingWindow {
			c.SlidingWindow = window
		}
	case "llama":
		c.QKVBias, c.OBias = r.AttentionBias, r.AttentionBias
	case "mistral":
		c.SlidingWindow = window
	}
	if len(r.RopeScaling) > 0 && string(r.RopeScaling) != "null" {
		var rs struct {
			Type           string          `json:"type"`
			RopeType       string          `json:"rope_type"`
			Factor         float64         `json:"factor"`
			LowFreqFactor  float64         `json:"low_freq_factor"`
			HighFreqFactor float64         `json:"high_freq_factor"`
			OriginalMax    json.RawMessage `json:"original_max_position_embeddings"`
		}
		if err := json.Unmarshal(r.RopeScaling, &rs); err != nil {
			return Config{}, fmt.Errorf("config.json: rope_scaling: %w", err)
		}
		s := RopeScaling{Type: rs.RopeType, Factor: rs.Factor, LowFreqFactor: rs.LowFreqFactor, HighFreqFactor: rs.HighFreqFactor}
		if s.Type == "" {
			s.Type = rs.Type
		}
		if s.OriginalMaxPositionEmbeddings, err = intField("rope_scaling.original_max_position_embeddings", rs.OriginalMax, true, 0, maxPositions); err != nil {
			return Config{}, err
		}
		switch s.Type {
		case "default":
		case "llama3", "linear":
			c.RopeScaling = &s
		default:
			return Config{}, fmt.Errorf("config.json: unsupported rope_scaling type %q (supported: llama3, linear)", s.Type)
		}
	}
	if c.BOS, err = tokenIDs(r.BOSTokenID); err != nil {
		return Config{}, fmt.Errorf("config.json: bos_token_id: %w", err)
	}
	if c.EOS, err = tokenIDs(r.EOSTokenID); err != nil {
		return Config{}, fmt.Errorf("config.json: eos_token_id: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// tokenIDs reads an id field that is absent, null, an int or a list of at
// most maxTokenIDs ints, each in [0, 2³¹).
func tokenIDs(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		raw = json.RawMessage("[" + strconv.Itoa(one) + "]")
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		if len(raw) > 40 {
			raw = append(raw[:40:40], "…"...)
		}
		return nil, fmt.Errorf("want an int or a list of ints, got %s", raw)
	}
	if len(many) > maxTokenIDs {
		return nil, fmt.Errorf("%d ids, more than %d", len(many), maxTokenIDs)
	}
	for _, id := range many {
		if id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("id %d is outside [0, %d]", id, math.MaxInt32)
		}
	}
	return many, nil
}

// Validate checks that the shape is consistent and within the bounds of
// any real model.
func (c Config) Validate() error {
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"vocab_size", c.Vocab, maxVocab},
		{"hidden_size", c.Hidden, maxHidden},
		{"intermediate_size", c.Intermediate, maxHidden * 16},
		{"num_hidden_layers", c.Layers, maxLayers},
		{"num_attention_heads", c.Heads, maxHeads},
		{"num_key_value_heads", c.KVHeads, maxHeads},
		{"head_dim", c.HeadDim, maxHeadDim},
		{"max_position_embeddings", c.MaxPos, maxPositions},
	} {
		if f.v <= 0 || f.v > f.max {
			return fmt.Errorf("config: %s is %d, outside [1, %d]", f.name, f.v, f.max)
		}
	}
	positive := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }
	switch {
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("config: %d attention heads do not divide into %d key/value heads", c.Heads, c.KVHeads)
	case c.HeadDim%2 != 0:
		return fmt.Errorf("config: rotary positions need an even head_dim, got %d", c.HeadDim)
	case c.SlidingWindow < 0 || c.SlidingWindow > maxPositions:
		return fmt.Errorf("config: sliding_window is %d, outside [0, %d]", c.SlidingWindow, maxPositions)
	case !positive(c.RMSEps):
		return fmt.Errorf("config: rms_norm_eps is %g, want a positive finite number", c.RMSEps)
	case !positive(c.RopeTheta):
		return fmt.Errorf("config: rope_theta is %g, want a positive finite number", c.RopeTheta)
	}
	if s := c.RopeScaling; s != nil {
		if !positive(s.Factor) {
			return fmt.Errorf("config: rope_scaling factor is %g, want a positive finite number", s.Factor)
		}
		if s.Type == "llama3" && (!positive(s.LowFreqFactor) || !positive(s.HighFreqFactor) || s.HighFreqFactor <= s.LowFreqFactor ||
			s.OriginalMaxPositionEmbeddings <= 0 || s.OriginalMaxPositionEmbeddings > maxPositions) {
			return fmt.Errorf("config: llama3 rope_scaling needs finite 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings in [1, %d], got %+v", maxPositions, *s)
		}
	}
	return nil
}

// QDim is the width of the concatenated query heads.
func (c Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of the concatenated key (or value) heads.
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim }

// NumParams counts the parameters of the base model.
func (c Config) NumParams() int {
	per := c.Hidden*(c.QDim()+2*c.KVDim()) + c.QDim()*c.Hidden + 3*c.Hidden*c.Intermediate + 2*c.Hidden
	if c.QKVBias {
		per += c.QDim() + 2*c.KVDim()
	}
	if c.OBias {
		per += c.Hidden
	}
	if c.MLPBias {
		per += 2*c.Intermediate + c.Hidden
	}
	if c.QKNorm {
		per += 2 * c.HeadDim
	}
	n := c.Layers*per + c.Vocab*c.Hidden + c.Hidden
	if !c.Tied {
		n += c.Vocab * c.Hidden
	}
	return n
}

// className is the Hugging Face class of the architecture.
func (c Config) className() string {
	for k, v := range Architectures {
		if v == c.Arch {
			return k
		}
	}
	return ""
}

// MarshalJSON writes the config in config.json's form, as Hugging Face's
// configuration classes do, so that transformers and troupe both load it.
func (c Config) MarshalJSON() ([]byte, error) {
	tie := c.Tied
	m := map[string]any{
		"architectures":           []string{c.className()},
		"model_type":              c.Arch,
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"max_position_embeddings": c.MaxPos,
		"rms_norm_eps":            c.RMSEps,
		"rope_theta":              c.RopeTheta,
		"tie_word_embeddings":     tie,
		"hidden_act":              "silu",
		"torch_dtype":             c.DType,
	}
	if c.RopeScaling != nil {
		m["rope_scaling"] = c.RopeScaling
	}
	switch c.Arch {
	case "llama", "qwen3":
		m["attention_bias"] = c.QKVBias
	}
	if c.Arch == "llama" {
		m["mlp_bias"] = c.MLPBias
	}
	if c.SlidingWindow > 0 {
		m["sliding_window"] = c.SlidingWindow
		if c.Arch == "qwen2" || c.Arch == "qwen3" {
			m["use_sliding_window"] = true
		}
	}
	ids := func(v []int) any {
		if len(v) == 1 {
			return v[0]
		}
		return v
	}
	if len(c.BOS) > 0 {
		m["bos_token_id"] = ids(c.BOS)
	}
	if len(c.EOS) > 0 {
		m["eos_token_id"] = ids(c.EOS)
	}
	return json.MarshalIndent(m, "", "  ")
}
