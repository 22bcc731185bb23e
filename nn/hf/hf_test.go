package hf

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/textgen"
)

// tinyConfigs are small configurations of each architecture, each with the
// switches that set it apart: Qwen2's q/k/v biases and tied embeddings,
// Qwen3's per-head norms and a head width other than hidden/heads, Llama's
// Llama-3 RoPE scaling and separate lm_head, Mistral's sliding window.
func tinyConfigs() map[string]Config {
	base := Config{Vocab: 300, Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Intermediate: 96,
		MaxPos: 128, RMSEps: 1e-6, RopeTheta: 10000, BOS: []int{1}, EOS: []int{2}}
	q2 := base
	q2.Arch, q2.QKVBias, q2.Tied, q2.RopeTheta = "qwen2", true, true, 1000000
	q3 := base
	q3.Arch, q3.QKNorm, q3.HeadDim, q3.Tied = "qwen3", true, 32, true
	ll := base
	ll.Arch, ll.KVHeads = "llama", 1
	ll.RopeScaling = &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 64}
	mi := base
	mi.Arch, mi.SlidingWindow = "mistral", 12
	return map[string]Config{"qwen2": q2, "qwen3": q3, "llama": ll, "mistral": mi}
}

func writeTiny(t testing.TB, c Config, seed uint64, opt WriteOptions) string {
	t.Helper()
	dir := t.TempDir()
	if opt.InitStd == 0 {
		opt.InitStd = 0.15
	}
	if err := WriteRandom(dir, c, seed, opt); err != nil {
		t.Fatal(err)
	}
	return dir
}

func loadTiny(t testing.TB, dir string) *Model {
	t.Helper()
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func randomIDs(rng *rand.Rand, n, vocab int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(vocab)
	}
	return ids
}

// torchLogProbs runs the independent float32 PyTorch forward written from
// Hugging Face's modelling equations (benchmarks/compare/hf.py).
func torchLogProbs(t *testing.T, dir string, ids []int) []float32 {
	t.Helper()
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		t.Skipf("PyTorch reference unavailable (%s -c 'import torch': %v); scripts/install-test-deps.sh installs it", py, err)
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	cmd := exec.Command(py, "../../benchmarks/compare/hf.py", "logprobs", "--model-dir", dir, "--ids", strings.Join(s, ","))
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("reference: %v\n%s", err, stderr)
	}
	var res struct{ LogProbs []float32 }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("reference output %q: %v", out, err)
	}
	return res.LogProbs
}

// TestLogProbsMatchPyTorch: the bar of the pretrained-model work. Tiny
// random bf16 checkpoints of every architecture give log-probabilities
// within 5e-3 of an independent float32 PyTorch forward.
func TestLogProbsMatchPyTorch(t *testing.T) {
	for name, c := range tinyConfigs() {
		t.Run(name, func(t *testing.T) {
			dir := writeTiny(t, c, 7, WriteOptions{})
			m := loadTiny(t, dir)
			ids := randomIDs(rand.New(rand.NewPCG(3, 4)), 40, c.Vocab)
			got, err := m.TokenLogProbs(nil, []Seq{{Prompt: ids[:1], Target: ids[1:]}})
			if err != nil {
				t.Fatal(err)
			}
			want := torchLogProbs(t, dir, ids)
			if diff := cmp.Diff(want, got[0], cmpopts.EquateApprox(0, 5e-3)); diff != "" {
				t.Errorf("log-probs differ from PyTorch (-torch +troupe):\n%s", diff)
			}
			var maxd float64
			for i := range want {
				maxd = math.Max(maxd, math.Abs(float64(want[i]-got[0][i])))
			}
			t.Logf("%s: max |Δ log p| = %.2e over %d positions", name, maxd, len(want))
		})
	}
}

// TestShardedAndF16 loads the same weights from shards and from F16/F32
// files: one reader for every layout.
func TestShardedAndF16(t *testing.T) {
	c := tinyConfigs()["qwen2"]
	ids := randomIDs(rand.New(rand.NewPCG(5, 6)), 20, c.Vocab)
	seq := []Seq{{Prompt: ids[:3], Target: ids[3:]}}
	ref, err := loadTiny(t, writeTiny(t, c, 9, WriteOptions{DType: safetensors.F32})).TokenLogProbs(nil, seq)
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []WriteOptions{{DType: safetensors.F32, Shards: 3}, {DType: safetensors.F16}, {DType: safetensors.BF16, Shards: 2}} {
		got, err := loadTiny(t, writeTiny(t, c, 9, opt)).TokenLogProbs(nil, seq)
		if err != nil {
			t.Fatal(err)
		}
		tol := 1e-5
		if opt.DType != safetensors.F32 {
			tol = 2e-2 // rounding the weights to 16 bits
		}
		if diff := cmp.Diff(ref, got, cmpopts.EquateApprox(0, tol)); diff != "" {
			t.Errorf("%+v: log-probs differ from the float32 file:\n%s", opt, diff)
		}
	}
}

// TestGenerateMatchesScoring: the KV-cache decoder's log-probabilities of
// its own tokens equal the training path's for the same tokens, batched
// prompts of different lengths give each prompt's solo result, and a
// temperature-sampled run is reproducible from its seed.
func TestGenerateMatchesScoring(t *testing.T) {
	for name, c := range tinyConfigs() {
		t.Run(name, func(t *testing.T) {
			m := loadTiny(t, writeTiny(t, c, 11, WriteOptions{}))
			ad := testAdapter(t, m, 2)
			rng := rand.New(rand.NewPCG(1, 2))
			prompts := [][]int{randomIDs(rng, 5, c.Vocab), randomIDs(rng, 17, c.Vocab), randomIDs(rng, 1, c.Vocab)}
			for _, temp := range []float64{0, 1} {
				opts := textgen.GenerateOptions{MaxTokens: 20, Temperature: temp, Seed: 42, TopLogProbs: 3}
				gens, err := m.Generate(context.Background(), ad, prompts, opts, nil)
				if err != nil {
					t.Fatal(err)
				}
				for i, g := range gens {
					if len(g.Tokens) != 20 || g.FinishReason != "length" {
						t.Fatalf("prompt %d: %d tokens, finish %q", i, len(g.Tokens), g.FinishReason)
					}
					lp, err := m.TokenLogProbs(ad, []Seq{{Prompt: prompts[i], Target: g.Tokens}})
					if err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff(lp[0], g.LogProbs, cmpopts.EquateApprox(0, 1e-4)); diff != "" {
						t.Errorf("T=%g prompt %d: generation log-probs differ from scoring:\n%s", temp, i, diff)
					}
					solo, err := m.Generate(context.Background(), ad, [][]int{prompts[i]}, opts, nil)
					if err != nil {
						t.Fatal(err)
					}
					if temp == 0 && !cmp.Equal(solo[0].Tokens, g.Tokens) {
						t.Errorf("prompt %d: batched greedy tokens %v differ from solo %v", i, g.Tokens, solo[0].Tokens)
					}
				}
			}
		})
	}
}

// testAdapter makes an adapter whose B matrices are random (PEFT starts
// them at zero), so that it changes the model.
func testAdapter(t testing.TB, m *Model, seed uint64) *LoRA {
	t.Helper()
	ad, err := NewLoRA(m, LoRAConfig{Rank: 4, Alpha: 8, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	for _, p := range ad.Params() {
		if strings.Contains(p.Name, "lora_B") {
			for i := range p.Data() {
				p.Data()[i] = float32(0.05 * rng.NormFloat64())
			}
		}
	}
	return ad
}

// TestLoRAGradients checks the adapter gradients of the cross-entropy
// against central finite differences of the loss, in float64 on a float32
// model, for every projection of every architecture.
func TestLoRAGradients(t *testing.T) {
	for name, c := range tinyConfigs() {
		t.Run(name, func(t *testing.T) {
			m := loadTiny(t, writeTiny(t, c, 13, WriteOptions{DType: safetensors.F32}))
			ad := testAdapter(t, m, 3)
			rng := rand.New(rand.NewPCG(7, 8))
			seqs := []Seq{{Prompt: randomIDs(rng, 6, c.Vocab), Target: randomIDs(rng, 9, c.Vocab)},
				{Prompt: randomIDs(rng, 2, c.Vocab), Target: randomIDs(rng, 4, c.Vocab)}}
			// Two entries per matrix keep the test quick.
			checked := checkGradients(t, m, ad, seqs, func(p *nn.Param) []int {
				return []int{rng.IntN(len(p.Data())), rng.IntN(len(p.Data()))}
			})
			t.Logf("%s: %d gradient entries checked", name, checked)
		})
	}
}

// checkGradients compares the adapter's gradients of the cross-entropy of
// seqs with central finite differences of the loss at the entries that
// entries picks of each parameter, and returns how many it checked.
func checkGradients(t *testing.T, m *Model, ad *LoRA, seqs []Seq, entries func(p *nn.Param) []int) int {
	t.Helper()
	lossAt := func() float64 {
		lp, err := m.TokenLogProbs(ad, seqs)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := CrossEntropy(lp)
		return l
	}
	ad.Store.ZeroGrad()
	if _, err := m.ForwardBackward(ad, seqs, CrossEntropy); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, p := range ad.Params() {
		for _, i := range entries(p) {
			w := p.Data()
			orig := w[i]
			const h = 1e-2
			w[i] = orig + h
			lp := lossAt()
			w[i] = orig - h
			lm := lossAt()
			w[i] = orig
			num := (lp - lm) / (2 * h)
			got := float64(p.Grad[i])
			if math.Abs(num-got) > 2e-3+0.05*math.Abs(num) {
				t.Errorf("%s[%d]: gradient %.6g, finite difference %.6g", p.Name, i, got, num)
			}
			checked++
		}
	}
	return checked
}

// TestBadCheckpoints: every malformed model directory is a returned error
// naming what is wrong, never a panic.
func TestBadCheckpoints(t *testing.T) {
	c := tinyConfigs()["qwen2"]
	good := writeTiny(t, c, 1, WriteOptions{})
	cases := []struct {
		name   string
		mutate func(dir string) error
		want   string
	}{
		{"unsupported architecture", func(dir string) error {
			return rewriteConfig(dir, func(m map[string]any) { m["architectures"] = []string{"GPT2LMHeadModel"} })
		}, `unsupported architecture "GPT2LMHeadModel"`},
		{"unsupported activation", func(dir string) error {
			return rewriteConfig(dir, func(m map[string]any) { m["hidden_act"] = "gelu" })
		}, `unsupported hidden_act "gelu"`},
		{"unsupported rope scaling", func(dir string) error {
			return rewriteConfig(dir, func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 4} })
		}, `unsupported rope_scaling type "yarn"`},
		{"wrong shape", func(dir string) error {
			return rewriteConfig(dir, func(m map[string]any) { m["intermediate_size"] = 100 })
		}, "intermediate_size is 100, but model.layers.0.mlp.gate_proj.weight has 96 rows"},
		{"missing tensor", func(dir string) error {
			return rewriteConfig(dir, func(m map[string]any) { m["tie_word_embeddings"] = false })
		}, "missing tensor lm_head.weight"},
		{"truncated weights", func(dir string) error {
			p := filepath.Join(dir, "model.safetensors")
			st, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.Truncate(p, st.Size()-100)
		}, "model.safetensors"},
		{"no config", func(dir string) error { return os.Remove(filepath.Join(dir, "config.json")) }, "config.json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := copyDir(good, dir); err != nil {
				t.Fatal(err)
			}
			if err := tc.mutate(dir); err != nil {
				t.Fatal(err)
			}
			m, err := Load(dir)
			if err == nil {
				m.Close()
				t.Fatalf("Load succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func rewriteConfig(dir string, f func(map[string]any)) error {
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	f(m)
	if b, err = json.Marshal(m); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

func copyDir(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func TestConfigRoundTrip(t *testing.T) {
	for name, c := range tinyConfigs() {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseConfig(b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		c.DType = got.DType
		if diff := cmp.Diff(c, got); diff != "" {
			t.Errorf("%s: config round trip (-want +got):\n%s", name, diff)
		}
	}
}

// TestConfigForms: config.json as different transformers releases write it
// (rope_theta and rope_scaling, or rope_parameters; torch_dtype or dtype).
func TestConfigForms(t *testing.T) {
	older := `{"architectures":["LlamaForCausalLM"],"vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,
		"num_attention_heads":2,"num_key_value_heads":1,"max_position_embeddings":64,"rms_norm_eps":1e-5,"rope_theta":500000.0,
		"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},
		"tie_word_embeddings":false,"torch_dtype":"bfloat16","eos_token_id":[1,2],"pretraining_tp":1}`
	newer := `{"architectures":["LlamaForCausalLM"],"vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,
		"num_attention_heads":2,"num_key_value_heads":1,"max_position_embeddings":64,"rms_norm_eps":1e-5,
		"rope_parameters":{"rope_theta":500000.0,"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},
		"tie_word_embeddings":false,"dtype":"bfloat16","eos_token_id":[1,2]}`
	a, err := ParseConfig([]byte(older))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseConfig([]byte(newer))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("the two forms parse differently (-rope_scaling +rope_parameters):\n%s", diff)
	}
	if a.RopeTheta != 500000 || a.RopeScaling == nil || a.RopeScaling.Factor != 8 || a.HeadDim != 4 || !cmp.Equal(a.EOS, []int{1, 2}) {
		t.Errorf("parsed %+v", a)
	}
}

// modulesCases are the ways an adapter can hold copies of the embeddings:
// tied and kept tied (one copy), a tied base untied by two copies, the
// input embedding alone on a tied base (the head stays the base's), and
// both copies of an untied base.
func modulesCases() map[string]struct {
	c   Config
	cfg LoRAConfig
} {
	tc := tinyConfigs()
	type cs = struct {
		c   Config
		cfg LoRAConfig
	}
	return map[string]cs{
		"qwen3-tied":       {tc["qwen3"], LoRAConfig{Rank: 4, Alpha: 8, ModulesToSave: []string{EmbedTokens}, EnsureWeightTying: true}},
		"qwen3-untied":     {tc["qwen3"], LoRAConfig{Rank: 4, Alpha: 8, ModulesToSave: []string{EmbedTokens, LMHead}}},
		"qwen2-embed-only": {tc["qwen2"], LoRAConfig{Rank: 4, Alpha: 8, ModulesToSave: []string{EmbedTokens}}},
		"llama-both":       {tc["llama"], LoRAConfig{Rank: 4, Alpha: 8, ModulesToSave: []string{EmbedTokens, LMHead}}},
	}
}

// modulesAdapter makes an adapter of cfg whose B matrices and embedding
// copies are perturbed, so that it differs from the base everywhere.
func modulesAdapter(t testing.TB, m *Model, cfg LoRAConfig, seed uint64) *LoRA {
	t.Helper()
	cfg.Seed = seed
	ad, err := NewLoRA(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	for _, p := range ad.Params() {
		if strings.Contains(p.Name, "lora_A") {
			continue
		}
		for i := range p.Data() {
			p.Data()[i] += float32(0.05 * rng.NormFloat64())
		}
	}
	return ad
}

// TestModulesToSaveGradients checks the gradients of the embedding and
// output-projection copies (and the LoRA matrices beside them) against
// central finite differences of the cross-entropy.
func TestModulesToSaveGradients(t *testing.T) {
	for name, tc := range modulesCases() {
		t.Run(name, func(t *testing.T) {
			c := tc.c
			m := loadTiny(t, writeTiny(t, c, 13, WriteOptions{DType: safetensors.F32}))
			ad := modulesAdapter(t, m, tc.cfg, 3)
			rng := rand.New(rand.NewPCG(7, 8))
			seqs := []Seq{{Prompt: randomIDs(rng, 6, c.Vocab), Target: randomIDs(rng, 9, c.Vocab)},
				{Prompt: randomIDs(rng, 2, c.Vocab), Target: randomIDs(rng, 4, c.Vocab)}}
			H := c.Hidden
			copies := 0
			checkGradients(t, m, ad, seqs, func(p *nn.Param) []int {
				if p != ad.embed && p != ad.head {
					return []int{rng.IntN(len(p.Data()))}
				}
				copies++
				// Rows the pass reads (input tokens) and scores (targets),
				// and one it only normalises over.
				var idx []int
				for _, tok := range []int{seqs[0].Prompt[2], seqs[1].Prompt[0], seqs[0].Target[3], rng.IntN(c.Vocab)} {
					idx = append(idx, tok*H+rng.IntN(H))
				}
				return idx
			})
			want := len(tc.cfg.ModulesToSave)
			if tc.cfg.EnsureWeightTying {
				want = 1
			}
			if copies != want {
				t.Errorf("%d embedding copies among the parameters, want %d", copies, want)
			}
		})
	}
}

// TestModulesToSaveRoundTrip: an adapter with embedding copies, saved in
// PEFT's layout and loaded back, gives identical log-probabilities; merged
// by Export and loaded as a plain model, the same up to float32 rounding;
// and generation (the decoder's per-adapter output projection) scores its
// tokens as TokenLogProbs does.
func TestModulesToSaveRoundTrip(t *testing.T) {
	for name, tc := range modulesCases() {
		t.Run(name, func(t *testing.T) {
			c := tc.c
			m := loadTiny(t, writeTiny(t, c, 5, WriteOptions{}))
			ad := modulesAdapter(t, m, tc.cfg, 4)
			rng := rand.New(rand.NewPCG(3, 4))
			seqs := []Seq{{Prompt: randomIDs(rng, 7, c.Vocab), Target: randomIDs(rng, 11, c.Vocab)}}
			want, err := m.TokenLogProbs(ad, seqs)
			if err != nil {
				t.Fatal(err)
			}
			base, _ := m.TokenLogProbs(nil, seqs)
			if cmp.Equal(want, base, cmpopts.EquateApprox(0, 1e-3)) {
				t.Fatal("the adapter does not change the model")
			}

			dir := t.TempDir()
			if err := ad.Save(dir, "tiny"); err != nil {
				t.Fatal(err)
			}
			f, err := safetensors.Open(filepath.Join(dir, "adapter_model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			names := f.Names()
			f.Close()
			for _, mod := range tc.cfg.ModulesToSave {
				n := map[string]string{EmbedTokens: peftEmbedName, LMHead: peftHeadName}[mod]
				if tc.cfg.EnsureWeightTying {
					n = peftEmbedName
				}
				if !strings.Contains(strings.Join(names, " "), n) {
					t.Errorf("saved tensors %v lack %s", names, n)
				}
			}
			back, err := LoadLoRA(m, dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.TokenLogProbs(back, seqs)
			if err != nil {
				t.Fatal(err)
			}
			if !cmp.Equal(want, got) {
				t.Errorf("reloaded adapter's log-probs differ:\n%s", cmp.Diff(want, got))
			}
			if (back.head == back.embed) != (ad.head == ad.embed) {
				t.Errorf("reloaded adapter's tying differs")
			}

			out := t.TempDir()
			if err := m.Export(out, ad, WriteOptions{DType: safetensors.F32}); err != nil {
				t.Fatal(err)
			}
			merged := loadTiny(t, out)
			if merged.Config.Tied != (c.Tied && !ad.unties()) {
				t.Errorf("exported model: tied %v, want %v", merged.Config.Tied, c.Tied && !ad.unties())
			}
			got, err = merged.TokenLogProbs(nil, seqs)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-4)); d != "" {
				t.Errorf("merged model's log-probs differ from the adapter's:\n%s", d)
			}

			gens, err := m.Generate(context.Background(), back, [][]int{seqs[0].Prompt}, textgen.GenerateOptions{MaxTokens: 8}, nil)
			if err != nil {
				t.Fatal(err)
			}
			lp, err := m.TokenLogProbs(back, []Seq{{Prompt: seqs[0].Prompt, Target: gens[0].Tokens}})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(lp[0], gens[0].LogProbs, cmpopts.EquateApprox(0, 1e-4)); d != "" {
				t.Errorf("generation log-probs differ from scoring:\n%s", d)
			}
		})
	}
}
