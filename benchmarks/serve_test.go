package benchmarks

// BenchmarkServe measures the rollout serving path end to end: real HTTP on
// loopback, a swarm server per agent over one pretrained base (Qwen2.5-0.5B
// shapes, random bf16 weights, Qwen's real tokenizer and chat template)
// whose agents share one textgen.Engine, one thread (GOMAXPROCS=1, as a
// server on one core). Every client claims its own episode, streams one
// chat completion of 32 tokens and ends the episode (eval episodes: no
// training runs during the measurement). It reports the aggregate
// completion tokens/s and the client-side time to first token (p50, p99).
//
//	GOMAXPROCS=1 go test ./benchmarks -run '^$' -bench 'Serve' -benchtime 2x
//
// The offline reference is BenchmarkHFDecode (batch=1 against batch=8):
// what batching gives without HTTP, streams and scheduling.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/hfmodel"
	"github.com/troupe-ml/troupe/textgen"
)

const serveTokens = 32

// serveModelDir is a random qwen2-0.5b checkpoint with Qwen's tokenizer
// (fetched by scripts/fetch-hf-refs.sh), written once.
func serveModelDir(b *testing.B) string {
	b.Helper()
	dir := filepath.Join(os.TempDir(), "troupe-bench", "qwen2-0.5b-bf16")
	hfModel(b, "qwen2-0.5b") // writes the weights once
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		return dir
	}
	out, err := exec.Command("bash", "../scripts/fetch-hf-refs.sh").CombinedOutput()
	if err != nil {
		b.Skipf("Qwen's tokenizer is unavailable (scripts/fetch-hf-refs.sh: %v): %s", err, out)
	}
	if err := hf.CopyTokenizer(filepath.Join("..", "data", "hf", "tokenizer-qwen3", "models"), dir); err != nil {
		b.Fatal(err)
	}
	return dir
}

func BenchmarkServe(b *testing.B) {
	for _, c := range []struct{ agents, clients int }{{1, 1}, {1, 8}, {1, 32}, {2, 8}} {
		name := fmt.Sprintf("qwen2-0.5b/clients=%d", c.clients)
		if c.agents > 1 {
			name = fmt.Sprintf("qwen2-0.5b/agents=%d/clients=%d", c.agents, c.clients)
		}
		b.Run(name, func(b *testing.B) { benchServe(b, c.agents, c.clients) })
	}
}

func benchServe(b *testing.B, agents, clients int) {
	dir := serveModelDir(b)
	oneThread(b)
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	base, err := hf.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer base.Close()
	tok, err := hf.LoadTokenizer(dir)
	if err != nil {
		b.Fatal(err)
	}
	engine := hfmodel.NewEngine(base, textgen.EngineConfig{KVCacheBytes: 4 << 30})
	defer engine.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var urls []string
	for a := range agents {
		m, _, err := hfmodel.New(hfmodel.Config{Name: fmt.Sprintf("agent-%d", a), Base: base, Tokenizer: tok, Engine: engine,
			LoRAConfig: hf.LoRAConfig{Rank: 16, Seed: uint64(a + 1)}})
		if err != nil {
			b.Fatal(err)
		}
		s, err := swarm.NewServer(swarm.ServerConfig{Model: m, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Start(); err != nil {
			b.Fatal(err)
		}
		ts := httptest.NewServer(s.Handler())
		defer ts.Close()
		defer s.Close()
		urls = append(urls, ts.URL)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	var mu sync.Mutex
	var ttft []time.Duration
	tokens := 0
	round := func(warm bool) {
		var wg sync.WaitGroup
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cli := client.New(urls[i%len(urls)])
				cli.HTTP = &http.Client{Transport: tr, Timeout: 10 * time.Minute}
				n, first, err := streamEpisode(cli, i)
				if err != nil {
					b.Error(err)
					return
				}
				if !warm {
					mu.Lock()
					tokens += n
					ttft = append(ttft, first)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	round(true) // touches the memory-mapped weights
	b.ResetTimer()
	for range b.N {
		round(false)
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(percentile(ttft, 0.5)/1e3, "ttft-p50-ms")
	b.ReportMetric(percentile(ttft, 0.99)/1e3, "ttft-p99-ms")
}

// streamEpisode claims an eval episode, streams one completion of
// serveTokens tokens and ends the episode; it returns the completion's
// tokens and the time to its first content chunk.
func streamEpisode(cli *client.Client, i int) (int, time.Duration, error) {
	ctx := context.Background()
	ep, err := cli.BeginEpisode(ctx, client.BeginOptions{Type: api.EpisodeEval})
	if err != nil {
		return 0, 0, err
	}
	body := fmt.Sprintf(`{"model": "m", "messages": [{"role": "user", "content": "Write a short story about client %d and the sea."}], "max_tokens": %d, "temperature": 1, "seed": %d, "stream": true, "stream_options": {"include_usage": true}}`, i, serveTokens, i)
	req, _ := http.NewRequest("POST", ep.BaseURL+"/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+ep.APIKey)
	start := time.Now()
	resp, err := cli.HTTP.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var first time.Duration
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch api.ChatChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return 0, 0, err
		}
		for _, c := range ch.Choices {
			if first == 0 && c.Delta.Content != nil && *c.Delta.Content != "" {
				first = time.Since(start)
			}
		}
		if ch.Usage != nil {
			n = ch.Usage.CompletionTokens
		}
	}
	if err := cli.EndEpisode(ctx, ep, "bench", client.WorkflowResult{Reward: 0}); err != nil {
		return 0, 0, err
	}
	return n, first, sc.Err()
}
