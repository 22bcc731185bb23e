package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/nn/hf"
)

// TestServePlainOpenAI runs troupe serve on a tiny Qwen3-shaped model with
// the real tokenizer and a LoRA module: /v1/models lists both, chat and
// text completions answer for each (the adapter's answers differ from the
// base's), concurrent requests share engine steps (the batch-size metric),
// and SIGTERM stops it.
func TestServePlainOpenAI(t *testing.T) {
	dir := tinyModel(t)
	base, err := hf.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := hf.NewLoRA(base, hf.LoRAConfig{Rank: 4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ad.Params() {
		for i := range p.Data() {
			p.Data()[i] = float32((i*7919)%13-6) * 0.05
		}
	}
	loraDir := filepath.Join(t.TempDir(), "planner")
	if err := ad.Save(loraDir, "tiny"); err != nil {
		t.Fatal(err)
	}
	base.Close()
	port := freePort(t)
	done := make(chan int, 1)
	go func() {
		done <- runCLI([]string{"serve", dir, "--served-model-name", "tiny", "--lora-modules", "planner=" + loraDir, "--port", fmt.Sprint(port)},
			cmdIO{nil, io.Discard, io.Discard})
	}()
	u := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitFor(t, 60*time.Second, "troupe serve", func() bool {
		resp, err := http.Get(u + "/v1/models")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	resp, err := http.Get(u + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct{ Data []struct{ ID string } }
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 2 || models.Data[0].ID != "tiny" || models.Data[1].ID != "planner" {
		t.Fatalf("models: %+v", models)
	}
	chat := func(model string) string {
		body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 12, "temperature": 0}`, model)
		resp, err := http.Post(u+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Choices []struct{ Message struct{ Content string } }
		}
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Choices) != 1 {
			t.Fatalf("chat %s: status %d", model, resp.StatusCode)
		}
		return r.Choices[0].Message.Content
	}
	if chat("tiny") == chat("planner") {
		t.Error("the adapter answers as the base does")
	}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model": "planner", "prompt": "count %d", "max_tokens": 24, "temperature": 1, "seed": %d}`, i, i)
			resp, err := http.Post(u+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("completion %d: %v %v", i, err, resp)
				return
			}
			resp.Body.Close()
		}()
	}
	wg.Wait()
	resp, err = http.Get(u + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "troupe_engine_batch_sequences_bucket") || strings.Contains(string(metrics), `troupe_engine_batch_sequences_bucket{le="1",model="tiny"} `+countLine(string(metrics))) {
		t.Errorf("no step ran several sequences:\n%s", grepLines(string(metrics), "troupe_engine_batch_sequences"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-ctx.Done():
		t.Fatal("serve did not stop on SIGTERM")
	}
}

// countLine is the value of troupe_engine_batch_sequences_count.
func countLine(metrics string) string {
	for _, l := range strings.Split(metrics, "\n") {
		if rest, ok := strings.CutPrefix(l, `troupe_engine_batch_sequences_count{model="tiny"} `); ok {
			return rest
		}
	}
	return "?"
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
