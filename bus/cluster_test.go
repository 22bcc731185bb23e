package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The replicated stream both cluster tests write to.
const (
	clusterStream  = "CLUSTER"
	clusterSubject = "cluster.episodes"
)

// payloadFor is the body published under a message id, so that a reader can
// tell a message stored whole from one mixed up with another.
func payloadFor(id string) []byte { return []byte("episode " + id) }

// syncBuffer collects the servers' logs, shown only when a test fails.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// tail is the last n bytes written.
func (s *syncBuffer) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// freeLoopbackPorts returns n ports that were free on 127.0.0.1 a moment
// ago (all held open together, so they differ).
func freeLoopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// testCluster is a cluster of embedded servers inside the test process,
// each reached through its own in-process connection.
type testCluster struct {
	t     *testing.T
	cfgs  []Config
	nodes []*Bus // nil while a node is down
	log   *syncBuffer
}

// newTestCluster starts n clustered embedded servers on loopback. They are
// opened together: a clustered Open waits for JetStream's meta leader, which
// needs a majority of the nodes up. Each adjust changes every node's
// configuration before it opens.
func newTestCluster(t *testing.T, n int, adjust ...func(i int, cfg *Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, cfgs: make([]Config, n), nodes: make([]*Bus, n), log: &syncBuffer{}}
	ports := freeLoopbackPorts(t, n)
	for i := range n {
		var routes []string
		for j, p := range ports {
			if j != i {
				routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(p))
			}
		}
		c.cfgs[i] = Config{
			Name:    "n" + strconv.Itoa(i),
			DataDir: t.TempDir(),
			// nats-server starts its routes only once its client
			// listener is up: a clustered server needs one.
			Listen:  "127.0.0.1:0",
			Cluster: &Cluster{Name: "troupe-test", Listen: "127.0.0.1:" + strconv.Itoa(ports[i]), Routes: routes},
			Logger: slog.New(slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: slog.LevelWarn})).
				With("node", i),
		}
		for _, f := range adjust {
			f(i, &c.cfgs[i])
		}
	}
	t.Cleanup(func() {
		for _, b := range c.nodes {
			if b != nil {
				b.Close()
			}
		}
		if t.Failed() {
			t.Logf("server log (tail):\n%s", c.log.tail(32<<10))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { c.nodes[i], errs[i] = Open(ctx, c.cfgs[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return c
}

// stop shuts node i down (its store closed cleanly).
func (c *testCluster) stop(i int) {
	c.nodes[i].Close()
	c.nodes[i] = nil
}

// restart opens node i again on its data dir.
func (c *testCluster) restart(ctx context.Context, i int) {
	c.t.Helper()
	b, err := Open(ctx, c.cfgs[i])
	if err != nil {
		c.t.Fatalf("restart node %d: %v", i, err)
	}
	c.nodes[i] = b
}

// index is the node with the given server name.
func (c *testCluster) index(name string) int {
	for i, cfg := range c.cfgs {
		if cfg.Name == name {
			return i
		}
	}
	c.t.Fatalf("no node named %q", name)
	return -1
}

// localState is the stream's state in node i's own store, not the leader's
// view of it.
func localState(srv *server.Server, stream string) (server.StreamState, bool) {
	info, err := srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		return server.StreamState{}, false
	}
	for _, acc := range info.AccountDetails {
		for _, st := range acc.Streams {
			if st.Name == stream {
				return st.State, true
			}
		}
	}
	return server.StreamState{}, false
}

// createReplicatedStream creates the test stream with the given number of
// copies, retrying while the cluster is still electing its meta leader.
func createReplicatedStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	cfg := jetstream.StreamConfig{
		Name:     clusterStream,
		Subjects: []string{clusterSubject},
		Storage:  jetstream.FileStorage,
		Replicas: replicas,
		// Deduplication by Nats-Msg-Id must cover every retry of the test.
		Duplicates: 5 * time.Minute,
	}
	return retry(ctx, func(ctx context.Context) error {
		_, err := js.CreateOrUpdateStream(ctx, cfg)
		return err
	})
}

// retry calls f, with a short deadline per call, until it succeeds or ctx
// ends; it returns the last error then.
func retry(ctx context.Context, f func(context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// publishAcked publishes id until the stream acknowledges it, as a client
// that must not lose a message does: a timed-out publish may still have been
// stored, and the retry under the same Nats-Msg-Id is then acknowledged as a
// duplicate with the first copy's sequence.
func publishAcked(ctx context.Context, js jetstream.JetStream, id string) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		ack, err = js.Publish(ctx, clusterSubject, payloadFor(id), jetstream.WithMsgID(id), jetstream.WithExpectStream(clusterStream))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", id, err)
	}
	return ack, nil
}

// streamLeader is the server name of the stream's current leader.
func streamLeader(ctx context.Context, js jetstream.JetStream) (string, error) {
	st, err := js.Stream(ctx, clusterStream)
	if err != nil {
		return "", err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return "", err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", errors.New("stream has no leader")
	}
	return info.Cluster.Leader, nil
}

// allCurrent reports whether the leader sees every other replica online and
// caught up, and names the leader.
func allCurrent(ctx context.Context, js jetstream.JetStream, replicas int) (leader string, err error) {
	st, err := js.Stream(ctx, clusterStream)
	if err != nil {
		return "", err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return "", err
	}
	ci := info.Cluster
	if ci == nil || ci.Leader == "" {
		return "", errors.New("stream has no leader")
	}
	if len(ci.Replicas) != replicas-1 {
		return "", fmt.Errorf("leader %s sees %d other replicas, want %d", ci.Leader, len(ci.Replicas), replicas-1)
	}
	for _, p := range ci.Replicas {
		if !p.Current || p.Offline || p.Lag != 0 {
			return "", fmt.Errorf("replica %s: current=%v offline=%v lag=%d", p.Name, p.Current, p.Offline, p.Lag)
		}
	}
	return ci.Leader, nil
}

// stepDownTo asks the stream's leader to hand leadership to the named
// server, and waits until it has. Raft elects only a node whose log holds
// every committed entry, so a node that leads has caught up.
func stepDownTo(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, name string) error {
	req, err := json.Marshal(server.JSApiLeaderStepdownRequest{Placement: &server.Placement{Preferred: name}})
	if err != nil {
		return err
	}
	return retry(ctx, func(ctx context.Context) error {
		if leader, err := streamLeader(ctx, js); err != nil {
			return err
		} else if leader == name {
			return nil
		}
		msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+clusterStream, req)
		if err != nil {
			return err
		}
		var resp server.JSApiStreamLeaderStepDownResponse
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return fmt.Errorf("stepdown response %q: %w", msg.Data, err)
		}
		if resp.Error != nil {
			return fmt.Errorf("stepdown to %s: %v", name, resp.Error)
		}
		return errors.New("leadership still moving")
	})
}

// readStream returns every stored message's id by sequence, checking that
// each body is the one published under its id.
func readStream(ctx context.Context, js jetstream.JetStream) (map[uint64]string, error) {
	st, err := js.Stream(ctx, clusterStream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	got := make(map[uint64]string, info.State.Msgs)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return nil, fmt.Errorf("get message %d of %d: %w", seq, info.State.LastSeq, err)
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		if !bytes.Equal(m.Data, payloadFor(id)) {
			return nil, fmt.Errorf("message %d (id %q) holds %q, want %q", seq, id, m.Data, payloadFor(id))
		}
		got[seq] = id
	}
	if uint64(len(got)) != info.State.Msgs {
		return nil, fmt.Errorf("read %d messages, the stream reports %d", len(got), info.State.Msgs)
	}
	return got, nil
}

// checkExactlyOnce compares what the stream holds (id by sequence) with
// what was acknowledged (sequence by id): every acknowledged message is
// stored once, under the sequence its acknowledgement named, and nothing else
// is stored except ids in unacked (published without a known outcome).
func checkExactlyOnce(stored map[uint64]string, acked map[string]uint64, unacked map[string]bool) []error {
	var errs []error
	seen := make(map[string]uint64, len(stored))
	for seq, id := range stored {
		if prev, dup := seen[id]; dup {
			errs = append(errs, fmt.Errorf("id %s stored twice, at %d and %d", id, prev, seq))
		}
		seen[id] = seq
		if _, ok := acked[id]; !ok && !unacked[id] {
			errs = append(errs, fmt.Errorf("id %s stored at %d was never published or was refused", id, seq))
		}
	}
	for id, seq := range acked {
		switch got, ok := stored[seq]; {
		case !ok:
			errs = append(errs, fmt.Errorf("acknowledged id %s (sequence %d) lost", id, seq))
		case got != id:
			errs = append(errs, fmt.Errorf("sequence %d was acknowledged for %s but holds %s", seq, id, got))
		}
	}
	return errs
}

// TestClusterSurvivesNodeLoss runs three clustered embedded servers, writes
// to a stream with three copies, shuts the stream's leader down mid-way and
// writes on through a survivor; then it restarts the node and checks that it
// caught up and that every acknowledged message is there exactly once.
func TestClusterSurvivesNodeLoss(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r := c.nodes[0].Replicas(); r != 3 {
		t.Fatalf("Replicas() = %d for a three-node cluster, want 3", r)
	}
	js0 := c.nodes[0].JetStream()
	if err := createReplicatedStream(ctx, js0, c.nodes[0].Replicas()); err != nil {
		t.Fatal(err)
	}

	const perPhase = 40
	acked := map[string]uint64{}
	publish := func(js jetstream.JetStream, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			id := fmt.Sprintf("m%03d", i)
			ack, err := publishAcked(ctx, js, id)
			if err != nil {
				t.Fatal(err)
			}
			if ack.Duplicate {
				t.Fatalf("first publish of %s acknowledged as a duplicate (sequence %d)", id, ack.Sequence)
			}
			acked[id] = ack.Sequence
		}
	}
	publish(js0, 0, perPhase)

	leaderName, err := streamLeader(ctx, js0)
	if err != nil {
		t.Fatal(err)
	}
	down := c.index(leaderName)
	survivor := (down + 1) % 3
	c.stop(down)
	t.Logf("stopped the stream leader %s; writing through %s", leaderName, c.cfgs[survivor].Name)

	jsS := c.nodes[survivor].JetStream()
	publish(jsS, perPhase, 2*perPhase)
	// A client that retries after the failover must not store twice: the
	// new leader keeps the deduplication window.
	for _, id := range []string{"m000", fmt.Sprintf("m%03d", perPhase-1)} {
		ack, err := publishAcked(ctx, jsS, id)
		if err != nil {
			t.Fatal(err)
		}
		if !ack.Duplicate || ack.Sequence != acked[id] {
			t.Errorf("republished %s after the failover: duplicate=%v sequence %d, want a duplicate of %d", id, ack.Duplicate, ack.Sequence, acked[id])
		}
	}
	if newLeader, err := streamLeader(ctx, jsS); err != nil || newLeader == leaderName {
		t.Fatalf("after stopping %s the leader is %q (err %v)", leaderName, newLeader, err)
	}

	c.restart(ctx, down)
	want := uint64(len(acked))
	if err := retry(ctx, func(ctx context.Context) error {
		for i, b := range c.nodes {
			st, ok := localState(b.Server(), clusterStream)
			if !ok || st.Msgs != want || st.LastSeq != want {
				return fmt.Errorf("node %s holds %d messages up to %d, want %d", c.cfgs[i].Name, st.Msgs, st.LastSeq, want)
			}
		}
		_, err := allCurrent(ctx, jsS, 3)
		return err
	}); err != nil {
		t.Fatalf("restarted node did not catch up: %v", err)
	}
	// Read everything back with the restarted node leading.
	jsD := c.nodes[down].JetStream()
	if err := stepDownTo(ctx, c.nodes[down].Conn(), jsD, leaderName); err != nil {
		t.Fatal(err)
	}
	stored, err := readStream(ctx, jsD)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range checkExactlyOnce(stored, acked, nil) {
		t.Error(err)
	}
}

// TestClusterNeedsClientListen: nats-server starts a cluster's routes only
// after its client listener, so a clustered embedded server without one is
// refused at once. Left to start, it would never become ready, and shutting
// it down would wait forever for its route goroutines.
func TestClusterNeedsClientListen(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), ConnectTimeout: 2 * time.Second,
		Cluster: &Cluster{Name: "c", Listen: "127.0.0.1:0", Routes: []string{"nats://127.0.0.1:1"}}}
	done := make(chan error, 1)
	go func() {
		b, err := Open(context.Background(), cfg)
		if err == nil {
			b.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a clustered server without a client listen address opened")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Open of a clustered server without a client listen address still waiting after 20 s")
	}
}

// TestOpenWithoutJetStreamFailsFast: Open waits for a cluster's JetStream to
// answer, but a server that has no JetStream says so at once, and Open
// reports it without waiting out ConnectTimeout.
func TestOpenWithoutJetStreamFailsFast(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("plain nats-server not ready")
	}
	start := time.Now()
	b, err := Open(context.Background(), Config{URL: srv.ClientURL(), ConnectTimeout: 20 * time.Second})
	if err == nil {
		b.Close()
		t.Fatal("Open succeeded against a server without JetStream")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Open took %v to report a server without JetStream (%v); want an answer, not the 20 s timeout", d, err)
	}
}
