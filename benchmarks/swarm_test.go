package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
	"github.com/troupe-ml/troupe/textgen"
)

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[int(p*float64(len(d)-1))].Nanoseconds()) / 1e3
}

func benchServer(b *testing.B) (*swarm.Server, *tabular.Model) {
	m, err := tabular.NewPreset("tiny")
	if err != nil {
		b.Fatal(err)
	}
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat, tc.MaxStaleness = 8, 4, 4
	s, err := swarm.NewServer(swarm.ServerConfig{Model: m, Train: tc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, m
}

const chatTokens = 16

// BenchmarkSwarmEpisode measures the swarm server's own overhead over real
// loopback HTTP with the tiny (bigram, 66k-parameter) model: one op is a
// train episode of claim + N chat completions (16 tokens each) + end, with
// a GRPO step every 32 episodes. It reports requests/s and the client-side
// p50/p99 latency of a chat completion in µs. parallel=P runs P client
// goroutines.
func BenchmarkSwarmEpisode(b *testing.B) {
	for _, n := range []int{1, 8} {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("completions=%d/parallel=%d", n, par), func(b *testing.B) {
				s, _ := benchServer(b)
				ts := httptest.NewServer(s.Handler())
				defer ts.Close()
				tr := &http.Transport{MaxIdleConnsPerHost: 64}
				defer tr.CloseIdleConnections()
				ctx := context.Background()
				var mu sync.Mutex
				var chatLat, allLat []time.Duration
				var requests int
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				per := (b.N + par - 1) / par
				for p := 0; p < par; p++ {
					wg.Add(1)
					go func(p int) {
						defer wg.Done()
						cli := client.New(ts.URL)
						cli.HTTP = &http.Client{Transport: tr}
						cli.Backoff = client.Backoff{Initial: 50 * time.Microsecond, Max: time.Millisecond}
						temp := 1.0
						var cl, al []time.Duration
						reqs := 0
						for i := 0; i < per; i++ {
							t0 := time.Now()
							ep, err := cli.BeginEpisode(ctx, client.BeginOptions{})
							if err != nil {
								b.Error(err)
								return
							}
							al = append(al, time.Since(t0))
							chat := ep.Chat()
							for k := 0; k < n; k++ {
								t0 = time.Now()
								_, err := chat.Create(ctx, api.ChatRequest{Model: "tiny", Messages: []api.Message{{Role: "user", Content: "benchmark prompt"}},
									MaxTokens: chatTokens, Temperature: &temp, Logprobs: true})
								if err != nil {
									b.Error(err)
									return
								}
								d := time.Since(t0)
								cl = append(cl, d)
								al = append(al, d)
							}
							t0 = time.Now()
							if err := cli.EndEpisode(ctx, ep, fmt.Sprint("task", i%8), client.WorkflowResult{Reward: rand.Float64()}); err != nil {
								b.Error(err)
								return
							}
							al = append(al, time.Since(t0))
							reqs += n + 2
						}
						mu.Lock()
						chatLat = append(chatLat, cl...)
						allLat = append(allLat, al...)
						requests += reqs
						mu.Unlock()
					}(p)
				}
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(requests)/el.Seconds(), "requests/s")
				b.ReportMetric(percentile(chatLat, 0.5), "chat-p50-µs")
				b.ReportMetric(percentile(chatLat, 0.99), "chat-p99-µs")
				b.ReportMetric(percentile(allLat, 0.5), "req-p50-µs")
				b.ReportMetric(percentile(allLat, 0.99), "req-p99-µs")
				_, _, step := s.Status()
				b.ReportMetric(float64(step), "train-steps")
			})
		}
	}
}

// BenchmarkSwarmChatHandler isolates the server's work per chat completion
// (JSON decoding, key check, chat template, sampling 16 tokens with the tiny
// model, recording, response encoding) by calling the handler in-process,
// next to the model's sampling alone, so that the server overhead is the
// difference of the two p50s.
func BenchmarkSwarmChatHandler(b *testing.B) {
	s, m := benchServer(b)
	h := s.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/claim_episode", strings.NewReader(`{"client_uuid":"bench","episode_type":"eval","discard_episode_timeout":3600}`)))
	var key string
	for _, part := range strings.Split(rec.Body.String(), `"`) {
		if strings.HasPrefix(part, "sk-troupe-") {
			key = part
		}
	}
	body := []byte(`{"model": "tiny", "messages": [{"role": "user", "content": "benchmark prompt"}], "max_tokens": 16, "temperature": 1.0, "logprobs": true}`)
	b.Run("handler", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			req := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			rec := httptest.NewRecorder()
			t0 := time.Now()
			h.ServeHTTP(rec, req)
			lat = append(lat, time.Since(t0))
			if rec.Code != 200 {
				b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
		b.ReportMetric(percentile(lat, 0.5), "p50-µs")
		b.ReportMetric(percentile(lat, 0.99), "p99-µs")
	})
	b.Run("model-only", func(b *testing.B) {
		prompt, _ := m.ChatPrompt(context.Background(), []api.Message{{Role: "user", Content: "benchmark prompt"}}, nil)
		r := rand.New(rand.NewPCG(1, 2))
		lat := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			m.Generate(context.Background(), [][]int{prompt}, textgen.GenerateOptions{MaxTokens: chatTokens, Temperature: 1, Seed: r.Uint64()}, nil)
			lat = append(lat, time.Since(t0))
		}
		b.ReportMetric(percentile(lat, 0.5), "p50-µs")
		b.ReportMetric(percentile(lat, 0.99), "p99-µs")
	})
}
