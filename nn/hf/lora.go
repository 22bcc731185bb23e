package hf

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	ts "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/tensor"
)

// LoRAConfig configures low-rank adapters (Hu et al. 2021) with PEFT's
// options: each targeted projection y = x·Wᵀ becomes
// y = x·Wᵀ + (Alpha/Rank)·x·Aᵀ·Bᵀ with A of Rank×in and B of out×Rank.
// Zero fields take the defaults of WithDefaults.
type LoRAConfig struct {
	// Rank is r (DefaultLoRARank when zero).
	Rank int
	// Alpha is lora_alpha (twice the rank when zero, the common choice
	// that keeps the update's scale at 2 whatever the rank).
	Alpha float64
	// Targets are PEFT's target_modules: q_proj, k_proj, v_proj, o_proj,
	// gate_proj, up_proj, down_proj. Empty: all seven.
	Targets []string
	// RSLoRA scales by Alpha/√Rank instead (rank-stabilised LoRA).
	RSLoRA bool
	// Seed seeds A's initialisation.
	Seed uint64
	// ModulesToSave are PEFT's modules_to_save: modules the adapter holds a
	// full trainable copy of, made from the base's weight: "embed_tokens"
	// (the token embedding) and "lm_head" (the output projection). A model
	// whose embedding was never trained, or a vocabulary that must learn new
	// tokens, needs them: no low-rank delta on the projections changes
	// which vectors the tokens are.
	ModulesToSave []string `json:",omitempty"`
	// EnsureWeightTying is PEFT's ensure_weight_tying: on a base with tied
	// embeddings, one copy serves as both embed_tokens and lm_head (saved
	// under embed_tokens' name), so the adapted model stays tied. Without
	// it a copy of one of them unties them, as in PEFT, and Export writes
	// an untied model.
	EnsureWeightTying bool `json:",omitempty"`
}

// DefaultTargets are all seven projections of a block.
var DefaultTargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// DefaultLoRARank is LoRAConfig.Rank when zero.
const DefaultLoRARank = 16

// WithDefaults fills c's zero fields: Rank DefaultLoRARank, Alpha twice the
// rank, Targets DefaultTargets.
func (c LoRAConfig) WithDefaults() LoRAConfig {
	if c.Rank == 0 {
		c.Rank = DefaultLoRARank
	}
	if c.Alpha == 0 {
		c.Alpha = 2 * float64(c.Rank)
	}
	if len(c.Targets) == 0 {
		c.Targets = DefaultTargets
	}
	return c
}

// loraModule is one adapted projection.
type loraModule struct {
	A, B *nn.Param
	// pa and pb, kept by snapshots, are Aᵀ and Bᵀ packed for the
	// products' kernels: packing them at every call took a tenth of
	// decoding's time with an adapter at one row. The results are the
	// same bits either way.
	pa, pb *tensor.PackedB
}

// LoRA is a set of adapters over one Model. Its matrices live in an
// nn.Store, so nn's optimizers and gradient clipping apply to them; the
// base model is never written.
type LoRA struct {
	Config LoRAConfig
	Store  *nn.Store
	// Base is the model the adapter was made for.
	Base  *Model
	mods  [][numProj]*loraModule
	scale float32
	// embed and head are the trainable copies of ModulesToSave (nil: the
	// base's); head == embed when they are tied.
	embed, head *nn.Param
}

// Modules PEFT's modules_to_save may name.
const (
	EmbedTokens = "embed_tokens"
	LMHead      = "lm_head"
)

// PEFT's saved names of the modules_to_save copies.
const (
	peftEmbedName = "base_model.model.model.embed_tokens.weight"
	peftHeadName  = "base_model.model.lm_head.weight"
)

// NewLoRA makes adapters for base (cfg.WithDefaults()), initialised as PEFT does: A from
// Kaiming-uniform (bound 1/√in), B zero, so the adapted model starts equal
// to the base.
func NewLoRA(base *Model, cfg LoRAConfig) (*LoRA, error) {
	cfg = cfg.WithDefaults()
	if cfg.Rank < 0 {
		return nil, fmt.Errorf("hf: LoRA rank must be positive, got %d", cfg.Rank)
	}
	targets := map[Proj]bool{}
	for _, t := range cfg.Targets {
		p, ok := projByName(t)
		if !ok {
			return nil, fmt.Errorf("hf: unknown LoRA target module %q (want one of %s)", t, strings.Join(DefaultTargets, ", "))
		}
		targets[p] = true
	}
	ad := &LoRA{Config: cfg, Store: nn.NewStore(cfg.Seed), Base: base, mods: make([][numProj]*loraModule, base.Config.Layers)}
	ad.scale = float32(cfg.Alpha / float64(cfg.Rank))
	if cfg.RSLoRA {
		ad.scale = float32(cfg.Alpha / math.Sqrt(float64(cfg.Rank)))
	}
	if err := ad.addModulesToSave(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x10a))
	for l := range ad.mods {
		for p := Proj(0); p < numProj; p++ {
			if !targets[p] {
				continue
			}
			out, in := base.Config.projShape(p)
			bound := 1 / math.Sqrt(float64(in))
			a := ad.Store.GetOrCreate(peftName(l, p, "lora_A"), ts.Shape{cfg.Rank, in}, func(_ *rand.Rand, _ ts.Shape, d []float32) {
				for i := range d {
					d[i] = float32((2*rng.Float64() - 1) * bound)
				}
			})
			b := ad.Store.GetOrCreate(peftName(l, p, "lora_B"), ts.Shape{out, cfg.Rank}, nn.Zeros)
			ad.mods[l][p] = &loraModule{A: a, B: b}
		}
	}
	return ad, nil
}

// addModulesToSave makes the trainable copies of the embedding and the
// output projection that Config.ModulesToSave names.
func (ad *LoRA) addModulesToSave() error {
	var embed, head bool
	for _, name := range ad.Config.ModulesToSave {
		switch name {
		case EmbedTokens:
			embed = true
		case LMHead:
			head = true
		default:
			return fmt.Errorf("hf: unsupported module to save %q (want %s or %s)", name, EmbedTokens, LMHead)
		}
	}
	c := ad.Base.Config
	copyOf := func(w *Matrix) nn.Initializer {
		return func(_ *rand.Rand, _ ts.Shape, d []float32) { copy(d, w.Float32s()) }
	}
	if c.Tied && ad.Config.EnsureWeightTying && (embed || head) {
		ad.embed = ad.Store.GetOrCreate(peftEmbedName, ts.Shape{c.Vocab, c.Hidden}, copyOf(&ad.Base.embed))
		ad.head = ad.embed
		return nil
	}
	if embed {
		ad.embed = ad.Store.GetOrCreate(peftEmbedName, ts.Shape{c.Vocab, c.Hidden}, copyOf(&ad.Base.embed))
	}
	if head {
		ad.head = ad.Store.GetOrCreate(peftHeadName, ts.Shape{c.Vocab, c.Hidden}, copyOf(ad.Base.head))
	}
	return nil
}

// embedMatrix is the token embedding under adapter ad (may be nil).
func (m *Model) embedMatrix(ad *LoRA) *Matrix {
	if ad == nil || ad.embed == nil {
		return &m.embed
	}
	return paramMatrix(ad.embed)
}

// headMatrix is the output projection under adapter ad (may be nil).
func (m *Model) headMatrix(ad *LoRA) *Matrix {
	if ad == nil || ad.head == nil {
		return m.head
	}
	return paramMatrix(ad.head)
}

// headParam is ad's trainable output projection, nil for the base's.
func (ad *LoRA) headParam() *nn.Param {
	if ad == nil {
		return nil
	}
	return ad.head
}

// paramMatrix views a Vocab×Hidden parameter as a Matrix (no copy).
func paramMatrix(p *nn.Param) *Matrix {
	sh := p.Shape()
	return &Matrix{Rows: sh[0], Cols: sh[1], F32: p.Data()}
}

// unties reports whether ad makes a tied base's input and output
// embeddings differ.
func (ad *LoRA) unties() bool { return ad != nil && ad.Base.Config.Tied && ad.embed != ad.head }

func projByName(s string) (Proj, bool) {
	for p := Proj(0); p < numProj; p++ {
		if p.String() == s {
			return p, true
		}
	}
	return 0, false
}

// peftName is PEFT's saved name of an adapter matrix
// (base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight).
func peftName(l int, p Proj, which string) string {
	return "base_model.model.model.layers." + strconv.Itoa(l) + "." + projModules[p] + "." + which + ".weight"
}

// module returns the adapter of projection p in layer l, nil when ad is nil
// or p is not targeted.
func (ad *LoRA) module(l int, p Proj) *loraModule {
	if ad == nil {
		return nil
	}
	return ad.mods[l][p]
}

// Params returns the trainable matrices.
func (ad *LoRA) Params() []*nn.Param { return ad.Store.Params() }

// peftConfig is adapter_config.json as PEFT writes it for LoRA.
type peftConfig struct {
	PeftType        string   `json:"peft_type"`
	TaskType        string   `json:"task_type"`
	R               int      `json:"r"`
	LoraAlpha       float64  `json:"lora_alpha"`
	LoraDropout     float64  `json:"lora_dropout"`
	TargetModules   []string `json:"target_modules"`
	Bias            string   `json:"bias"`
	FanInFanOut     bool     `json:"fan_in_fan_out"`
	InferenceMode   bool     `json:"inference_mode"`
	InitLoraWeights bool     `json:"init_lora_weights"`
	UseRSLoRA       bool     `json:"use_rslora"`
	UseDora         bool     `json:"use_dora"`
	ModulesToSave   []string `json:"modules_to_save"`
	EnsureTying     bool     `json:"ensure_weight_tying"`
	BaseModel       string   `json:"base_model_name_or_path"`
	RankPattern     struct{} `json:"rank_pattern"`
	AlphaPattern    struct{} `json:"alpha_pattern"`
}

// Save writes the adapters in PEFT's layout: dir/adapter_config.json and
// dir/adapter_model.safetensors (float32, PEFT's tensor names), which
// PEFT's PeftModel.from_pretrained loads. base names the base model in the
// config (may be empty).
func (ad *LoRA) Save(dir, base string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hf: saving adapter: %w", err)
	}
	targets := slices.Clone(ad.Config.Targets)
	slices.Sort(targets)
	pc := peftConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", R: ad.Config.Rank, LoraAlpha: ad.Config.Alpha,
		TargetModules: targets, Bias: "none", InferenceMode: true, InitLoraWeights: true,
		UseRSLoRA: ad.Config.RSLoRA, BaseModel: base,
		ModulesToSave: ad.Config.ModulesToSave, EnsureTying: ad.Config.EnsureWeightTying}
	if err := writeJSON(filepath.Join(dir, "adapter_config.json"), pc); err != nil {
		return fmt.Errorf("hf: saving adapter: %w", err)
	}
	var tensors []safetensors.Tensor
	for _, p := range ad.Store.Params() {
		tensors = append(tensors, safetensors.FromFloat32(p.Name, slices.Clone([]int(p.Shape())), p.Data()))
	}
	err := writeFileAtomic(filepath.Join(dir, "adapter_model.safetensors"), func(f *os.File) error {
		return safetensors.Write(f, tensors, map[string]string{"format": "pt"})
	})
	if err != nil {
		return fmt.Errorf("hf: saving adapter: %w", err)
	}
	return nil
}

// LoadLoRA reads adapters that Save (or PEFT) wrote for base. Tensor names
// with PEFT's adapter-name infix (….lora_A.default.weight) are accepted.
func LoadLoRA(base *Model, dir string) (*LoRA, error) {
	cb, err := readConfigFile(filepath.Join(dir, "adapter_config.json"))
	if err != nil {
		return nil, fmt.Errorf("hf: loading adapter: %w", err)
	}
	var pc peftConfig
	if err := json.Unmarshal(cb, &pc); err != nil {
		return nil, fmt.Errorf("hf: %s: %w", filepath.Join(dir, "adapter_config.json"), err)
	}
	if pc.PeftType != "LORA" {
		return nil, fmt.Errorf("hf: %s: peft_type %q, want LORA", dir, pc.PeftType)
	}
	if pc.UseDora || pc.FanInFanOut || (pc.Bias != "" && pc.Bias != "none") {
		return nil, fmt.Errorf("hf: %s: unsupported LoRA options (use_dora, fan_in_fan_out or bias)", dir)
	}
	path := filepath.Join(dir, "adapter_model.safetensors")
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	defer f.Close()
	// The rank sizes the adapter's matrices: it is compared with the
	// weights' before they are made.
	for _, n := range f.Names() {
		if t, _ := f.Tensor(n); strings.Contains(n, ".lora_A.") && (len(t.Shape) != 2 || t.Shape[0] != pc.R) {
			return nil, fmt.Errorf("hf: %s: adapter_config.json has r %d, but tensor %s has shape %v", dir, pc.R, n, t.Shape)
		}
	}
	ad, err := NewLoRA(base, LoRAConfig{Rank: pc.R, Alpha: pc.LoraAlpha, Targets: pc.TargetModules, RSLoRA: pc.UseRSLoRA,
		ModulesToSave: pc.ModulesToSave, EnsureWeightTying: pc.EnsureTying})
	if err != nil {
		return nil, fmt.Errorf("hf: %s: %w", dir, err)
	}
	names := map[string]string{}
	for _, n := range f.Names() {
		k := strings.Replace(strings.Replace(n, ".lora_A.default.", ".lora_A.", 1), ".lora_B.default.", ".lora_B.", 1)
		names[strings.Replace(k, ".modules_to_save.default.", ".", 1)] = n
	}
	// A tied copy may have been saved under lm_head's name.
	if _, ok := names[peftEmbedName]; !ok && ad.embed != nil && ad.embed == ad.head {
		if n, ok := names[peftHeadName]; ok {
			names[peftEmbedName] = n
		}
	}
	for _, p := range ad.Store.Params() {
		src, ok := names[p.Name]
		if !ok {
			return nil, fmt.Errorf("hf: %s: missing tensor %s (shape %v)", path, p.Name, p.Shape())
		}
		t, _ := f.Tensor(src)
		if !slices.Equal(t.Shape, []int(p.Shape())) {
			return nil, fmt.Errorf("hf: %s: tensor %s has shape %v, want %v", path, src, t.Shape, p.Shape())
		}
		v, err := t.Float32s()
		if err != nil {
			return nil, fmt.Errorf("hf: %s: tensor %s: %w", path, src, err)
		}
		copy(p.Data(), v)
	}
	return ad, nil
}

// writeJSON writes v as indented JSON to path, atomically.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, func(f *os.File) error {
		_, err := f.Write(append(b, '\n'))
		return err
	})
}

// writeFileAtomic writes path through a temporary file in the same folder,
// synced and renamed, so a crash leaves the old file or the new one.
func writeFileAtomic(path string, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Snapshot returns a frozen copy of the adapter's current matrices, for
// sequences that must keep sampling from one version while the adapter
// trains: a generation engine binds each request to the snapshot that was
// current when it started. The copy has no Store (it cannot be trained or
// saved) and no gradients; it takes two to three times the adapter's
// memory (a copy, and the copy packed for generation's products).
// The caller makes sure that no optimizer step writes the adapter while it
// is copied.
func (ad *LoRA) Snapshot() *LoRA {
	s := &LoRA{Config: ad.Config, Base: ad.Base, mods: make([][numProj]*loraModule, len(ad.mods)), scale: ad.scale}
	frozen := func(p *nn.Param) *nn.Param {
		if p == nil {
			return nil
		}
		v := ts.New(ts.WithShape(p.Shape().Clone()...), ts.WithBacking(slices.Clone(p.Data())))
		return &nn.Param{Name: p.Name, Value: v}
	}
	s.embed, s.head = frozen(ad.embed), frozen(ad.head)
	if ad.head == ad.embed {
		s.head = s.embed
	}
	for l, row := range ad.mods {
		for p, m := range row {
			if m != nil {
				a, b := frozen(m.A), frozen(m.B)
				r := a.Shape()[0]
				s.mods[l][p] = &loraModule{A: a, B: b,
					pa: tensor.PackB(true, a.Shape()[1], r, a.Data(), a.Shape()[1]),
					pb: tensor.PackB(true, r, b.Shape()[0], b.Data(), r)}
			}
		}
	}
	return s
}
