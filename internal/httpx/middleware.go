package httpx

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StatusRecorder captures a response's status code.
type StatusRecorder struct {
	http.ResponseWriter
	Code int
}

// WriteHeader implements http.ResponseWriter.
func (r *StatusRecorder) WriteHeader(c int) {
	if r.Code == 0 {
		r.Code = c
	}
	r.ResponseWriter.WriteHeader(c)
}

// Write implements http.ResponseWriter.
func (r *StatusRecorder) Write(b []byte) (int, error) {
	if r.Code == 0 {
		r.Code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (write
// deadlines of streamed chunks).
func (r *StatusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush implements http.Flusher.
func (r *StatusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Metrics counts and times requests by endpoint.
type Metrics struct {
	Requests *prometheus.CounterVec
	Latency  *prometheus.HistogramVec
}

// NewMetrics registers the request metrics under prefix (swarm_http_...).
func NewMetrics(reg prometheus.Registerer, prefix string) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "_http_requests_total",
			Help: "HTTP requests by endpoint and status code."}, []string{"endpoint", "code"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "_http_request_duration_seconds",
			Help: "HTTP request latency by endpoint.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)}, []string{"endpoint"}),
	}
	reg.MustRegister(m.Requests, m.Latency)
	return m
}

// Instrument counts and times h under an endpoint label.
func (m *Metrics) Instrument(endpoint string, h http.HandlerFunc) http.Handler {
	lat := m.Latency.WithLabelValues(endpoint)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &StatusRecorder{ResponseWriter: w}
		h(rec, r)
		if rec.Code == 0 {
			rec.Code = http.StatusOK
		}
		lat.Observe(time.Since(start).Seconds())
		m.Requests.WithLabelValues(endpoint, strconv.Itoa(rec.Code)).Inc()
	})
}

// Recover is the last line of defence: a panic becomes a 500, is counted
// and logged with the path as redact shows it. Tests drive handlers
// without it to show that they never panic.
func Recover(h http.Handler, panics prometheus.Counter, log *slog.Logger, redact func(string) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				if panics != nil {
					panics.Inc()
				}
				p := r.URL.Path
				if redact != nil {
					p = redact(p)
				}
				log.Error("handler panic", "path", p, "panic", v)
				WriteJSON(w, http.StatusInternalServerError, map[string]any{"detail": "internal error"})
			}
		}()
		h.ServeHTTP(w, r)
	})
}
