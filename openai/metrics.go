package openai

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-ml/troupe/textgen"
)

// EngineMetrics exposes a textgen.Engine to Prometheus: the queue depth,
// the running sequences, the cache bytes in use, reserved and budgeted,
// the batch size of each step and each request's time to first token. Set
// Hooks in the engine's config, then Register the metrics once the engine
// exists (in as many registries as serve it).
type EngineMetrics struct {
	batch, ttft, stepSeconds prometheus.Histogram
	adapters                 prometheus.Histogram
	gauges                   []prometheus.Collector
}

// NewEngineMetrics returns the metrics of one engine (label model).
func NewEngineMetrics(model string) *EngineMetrics {
	l := prometheus.Labels{"model": model}
	m := &EngineMetrics{
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "troupe_engine_batch_sequences", ConstLabels: l,
			Help: "Sequences run by one engine step (decoding and prefilling).", Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}}),
		adapters: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "troupe_engine_batch_adapters", ConstLabels: l,
			Help: "Distinct adapters (the base counts as one) in one engine step.", Buckets: []float64{1, 2, 3, 4, 8, 16}}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "troupe_engine_time_to_first_token_seconds", ConstLabels: l,
			Help: "Time from a request's submission to its first sampled token (queue, prefill and first step).", Buckets: prometheus.ExponentialBuckets(1e-3, 2, 18)}),
		stepSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "troupe_engine_step_seconds", ConstLabels: l,
			Help: "Duration of one engine step (forward pass and sampling).", Buckets: prometheus.ExponentialBuckets(1e-4, 2, 20)}),
	}
	return m
}

// Hooks sets the engine config's step and first-token hooks to feed the
// metrics, keeping hooks already set.
func (m *EngineMetrics) Hooks(cfg *textgen.EngineConfig) {
	onStep, onFirst := cfg.OnStep, cfg.OnFirstToken
	cfg.OnStep = func(st textgen.StepStats) {
		m.batch.Observe(float64(st.Seqs))
		m.adapters.Observe(float64(st.Adapters))
		m.stepSeconds.Observe(st.Duration.Seconds())
		if onStep != nil {
			onStep(st)
		}
	}
	cfg.OnFirstToken = func(d time.Duration) {
		m.ttft.Observe(d.Seconds())
		if onFirst != nil {
			onFirst(d)
		}
	}
}

// Register adds the metrics of engine e to reg.
func (m *EngineMetrics) Register(reg prometheus.Registerer, e *textgen.Engine, model string) error {
	if m.gauges == nil {
		l := prometheus.Labels{"model": model}
		gauge := func(name, help string, v func(textgen.EngineStats) float64) prometheus.Collector {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: l}, func() float64 { return v(e.Stats()) })
		}
		counter := func(name, help string, v func(textgen.EngineStats) float64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: l}, func() float64 { return v(e.Stats()) })
		}
		m.gauges = []prometheus.Collector{
			gauge("troupe_engine_queue_depth", "Requests waiting for admission.", func(s textgen.EngineStats) float64 { return float64(s.Waiting) }),
			gauge("troupe_engine_running_sequences", "Sequences admitted and not finished.", func(s textgen.EngineStats) float64 { return float64(s.Running) }),
			gauge("troupe_engine_kv_cache_bytes_in_use", "Key/value cache bytes the running sequences hold.", func(s textgen.EngineStats) float64 { return float64(s.KVUsed) }),
			gauge("troupe_engine_kv_cache_bytes_reserved", "Key/value cache bytes reserved by the running sequences (their worst case).", func(s textgen.EngineStats) float64 { return float64(s.KVReserved) }),
			gauge("troupe_engine_kv_cache_budget_bytes", "The engine's key/value cache budget.", func(s textgen.EngineStats) float64 { return float64(s.KVBudget) }),
			counter("troupe_engine_steps_total", "Engine steps run.", func(s textgen.EngineStats) float64 { return float64(s.Steps) }),
			counter("troupe_engine_tokens_total", "Tokens fed to the model (prompt and sampled).", func(s textgen.EngineStats) float64 { return float64(s.Tokens) }),
		}
	}
	for _, c := range append([]prometheus.Collector{m.batch, m.adapters, m.ttft, m.stepSeconds}, m.gauges...) {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
