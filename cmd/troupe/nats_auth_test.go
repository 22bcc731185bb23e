package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/registry"
	"github.com/troupe-ml/troupe/swarm/weightstore"
)

// TestNATSRefusesOpenListener: troupe nats will not accept clients, or a
// cluster's routes, beyond loopback without authentication, and says how
// to add it; client authentication does not stand in for the route secret.
func TestNATSRefusesOpenListener(t *testing.T) {
	dir := t.TempDir()
	emptyFile, tokenFile := filepath.Join(dir, "empty"), filepath.Join(dir, "token")
	if err := os.WriteFile(emptyFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("client-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, []string{"refusing", "0.0.0.0", "without authentication", "--auth-file", "--token-file", "--tls-ca"}},
		{[]string{"--listen", ":0", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, []string{"refusing"}},
		{[]string{"--listen", "0.0.0.0:0", "--auth-file", "a.json", "--token-file", "t"}, []string{"give one"}},
		{[]string{"--tls-cert", "c.pem"}, []string{"--tls-key"}},
		{[]string{"--cluster", "c", "--cluster-listen", "0.0.0.0:0"}, []string{"refusing", "cluster routes", "0.0.0.0", "route secret", "--cluster-token-file"}},
		{[]string{"--listen", "0.0.0.0:0", "--token-file", tokenFile, "--cluster", "c", "--cluster-listen", ":6222"}, []string{"refusing", "cluster routes", "--cluster-token-file"}},
		{[]string{"--cluster", "c", "--cluster-listen", ":6222", "--routes", "nats://10.0.0.2:6222"}, []string{"refusing", "all interfaces", "--cluster-token-file"}},
		{[]string{"--cluster", "c", "--cluster-listen", "10.0.0.1:6222", "--cluster-token-file", emptyFile}, []string{"--cluster-token-file", "empty"}},
		{[]string{"--cluster-listen", "127.0.0.1:6222", "--cluster-token-file", emptyFile}, []string{"need --cluster"}},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"nats", "--data-dir", t.TempDir()}, c.args...)
		if code := runCLI(args, cmdIO{nil, &stdout, &stderr}); code != 1 {
			t.Fatalf("%v: exit %d, want 1; stderr:\n%s", c.args, code, stderr.String())
		}
		for _, w := range c.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%v: stderr %q does not say %q", c.args, stderr.String(), w)
			}
		}
	}
}

// startAuthNATS runs "troupe nats" with args as a process and returns the
// port it printed.
func startAuthNATS(t *testing.T, args ...string) (port string, log *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"nats", "--data-dir", t.TempDir()}, args...)...)
	cmd.Env = append(os.Environ(), "TROUPE_TEST_MAIN=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	log = &lockedBuffer{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGKILL); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("troupe nats printed no URL (%v); stderr:\n%s", err, log.String())
	}
	u, err := url.Parse(strings.TrimSpace(line))
	if err != nil || u.Port() == "" {
		t.Fatalf("troupe nats printed %q", line)
	}
	return u.Port(), log
}

// TestNATSAuthRoles runs troupe nats beyond loopback with an auth file, a
// trainer and a rollout front-end as processes, each with its role's
// user: episodes finished on the front-end train three steps, the trainer
// publishes and prunes weights, the front-end loads them, and a read user
// lists both in the registry. So each role's permissions cover what the
// swarm does with it. A client without credentials is refused, and a
// wrong password in a --nats URL is not echoed.
func TestNATSAuthRoles(t *testing.T) {
	const trainPW, rolloutPW, readPW, adminPW = "train-pw-1", "rollout-pw-2", "read-pw-3", "admin-pw-4"
	authFile := filepath.Join(t.TempDir(), "users.json")
	users := fmt.Sprintf(`{"users": [
		{"user": "trainer", "password": %q, "role": "train"},
		{"user": "frontend", "password": %q, "role": "rollout"},
		{"user": "dashboard", "password": %q, "role": "read"},
		{"user": "ops", "password": %q, "role": "admin"}]}`, trainPW, rolloutPW, readPW, adminPW)
	if err := os.WriteFile(authFile, []byte(users), 0o600); err != nil {
		t.Fatal(err)
	}
	port, natsLog := startAuthNATS(t, "--listen", "0.0.0.0:0", "--auth-file", authFile)
	// stderr is copied by another goroutine: the line may follow the URL.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(natsLog.String(), `auth="4 users"`) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(natsLog.String(), `auth="4 users"`) {
		t.Errorf("troupe nats's log does not name its authentication:\n%s", natsLog.String())
	}
	addr := "127.0.0.1:" + port
	natsURL := "nats://" + addr

	if nc, err := nats.Connect(natsURL); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a client without credentials: %v, want an authorization violation", err)
	}

	cfgFile := filepath.Join(t.TempDir(), "train.yaml")
	if err := os.WriteFile(cfgFile, []byte("troupe:\n  max_staleness: 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tport, rport := freePort(t), freePort(t)
	keyFile := filepath.Join(t.TempDir(), "episode.key")
	if err := os.WriteFile(keyFile, []byte(testEpisodeKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--autostart", "--batch-size", "2", "--num-repeat", "1", "--config", cfgFile, "--episode-key-file", keyFile}
	// swarm serve takes its credentials in the URL here.
	startProc(t, append([]string{"swarm", "serve", "--role", "train", "--port", fmt.Sprint(tport), "--checkpoint-dir", t.TempDir(),
		"--nats", "nats://trainer:" + trainPW + "@" + addr}, common...)...)
	startProc(t, append([]string{"swarm", "serve", "--role", "rollout", "--port", fmt.Sprint(rport),
		"--nats", "nats://frontend:" + rolloutPW + "@" + addr}, common...)...)
	tc := client.New(fmt.Sprintf("http://127.0.0.1:%d", tport))
	rc := client.New(fmt.Sprintf("http://127.0.0.1:%d", rport))
	waitRolling(t, tc)
	waitRolling(t, rc)
	for i := range 6 {
		finishEpisode(t, rc, fmt.Sprintf("task-%d", i), float64(i))
	}
	ctx := context.Background()
	waitFor(t, 60*time.Second, "the trainer's third step and the front-end loading it", func() bool {
		a, err1 := tc.EngineStatus(ctx)
		b, err2 := rc.EngineStatus(ctx)
		return err1 == nil && err2 == nil && a.GlobalStep >= 3 && b.GlobalStep >= 3
	})

	// The trainer pruned the first step's weights: a delete marker, and
	// the object's chunks purged from the bucket's stream.
	admin, err := bus.Open(ctx, bus.Config{URL: natsURL, Auth: bus.Auth{User: "ops", Password: adminPW}})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	bucket := weightstore.Bucket("small")
	waitFor(t, 30*time.Second, "the trainer to prune step 1's weights", func() bool {
		obs, err := admin.JetStream().ObjectStore(ctx, bucket)
		if err != nil {
			return false
		}
		info, err := obs.GetInfo(ctx, weightstore.Object(1), jetstream.GetObjectInfoShowDeleted())
		if err != nil || !info.Deleted {
			return false
		}
		st, err := admin.JetStream().Stream(ctx, "OBJ_"+bucket)
		if err != nil {
			return false
		}
		_, err = st.GetLastMsgForSubject(ctx, "$O."+bucket+".C."+info.NUID)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})

	// A read user lists the registry (each server registers within a
	// reap interval), its password from the environment.
	t.Setenv(bus.EnvPassword, readPW)
	var stdout, stderr bytes.Buffer
	roles := map[string]bool{}
	waitFor(t, 30*time.Second, "the registry to list the trainer and the front-end", func() bool {
		stdout.Reset()
		stderr.Reset()
		if code := runCLI([]string{"swarm", "frontends", "--nats", natsURL, "--nats-user", "dashboard"}, cmdIO{nil, &stdout, &stderr}); code != 0 {
			t.Fatalf("frontends as the read user: exit %d\n%s", code, stderr.String())
		}
		clear(roles)
		for _, line := range strings.Split(stdout.String(), "\n") {
			if line == "" {
				continue
			}
			var f registry.Frontend
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				t.Fatalf("frontends printed %q: %v", line, err)
			}
			roles[f.Role] = true
		}
		return roles["train"] && roles["rollout"]
	})
	if len(roles) != 2 {
		t.Fatalf("the registry lists roles %v, want train and rollout:\n%s", roles, stdout.String())
	}

	// A wrong password in the URL: refused, and not echoed.
	stdout.Reset()
	stderr.Reset()
	const wrong = "not-the-password"
	os.Unsetenv(bus.EnvPassword)
	if code := runCLI([]string{"swarm", "frontends", "--nats", "nats://dashboard:" + wrong + "@" + addr}, cmdIO{nil, &stdout, &stderr}); code != 1 {
		t.Fatalf("frontends with a wrong password: exit %d", code)
	}
	if out := stdout.String() + stderr.String(); strings.Contains(out, wrong) || !strings.Contains(out, "dashboard:xxxxx@") {
		t.Fatalf("the refusal shows the password, or no redacted URL:\n%s", out)
	}
}
