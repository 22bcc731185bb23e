package hf

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
type rawConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type,omitempty"`
	VocabSize             int             `json:"vocab_size"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      int             `json:"num_key_value_heads,omitempty"`
	HeadDim               int             `json:"head_dim,omitempty"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeTheta             float64         `json:"rope_theta,omitempty"`
	RopeScaling           json.RawMessage `json:"rope_scaling,omitempty"`
	RopeParameters        json.RawMessage `json:"rope_parameters,omitempty"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings,omitempty"`
	AttentionBias         bool            `json:"attention_bias,omitempty"`
	MLPBias               bool            `json:"mlp_bias,omitempty"`
	HiddenAct             string          `json:"hidden_act,omitempty"`
	UseSlidingWindow      *bool           `json:"use_sliding_window,omitempty"`
	SlidingWindow         *int            `json:"sliding_window,omitempty"`
	BOSTokenID            json.RawMessage `json:"bos_token_id,omitempty"`
	EOSTokenID            json.RawMessage `json:"eos_token_id,omitempty"`
	TorchDType            string          `json:"torch_dtype,omitempty"`
	DType                 string          `json:"dtype,omitempty"`
}

// LoadConfig reads dir/config.json.
func LoadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
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
// or RoPE scaling is an error naming it.
func ParseConfig(b []byte) (Config, error) {
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
	c := Config{
		Arch: arch, Vocab: r.VocabSize, Hidden: r.HiddenSize, Layers: r.NumHiddenLayers,
		Heads: r.NumAttentionHeads, KVHeads: r.NumKeyValueHeads, HeadDim: r.HeadDim,
		Intermediate: r.IntermediateSize, MaxPos: r.MaxPositionEmbeddings, RMSEps: r.RMSNormEps,
		RopeTheta: r.RopeTheta, MLPBias: r.MLPBias, DType: r.TorchDType,
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
		if r.UseSlidingWindow != nil && *r.UseSlidingWindow && r.SlidingWindow != nil {
			c.SlidingWindow = *r.SlidingWindow
		}
	case "qwen3":
		c.QKNorm = true
		c.QKVBias, c.OBias = r.AttentionBias, r.AttentionBias
		if r.UseSlidingWindow != nil && *r.UseSlidingWindow && r.SlidingWindow != nil {
			c.SlidingWindow = *r.SlidingWindow
		}
	case "llama":
		c.QKVBias, c.OBias = r.AttentionBias, r.AttentionBias
	case "mistral":
		if r.SlidingWindow != nil {
			c.SlidingWindow = *r.SlidingWindow
		}
	}
	if len(r.RopeScaling) > 0 && string(r.RopeScaling) != "null" {
		var rs struct {
			RopeScaling
			Type string `json:"type"`
		}
		if err := json.Unmarshal(r.RopeScaling, &rs); err != nil {
			return Config{}, fmt.Errorf("config.json: rope_scaling: %w", err)
		}
		s := rs.RopeScaling
		if s.Type == "" {
			s.Type = rs.Type
		}
		switch s.Type {
		case "default":
		case "llama3", "linear":
			c.RopeScaling = &s
		default:
			return Config{}, fmt.Errorf("config.json: unsupported rope_scaling type %q (supported: llama3, linear)", s.Type)
		}
	}
	var err error
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

// tokenIDs reads an id field that is absent, null, an int or a list of ints.
func tokenIDs(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want an int or a list of ints, got %s", raw)
	}
	return many, nil
}

// Validate checks that the shape is consistent.
func (c Config) Validate() error {
	switch {
	case c.Vocab <= 0 || c.Hidden <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.Intermediate <= 0:
		return fmt.Errorf("config: vocab_size, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim and intermediate_size must be positive: %+v", c)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("config: %d attention heads do not divide into %d key/value heads", c.Heads, c.KVHeads)
	case c.HeadDim%2 != 0:
		return fmt.Errorf("config: rotary positions need an even head_dim, got %d", c.HeadDim)
	case c.MaxPos <= 0:
		return fmt.Errorf("config: max_position_embeddings must be positive, got %d", c.MaxPos)
	case c.RMSEps <= 0 || math.IsNaN(c.RMSEps) || c.RopeTheta <= 0:
		return fmt.Errorf("config: rms_norm_eps %g and rope_theta %g must be positive", c.RMSEps, c.RopeTheta)
	}
	if s := c.RopeScaling; s != nil {
		if s.Factor <= 0 {
			return fmt.Errorf("config: rope_scaling factor must be positive, got %g", s.Factor)
		}
		if s.Type == "llama3" && (s.LowFreqFactor <= 0 || s.HighFreqFactor <= s.LowFreqFactor || s.OriginalMaxPositionEmbeddings <= 0) {
			return fmt.Errorf("config: llama3 rope_scaling needs 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0, got %+v", *s)
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
