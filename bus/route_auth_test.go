package bus

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestClusterRouteSecret runs three embedded servers that share a route
// secret: they form a cluster and replicate a stream to every node. A
// route that gives no secret, or a wrong one, is refused with an
// authorization violation, and a fourth server with a wrong secret that
// names every node in its routes never becomes a route of any of them.
// Neither secret appears in any log, at any level.
func TestClusterRouteSecret(t *testing.T) {
	const secret, wrong = "route-secret-7c41e9", "not-the-route-secret-02b8"
	log := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newTestCluster(t, 3, func(i int, cfg *Config) {
		cfg.Cluster.Secret = secret
		cfg.Logger = logger.With("node", i)
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log (tail):\n%s", log.tail(32<<10))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	js := c.nodes[0].JetStream()
	if err := createReplicatedStream(ctx, js, 3); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := publishAcked(ctx, js, "m"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Every node's own store holds the three messages: the routes carry
	// the stream's replication.
	waitUntil(t, 30*time.Second, "every node to store the three messages", func() bool {
		for _, b := range c.nodes {
			if st, ok := localState(b.Server(), clusterStream); !ok || st.Msgs != 3 {
				return false
			}
		}
		return true
	})
	// A pool's routes come up one by one after the first (the count once
	// went from 5 to 8 while the intruder was being refused): the baseline
	// is each node's count once every count has held still for a second.
	routes := make([]int, len(c.nodes))
	for still, deadline := time.Now(), time.Now().Add(30*time.Second); time.Since(still) < time.Second; time.Sleep(50 * time.Millisecond) {
		for i, b := range c.nodes {
			if n := b.Server().NumRoutes(); n != routes[i] {
				routes[i], still = n, time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes' route counts still change after 30 s: %v", routes)
		}
	}
	for i, n := range routes {
		if n == 0 {
			t.Fatalf("node %d has no routes", i)
		}
	}

	routeAddr := c.cfgs[0].Cluster.Listen
	for _, tc := range []struct{ what, creds string }{
		{"no secret", ""},
		{"a wrong secret", fmt.Sprintf(`"user":%q,"pass":%q,`, RouteUser, wrong)},
	} {
		if got := connectRoute(t, routeAddr, tc.creds); !strings.Contains(got, "Authorization Violation") {
			t.Errorf("a route with %s: the server answered %q, want an authorization violation", tc.what, got)
		}
	}

	// A server with the wrong secret, its routes at every node. Its Open
	// cannot get a JetStream meta leader without routes, and fails.
	intruder := Config{
		Name: "intruder", DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConnectTimeout: 4 * time.Second,
		Cluster: &Cluster{Name: c.cfgs[0].Cluster.Name, Listen: "127.0.0.1:0", Secret: wrong},
		Logger:  logger.With("node", "intruder"),
	}
	for _, cfg := range c.cfgs {
		intruder.Cluster.Routes = append(intruder.Cluster.Routes, "nats://"+cfg.Cluster.Listen)
	}
	done := make(chan error, 1)
	go func() {
		b, err := Open(ctx, intruder)
		if err == nil {
			err = fmt.Errorf("the server with a wrong secret opened (%d routes)", b.Server().NumRoutes())
			b.Close()
		}
		done <- err
	}()
	for open := true; open; {
		select {
		case err := <-done:
			t.Logf("the server with a wrong secret: %v", err)
			open = false
		case <-time.After(50 * time.Millisecond):
		}
		for i, b := range c.nodes {
			rz, err := b.Server().Routez(&server.RoutezOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rz.Routes {
				if r.RemoteName == intruder.Name {
					t.Fatalf("node %d has a route to the server with a wrong secret", i)
				}
			}
			if n := b.Server().NumRoutes(); n != routes[i] {
				t.Fatalf("node %d has %d routes, had %d before the server with a wrong secret started", i, n, routes[i])
			}
		}
	}

	out := log.tail(1 << 30)
	if !strings.Contains(out, "Authorization") {
		t.Errorf("no node logged the refused routes")
	}
	for _, s := range []string{secret, wrong} {
		if strings.Contains(out, s) {
			t.Errorf("the log shows the route secret %q", s)
		}
	}
}

// connectRoute dials a route listener as a server would, sends a route's
// CONNECT with creds (JSON fields, or none) and a PING, and returns the
// first line that answers it.
func connectRoute(t *testing.T, addr, creds string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(info, "INFO ") {
		t.Fatalf("route listener sent %q (%v), want its INFO", info, err)
	}
	if !strings.Contains(info, `"auth_required":true`) {
		t.Errorf("route listener's INFO does not require authentication: %s", info)
	}
	fmt.Fprintf(conn, "CONNECT {%s\"verbose\":false,\"pedantic\":false,\"tls_required\":false,\"name\":\"raw-route\",\"cluster\":\"troupe-test\"}\r\nPING\r\n", creds)
	line, err := r.ReadString('\n')
	if err != nil && line == "" {
		return "closed: " + err.Error()
	}
	return strings.TrimSpace(line)
}

// waitUntil polls ok until it holds, failing the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterSecretConfig: Open refuses route URLs that carry credentials
// (without showing them) and a secret shaped like a bcrypt hash, which
// nats-server would compare against as a hash.
func TestClusterSecretConfig(t *testing.T) {
	for _, tc := range []struct {
		cluster Cluster
		want    string
	}{
		{Cluster{Routes: []string{"nats://troupe:pw-in-url-9d2@127.0.0.1:1"}}, "carries credentials"},
		{Cluster{Routes: []string{"nats://troupe:pw-in-url-9d2@127.0.0.1:1"}, Secret: "s"}, "carries credentials"},
		{Cluster{Secret: "$2a$11$abcdefghijklmnopqrstuuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0"}, "bcrypt"},
	} {
		tc.cluster.Name, tc.cluster.Listen = "c", "127.0.0.1:0"
		_, err := Open(context.Background(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConnectTimeout: time.Second, Cluster: &tc.cluster})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want one saying %q", tc.cluster.Routes, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw-in-url-9d2") {
			t.Errorf("the error shows a route's password: %v", err)
		}
	}
}

func TestCheckClusterListen(t *testing.T) {
	for _, c := range []struct {
		cluster *Cluster
		ok      bool
	}{
		{nil, true},
		{&Cluster{Name: "c", Listen: "127.0.0.1:6222"}, true},
		{&Cluster{Name: "c", Listen: "[::1]:6222"}, true},
		{&Cluster{Name: "c", Listen: "localhost:6222"}, true},
		{&Cluster{Name: "c", Listen: "0.0.0.0:0"}, false},
		{&Cluster{Name: "c", Listen: ":6222"}, false},
		{&Cluster{Name: "c", Listen: "10.0.0.1:6222"}, false},
		{&Cluster{Name: "c", Listen: "10.0.0.1:6222", Secret: "s"}, true},
		{&Cluster{Name: "c", Listen: "0.0.0.0:6222", Secret: "s"}, true},
	} {
		// Client authentication does not cover routes.
		cfg := Config{Listen: "10.0.0.1:4222", ServerAuth: &ServerAuth{Token: "t"}, Cluster: c.cluster}
		err := cfg.CheckClusterListen()
		if (err == nil) != c.ok {
			t.Errorf("%+v: err %v, want ok=%v", c.cluster, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "route secret") {
			t.Errorf("%+v: err %v does not name the route secret", c.cluster, err)
		}
	}
}
