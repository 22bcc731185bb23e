package bus

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The network-namespace test runs only when asked (it needs root and
// iproute2, and takes a minute or two):
//
//	TROUPE_NETNS=1 go test -count=1 -run TestNetnsCluster -v ./bus
//
// TROUPE_NETNS_TROUPE names a troupe binary to run as the nodes; without it
// the test builds cmd/troupe.
const (
	netnsEnv       = "TROUPE_NETNS"
	netnsBinEnv    = "TROUPE_NETNS_TROUPE"
	netnsHelperEnv = "TROUPE_BUS_NETNS_HELPER" // the test binary as a client inside a namespace
	netnsURLsEnv   = "TROUPE_BUS_NETNS_URLS"
	netnsPinEnv    = "TROUPE_BUS_NETNS_PIN"
	// The nodes listen beyond loopback, so they take a token (troupe nats
	// refuses otherwise); the clients give it from EnvToken.
	netnsToken = "netns-cluster-token"
	// Their routes listen beyond loopback too, so the nodes share a route
	// secret, which no log may show.
	netnsRouteSecret = "netns-route-secret"
)

// TestMain lets the netns test run this test binary, re-executed inside a
// network namespace, as a NATS client that the test drives over stdin and
// stdout.
func TestMain(m *testing.M) {
	if os.Getenv(netnsHelperEnv) != "" {
		if err := runNetnsClient(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "netns client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The subnet of the test's private network. It exists only inside the
// test's own namespaces, so it cannot meet the host's addresses.
const netnsSubnet = "10.231.7."

// netnsNet is a small network of namespaces: a hub namespace holding a
// bridge, and member namespaces each linked to it by a veth pair (the
// member's end is eth0, the hub's end v<i>), so that one member's link can be
// cut while its processes live on.
type netnsNet struct {
	t       *testing.T
	hub     string
	members []string // namespace names
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetnsNet creates the hub and n members, member i at netnsSubnet+(10+i).
// Every namespace is deleted when the test ends, whatever its outcome.
func newNetnsNet(t *testing.T, n int) *netnsNet {
	t.Helper()
	prefix := fmt.Sprintf("troupe-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	nw := &netnsNet{t: t, hub: prefix + "-hub"}
	add := func(name string) {
		if err := ipCmd("netns", "add", name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := ipCmd("netns", "del", name); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		if err := ipCmd("-n", name, "link", "set", "lo", "up"); err != nil {
			t.Fatal(err)
		}
	}
	add(nw.hub)
	for _, args := range [][]string{
		{"-n", nw.hub, "link", "add", "br0", "type", "bridge"},
		{"-n", nw.hub, "link", "set", "br0", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= n; i++ {
		ns := prefix + "-m" + strconv.Itoa(i)
		add(ns)
		nw.members = append(nw.members, ns)
		v := "v" + strconv.Itoa(i)
		for _, args := range [][]string{
			{"-n", nw.hub, "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"-n", nw.hub, "link", "set", v, "master", "br0", "up"},
			{"-n", ns, "addr", "add", nw.addr(i) + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
		} {
			if err := ipCmd(args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return nw
}

// addr is member i's address (i from 1).
func (nw *netnsNet) addr(i int) string { return netnsSubnet + strconv.Itoa(10+i) }

// ns is member i's namespace (i from 1).
func (nw *netnsNet) ns(i int) string { return nw.members[i-1] }

// setLink cuts (up=false) or restores member i's link to the hub.
func (nw *netnsNet) setLink(i int, up bool) {
	nw.t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	if err := ipCmd("-n", nw.hub, "link", "set", "v"+strconv.Itoa(i), state); err != nil {
		nw.t.Fatal(err)
	}
}

// netnsNode is one `troupe nats` process inside its namespace.
type netnsNode struct {
	name  string
	args  []string
	cmd   *exec.Cmd
	ready chan string // the client URL the node prints once it serves
	done  chan struct{}
}

// netnsCluster runs three `troupe nats` nodes in members 1..3 of a netnsNet.
type netnsCluster struct {
	t     *testing.T
	net   *netnsNet
	bin   string
	nodes []*netnsNode // index i-1 for member i
	log   *syncBuffer
}

func (c *netnsCluster) clientURL(i int) string { return "nats://" + c.net.addr(i) + ":4222" }

// start runs node i (from 1).
func (c *netnsCluster) start(i int) {
	c.t.Helper()
	n := c.nodes[i-1]
	cmd := exec.Command("ip", append([]string{"netns", "exec", c.net.ns(i), c.bin}, n.args...)...)
	cmd.Stderr = prefixWriter{c.log, n.name + ": "}
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", n.name, err)
	}
	n.cmd, n.ready, n.done = cmd, make(chan string, 1), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case n.ready <- sc.Text():
			default:
			}
		}
		cmd.Wait()
		close(n.done)
	}()
}

// waitReady waits until node i prints its client URL, which `troupe nats`
// does once JetStream answers it.
func (c *netnsCluster) waitReady(i int) {
	c.t.Helper()
	n := c.nodes[i-1]
	select {
	case u := <-n.ready:
		c.t.Logf("%s ready at %s", n.name, u)
	case <-n.done:
		c.t.Fatalf("%s exited before it was ready", n.name)
	case <-time.After(90 * time.Second):
		c.t.Fatalf("%s not ready after 90 s", n.name)
	}
}

// kill SIGKILLs node i's process and waits for it.
func (c *netnsCluster) kill(i int) {
	n := c.nodes[i-1]
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
	n.cmd = nil
}

// index is the member number of the node with the given server name.
func (c *netnsCluster) index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i + 1
		}
	}
	c.t.Fatalf("no node named %q", name)
	return 0
}

// prefixWriter prefixes each write (a log line) with a node's name.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// troupeBinary returns the troupe command to run as the nodes, building it
// into a temporary directory unless TROUPE_NETNS_TROUPE names one.
func troupeBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv(netnsBinEnv); b != "" {
		return b
	}
	bin := filepath.Join(t.TempDir(), "troupe")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/troupe-ml/troupe/cmd/troupe").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/troupe: %v\n%s", err, out)
	}
	return bin
}

// netnsClient drives one re-executed test binary running
// runNetnsClient inside a namespace.
type netnsClient struct {
	t       *testing.T
	name    string
	stdin   io.WriteCloser
	replies chan string
	done    chan struct{}

	mu     sync.Mutex
	acked  map[string]uint64
	nAcked int
	fails  []string
}

func startNetnsClient(t *testing.T, name, ns string, urls []string, pin bool, log *syncBuffer) *netnsClient {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, self)
	cmd.Env = append(os.Environ(), netnsHelperEnv+"=1", netnsURLsEnv+"="+strings.Join(urls, ","), EnvToken+"="+netnsToken)
	if pin {
		cmd.Env = append(cmd.Env, netnsPinEnv+"=1")
	}
	cmd.Stderr = prefixWriter{log, name + ": "}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cl := &netnsClient{t: t, name: name, stdin: stdin, replies: make(chan string, 1<<16), done: make(chan struct{}), acked: map[string]uint64{}}
	go func() {
		defer close(cl.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<16), 1<<24)
		for sc.Scan() {
			cl.line(sc.Text())
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-cl.done
	})
	return cl
}

// line files one line of the client's output: publish outcomes are
// recorded as they come, everything else answers a command.
func (cl *netnsClient) line(s string) {
	f := strings.Fields(s)
	switch {
	case len(f) == 4 && f[0] == "ack":
		seq, _ := strconv.ParseUint(f[2], 10, 64)
		cl.mu.Lock()
		if prev, ok := cl.acked[f[1]]; ok && prev != seq {
			cl.fails = append(cl.fails, fmt.Sprintf("MISMATCH %s acknowledged at %d and at %d", f[1], prev, seq))
		}
		cl.acked[f[1]] = seq
		cl.nAcked++
		cl.mu.Unlock()
	case len(f) > 0 && f[0] == "fail":
		cl.mu.Lock()
		cl.fails = append(cl.fails, s)
		cl.mu.Unlock()
	default:
		cl.replies <- s
	}
}

// call sends a command and returns the lines of its answer, up to the "ok"
// line; an "error" line fails the test.
func (cl *netnsClient) call(timeout time.Duration, cmd string) []string {
	cl.t.Helper()
	if _, err := fmt.Fprintln(cl.stdin, cmd); err != nil {
		cl.t.Fatalf("%s: send %q: %v", cl.name, cmd, err)
	}
	var lines []string
	deadline := time.After(timeout)
	for {
		select {
		case s := <-cl.replies:
			switch {
			case s == "ok" || strings.HasPrefix(s, "ok "):
				return append(lines, s)
			case strings.HasPrefix(s, "error "):
				cl.t.Fatalf("%s: %s: %s", cl.name, cmd, s)
			}
			lines = append(lines, s)
		case <-cl.done:
			cl.t.Fatalf("%s exited during %q", cl.name, cmd)
		case <-deadline:
			cl.t.Fatalf("%s: no answer to %q after %v", cl.name, cmd, timeout)
		}
	}
}

// acks is the number of acknowledgements so far.
func (cl *netnsClient) acks() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.nAcked
}

// waitAcks waits until n acknowledgements have come.
func (cl *netnsClient) waitAcks(n int, timeout time.Duration, what string) time.Duration {
	cl.t.Helper()
	start := time.Now()
	for cl.acks() < n {
		if time.Since(start) > timeout {
			cl.mu.Lock()
			last := cl.fails[max(0, len(cl.fails)-3):]
			cl.mu.Unlock()
			cl.t.Fatalf("%s: %d of %d acknowledgements after %v (%s); last failures: %q", cl.name, cl.acks(), n, timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// snapshot copies the acknowledged ids and the failures.
func (cl *netnsClient) snapshot() (map[string]uint64, []string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	acked := make(map[string]uint64, len(cl.acked))
	for id, seq := range cl.acked {
		acked[id] = seq
	}
	return acked, append([]string(nil), cl.fails...)
}

// TestNetnsCluster runs three `troupe nats` nodes, each in a network
// namespace of its own joined by a bridge, and a publisher in a fourth; a
// stream keeps three copies. It SIGKILLs the stream's leader while the
// publisher writes; then it makes node 3 the leader and cuts its link, so
// that the old leader is alone with a client of its own: that client's
// writes must all be refused while the majority's go on; then it restores
// the link. At the end every acknowledged message must be stored exactly
// once, under the sequence its acknowledgement named, read back with node 3
// leading. The nodes authenticate their routes with a shared secret, which
// no node's log may show.
func TestNetnsCluster(t *testing.T) {
	if os.Getenv(netnsEnv) != "1" {
		t.Skip("set " + netnsEnv + "=1 to run the network-namespace cluster test (needs root and iproute2)")
	}
	if testing.Short() {
		t.Skip("the network-namespace cluster test is not short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the network-namespace cluster test needs root (ip netns add)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the network-namespace cluster test needs iproute2's ip (scripts/install-netns-deps.sh)")
	}
	start := time.Now()
	bin := troupeBinary(t)
	t.Logf("troupe binary ready after %v", time.Since(start).Round(time.Millisecond))

	nw := newNetnsNet(t, 4) // members 1..3: the nodes; 4: the publisher
	c := &netnsCluster{t: t, net: nw, bin: bin, log: &syncBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node and client logs (tail):\n%s", c.log.tail(64<<10))
		}
	})
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(netnsToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	routeSecretFile := filepath.Join(t.TempDir(), "route-secret")
	if err := os.WriteFile(routeSecretFile, []byte(netnsRouteSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		var routes []string
		for j := 1; j <= 3; j++ {
			if j != i {
				routes = append(routes, "nats://"+nw.addr(j)+":6222")
			}
		}
		name := "n" + strconv.Itoa(i)
		c.nodes = append(c.nodes, &netnsNode{name: name, args: []string{
			"nats", "--name", name, "--listen", nw.addr(i) + ":4222", "--data-dir", t.TempDir(),
			"--cluster", "troupe-netns", "--cluster-listen", nw.addr(i) + ":6222", "--routes", strings.Join(routes, ","),
			"--token-file", tokenFile, "--cluster-token-file", routeSecretFile, "--log-level", "warn",
		}})
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.kill(i + 1)
		}
	})
	// A clustered node is ready once a majority is up: start all, then wait.
	for i := 1; i <= 3; i++ {
		c.start(i)
	}
	for i := 1; i <= 3; i++ {
		c.waitReady(i)
	}
	t.Logf("cluster up after %v", time.Since(start).Round(time.Millisecond))

	// A publisher, connected as troupe's processes are (Open with a URL).
	pub := startNetnsClient(t, "publisher", nw.ns(4), []string{c.clientURL(1), c.clientURL(2), c.clientURL(3)}, false, c.log)
	pub.call(30*time.Second, "create 3")
	pub.call(5*time.Second, "pub e")
	pub.waitAcks(30, 30*time.Second, "before any fault")

	// 1. SIGKILL the stream's leader: the others elect a new one and the
	// publisher goes on.
	leader := infoLeader(pub)
	down := c.index(leader)
	before := pub.acks()
	c.kill(down)
	took := pub.waitAcks(before+30, 45*time.Second, "after killing the leader "+leader)
	t.Logf("killed leader %s: 30 more acknowledgements within %v; new leader %s", leader, took.Round(time.Millisecond), infoLeader(pub))
	c.start(down)
	c.waitReady(down)
	pub.call(60*time.Second, "current 3")
	t.Logf("%s restarted and caught up", leader)

	// 2. Partition node 3, leading, away from the others. A second
	// publisher, given only n3's URL, is surely connected to it at the cut
	// and must find the majority by itself (the cluster told it the other
	// servers' URLs).
	pub3 := startNetnsClient(t, "publisher3", nw.ns(4), []string{c.clientURL(3)}, false, c.log)
	pub3.call(5*time.Second, "pub f")
	pub3.waitAcks(10, 30*time.Second, "through n3")
	pub.call(30*time.Second, "stepdown n3")
	via, via3 := pub.call(5*time.Second, "server"), pub3.call(5*time.Second, "server")
	before, before3 := pub.acks(), pub3.acks()
	nw.setLink(3, false)
	cut := time.Now()
	t.Logf("cut n3's link (n3 leading; the publishers wrote through %s and %s)", lastWord(via), lastWord(via3))
	minority := startNetnsClient(t, "minority", nw.ns(3), []string{c.clientURL(3)}, true, c.log)
	tried := minority.call(60*time.Second, "try x 6")
	if got := lastWord(tried); got != "n3" {
		t.Fatalf("the minority's client ended connected to %q, want n3 throughout", got)
	}
	if n := minority.acks(); n != 0 {
		acked, _ := minority.snapshot()
		t.Errorf("split brain: the cut-off node acknowledged %d writes: %v", n, acked)
	}
	if _, refusals := minority.snapshot(); len(refusals) > 0 {
		t.Logf("the cut-off node refused %d writes, e.g. %q", len(refusals), refusals[0])
	}
	for p, n := range map[*netnsClient]int{pub: before, pub3: before3} {
		p.waitAcks(n+30, 90*time.Second, "during the partition")
		t.Logf("partition: %s had 30 more writes acknowledged within %v of the cut", p.name, time.Since(cut).Round(time.Millisecond))
	}
	majorityLeader := infoLeader(pub)
	if majorityLeader == "n3" {
		t.Errorf("during the partition the stream's leader is the cut-off n3")
	}
	t.Logf("partition: the majority's leader is %s", majorityLeader)

	// 3. Heal: node 3 catches up, and leads again to show it.
	nw.setLink(3, true)
	healed := time.Now()
	// nats-server's catch-up of a rejoined node can stall and retry for a
	// while ("Expected first catchup entry to be a snapshot"), hence the
	// long wait.
	pub.call(180*time.Second, "current 3")
	t.Logf("healed: n3 current after %v", time.Since(healed).Round(time.Millisecond))
	pub.call(30*time.Second, "stepdown n3")
	acked := map[string]uint64{}
	unacked := map[string]bool{}
	retried := 0
	for _, p := range []*netnsClient{pub, pub3} {
		if id := lastWord(p.call(30*time.Second, "stop")); id != "ok" {
			unacked[id] = true // in flight when stopped: stored or not
		}
		a, fails := p.snapshot()
		for id, seq := range a {
			acked[id] = seq
		}
		for _, f := range fails {
			if strings.HasPrefix(f, "MISMATCH") {
				t.Error(f)
			}
		}
		retried += len(fails)
	}
	dump := minority.call(60*time.Second, "dump")
	stored := map[uint64]string{}
	for _, l := range dump {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "msg" {
			seq, _ := strconv.ParseUint(f[1], 10, 64)
			stored[seq] = f[2]
		}
	}
	for _, err := range checkExactlyOnce(stored, acked, unacked) {
		t.Error(err)
	}
	if strings.Contains(c.log.tail(1<<30), netnsRouteSecret) {
		t.Error("a node's log shows the route secret")
	}
	t.Logf("%d acknowledged writes (%d failed attempts retried), %d stored, read back through n3; total %v",
		len(acked), retried, len(stored), time.Since(start).Round(time.Millisecond))
}

// lastWord is the last word of a command's answer.
func lastWord(lines []string) string {
	f := strings.Fields(lines[len(lines)-1])
	return f[len(f)-1]
}

// infoLeader asks the publisher for the stream's leader.
func infoLeader(cl *netnsClient) string {
	cl.t.Helper()
	lines := cl.call(30*time.Second, "leader")
	return strings.TrimPrefix(lines[len(lines)-1], "ok ")
}

// runNetnsClient is the client side: it connects to the URLs in
// TROUPE_BUS_NETNS_URLS and runs the commands read from in, one a line,
// writing "ok ..." or "error ..." after each. Publish outcomes are written
// as "ack <id> <seq> <duplicate>" and "fail <id> <error>" lines as they come.
func runNetnsClient(in io.Reader, out io.Writer) error {
	nc, js, closeConn, err := netnsConnect()
	if err != nil {
		return err
	}
	defer closeConn()
	var mu sync.Mutex
	printf := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", a...)
	}
	oneLine := func(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

	var (
		stopPub chan struct{}
		pubDone chan string // the id in flight when stopped, "" if none
	)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err := func() error {
			switch f[0] {
			case "create":
				r, _ := strconv.Atoi(f[1])
				return createReplicatedStream(ctx, js, r)
			case "leader":
				var leader string
				err := retry(ctx, func(ctx context.Context) error {
					var err error
					leader, err = streamLeader(ctx, js)
					return err
				})
				if err == nil {
					printf("ok %s", leader)
				}
				return err
			case "current":
				r, _ := strconv.Atoi(f[1])
				return retry(ctx, func(ctx context.Context) error { _, err := allCurrent(ctx, js, r); return err })
			case "server":
				printf("ok %s", nc.ConnectedServerName())
			case "stepdown":
				return stepDownTo(ctx, nc, js, f[1])
			case "pub": // publish f[1]-00000, f[1]-00001, ... until "stop"
				stopPub, pubDone = make(chan struct{}), make(chan string, 1)
				go publishLoop(js, f[1], stopPub, pubDone, printf, oneLine)
			case "stop":
				close(stopPub)
				printf("ok %s", <-pubDone)
			case "try": // f[2] single attempts, refused or not
				n, _ := strconv.Atoi(f[2])
				for i := range n {
					id := fmt.Sprintf("%s-%03d", f[1], i)
					actx, acancel := context.WithTimeout(ctx, 1500*time.Millisecond)
					ack, err := js.Publish(actx, clusterSubject, payloadFor(id), jetstream.WithMsgID(id), jetstream.WithExpectStream(clusterStream))
					acancel()
					if err != nil {
						printf("fail %s %s", id, oneLine(err))
					} else {
						printf("ack %s %d %v", id, ack.Sequence, ack.Duplicate)
					}
				}
				if !nc.IsConnected() {
					return fmt.Errorf("not connected after the attempts (status %v)", nc.Status())
				}
				printf("ok %s", nc.ConnectedServerName())
			case "dump":
				// Reads through the node that has just been made leader
				// can meet "JetStream system temporarily unavailable"
				// while its meta state settles: retried (each attempt reads
				// the whole stream, so under the command's deadline rather
				// than retry's per-attempt one).
				stored, err := readStream(ctx, js)
				for err != nil && ctx.Err() == nil {
					time.Sleep(200 * time.Millisecond)
					stored, err = readStream(ctx, js)
				}
				if err != nil {
					return err
				}
				for seq, id := range stored {
					printf("msg %d %s", seq, id)
				}
			default:
				return fmt.Errorf("unknown command %q", f[0])
			}
			return nil
		}()
		cancel()
		switch {
		case err != nil:
			printf("error %s", oneLine(err))
		case f[0] != "leader" && f[0] != "stop" && f[0] != "try" && f[0] != "server":
			printf("ok")
		}
	}
	return sc.Err()
}

// publishLoop publishes prefix-00000, prefix-00001, ..., each retried under
// its id until acknowledged, until stop closes; it then sends the id whose
// outcome is unknown ("" when the last one was acknowledged) on done.
func publishLoop(js jetstream.JetStream, prefix string, stop chan struct{}, done chan string, printf func(string, ...any), oneLine func(error) string) {
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s-%05d", prefix, i)
		for attempt := 0; ; attempt++ {
			select {
			case <-stop:
				if attempt == 0 {
					id = ""
				}
				done <- id
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ack, err := js.Publish(ctx, clusterSubject, payloadFor(id), jetstream.WithMsgID(id), jetstream.WithExpectStream(clusterStream))
			cancel()
			if err == nil {
				printf("ack %s %d %v", id, ack.Sequence, ack.Duplicate)
				break
			}
			printf("fail %s %s", id, oneLine(err))
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// netnsConnect connects a client as troupe's own processes do (Open with
// a URL), or, with TROUPE_BUS_NETNS_PIN=1, to the one URL given and no other
// server of the cluster, however long that server is unreachable.
func netnsConnect() (*nats.Conn, jetstream.JetStream, func(), error) {
	urls := os.Getenv(netnsURLsEnv)
	if os.Getenv(netnsPinEnv) != "1" {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		b, err := Open(context.Background(), Config{URL: urls, Auth: Auth{Token: os.Getenv(EnvToken)}, Logger: log})
		if err != nil {
			return nil, nil, nil, err
		}
		return b.Conn(), b.JetStream(), func() { b.Close() }, nil
	}
	nc, err := nats.Connect(urls,
		nats.Token(os.Getenv(EnvToken)),
		nats.IgnoreDiscoveredServers(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.Timeout(2*time.Second),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return nc, js, nc.Close, nil
}
