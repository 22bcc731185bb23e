package hf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHostileConfigs loads a tiny checkpoint (two layers, vocabulary 300,
// hidden size 64, four heads of 16, two key/value heads, intermediate size
// 96) under config.json files that disagree with it or hold absurd or
// malformed numbers. Each is an error naming the field, returned quickly
// and with little memory: none is allocated to the config's size first.
func TestHostileConfigs(t *testing.T) {
	good := writeTiny(t, tinyConfigs()["qwen2"], 1, WriteOptions{})
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	set := func(kv ...any) func(map[string]any) {
		return func(m map[string]any) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i+1] == nil {
					delete(m, kv[i].(string))
				} else {
					m[kv[i].(string)] = kv[i+1]
				}
			}
		}
	}
	ids := make([]int, 2000)
	cases := []struct {
		name   string
		mutate func(map[string]any)
		want   string
	}{
		{"layers 1e8", set("num_hidden_layers", raw("1e8")), "num_hidden_layers is 1e8, outside [1, 4096]"},
		{"layers 100000000", set("num_hidden_layers", raw("100000000")), "num_hidden_layers is 100000000, outside"},
		{"layers beyond int64", set("num_hidden_layers", raw("123456789012345678901234567890")), "num_hidden_layers is 1234"},
		{"layers 1e400", set("num_hidden_layers", raw("1e400")), "num_hidden_layers is 1e400"},
		{"layers fractional", set("num_hidden_layers", raw("2.5")), "num_hidden_layers is 2.5, not an integer"},
		{"layers a string", set("num_hidden_layers", "2"), `num_hidden_layers is "2", not a number`},
		{"layers negative", set("num_hidden_layers", -1), "num_hidden_layers is -1, outside"},
		{"layers zero", set("num_hidden_layers", 0), "num_hidden_layers is 0, outside"},
		{"layers missing", set("num_hidden_layers", nil), "num_hidden_layers is missing"},
		{"layers more than the weights", set("num_hidden_layers", 3), "num_hidden_layers is 3, but the weights hold 2 layers"},
		{"layers fewer than the weights", set("num_hidden_layers", 1), "num_hidden_layers is 1, but the weights hold 2 layers"},
		{"vocab absurd", set("vocab_size", raw("1e12")), "vocab_size is 1e12, outside"},
		{"vocab not the weights'", set("vocab_size", 301), "vocab_size is 301, but model.embed_tokens.weight has 300 rows"},
		{"hidden absurd", set("hidden_size", raw("1099511627776")), "hidden_size is 1099511627776, outside"},
		{"hidden not the weights'", set("hidden_size", 128, "head_dim", 32), "hidden_size is 128, but model.embed_tokens.weight has 64 columns"},
		{"intermediate absurd", set("intermediate_size", raw("1e15")), "intermediate_size is 1e15, outside"},
		{"intermediate not the weights'", set("intermediate_size", 100), "intermediate_size is 100, but model.layers.0.mlp.gate_proj.weight has 96 rows"},
		{"heads not dividing hidden", set("num_attention_heads", 3, "num_key_value_heads", 1, "head_dim", nil), "num_attention_heads 3 does not divide hidden_size 64"},
		{"heads not the weights'", set("num_attention_heads", 8), "num_attention_heads 8 × head_dim 16 is 128, but model.layers.0.self_attn.q_proj.weight has 64 rows"},
		{"heads absurd", set("num_attention_heads", raw("1e9")), "num_attention_heads is 1e9, outside"},
		{"head_dim not the weights'", set("head_dim", 32), "num_attention_heads 4 × head_dim 32 is 128, but model.layers.0.self_attn.q_proj.weight has 64 rows"},
		{"head_dim absurd", set("head_dim", raw("4e9")), "head_dim is 4e9, outside"},
		{"head_dim odd", set("head_dim", 15), "even head_dim"},
		{"kv heads not the weights'", set("num_key_value_heads", 4), "num_key_value_heads 4 × head_dim 16 is 64, but model.layers.0.self_attn.k_proj.weight has 32 rows"},
		{"kv heads not dividing heads", set("num_key_value_heads", 3), "do not divide"},
		{"positions absurd", set("max_position_embeddings", raw("1e12")), "max_position_embeddings is 1e12, outside"},
		{"sliding window absurd", set("sliding_window", raw("1e15")), "sliding_window is 1e15, outside"},
		{"rope_theta negative", set("rope_theta", -1), "rope_theta is -1"},
		{"rope_theta overflowing", set("rope_theta", raw("1e999")), "rope_theta"},
		{"rms_norm_eps negative", set("rms_norm_eps", -1e-6), "rms_norm_eps is -1e-06"},
		{"rope factor zero", set("rope_scaling", map[string]any{"rope_type": "linear", "factor": 0}), "rope_scaling factor is 0"},
		{"rope original positions absurd", set("rope_scaling", map[string]any{"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
			"high_freq_factor": 4, "original_max_position_embeddings": raw("1e12")}), "original_max_position_embeddings is 1e12, outside"},
		{"rope original positions fractional", set("rope_scaling", map[string]any{"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
			"high_freq_factor": 4, "original_max_position_embeddings": 8192.5}), "not an integer"},
		{"eos ids many", set("eos_token_id", ids), "2000 ids, more than 1024"},
		{"eos id negative", set("eos_token_id", -5), "id -5 is outside"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := copyDir(good, dir); err != nil {
				t.Fatal(err)
			}
			if err := rewriteConfig(dir, tc.mutate); err != nil {
				t.Fatal(err)
			}
			loadFails(t, dir, tc.want)
		})
	}

	// Literal NaN, as Python's json writes it, is not JSON.
	t.Run("rope_theta NaN", func(t *testing.T) {
		dir := t.TempDir()
		if err := copyDir(good, dir); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "config.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		nan := strings.Replace(string(b), `"rope_theta": 1000000`, `"rope_theta": NaN`, 1)
		if nan == string(b) {
			t.Fatalf("config.json has no rope_theta of 1000000:\n%s", b)
		}
		b = []byte(nan)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		loadFails(t, dir, "config.json")
	})
	// A config.json of 2 GB (sparse) is refused unread.
	t.Run("config.json of 2 GB", func(t *testing.T) {
		dir := t.TempDir()
		if err := copyDir(good, dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(filepath.Join(dir, "config.json"), 2<<30); err != nil {
			t.Skipf("cannot make a sparse file: %v", err)
		}
		loadFails(t, dir, "more than the 16777216")
	})
	// An integral float where an integer is expected is that integer.
	t.Run("layers 2.0", func(t *testing.T) {
		dir := t.TempDir()
		if err := copyDir(good, dir); err != nil {
			t.Fatal(err)
		}
		if err := rewriteConfig(dir, set("num_hidden_layers", raw("2.0"), "vocab_size", raw("3e2"))); err != nil {
			t.Fatal(err)
		}
		m := loadTiny(t, dir)
		if m.Config.Layers != 2 || m.Config.Vocab != 300 {
			t.Errorf("layers %d, vocab %d, want 2 and 300", m.Config.Layers, m.Config.Vocab)
		}
	})
}

// loadFails checks that Load of dir fails with an error containing want,
// within a generous time and allocating less than 64 MiB.
func loadFails(t *testing.T, dir, want string) {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	m, err := Load(dir)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if err == nil {
		m.Close()
		t.Fatalf("Load succeeded, want an error containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("allocated %d MiB before failing", grew>>20)
	}
	if took > 10*time.Second {
		t.Errorf("took %v to fail", took)
	}
}

// TestHostileAdapterConfig: an adapter_config.json whose rank disagrees
// with its weights is an error naming it, before matrices of that rank are
// made.
func TestHostileAdapterConfig(t *testing.T) {
	m := loadTiny(t, writeTiny(t, tinyConfigs()["qwen2"], 1, WriteOptions{}))
	ad, err := NewLoRA(m, LoRAConfig{Rank: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	good := t.TempDir()
	if err := ad.Save(good, "tiny"); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadLoRA(m, good); err != nil {
		t.Fatalf("the saved adapter does not load: %v", err)
	}
	for _, r := range []int{1_000_000_000, 8} {
		dir := t.TempDir()
		if err := copyDir(good, dir); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "adapter_config.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		cfg["r"] = r
		if b, err = json.Marshal(cfg); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = LoadLoRA(m, dir)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "has r "+strconv.Itoa(r)) {
			t.Errorf("r %d: error %v, want one naming r", r, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Errorf("r %d: allocated %d MiB before failing", r, grew>>20)
		}
	}
}
