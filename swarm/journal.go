package swarm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/swarm/record"
	"github.com/troupe-ml/troupe/swarm/rundir"
	"github.com/troupe-ml/troupe/swarm/team"
)

// The episode journal: every finished train episode is published to a
// JetStream stream of its model (subject troupe.episodes.<model>, message id
// the episode id, so a repeated publish is dropped) before end_episode
// answers 200. The trainer reads the stream through a durable consumer and
// acknowledges an episode only once the step that trained it is
// checkpointed (or once it is dropped, counted and logged), so a process
// killed at any moment loses no acknowledged reward: a restart replays the
// unacknowledged episodes into the buffer.
//
// The stream keeps work-queue retention (an acknowledged episode is
// deleted), so on boot the trainer recreates its consumer and is handed
// exactly the episodes no checkpoint holds yet. The one window left, a
// crash between writing a checkpoint and acknowledging its episodes, is
// closed by JournalFile: it names the step and the stream sequences a
// checkpoint trained, written before the checkpoint, and a boot that finds
// the checkpoint at that step acknowledges those sequences instead of
// training them again.

// JournalFile, in ServerConfig.CheckpointDir, names the episodes the
// checkpoint trained (see the package's journal notes).
const JournalFile = "journal.json"

// TrainConfigFile, in ServerConfig.CheckpointDir, holds the training
// config a client synced, so that a restart resumes with it.
const TrainConfigFile = "train_config.yaml"

// TrainerConsumer is the durable consumer through which a model's trainer
// reads its episode stream.
const TrainerConsumer = "trainer"

// EpisodeStream is the name of a model's episode stream.
func EpisodeStream(model string) string { return "TROUPE_EPISODES_" + bus.Subject(model) }

// EpisodeSubject is the subject a model's finished episodes are published on.
func EpisodeSubject(model string) string { return "troupe.episodes." + bus.Subject(model) }

// journal is a model's episode stream and what this process knows of its
// messages. Its maps are guarded by the server's mutex.
type journal struct {
	js       jetstream.JetStream
	stream   jetstream.Stream
	subject  string
	timeout  time.Duration
	consume  jetstream.ConsumeContext
	consumer *jetstream.ConsumerConfig // as created, for updates
	replicas int

	key        []byte                   // signs and verifies records (package swarm/record)
	seqs       map[uint64]*jentry       // journaled episodes not acknowledged yet, by stream sequence
	trained    map[uint64]bool          // sequences the loaded checkpoint already trained (JournalFile)
	publishing map[string]bool          // episode ids whose end_episode is publishing
	early      map[string]jetstream.Msg // delivered while their end_episode was publishing
	deferred   map[uint64]bool          // handed back while the buffer was full; delivered again later
	seen       map[string]bool          // episode ids this trainer took, to refuse a second copy
	seenRing   []string                 // the order of seen, oldest first, bounded by maxSeen
}

// maxSeen bounds the episode ids a trainer remembers against duplicates.
const maxSeen = 1 << 16

// deferDelay is how long a journaled episode handed back to a full buffer
// waits before the stream delivers it again.
const deferDelay = 5 * time.Second

// jentry is a journaled episode the trainer has not acknowledged yet.
type jentry struct {
	fe      *finishedEpisode
	msg     jetstream.Msg // nil until the consumer delivers it
	trained int64         // the step that trained it; -1 while buffered
	ackNow  bool          // trained into a checkpoint, or dropped
}

// JournalStreamConfig is the configuration of a model's episode stream:
// work-queue retention (an acknowledged episode is deleted), file storage,
// and a ten-minute window in which a repeated episode id is dropped.
func JournalStreamConfig(model string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EpisodeStream(model),
		Description: "finished train episodes of " + model + ", until a checkpoint holds them",
		Subjects:    []string{EpisodeSubject(model)},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		Duplicates:  10 * time.Minute,
	}
}

func openJournal(ctx context.Context, js jetstream.JetStream, model string, replicas int, timeout time.Duration, key []byte) (*journal, error) {
	j := &journal{js: js, subject: EpisodeSubject(model), timeout: timeout, replicas: replicas, key: key,
		seqs: map[uint64]*jentry{}, trained: map[uint64]bool{}, publishing: map[string]bool{}, early: map[string]jetstream.Msg{},
		deferred: map[uint64]bool{}, seen: map[string]bool{}}
	cfg := JournalStreamConfig(model, replicas)
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("swarm: episode stream %s: %w", cfg.Name, err)
	}
	j.stream = st
	return j, nil
}

// publish journals a finished episode, signed, and returns its stream
// sequence.
func (j *journal) publish(fe *finishedEpisode) (uint64, error) {
	body, sig, err := record.Seal(j.key, j.subject, api.EpisodeRecord{ID: fe.id, TaskID: fe.taskID, Client: fe.client, Reward: fe.reward,
		MinVersion: fe.minVersion, Samples: fe.samples, Completions: fe.convo, TeamID: fe.team, RewardComponents: fe.components})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	msg := &nats.Msg{Subject: j.subject, Data: body, Header: nats.Header{record.Header: []string{sig}}}
	ack, err := j.js.PublishMsg(ctx, msg, jetstream.WithMsgID(fe.id), jetstream.WithExpectStream(j.stream.CachedInfo().Config.Name))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// track records an episode this process journaled, with the message the
// consumer delivered early if it did; false when the sequence is known
// already (a retried end whose first publish timed out but was stored).
func (j *journal) track(fe *finishedEpisode) bool {
	if j.seqs[fe.seq] != nil {
		return false
	}
	e := &jentry{fe: fe, trained: -1}
	if m := j.early[fe.id]; m != nil {
		e.msg = m
		delete(j.early, fe.id)
	}
	j.seqs[fe.seq] = e
	return true
}

// forget drops what this process knows of a sequence (a rollout
// front-end's episode, which the trainer acknowledges).
func (j *journal) forget(seq uint64) { delete(j.seqs, seq) }

// startConsumer recreates the trainer's consumer, so that every episode
// still in the stream (none acknowledged) is delivered again, and starts
// delivering to s.journaled.
func (s *Server) startConsumer(ctx context.Context) error {
	j := s.jr
	name := j.stream.CachedInfo().Config.Name
	if err := j.stream.DeleteConsumer(ctx, TrainerConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("swarm: reset consumer %s on %s: %w", TrainerConsumer, name, err)
	}
	ccfg := jetstream.ConsumerConfig{
		Durable:       TrainerConsumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		// Episodes wait for a batch and a checkpoint for as long as it
		// takes; redelivery comes from recreating the consumer at boot.
		AckWait:       24 * time.Hour,
		MaxDeliver:    -1,
		MaxAckPending: -1,
		Replicas:      j.replicas,
	}
	c, err := j.stream.CreateConsumer(ctx, ccfg)
	if err != nil {
		return fmt.Errorf("swarm: consumer %s on %s: %w", TrainerConsumer, name, err)
	}
	cc, err := c.Consume(s.journaled, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		s.log.Warn("episode journal consumer", "err", err)
	}))
	if err != nil {
		return fmt.Errorf("swarm: consume %s: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil { // closed while booting
		cc.Stop()
		return errors.New("swarm: closed while booting")
	}
	j.consume, j.consumer = cc, &ccfg
	return nil
}

// journaled receives an episode from the trainer's consumer: one this
// process published (its handle is recorded for the acknowledgement), one
// a checkpoint already trained (acknowledged now), or one published before
// a restart or by another front-end (taken into the buffer).
func (s *Server) journaled(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		s.log.Error("episode journal: message without metadata", "err", err)
		return
	}
	seq := md.Sequence.Stream
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.jr.seqs[seq]; e != nil {
		e.msg = msg
		if e.ackNow {
			s.ackLocked(seq, e)
		}
		return
	}
	if s.jr.trained[seq] {
		delete(s.jr.trained, seq)
		s.doAck(msg, seq)
		return
	}
	je, bad, err := record.Open(s.jr.key, msg.Subject(), msg.Data(), msg.Headers().Get(record.Header), s.cfg.MaxAbsReward)
	if err != nil {
		// Acknowledged, so that the stream lets it go: it is never trained.
		s.log.Error("episode journal: message refused", "reason", record.Reason(err), "subject", msg.Subject(), "seq", seq,
			"episode", clipID(je.ID), "err", err)
		s.noteDropLocked(clipID(je.ID), clipID(je.TaskID), record.Reason(err))
		s.doAck(msg, seq)
		return
	}
	if s.jr.publishing[je.ID] {
		// Delivered before this process's own publish returned: the
		// end_episode handler takes it from here.
		s.jr.early[je.ID] = msg
		return
	}
	redelivered := s.jr.deferred[seq]
	if !redelivered && s.jr.seen[je.ID] {
		s.log.Error("episode journal: a second copy of an episode refused", "reason", "duplicate", "subject", msg.Subject(), "seq", seq, "episode", je.ID)
		s.noteDropLocked(je.ID, je.TaskID, "duplicate")
		s.doAck(msg, seq)
		return
	}
	if bad > 0 && !redelivered {
		s.m.droppedSamples.Add(float64(bad))
		s.droppedSamples += int64(bad)
		s.log.Warn("episode journal: malformed samples dropped from an episode", "reason", record.MalformedSample, "n", bad,
			"subject", msg.Subject(), "episode", je.ID)
	}
	delete(s.jr.deferred, seq)
	s.jr.remember(je.ID)
	fe := &finishedEpisode{id: je.ID, taskID: je.TaskID, client: je.Client, reward: je.Reward, samples: je.Samples,
		convo: je.Completions, minVersion: je.MinVersion, seq: seq, team: je.TeamID, components: je.RewardComponents}
	s.jr.seqs[seq] = &jentry{fe: fe, msg: msg, trained: -1}
	if !redelivered {
		s.acct.Recovered++
		s.acct.RecoveredRewardSum += fe.reward
		s.m.recovered.Inc()
	}
	s.takeLocked(fe, team.Pending)
	s.maybeTriggerLocked()
}

// remember records an episode id the trainer took (bounded by maxSeen).
func (j *journal) remember(id string) {
	if j.seen[id] {
		return
	}
	if len(j.seenRing) >= maxSeen {
		delete(j.seen, j.seenRing[0])
		j.seenRing = j.seenRing[1:]
	}
	j.seen[id] = true
	j.seenRing = append(j.seenRing, id)
}

// clipID bounds an id taken from a refused message for logs and
// dropped.jsonl.
func clipID(id string) string {
	if len(id) > 256 {
		return id[:256]
	}
	return id
}

// deferLocked hands a journaled episode back to the journal while the
// buffer is full: its message is negatively acknowledged with a delay
// (or, not delivered yet, arrives later anyway), so the stream delivers it
// again, and this process forgets it meanwhile. Nothing is dropped.
func (s *Server) deferLocked(fe *finishedEpisode) {
	e := s.jr.seqs[fe.seq]
	delete(s.jr.seqs, fe.seq)
	s.jr.deferred[fe.seq] = true
	s.acct.Deferred++
	if e != nil && e.msg != nil {
		if err := e.msg.NakWithDelay(deferDelay); err != nil {
			s.log.Warn("episode journal: handing an episode back failed; it returns at the next start", "seq", fe.seq, "err", err)
		}
	}
}

// markDoneLocked records that a journaled episode left the buffer: trained
// at step (acknowledged after the checkpoint of that step) or dropped
// (step < 0: acknowledged at once, it will never be trained).
func (s *Server) markDoneLocked(fe *finishedEpisode, step int64) {
	if s.jr == nil || fe.seq == 0 {
		return
	}
	e := s.jr.seqs[fe.seq]
	if e == nil {
		return
	}
	if step < 0 || s.cfg.CheckpointDir == "" {
		// Without a checkpoint dir there are no durable weights to wait for.
		e.ackNow = true
		if e.msg != nil {
			s.ackLocked(fe.seq, e)
		}
		return
	}
	e.trained = step
}

// checkpointedLocked acknowledges the episodes trained at or before step,
// which a checkpoint now holds.
func (s *Server) checkpointedLocked(step int64) {
	for seq, e := range s.jr.seqs {
		if e.trained >= 0 && e.trained <= step {
			e.ackNow = true
			if e.msg != nil {
				s.ackLocked(seq, e)
			}
		}
	}
}

// trainedSeqsLocked lists the journaled episodes trained at or before
// step, for JournalFile.
func (s *Server) trainedSeqsLocked(step int64) []uint64 {
	var out []uint64
	for seq, e := range s.jr.seqs {
		if e.trained >= 0 && e.trained <= step {
			out = append(out, seq)
		}
	}
	// Those the loaded checkpoint trained and the consumer has not
	// delivered again yet: a new record must not forget them.
	for seq := range s.jr.trained {
		out = append(out, seq)
	}
	slices.Sort(out)
	return out
}

func (s *Server) ackLocked(seq uint64, e *jentry) {
	delete(s.jr.seqs, seq)
	s.doAck(e.msg, seq)
}

func (s *Server) doAck(msg jetstream.Msg, seq uint64) {
	// A lost acknowledgement is harmless: the episode comes back at the
	// next boot and JournalFile (or the stale check) keeps it out of
	// training.
	if err := msg.Ack(); err != nil {
		s.log.Warn("episode journal: acknowledgement failed", "seq", seq, "err", err)
	}
}

type journalRecord struct {
	Step int64    `json:"step"`
	Seqs []uint64 `json:"trained_seqs"`
	// Row is the TrainMetricsFile row of the step, appended once the
	// checkpoint and the weights are out: a boot that finds the
	// checkpoint at Step and no row of it appends this one.
	Row map[string]any `json:"row,omitempty"`
}

// loadJournalRecord reads JournalFile; its sequences count as trained only
// when the checkpoint reached its step, and its row is appended to
// TrainMetricsFile when the process died before it was.
func (s *Server) loadJournalRecord(step int64) error {
	b, err := os.ReadFile(filepath.Join(s.cfg.CheckpointDir, JournalFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("swarm: %w", err)
	}
	var rec journalRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("swarm: %s: %w", JournalFile, err)
	}
	if rec.Step != step {
		return nil // written for a checkpoint that never landed
	}
	if has, err := rundir.HasStep(s.cfg.CheckpointDir, step); err == nil && !has && rec.Row != nil {
		s.log.Info("restoring the metrics row of the checkpoint's step", "global_step", step)
		if err := rundir.AppendJSONL(filepath.Join(s.cfg.CheckpointDir, TrainMetricsFile), rec.Row); err != nil {
			return fmt.Errorf("swarm: %w", err)
		}
	}
	s.mu.Lock()
	for _, q := range rec.Seqs {
		s.jr.trained[q] = true
	}
	s.mu.Unlock()
	return nil
}

// bytesWriter is rundir.WriteFileAtomic's write of fixed contents.
func bytesWriter(b []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := w.Write(b); return err }
}

// TrainConfigBucket is the JetStream key-value bucket that keeps the
// training config a client synced (key: the journal's name), for a server
// with JetStream but no CheckpointDir.
const TrainConfigBucket = "TROUPE_TRAIN_CONFIG"

// loadTrainConfig resumes with the training config a client synced before
// a restart (TrainConfigFile, else TrainConfigBucket), which wins over
// ServerConfig.Train.
func (s *Server) loadTrainConfig() error {
	var y []byte
	var from string
	if s.cfg.CheckpointDir != "" {
		from = filepath.Join(s.cfg.CheckpointDir, TrainConfigFile)
		b, err := os.ReadFile(from)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("swarm: %w", err)
		}
		y = b
	} else if s.cfg.JetStream != nil {
		from = TrainConfigBucket + "/" + bus.Subject(s.journalName())
		kv, err := s.configBucket()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.JournalTimeout)
		e, err := kv.Get(ctx, bus.Subject(s.journalName()))
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("swarm: %s: %w", from, err)
		}
		if e != nil {
			y = e.Value()
		}
	}
	if len(y) == 0 {
		return nil
	}
	tc := s.train
	if err := tc.ApplyYAML(string(y)); err != nil {
		return fmt.Errorf("swarm: %s: %w", from, err)
	}
	s.train, s.syncedYAML = tc, string(y)
	s.log.Info("resuming with the training config a client synced; delete it to start from the server's own", "from", from,
		"batch_size", tc.BatchSize, "num_repeat", tc.NumRepeat)
	return nil
}

func (s *Server) configBucket() (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.JournalTimeout)
	defer cancel()
	kv, err := s.cfg.JetStream.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: TrainConfigBucket,
		Description: "training configs synced by clients", Storage: jetstream.FileStorage, Replicas: s.cfg.JournalReplicas})
	if err != nil {
		return nil, fmt.Errorf("swarm: %s bucket: %w", TrainConfigBucket, err)
	}
	return kv, nil
}

// saveTrainConfig persists a synced training config (TrainConfigFile, or
// TrainConfigBucket without a CheckpointDir).
func (s *Server) saveTrainConfig(yaml string) error {
	if s.cfg.CheckpointDir != "" {
		if err := rundir.WriteFileAtomic(s.cfg.CheckpointDir, TrainConfigFile, bytesWriter([]byte(yaml))); err != nil {
			return fmt.Errorf("swarm: persist training config: %w", err)
		}
		return nil
	}
	if s.cfg.JetStream == nil {
		return nil
	}
	kv, err := s.configBucket()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.JournalTimeout)
	defer cancel()
	if _, err := kv.Put(ctx, bus.Subject(s.journalName()), []byte(yaml)); err != nil {
		return fmt.Errorf("swarm: persist training config: %w", err)
	}
	return nil
}
