package swarm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/record"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// publishRecord publishes rec on model's episode subject as a front-end
// holding key does.
func publishRecord(ctx context.Context, js jetstream.JetStream, key []byte, model string, rec api.EpisodeRecord) (*jetstream.PubAck, error) {
	body, sig, err := record.Seal(key, EpisodeSubject(model), rec)
	if err != nil {
		return nil, err
	}
	return js.PublishMsg(ctx, &nats.Msg{Subject: EpisodeSubject(model), Data: body, Header: nats.Header{record.Header: []string{sig}}})
}

// finish claims, chats once and ends a train episode through the client.
func finish(t *testing.T, ts *testServer, task string, reward float64) {
	t.Helper()
	ctx := ctxT(t)
	ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{TaskID: task})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: task}}, MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
	if err := ts.cli.EndEpisode(ctx, ep, task, client.WorkflowResult{Reward: reward}); err != nil {
		t.Fatal(err)
	}
}

// TestJournalKeepsBufferedAcrossClose: a server that closes with finished
// episodes in its buffer leaves them in the journal (none dropped), and
// the next server on the same bus and directory trains them with the
// one that completes the batch; the episodes a checkpoint holds are not
// replayed again.
func TestJournalKeepsBufferedAcrossClose(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := bus.Open(ctx, bus.Config{DataDir: filepath.Join(dir, "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mk := func() *testServer {
		m, err := tabular.NewPreset("tiny")
		if err != nil {
			t.Fatal(err)
		}
		return startServer(t, m, testTrainConfig(2, 2), func(c *ServerConfig) {
			c.JetStream, c.CheckpointDir = b.JetStream(), dir
			c.Train.CheckpointEvery = 1
		})
	}
	a := mk()
	for i, task := range []string{"x", "x", "y", "y", "z"} {
		finish(t, a, task, float64(i))
	}
	waitFor(t, "a training step", func() bool { return a.s.globalStep() == 1 })
	if n := a.s.BufferedEpisodes(); n != 1 {
		t.Fatalf("%d episodes buffered after the step, want 1", n)
	}
	if err := a.s.Close(); err != nil {
		t.Fatal(err)
	}
	if acc := a.s.Accounting(); acc.Dropped != 0 {
		t.Fatalf("closing dropped %d episodes: %+v", acc.Dropped, acc)
	}
	var rec journalRecord
	raw, err := os.ReadFile(filepath.Join(dir, JournalFile))
	// The final checkpoint's record: step 1, its episodes acknowledged
	// already by the step's own checkpoint.
	if err != nil || json.Unmarshal(raw, &rec) != nil || rec.Step != 1 || len(rec.Seqs) != 0 {
		t.Fatalf("%s: %s (%v): want step 1 and no sequence left to acknowledge", JournalFile, raw, err)
	}

	c := mk()
	waitFor(t, "the journaled episode back in the buffer", func() bool { return c.s.BufferedEpisodes() == 1 })
	if st := c.s.globalStep(); st != 1 {
		t.Fatalf("resumed at step %d, want 1", st)
	}
	for _, task := range []string{"z", "w", "w"} {
		finish(t, c, task, 1)
	}
	waitFor(t, "a training step on the replayed episode", func() bool { return c.s.globalStep() == 2 })
	acc := c.s.Accounting()
	if acc.Recovered != 1 || acc.Ended != 3 || acc.TrainedEpisodes != 4 {
		t.Fatalf("accounting after the restart: %+v; want 1 recovered, 3 ended, 4 trained", acc)
	}
}

// TestJournalRoleNeedsJetStream: the split roles refuse to start without
// a journal.
func TestJournalRoleNeedsJetStream(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	for _, role := range []string{RoleRollout, RoleTrain, "both"} {
		if _, err := NewServer(ServerConfig{Model: m, Role: role, Logger: quietLog}); err == nil {
			t.Errorf("role %q without JetStream: no error", role)
		}
	}
}

// TestJournalSkipsCheckpointedEpisodes: a crash after a checkpoint landed
// but before its episodes were acknowledged leaves them in the stream;
// the next boot finds their sequences in JournalFile at the checkpoint's
// step and acknowledges them instead of training them twice. A record for
// a step the checkpoint never reached is ignored.
func TestJournalSkipsCheckpointedEpisodes(t *testing.T) {
	for _, landed := range []bool{true, false} {
		ctx := context.Background()
		dir := t.TempDir()
		b, err := bus.Open(ctx, bus.Config{DataDir: filepath.Join(dir, "nats")})
		if err != nil {
			t.Fatal(err)
		}
		js := b.JetStream()
		if _, err := js.CreateOrUpdateStream(ctx, JournalStreamConfig("tiny", 1)); err != nil {
			t.Fatal(err)
		}
		key, err := record.LoadOrCreateKey(dir)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for i := range 4 {
			ack, err := publishRecord(ctx, js, key, "tiny", api.EpisodeRecord{ID: string(rune('a' + i)), TaskID: "t", Reward: float64(i), MinVersion: -1})
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, ack.Sequence)
		}
		// The checkpoint of step 1 (a model trained once) and its record.
		m, _ := tabular.NewPreset("tiny")
		batch := []rl.Sample{
			{TaskID: "t", Prompt: []int{'h', 'i'}, Actions: []int{'a', 'b'}, LogProbs: []float32{-5, -5}, Reward: 1},
			{TaskID: "t", Prompt: []int{'h', 'i'}, Actions: []int{'c', 'd'}, LogProbs: []float32{-5, -5}, Reward: 0},
		}
		if _, err := m.Train(batch); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, CheckpointFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Save(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
		step := m.Version()
		if !landed {
			step++ // the record of a checkpoint that never replaced this one
		}
		raw, _ := json.Marshal(journalRecord{Step: step, Seqs: seqs})
		if err := os.WriteFile(filepath.Join(dir, JournalFile), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		m2, _ := tabular.NewPreset("tiny")
		ts := startServer(t, m2, testTrainConfig(4, 1), func(c *ServerConfig) { c.JetStream, c.CheckpointDir = js, dir })
		want := 0
		if !landed {
			want = 4
		}
		st, err := js.Stream(ctx, EpisodeStream("tiny"))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the journal to settle", func() bool {
			info, err := st.Info(ctx)
			return err == nil && int(info.State.Msgs) == want && ts.s.Accounting().Recovered == int64(want)
		})
		if landed && ts.s.globalStep() != m.Version() {
			t.Fatalf("resumed at %d, want %d", ts.s.globalStep(), m.Version())
		}
		ts.s.Close()
		b.Close()
	}
}
