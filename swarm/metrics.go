package swarm

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-ml/troupe/internal/httpx"
)

type metrics struct {
	http             *httpx.Metrics
	episodes         *prometheus.CounterVec
	open             prometheus.Gauge
	globalStep       prometheus.Gauge
	statusG          *prometheus.GaugeVec
	tokens           *prometheus.CounterVec
	rewardSum        *prometheus.GaugeVec // a gauge: rewards may be negative
	rewardCount      *prometheus.CounterVec
	batchReward      prometheus.Gauge
	dropped          *prometheus.CounterVec
	droppedSamples   prometheus.Counter
	journalErrors    prometheus.Counter
	recovered        prometheus.Counter
	weightsPublished prometheus.Histogram
	weightsLoaded    prometheus.Counter
	trainSteps       prometheus.Counter
	trainSeconds     prometheus.Histogram
	checkpoints      prometheus.Counter
	panics           prometheus.Counter
	teamHeld         prometheus.Gauge
	teams            *prometheus.CounterVec
}

var allStatuses = []string{StatusOffline, StatusBooting, StatusRolling, StatusRollingPost, StatusWeightSyncing}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		http: httpx.NewMetrics(reg, "swarm"),
		episodes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarm_episodes_total",
			Help: "Episode events: claimed, ended, aborted, reclaimed, stopped, refused (engine busy or full), quota (a client past its open-episode limit)."}, []string{"event"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "swarm_open_episodes", Help: "Episodes currently open."}),
		globalStep: prometheus.NewGauge(prometheus.GaugeOpts{Name: "swarm_global_step",
			Help: "Training steps applied (the parameter version)."}),
		statusG: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "swarm_engine_status",
			Help: "1 for the current engine status, 0 for the others."}, []string{"status"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarm_tokens_total",
			Help: "Prompt and completion tokens processed."}, []string{"kind"}),
		rewardSum: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "swarm_reward_sum",
			Help: "Sum of episode rewards by episode type (a gauge: rewards may be negative)."}, []string{"type"}),
		rewardCount: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarm_reward_count",
			Help: "Number of rewarded episodes by episode type."}, []string{"type"}),
		batchReward: prometheus.NewGauge(prometheus.GaugeOpts{Name: "swarm_batch_reward_mean",
			Help: "Mean episode reward of the last training batch."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarm_dropped_episodes_total",
			Help: "Finished train episodes never trained on, by reason: stale (beyond max_staleness), dummy (equal rewards, non-dummy collection), overflow and shutdown (a server without a journal: buffer full, or still buffered at close), team_incomplete (a member of a team episode that was discarded); journal messages refused: unsigned, forged (the MAC does not match), malformed, duplicate (an episode taken already)."}, []string{"reason"}),
		droppedSamples: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_dropped_samples_total",
			Help: "Malformed samples (reason malformed_sample) dropped from journaled episodes whose other samples were trained."}),
		journalErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_journal_errors_total",
			Help: "end_episode requests answered 503 because the episode journal did not acknowledge the publish (the episode stayed open)."}),
		weightsPublished: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "swarm_weights_publish_seconds",
			Help: "Time to publish one step's weights to the weights bucket (trainer role).", Buckets: prometheus.ExponentialBuckets(1e-3, 4, 10)}),
		weightsLoaded: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_weights_loaded_total",
			Help: "Published weights loaded by a rollout front-end."}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_recovered_episodes_total",
			Help: "Finished episodes taken from the journal rather than from this process's end_episode: replayed after a restart, or published by another front-end."}),
		trainSteps: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_train_steps_total", Help: "Training steps run by this process."}),
		trainSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "swarm_train_step_seconds",
			Help: "Duration of a training step.", Buckets: prometheus.ExponentialBuckets(1e-4, 4, 12)}),
		checkpoints: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_checkpoints_total", Help: "Checkpoints written."}),
		panics:      prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_handler_panics_total", Help: "Panics caught by the recover middleware (should stay 0)."}),
		teamHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "swarm_team_members_held",
			Help: "Ended members of team episodes this trainer holds until their team is decided."}),
		teams: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarm_team_decisions_total",
			Help: "Team episodes whose held members this trainer released (complete) or dropped (discarded)."}, []string{"decision"}),
	}
	reg.MustRegister(m.episodes, m.open, m.globalStep, m.statusG, m.tokens,
		m.rewardSum, m.rewardCount, m.batchReward, m.dropped, m.droppedSamples, m.trainSteps, m.trainSeconds, m.checkpoints, m.panics, m.journalErrors, m.recovered, m.weightsPublished, m.weightsLoaded, m.teamHeld, m.teams)
	m.globalStep.Set(float64(s.model.Version()))
	m.setStatus(StatusOffline)
	return m
}

func (m *metrics) setStatus(st string) {
	for _, x := range allStatuses {
		v := 0.0
		if x == st {
			v = 1
		}
		m.statusG.WithLabelValues(x).Set(v)
	}
}
