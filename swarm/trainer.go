package swarm

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/rundir"
)

// finishedEpisode is a train episode that ended with a reward and waits
// for a batch.
type finishedEpisode struct {
	id, taskID, client string
	reward             float64
	samples            []rl.Sample
	convo              []api.CompletionRecord // for the step's sample file
	minVersion         int64                  // oldest parameter version among its completions; -1 when none
	seq                uint64                 // its sequence in the episode journal; 0 when not journaled
	arrived            time.Time              // when this process buffered it (TrainConfig.GroupTimeout)
	team               string                 // the team episode it belongs to; empty when none
	components         map[string]float64     // the reward's named parts; nil when none
}

// activeClient is a client on the agree-sync-weight active list: it ended a
// rewarded train episode since the last weight sync (AgentJet's
// ActiveSwarmClient).
type activeClient struct {
	lastActivity time.Time
	agreed       bool
}

// Accounting tracks where finished train episodes went.
type Accounting struct {
	Ended                       int64   // train episodes ended with a reward
	EndedRewardSum              float64 // sum of their rewards
	TrainedEpisodes             int64   // episodes handed to a training step
	TrainedRewardSum            float64
	Dropped                     int64 // stale, dummy or overflow episodes never trained on
	DroppedRewardSum            float64
	Buffered                    int64 // waiting for the next batch
	BufferedRewardSum           float64
	Recovered                   int64 // replayed from the journal at boot (ended before a restart) or published by another front-end
	RecoveredRewardSum          float64
	Deferred                    int64 // journaled episodes handed back to the journal while the buffer was full (delivered again later)
	Reclaimed, Aborted, Claimed int64
}

// batcher holds the finished episodes waiting for a batch and the
// agree-sync-weight voters, and decides, by the collection method, which
// of them the next step trains on. Its methods are called with the
// server's mutex held.
type batcher struct {
	finished []*finishedEpisode
	active   map[string]*activeClient // agree-sync-weight voters, by client_uuid
}

// agreeMethod says whether the collection method trains on the clients'
// votes rather than on counts.
func agreeMethod(method string) bool { return method == CollectAnyAgree || method == CollectAllAgree }

// bufferLimit bounds the finished episodes kept for training: eight
// batches, or, for the agree-sync-weight methods (whose batch is whatever
// the clients collected), 65536 episodes.
func bufferLimit(tc TrainConfig) int {
	if agreeMethod(tc.CollectionMethod) {
		return 1 << 16
	}
	return 8 * tc.BatchSize * tc.NumRepeat
}

// selectBatch picks the episodes of the next training batch according to
// tc's collection method. With take, the chosen episodes are removed from
// the buffer, and so are stale ones (more than tc.MaxStaleness versions
// behind step cur) and dummy tasks, which drop receives. A task whose
// oldest episode has waited tc.GroupTimeout by now is ready short of its
// group and makes a batch short of BatchSize (a partial batch).
func (b *batcher) selectBatch(tc TrainConfig, cur int64, now time.Time, take bool, drop func(*finishedEpisode, string)) ([]*finishedEpisode, bool) {
	if take {
		b.finished = slices.DeleteFunc(b.finished, func(fe *finishedEpisode) bool {
			if fe.minVersion >= 0 && cur-fe.minVersion > tc.MaxStaleness {
				drop(fe, "stale")
				return true
			}
			return false
		})
	}
	switch tc.CollectionMethod {
	case CollectAnyAgree, CollectAllAgree:
		// AgentJet's trainer stops rolling when any (all) of the active
		// clients agreed, and trains on what was collected: batch_size
		// does not apply.
		if len(b.finished) == 0 || len(b.active) == 0 {
			return nil, false
		}
		agreed := 0
		for _, ac := range b.active {
			if ac.agreed {
				agreed++
			}
		}
		if agreed == 0 || tc.CollectionMethod == CollectAllAgree && agreed < len(b.active) {
			return nil, false
		}
		if !take {
			return nil, true
		}
		batch := b.finished
		b.finished = nil
		return batch, true
	case CollectEpisodes:
		need := tc.BatchSize * tc.NumRepeat
		if len(b.finished) < need && !(len(b.finished) > 0 && expired(tc, b.finished, now)) {
			return nil, false
		}
		need = min(need, len(b.finished))
		if !take {
			return nil, true
		}
		batch := slices.Clone(b.finished[:need])
		b.finished = slices.Clone(b.finished[need:])
		return batch, true
	}
	order := []string{}
	byTask := map[string][]*finishedEpisode{}
	for _, fe := range b.finished {
		if _, ok := byTask[fe.taskID]; !ok {
			order = append(order, fe.taskID)
		}
		byTask[fe.taskID] = append(byTask[fe.taskID], fe)
	}
	chosen := map[string]bool{}
	dummy := map[string]bool{}
	partial := false
	for _, t := range order {
		eps := byTask[t]
		late := expired(tc, eps, now)
		if len(eps) < tc.NumRepeat && !late {
			continue
		}
		if tc.CollectionMethod == CollectNonDummyTasks && !slices.ContainsFunc(eps[1:], func(fe *finishedEpisode) bool { return fe.reward != eps[0].reward }) {
			dummy[t] = true
			partial = partial || late // dropped with the partial batch
			continue
		}
		if len(chosen) < tc.BatchSize {
			chosen[t] = true
			partial = partial || late
		}
	}
	if len(chosen) < tc.BatchSize && !partial {
		return nil, false
	}
	if !take {
		return nil, true
	}
	var batch []*finishedEpisode
	var rest []*finishedEpisode
	for _, fe := range b.finished {
		switch {
		case chosen[fe.taskID]:
			batch = append(batch, fe)
		case dummy[fe.taskID]:
			drop(fe, "dummy")
		default:
			rest = append(rest, fe)
		}
	}
	b.finished = rest
	return batch, true
}

// expired reports whether the oldest of eps has waited tc.GroupTimeout.
func expired(tc TrainConfig, eps []*finishedEpisode, now time.Time) bool {
	if tc.GroupTimeout <= 0 {
		return false
	}
	for _, fe := range eps {
		if now.Sub(fe.arrived) >= tc.GroupTimeout {
			return true
		}
	}
	return false
}

// sortBatch puts a training batch in an order fixed by its content (task,
// reward, then the samples' tokens and log-probabilities), not by when its
// episodes finished. Concurrent clients finish episodes in an order that
// changes from run to run, and a model's gradient is a float sum over the
// batch whose rounding depends on the order: unsorted, a seeded run would
// train bitwise different weights whenever its episodes interleaved
// differently, and once in a while a sampled token would flip and the run
// diverge.
func sortBatch(batch []*finishedEpisode) {
	slices.SortStableFunc(batch, func(a, b *finishedEpisode) int {
		c := cmp.Or(strings.Compare(a.taskID, b.taskID), cmp.Compare(a.reward, b.reward), cmp.Compare(len(a.samples), len(b.samples)))
		for i := 0; c == 0 && i < len(a.samples); i++ {
			x, y := &a.samples[i], &b.samples[i]
			c = cmp.Or(slices.Compare(x.Prompt, y.Prompt), slices.Compare(x.Actions, y.Actions), slices.Compare(x.LogProbs, y.LogProbs),
				slices.Compare(x.Obs, y.Obs), slices.Compare(x.StepRewards, y.StepRewards), cmp.Compare(x.Reward, y.Reward))
		}
		return c
	})
}

// ruleMetLocked reports whether the finished episodes satisfy the
// collection rule.
func (s *Server) ruleMetLocked() bool {
	_, ok := s.batch.selectBatch(s.train, s.step.Load(), time.Now(), false, nil)
	return ok
}

// maybeTriggerLocked moves ROLLING to ROLLING_POST when the rule is met.
func (s *Server) maybeTriggerLocked() {
	if s.status != StatusRolling || s.training || !s.ruleMetLocked() {
		return
	}
	s.status, s.detail = StatusRollingPost, "batch collected; draining open train episodes"
	s.m.setStatus(s.status)
	select {
	case s.trainReq <- struct{}{}:
	default:
	}
}

// acceptFinishedLocked takes a finished train episode into the buffer of
// the next batch. This is where a finished episode is acknowledged: the
// caller answers end_episode with 200 right after it returns, so a journal
// that must hold every acknowledged reward (an episode stream) appends
// here, before the buffer takes it.
//
// decision is the episode's team's, when it is a team's member.
func (s *Server) acceptFinishedLocked(fe *finishedEpisode, decision string) {
	if fe.seq != 0 && !s.jr.track(fe) {
		// A retried end of an episode whose first publish timed out but
		// was stored: the consumer buffered (and counted) it.
		return
	}
	s.acct.Ended++
	s.acct.EndedRewardSum += fe.reward
	if s.cfg.Role == RoleRollout {
		// The trainer takes it from the journal.
		s.jr.forget(fe.seq)
		return
	}
	s.takeLocked(fe, decision)
}

// bufferLocked appends a finished episode to the buffer of the next batch.
// Beyond the buffer's bound, a journaled episode goes back to the journal,
// which delivers it again later; without a journal the oldest is dropped.
func (s *Server) bufferLocked(fe *finishedEpisode) {
	fe.arrived = time.Now()
	if fe.seq != 0 && len(s.batch.finished) >= bufferLimit(s.train) {
		s.deferLocked(fe)
		return
	}
	s.batch.finished = append(s.batch.finished, fe)
	if lim := bufferLimit(s.train); len(s.batch.finished) > lim {
		n := len(s.batch.finished) - lim
		for _, old := range s.batch.finished[:n] {
			s.dropLocked(old, "overflow")
		}
		s.batch.finished = slices.Clone(s.batch.finished[n:])
	}
}

// dropLocked counts and logs a finished train episode that will never be
// trained on.
func (s *Server) dropLocked(fe *finishedEpisode, reason string) {
	s.markDoneLocked(fe, -1)
	s.acct.Dropped++
	s.acct.DroppedRewardSum += fe.reward
	s.noteDropLocked(fe.id, fe.taskID, reason)
	s.log.Warn("finished episode dropped", "reason", reason, "episode", fe.id, "task_id", fe.taskID, "reward", fe.reward, "min_version", fe.minVersion)
}

// noteDropLocked counts a dropped episode by reason and keeps it for
// dropped.jsonl (written off the request path by flushDrops) and the
// training status.
func (s *Server) noteDropLocked(id, task, reason string) {
	s.m.dropped.WithLabelValues(reason).Inc()
	s.drops.Add(api.DroppedEpisode{Time: time.Now().UTC(), EpisodeID: id, TaskID: task, Reason: reason})
}

// flushDrops appends the dropped episodes not written yet to the run
// directory's dropped.jsonl.
func (s *Server) flushDrops() {
	if err := s.drops.Flush(s.cfg.CheckpointDir); err != nil {
		s.log.Error("writing dropped episodes failed", "err", err)
	}
}

// episodeStatesLocked counts the server's episodes by state.
func (s *Server) episodeStatesLocked() api.EpisodeStates {
	return api.EpisodeStates{Claimed: s.acct.Claimed, Open: int64(len(s.eps.open)), Ended: s.acct.Ended + s.acct.Recovered,
		Aborted: s.acct.Aborted, Expired: s.acct.Reclaimed, Dropped: s.drops.Counts()}
}

func (s *Server) trainLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stopCh:
			return
		case <-s.trainReq:
			s.trainOnce()
		}
	}
}

// trainOnce drains ROLLING_POST, runs one training step in WEIGHT_SYNCING
// and returns to ROLLING.
func (s *Server) trainOnce() {
	s.mu.Lock()
	epoch := s.epoch
	if s.status != StatusRollingPost {
		s.mu.Unlock()
		return
	}
	deadline := time.Now().Add(s.train.DrainTimeout)
	s.mu.Unlock()
	for {
		s.mu.Lock()
		if s.epoch != epoch || s.status != StatusRollingPost {
			s.mu.Unlock()
			return
		}
		if s.eps.openTrain == 0 || !time.Now().Before(deadline) {
			break // s.mu held
		}
		s.mu.Unlock()
		select {
		case <-s.stopCh:
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
	s.status, s.detail = StatusWeightSyncing, "training"
	s.m.setStatus(s.status)
	s.training = true
	syncStart := time.Now()
	agree := agreeMethod(s.train.CollectionMethod)
	batch, ok := s.batch.selectBatch(s.train, s.step.Load(), syncStart, true, s.dropLocked)
	// Leaving ROLLING: every vote is spent (AgentJet resets its active
	// client list here).
	clear(s.batch.active)
	s.mu.Unlock()

	var ts *TrainStep
	var err error
	step := s.step.Load()
	if ok {
		ts, err = s.trainBatch(batch)
		step = s.step.Load()
	}
	if agree {
		// AgentJet's client, having agreed, waits to see the sync it
		// agreed to, checking a cached status every 5 s: a step shorter
		// than that would leave it waiting forever.
		if wait := s.cfg.MinAgreeSync - time.Since(syncStart); wait > 0 {
			select {
			case <-s.stopCh:
			case <-time.After(wait):
			}
		}
	}
	s.mu.Lock()
	s.training = false
	if err != nil {
		s.log.Error("training step failed", "err", err)
	}
	if s.epoch == epoch && s.status == StatusWeightSyncing {
		s.status, s.detail = StatusRolling, "collecting episodes"
		if err != nil {
			s.detail = "last training step failed: " + err.Error()
		}
		if ts != nil {
			s.lastStats = ts.Stats
		}
		s.m.setStatus(s.status)
		s.maybeTriggerLocked()
	}
	every := s.train.CheckpointEvery
	if ts != nil {
		ts.EpisodeStates = s.episodeStatesLocked()
	}
	s.mu.Unlock()
	s.m.globalStep.Set(float64(step))
	if ts != nil {
		prev := time.Unix(0, s.stepEnd.Load())
		ts.Phases = map[string]float64{"rollout": syncStart.Sub(prev).Seconds(), "train": ts.Duration.Seconds()}
		if n := s.completionTokens.Load(); n > s.tokensAtStep {
			ts.TokensPerS = float64(n-s.tokensAtStep) / time.Since(prev).Seconds()
			s.tokensAtStep = n
		}
	}
	publish := time.Now()
	if ok && err == nil && every > 0 && step > 0 && step%int64(every) == 0 {
		var row map[string]any
		if ts != nil {
			row = ts.record()
		}
		if err := s.checkpoint(row); err != nil {
			s.log.Error("checkpoint failed", "err", err)
		}
	}
	if ok && err == nil && s.cfg.Role == RoleTrain {
		if err := s.publishWeights(step); err != nil {
			s.log.Error("weights not published; front-ends keep the previous step", "err", err)
		}
	}
	if ts != nil {
		ts.Phases["sync"] = time.Since(publish).Seconds()
		s.recordStep(*ts)
		s.stepEnd.Store(time.Now().UnixNano())
	}
	s.flushDrops()
}

// trainBatch runs Model.Train on a batch; it returns the step it made, or
// nil when nothing was trained (no samples, or an error).
func (s *Server) trainBatch(batch []*finishedEpisode) (*TrainStep, error) {
	sortBatch(batch)
	cur := s.step.Load()
	ts := &TrainStep{Model: s.model.Name(), Episodes: len(batch)}
	s.mu.Lock()
	tc := s.train
	s.mu.Unlock()
	if tc.NormalizeRewardComponents {
		componentRewards(batch, tc.RewardComponentWeights)
	}
	var samples []rl.Sample
	comps := map[string]*welford{}
	var rs welford
	var rsum, toks, lag float64
	groups := map[string][]float64{}
	for _, fe := range batch {
		samples = append(samples, fe.samples...)
		rs.add(fe.reward)
		rsum += fe.reward
		groups[fe.taskID] = append(groups[fe.taskID], fe.reward)
		ts.EpisodeIDs = append(ts.EpisodeIDs, fe.id)
		ts.TeamIDs = append(ts.TeamIDs, fe.team)
		for n, v := range fe.components {
			if comps[n] == nil {
				comps[n] = &welford{}
			}
			comps[n].add(v)
		}
		for i := range fe.samples {
			toks += float64(len(fe.samples[i].Actions))
			d := float64(cur - fe.samples[i].Version)
			lag += d
			ts.StalenessMax = max(ts.StalenessMax, d)
		}
		if s.cfg.CheckpointDir != "" {
			line := rundir.Sample{EpisodeID: fe.id, TaskID: fe.taskID, TeamID: fe.team, Reward: fe.reward,
				RewardComponents: fe.components, Completions: fe.convo}
			if line.RewardComponents == nil {
				line.RewardComponents = map[string]float64{}
			}
			if fe.minVersion >= 0 {
				line.Version = &fe.minVersion
			}
			ts.samples = append(ts.samples, line)
		}
	}
	for _, rewards := range groups {
		if !slices.ContainsFunc(rewards, func(r float64) bool { return r != rewards[0] }) {
			ts.ZeroSpreadGroups++
		}
	}
	ts.ZeroSpreadGroups /= float64(max(len(groups), 1))
	if len(comps) > 0 {
		ts.RewardComponentsMean = map[string]float64{}
		for n, w := range comps {
			ts.RewardComponentsMean[n] = w.mean
		}
		ts.Credit = credit(batch)
	}
	if n := float64(len(samples)); n > 0 {
		ts.CompletionTokensMean, ts.StalenessMean = toks/n, lag/n
	}
	s.m.batchReward.Set(rs.mean)
	s.mu.Lock()
	s.acct.TrainedEpisodes += int64(len(batch))
	s.acct.TrainedRewardSum += rsum
	s.mu.Unlock()
	start := time.Now()
	s.trainMu.Lock()
	var err error
	if len(samples) > 0 {
		ts.Stats, err = s.model.Train(samples)
	}
	step := s.model.Version()
	s.step.Store(step)
	s.mu.Lock()
	for _, fe := range batch {
		// A failed step trained nothing it will retry: the episodes are
		// spent either way, acknowledged with the next checkpoint.
		s.markDoneLocked(fe, step)
	}
	s.mu.Unlock()
	s.trainMu.Unlock()
	ts.Duration = time.Since(start)
	s.m.trainSeconds.Observe(ts.Duration.Seconds())
	if err != nil || len(samples) == 0 {
		return nil, err
	}
	s.m.trainSteps.Inc()
	ts.Step, ts.Tasks, ts.Samples, ts.Time = step, len(groups), len(samples), time.Now()
	ts.RewardMean, ts.RewardStd = rs.mean, rs.std()
	s.log.Info("training step", "global_step", step, "episodes", len(batch), "samples", len(samples),
		"loss", ts.Stats.Loss, "grad_norm", ts.Stats.GradNorm, "reward_mean", rs.mean, "reward_std", ts.RewardStd,
		"skipped_groups", ts.Stats.SkippedGroups, "staleness_max", ts.StalenessMax, "duration", ts.Duration)
	s.mu.Lock()
	s.vlogLocked("train", fmt.Sprintf("step %d: %d episodes, reward mean %.4g, loss %.4g", step, len(batch), rs.mean, ts.Stats.Loss))
	s.mu.Unlock()
	return ts, nil
}

// componentRewards sets the reward the samples train on to the decoupled
// per-component normalization (rl.ComponentRewards) in every group whose
// episodes all carry components; fe.reward stays what the client sent.
func componentRewards(batch []*finishedEpisode, weights map[string]float64) {
	full := map[string]bool{}
	for _, fe := range batch {
		if _, seen := full[fe.taskID]; !seen {
			full[fe.taskID] = true
		}
		if len(fe.components) == 0 {
			full[fe.taskID] = false
		}
	}
	var eps []*finishedEpisode
	var groups []string
	var comps []map[string]float64
	for _, fe := range batch {
		if full[fe.taskID] {
			eps = append(eps, fe)
			groups = append(groups, fe.taskID)
			comps = append(comps, fe.components)
		}
	}
	for i, r := range rl.ComponentRewards(groups, comps, weights, componentEps) {
		for k := range eps[i].samples {
			eps[i].samples[k].Reward = r
		}
	}
}

// credit is the batch's split of a team reward between its "shared" and
// "own" components (TrainStep.Credit).
func credit(batch []*finishedEpisode) map[string]float64 {
	var shared, own float64
	for _, fe := range batch {
		shared += math.Abs(fe.components["shared"])
		own += math.Abs(fe.components["own"])
	}
	if shared+own == 0 {
		return nil
	}
	return map[string]float64{"shared": shared / (shared + own), "own": own / (shared + own)}
}

// componentEps is the ε of each component's (c − mean)/(std + ε).
const componentEps = 1e-4

// Accounting returns the episode accounting (tests use it to show that no
// finished episode's reward is lost).
func (s *Server) Accounting() Accounting {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.acct
	for _, fe := range s.batch.finished {
		a.Buffered++
		a.BufferedRewardSum += fe.reward
	}
	return a
}

// BufferedEpisodes reports finished train episodes waiting for training.
func (s *Server) BufferedEpisodes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.batch.finished)
}

// LastTrainStats returns the statistics of the last training step.
func (s *Server) LastTrainStats() rl.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastStats
}
