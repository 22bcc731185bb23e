package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Config holds every hyper-parameter of a run, its defaults chosen on the
// validation split. -config and -set change fields by their `key` tags, so
// that a report's settings block alone reproduces its run.
type Config struct {
	// Models: the small one plays agents 1 and 3, the larger one agent 2.
	SmallDim    int `key:"small-dim"`
	SmallLayers int `key:"small-layers"` // 3: agent 3 must copy, which 2 layers learn far more slowly
	SmallCopy   int `key:"small-copy"`   // pointer (copy) head width (nn.LMConfig.CopyDim; 0: none)
	LargeDim    int `key:"large-dim"`
	LargeLayers int `key:"large-layers"`
	LargeCopy   int `key:"large-copy"`
	MaxLen      int `key:"max-len"` // context length of both models
	Vocab       int `key:"vocab"`   // BPE vocabulary size

	// Data: the longest sentences used, and what the report evaluates.
	MaxEn     int    `key:"max-en"`     // bytes of English
	MaxZh     int    `key:"max-zh"`     // characters of the Chinese reference
	EvalN     int    `key:"eval-n"`     // sentences evaluated (0: all)
	EvalSplit string `key:"eval-split"` // test, or val to choose settings without looking at test

	// Warm start (supervised).
	WarmSteps      int     `key:"warm-steps"`       // small model's steps
	CopySteps      int     `key:"copy-steps"`       // of those, the first on agent 3's copy task alone
	LargeWarmSteps int     `key:"large-warm-steps"` // larger model's steps
	WarmBatch      int     `key:"warm-batch"`
	WarmLR         float64 `key:"warm-lr"`     // peak learning rate (AdamW, warm-up and cosine decay)
	FinalFrac      float64 `key:"final-frac"`  // share of agent 3's examples in the small model's mix
	Pseudo         float64 `key:"pseudo"`      // share of those on pseudo-rough texts (copy training)
	RoughTasks     int     `key:"rough-tasks"` // train sentences agent 1 translates for agents 2 and 3's data (0: all)

	// RL: GRPO on each server, plain SGD (steps in proportion to the
	// gradient) with a k3 KL penalty to the warm start.
	Steps       int     `key:"steps"`         // GRPO steps per server (the miniatures; lora-steps with pretrained models)
	Batch       int     `key:"batch"`         // tasks per step
	Repeats     int     `key:"repeats"`       // episodes per task (the GRPO group)
	RLLR        float64 `key:"rl-lr"`         // small model's learning rate
	RLLRLarge   float64 `key:"rl-lr-large"`   // larger model's
	KLSmall     float64 `key:"kl-small"`      // KL coefficient β of the small model
	KLLarge     float64 `key:"kl-large"`      // and of the larger one
	HardFrac    float64 `key:"hard-frac"`     // share of each batch from error-prone sentences
	RLTemp      float64 `key:"rl-temp"`       // sampling temperature of agents 1 and 3
	RLTempLarge float64 `key:"rl-temp-large"` // and of agent 2

	// Pretrained Hugging Face models (both, or neither) instead of the warm
	// starts: the small one for agents 1 and 3, each trained through LoRA.
	SmallModelDir string  `key:"small-model-dir"`
	LargeModelDir string  `key:"large-model-dir"`
	LoRALR        float64 `key:"lora-lr"`       // AdamW learning rate of the small one's LoRA adapter (rank 16)
	LoRALRLarge   float64 `key:"lora-lr-large"` // and of the larger one's
	// GRPO steps per server on this path; the learning rates warm up over
	// the first twentieth and decay by a cosine to a tenth at the last.
	LoRASteps int `key:"lora-steps"`
	// -export-hf's Qwen3-shaped models (hidden width, layers; both roles)
	// and their warm starts' steps (small; larger), on the warm start's data.
	HFDim        int `key:"hf-dim"`
	HFLayers     int `key:"hf-layers"`
	HFSteps      int `key:"hf-steps"`
	HFLargeSteps int `key:"hf-large-steps"`

	Seed   uint64 `key:"seed"`    // data order, initialisation, warm start
	RLSeed uint64 `key:"rl-seed"` // RL phase alone (0: seed), to repeat RL from one cached warm start
}

// DefaultConfig is the full run's configuration.
func DefaultConfig() Config {
	return Config{
		SmallDim: 64, SmallLayers: 3, SmallCopy: 32, LargeDim: 96, LargeLayers: 3, LargeCopy: 32, MaxLen: 128, Vocab: 768,
		MaxEn: 48, MaxZh: 24, EvalSplit: "test",
		WarmSteps: 4000, CopySteps: 1500, LargeWarmSteps: 1000, WarmBatch: 16, WarmLR: 3e-3, FinalFrac: 0.4, Pseudo: 0.5,
		Steps: 100, Batch: 4, Repeats: 8, RLLR: 0.05, RLLRLarge: 0.1, KLSmall: 0.2, KLLarge: 0.1, HardFrac: 0.5, RLTemp: 1, RLTempLarge: 0.5,
		LoRALR: 1e-3, LoRALRLarge: 3e-4, LoRASteps: 200, HFDim: 128, HFLayers: 3, HFSteps: 2000, HFLargeSteps: 700,
		Seed: 1,
	}
}

// QuickConfig is -quick's: tiny models, warm enough for rewards that differ in a group.
func QuickConfig() Config {
	c := DefaultConfig()
	c.SmallDim, c.SmallLayers, c.SmallCopy, c.LargeDim, c.LargeLayers, c.LargeCopy = 32, 1, 8, 32, 1, 8
	c.MaxLen, c.Vocab, c.MaxEn, c.MaxZh, c.EvalN = 96, 320, 32, 16, 16
	c.WarmSteps, c.CopySteps, c.LargeWarmSteps, c.WarmBatch, c.RoughTasks = 300, 100, 150, 8, 32
	c.Steps, c.LoRASteps, c.Batch, c.Repeats = 4, 4, 2, 4
	c.HFDim, c.HFLayers, c.HFSteps, c.HFLargeSteps = 32, 1, 60, 30
	return c
}

// fields maps each key (a field's `key` tag) to the field.
func (c *Config) fields() map[string]reflect.Value {
	v := reflect.ValueOf(c).Elem()
	m := make(map[string]reflect.Value, v.NumField())
	for i := range v.NumField() {
		m[v.Type().Field(i).Tag.Get("key")] = v.Field(i)
	}
	return m
}

// Set sets the field of key from its text form.
func (c *Config) Set(key, value string) error {
	f, ok := c.fields()[key]
	if !ok {
		return fmt.Errorf("unknown key %q (keys: %s)", key, strings.Join(c.Keys(), ", "))
	}
	value = strings.TrimSpace(value)
	var err error
	switch p := f.Addr().Interface().(type) {
	case *int:
		*p, err = strconv.Atoi(value)
	case *uint64:
		*p, err = strconv.ParseUint(value, 10, 64)
	case *float64:
		*p, err = strconv.ParseFloat(value, 64)
	case *string:
		*p = strings.Trim(value, `"'`)
	}
	if err != nil {
		return fmt.Errorf("key %s: %w", key, err)
	}
	return nil
}

// Keys are the configuration's keys, sorted.
func (c *Config) Keys() []string { return slices.Sorted(maps.Keys(c.fields())) }

// String writes the configuration as a run file, "key: value" lines.
func (c *Config) String() string {
	var b strings.Builder
	f := c.fields()
	for _, k := range c.Keys() {
		fmt.Fprintf(&b, "%s: %v\n", k, f[k].Interface())
	}
	return b.String()
}

// LoadFile applies a run file: a JSON object, or "key: value" lines as
// String writes them (a flat YAML map; "#" starts a comment).
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if t := strings.TrimSpace(string(b)); strings.HasPrefix(t, "{") {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("config %s: %w", path, err)
		}
		for k, v := range m {
			if err := c.Set(k, strings.Trim(string(v), `"`)); err != nil {
				return fmt.Errorf("config %s: %w", path, err)
			}
		}
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for line := 1; sc.Scan(); line++ {
		s, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(s) == "" {
			continue
		}
		k, v, ok := strings.Cut(s, ":")
		if !ok {
			return fmt.Errorf("config %s line %d: %q is not \"key: value\"", path, line, s)
		}
		if err := c.Set(strings.TrimSpace(k), v); err != nil {
			return fmt.Errorf("config %s line %d: %w", path, line, err)
		}
	}
	return nil
}

// check refuses values a run cannot use.
func (c *Config) check() error {
	f := c.fields()
	for _, k := range []string{"small-dim", "small-layers", "large-dim", "large-layers", "vocab", "warm-batch", "steps", "lora-steps", "batch", "repeats", "hf-layers", "hf-steps", "hf-large-steps"} {
		if v := f[k].Int(); v < 1 {
			return fmt.Errorf("%s must be at least 1, got %d", k, v)
		}
	}
	if c.HFDim < 4 || c.HFDim%8 != 0 {
		return fmt.Errorf("hf-dim must be a multiple of 8 (four heads of an even width), got %d", c.HFDim)
	}
	if c.MaxLen < 32 {
		return fmt.Errorf("max-len must be at least 32, got %d", c.MaxLen)
	}
	for _, k := range []string{"final-frac", "pseudo", "hard-frac"} {
		if v := f[k].Float(); v < 0 || v > 1 {
			return fmt.Errorf("%s is a fraction in [0, 1], got %g", k, v)
		}
	}
	if c.RLLR < 0 || c.RLLRLarge < 0 || c.LoRALR < 0 || c.LoRALRLarge < 0 || c.KLSmall < 0 || c.KLLarge < 0 || c.RLTemp < 0 || c.RLTempLarge < 0 {
		return fmt.Errorf("learning rates, KL coefficients and temperatures must be at least 0")
	}
	if (c.SmallModelDir == "") != (c.LargeModelDir == "") {
		return fmt.Errorf("small-model-dir and large-model-dir go together: give both, or neither")
	}
	if c.EvalSplit != "test" && c.EvalSplit != "val" {
		return fmt.Errorf("eval-split wants test or val, got %q", c.EvalSplit)
	}
	return nil
}
