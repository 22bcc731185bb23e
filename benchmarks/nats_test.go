package benchmarks

// Overheads of troupe's distributed engine (NATS JetStream, package bus)
// on loopback: journaling a finished episode, and publishing a model's
// weights to the object store its rollout front-ends load from.
//
//	go test ./benchmarks -run '^$' -bench 'Journal|Weights' -benchtime 200x

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/lmmodel"
	"github.com/troupe-ml/troupe/swarm/tabular"
	"github.com/troupe-ml/troupe/swarm/weightstore"
)

// loopbackBus runs a NATS server with a file store and returns a client
// connected to it over TCP on 127.0.0.1, as a front-end on another process
// would be.
func loopbackBus(b *testing.B) *bus.Bus {
	b.Helper()
	ctx := context.Background()
	srv, err := bus.Open(ctx, bus.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	c, err := bus.Open(ctx, bus.Config{URL: srv.ClientURL()})
	if err != nil {
		srv.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); srv.Close() })
	return c
}

func millis(d []time.Duration, p float64) float64 { return percentile(d, p) / 1e3 }

// BenchmarkJournalPublish: one finished episode (a 128-token prompt and a
// 256-token completion with its log-probabilities) published to the
// episode stream and acknowledged by JetStream, as end_episode does before
// answering 200.
func BenchmarkJournalPublish(b *testing.B) {
	c := loopbackBus(b)
	ctx := context.Background()
	js := c.JetStream()
	if _, err := js.CreateOrUpdateStream(ctx, swarm.JournalStreamConfig("bench", 1)); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	s := rl.Sample{Prompt: make([]int, 128), Actions: make([]int, 256), LogProbs: make([]float32, 256)}
	for i := range s.Prompt {
		s.Prompt[i] = r.IntN(151936)
	}
	for i := range s.Actions {
		s.Actions[i], s.LogProbs[i] = r.IntN(151936), -r.Float32()*5
	}
	body, err := json.Marshal(api.EpisodeRecord{ID: "x", TaskID: "t", Client: "c", Reward: 1, Samples: []rl.Sample{s}})
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := range b.N {
		id := "ep-" + string(rune('a'+i%26)) + time.Now().Format("150405.000000000")
		t0 := time.Now()
		if _, err := js.Publish(ctx, swarm.EpisodeSubject("bench"), body, jetstream.WithMsgID(id)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(millis(lat, 0.5), "p50_ms")
	b.ReportMetric(millis(lat, 0.99), "p99_ms")
}

// BenchmarkWeightsPublish: one step's weights (what the model's Save
// writes: the trainer publishes exactly that) put into the weights
// bucket, for the swarm presets and, when its cached random checkpoint
// exists (BenchmarkHFDecode writes it), Qwen2.5-0.5B: its rank-16 LoRA
// adapter with optimizer state (what a LoRA trainer publishes) and the
// whole bf16 base (988 MB).
func BenchmarkWeightsPublish(b *testing.B) {
	type payload struct {
		name string
		data func(b *testing.B) []byte
	}
	save := func(m swarm.Model) []byte {
		var buf bytes.Buffer
		if err := m.Save(&buf); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}
	var cases []payload
	for _, name := range []string{"tiny", "small", "medium"} {
		cases = append(cases, payload{"tabular-" + name, func(b *testing.B) []byte {
			m, err := tabular.NewPreset(name)
			if err != nil {
				b.Fatal(err)
			}
			return save(m)
		}})
	}
	for _, name := range []string{"lm-tiny", "lm-small"} {
		if _, ok := lmmodel.Presets[name]; !ok {
			continue
		}
		cases = append(cases, payload{name, func(b *testing.B) []byte {
			m, err := lmmodel.NewPreset(name)
			if err != nil {
				b.Fatal(err)
			}
			return save(m)
		}})
	}
	qdir := filepath.Join(os.TempDir(), "troupe-bench", "qwen2-0.5b-bf16")
	cases = append(cases,
		payload{"qwen2-0.5b-lora-r16", func(b *testing.B) []byte {
			if _, err := os.Stat(filepath.Join(qdir, "model.safetensors")); err != nil {
				b.Skip("no cached Qwen2.5-0.5B-shaped checkpoint; run BenchmarkHFDecode once")
			}
			base := hfModel(b, "qwen2-0.5b")
			ad, err := hf.NewLoRA(base, hf.LoRAConfig{Rank: 16, Alpha: 32, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			if err := ad.Save(dir, qdir); err != nil {
				b.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(dir, "adapter_model.safetensors"))
			if err != nil {
				b.Fatal(err)
			}
			// Adam's two moments travel with the adapter in a trainer's
			// checkpoint: three times the adapter.
			return bytes.Repeat(data, 3)
		}},
		payload{"qwen2-0.5b-bf16-full", func(b *testing.B) []byte {
			data, err := os.ReadFile(filepath.Join(qdir, "model.safetensors"))
			if err != nil {
				b.Skip("no cached Qwen2.5-0.5B-shaped checkpoint; run BenchmarkHFDecode once")
			}
			return data
		}},
	)
	for _, p := range cases {
		b.Run(p.name, func(b *testing.B) {
			data := p.data(b)
			c := loopbackBus(b)
			ctx := context.Background()
			obs, err := c.JetStream().CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: weightstore.Bucket("bench"), Storage: jetstream.FileStorage})
			if err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if err := weightstore.Put(ctx, obs, int64(i), data); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(millis(lat, 0.5), "p50_ms")
			b.ReportMetric(float64(len(data))/1e6, "MB")
		})
	}
}
