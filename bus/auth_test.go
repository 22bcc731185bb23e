package bus

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/troupe-ml/troupe/swarm/team"
)

// The passwords of authUsers' users.
const (
	rolloutPW = "rollout-secret-1"
	trainPW   = "train-secret-2"
	readPW    = "read-secret-3"
	adminPW   = "admin-secret-4"
)

// authUsers is one user per role; rollout's password is stored as a
// bcrypt hash.
func authUsers(t *testing.T) []User {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(rolloutPW), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return []User{
		{User: "rollout", Password: string(h), Role: RoleRollout},
		{User: "train", Password: trainPW, Role: RoleTrain},
		{User: "read", Password: readPW, Role: RoleRead},
		{User: "admin", Password: adminPW, Role: RoleAdmin},
	}
}

// startAuthServer runs an embedded server on a loopback port with cfg's
// authentication and returns it with its client URL.
func startAuthServer(t *testing.T, cfg Config) (*Bus, string) {
	t.Helper()
	cfg.Listen = cmpOr(cfg.Listen, "127.0.0.1:0")
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, srv.ClientURL()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// client is a connection as one user, with its log.
type client struct {
	*Bus
	log *syncBuffer
}

func connect(t *testing.T, url string, auth Auth) (*client, error) {
	t.Helper()
	log := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := Open(ctx, Config{URL: url, Auth: auth, ConnectTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { b.Close() })
	return &client{b, log}, nil
}

func mustConnect(t *testing.T, url string, auth Auth) *client {
	t.Helper()
	c, err := connect(t, url, auth)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// denied runs op, which publishes to subject, and requires it to fail and
// the server to have reported a permissions violation for that subject.
func (c *client) denied(t *testing.T, what, subject string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := op(ctx)
	cancel()
	if err == nil {
		t.Fatalf("%s succeeded; want it denied", what)
	}
	want := `Publish to \"` + subject
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.log.tail(1<<20), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s failed (%v) but the server reported no violation for %s; log:\n%s", what, err, subject, c.log.tail(4096))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	st, err := js.Stream(ctx10(t), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx10(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestServerAuthRefusesStrangers(t *testing.T) {
	_, url := startAuthServer(t, Config{ServerAuth: &ServerAuth{Users: authUsers(t)}})
	if _, err := connect(t, url, Auth{}); err == nil || !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a client without credentials: err %v, want an authorization violation", err)
	}
	if _, err := connect(t, url, Auth{User: "train", Password: "wrong"}); err == nil || !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a wrong password: err %v, want an authorization violation", err)
	}
	// The bcrypt-hashed password and a plain one both work.
	mustConnect(t, url, Auth{User: "rollout", Password: rolloutPW})
	mustConnect(t, url, Auth{User: "train", Password: trainPW})
}

// TestRolePermissions checks each role against a real server, on the
// streams and buckets a swarm uses: a work-queue episode stream on
// troupe.episodes.>, the registry bucket, a weights object store.
func TestRolePermissions(t *testing.T) {
	_, url := startAuthServer(t, Config{ServerAuth: &ServerAuth{Users: authUsers(t)}})
	admin := mustConnect(t, url, Auth{User: "admin", Password: adminPW})
	rollout := mustConnect(t, url, Auth{User: "rollout", Password: rolloutPW})
	train := mustConnect(t, url, Auth{User: "train", Password: trainPW})
	read := mustConnect(t, url, Auth{User: "read", Password: readPW})

	const stream, subj = "TROUPE_EPISODES_m", "troupe.episodes.m"
	ctx := ctx10(t)
	ajs := admin.JetStream()
	if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"troupe.episodes.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	kv, err := ajs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "TROUPE_REGISTRY"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "m.a", []byte("front-end a")); err != nil {
		t.Fatal(err)
	}
	obs, err := ajs.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "TROUPE_WEIGHTS_m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, "step-1", []byte("weights 1")); err != nil {
		t.Fatal(err)
	}

	// Neither read nor train may publish an episode; nothing lands.
	for _, c := range []*client{read, train} {
		c.denied(t, "an episode", subj, func(ctx context.Context) error {
			_, err := c.JetStream().Publish(ctx, subj, []byte("made up"))
			return err
		})
		if err := c.Conn().Publish(subj, []byte("made up, core")); err != nil {
			t.Fatal(err)
		}
		c.Conn().Flush()
	}
	if n := streamMsgs(t, ajs, stream); n != 0 {
		t.Fatalf("after denied publishes the episode stream holds %d messages", n)
	}

	// rollout publishes an episode with JetStream's acknowledgement, reads
	// the weights, writes the registry; it cannot purge or delete the
	// stream, put weights, or take the trainer's consumer.
	rjs := rollout.JetStream()
	if _, err := rjs.Publish(ctx, subj, []byte("episode 1")); err != nil {
		t.Fatalf("rollout publishing an episode: %v", err)
	}
	robs, err := rjs.ObjectStore(ctx, "TROUPE_WEIGHTS_m")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := robs.GetBytes(ctx, "step-1"); err != nil || string(b) != "weights 1" {
		t.Fatalf("rollout reading weights: %q, %v", b, err)
	}
	rkv, err := rjs.KeyValue(ctx, "TROUPE_REGISTRY")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rkv.Put(ctx, "m.b", []byte("front-end b")); err != nil {
		t.Fatalf("rollout registering: %v", err)
	}
	rollout.denied(t, "a purge", "$JS.API.STREAM.PURGE."+stream, func(ctx context.Context) error {
		st, err := rjs.Stream(ctx10(t), stream)
		if err != nil {
			return err
		}
		return st.Purge(ctx)
	})
	rollout.denied(t, "deleting the stream", "$JS.API.STREAM.DELETE."+stream, func(ctx context.Context) error {
		return rjs.DeleteStream(ctx, stream)
	})
	rollout.denied(t, "putting weights", "$O.TROUPE_WEIGHTS_m.C.", func(ctx context.Context) error {
		_, err := robs.PutBytes(ctx, "step-2", []byte("forged weights"))
		return err
	})
	rollout.denied(t, "creating the trainer's consumer", "$JS.API.CONSUMER.CREATE."+stream+".trainer", func(ctx context.Context) error {
		_, err := rjs.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "trainer", AckPolicy: jetstream.AckExplicitPolicy})
		return err
	})
	if n := streamMsgs(t, ajs, stream); n != 1 {
		t.Fatalf("the episode stream holds %d messages, want rollout's 1", n)
	}

	// train creates its consumer, consumes and acknowledges (the work
	// queue then drops the episode), and puts weights.
	tjs := train.JetStream()
	cons, err := tjs.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "trainer", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("train creating its consumer: %v", err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("train acknowledging: %v", err)
		}
	}
	if err := batch.Error(); err != nil || len(got) != 1 || got[0] != "episode 1" {
		t.Fatalf("train consumed %q (err %v), want rollout's episode", got, err)
	}
	if n := streamMsgs(t, ajs, stream); n != 0 {
		t.Fatalf("after the trainer's acknowledgement the work queue holds %d messages", n)
	}
	tobs, err := tjs.ObjectStore(ctx, "TROUPE_WEIGHTS_m")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tobs.PutBytes(ctx, "step-2", []byte("weights 2")); err != nil {
		t.Fatalf("train putting weights: %v", err)
	}
	if err := tobs.Delete(ctx, "step-1"); err != nil {
		t.Fatalf("train pruning weights: %v", err)
	}

	// read lists the registry and reads weights; it cannot write the
	// registry, purge, delete a stream, or delete the trainer's consumer.
	rdjs := read.JetStream()
	rdkv, err := rdjs.KeyValue(ctx, "TROUPE_REGISTRY")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := rdkv.Keys(ctx)
	if err != nil || strings.Join(keys, ",") != "m.a,m.b" {
		t.Fatalf("read listing the registry: %q, %v", keys, err)
	}
	if e, err := rdkv.Get(ctx, "m.b"); err != nil || string(e.Value()) != "front-end b" {
		t.Fatalf("read getting a registry entry: %v", err)
	}
	rdobs, err := rdjs.ObjectStore(ctx, "TROUPE_WEIGHTS_m")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := rdobs.GetBytes(ctx, "step-2"); err != nil || string(b) != "weights 2" {
		t.Fatalf("read reading weights: %q, %v", b, err)
	}
	read.denied(t, "a registry put", "$KV.TROUPE_REGISTRY.m.c", func(ctx context.Context) error {
		_, err := rdkv.Put(ctx, "m.c", []byte("x"))
		return err
	})
	read.denied(t, "a purge", "$JS.API.STREAM.PURGE.KV_TROUPE_REGISTRY", func(ctx context.Context) error {
		st, err := rdjs.Stream(ctx10(t), "KV_TROUPE_REGISTRY")
		if err != nil {
			return err
		}
		return st.Purge(ctx)
	})
	read.denied(t, "deleting a bucket", "$JS.API.STREAM.DELETE.OBJ_TROUPE_WEIGHTS_m", func(ctx context.Context) error {
		return rdjs.DeleteObjectStore(ctx, "TROUPE_WEIGHTS_m")
	})
	read.denied(t, "deleting the trainer's consumer", "$JS.API.CONSUMER.DELETE."+stream+".trainer", func(ctx context.Context) error {
		return rdjs.DeleteConsumer(ctx, stream, "trainer")
	})
	if err := tjs.DeleteConsumer(ctx, stream, "trainer"); err != nil {
		t.Fatalf("train deleting its consumer: %v", err)
	}

	// Team episodes: a rollout front-end opens the bucket, joins and ends
	// members and beats; a trainer sweeps and discards; read may look but
	// not write.
	rteam, err := team.Open(ctx, rjs, 1)
	if err != nil {
		t.Fatalf("rollout opening the team bucket: %v", err)
	}
	if err := rteam.Join(ctx, "t1", 2, team.Member{Model: "m", Episode: "e1", Owner: "o"}); err != nil {
		t.Fatalf("rollout joining a team: %v", err)
	}
	if err := rteam.Beat(ctx, "o"); err != nil {
		t.Fatalf("rollout beating: %v", err)
	}
	tteam, err := team.Open(ctx, tjs, 1)
	if err != nil {
		t.Fatalf("train opening the team bucket: %v", err)
	}
	if d, err := tteam.Discard(ctx, "t1", "m", "e1", team.ReasonOwnerLost); err != nil || d.Decision != team.Discarded {
		t.Fatalf("train discarding a team: %+v, %v", d, err)
	}
	rdteam, err := rdjs.KeyValue(ctx, team.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rdteam.Get(ctx, team.Key("t1")); err != nil {
		t.Fatalf("read getting a team: %v", err)
	}
	read.denied(t, "a team put", "$KV."+team.Bucket+"."+team.Key("t2"), func(ctx context.Context) error {
		_, err := rdteam.Put(ctx, team.Key("t2"), []byte("{}"))
		return err
	})
}

func TestTokenAuth(t *testing.T) {
	_, url := startAuthServer(t, Config{ServerAuth: &ServerAuth{Token: "s3cret-token"}})
	if _, err := connect(t, url, Auth{}); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("no token: err %v, want an authorization violation", err)
	}
	if _, err := connect(t, url, Auth{Token: "wrong"}); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a wrong token: err %v, want an authorization violation", err)
	}
	c := mustConnect(t, url, Auth{Token: "s3cret-token"})
	if _, err := c.JetStream().CreateStream(ctx10(t), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("the token's admin creating a stream: %v", err)
	}
}

func TestNKeyAuth(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	_, url := startAuthServer(t, Config{ServerAuth: &ServerAuth{Users: []User{{NKey: pub, Role: RoleRollout}}}})
	if _, err := connect(t, url, Auth{NKeyFile: otherFile}); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("an unknown NKey: err %v, want an authorization violation", err)
	}
	c := mustConnect(t, url, Auth{NKeyFile: seedFile})
	// A rollout NKey user: may not delete streams.
	c.denied(t, "deleting a stream", "$JS.API.STREAM.DELETE.X", func(ctx context.Context) error {
		return c.JetStream().DeleteStream(ctx, "X")
	})
}

// TestCredsAuth connects with a .creds file to a server in operator mode,
// which a creds file needs: the user's JWT is signed by an account the
// operator signed. troupe nats runs no operator; this is the client side,
// for servers that do.
func TestCredsAuth(t *testing.T) {
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	sys, _ := nkeys.CreateAccount()
	spub, _ := sys.PublicKey()
	sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	resolver.Store(apub, ajwt)
	resolver.Store(spub, sjwt)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, JetStream: true, StoreDir: t.TempDir(),
		TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver, SystemAccount: spub})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("operator-mode server not ready")
	}

	creds := func(signer nkeys.KeyPair) string {
		ukp, _ := nkeys.CreateUser()
		upub, _ := ukp.PublicKey()
		ujwt, err := jwt.NewUserClaims(upub).Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		useed, _ := ukp.Seed()
		b, err := jwt.FormatUserConfig(ujwt, useed)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "user.creds")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	stranger, _ := nkeys.CreateAccount() // an account the operator never signed
	if _, err := connect(t, srv.ClientURL(), Auth{CredsFile: creds(stranger)}); err == nil {
		t.Fatal("a user of an unknown account connected")
	}
	c := mustConnect(t, srv.ClientURL(), Auth{CredsFile: creds(akp)})
	if _, err := c.JetStream().CreateStream(ctx10(t), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("a creds user creating a stream: %v", err)
	}
}

// tlsFiles writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all PEM, into dir.
type tlsFiles struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func writeTLSFiles(t *testing.T, dir string) tlsFiles {
	t.Helper()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "troupe test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) ([]byte, []byte) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der, kder
	}
	sc, sk := leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	cc, ck := leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return tlsFiles{
		ca:         write("ca.pem", "CERTIFICATE", caDER),
		serverCert: write("server.pem", "CERTIFICATE", sc), serverKey: write("server-key.pem", "EC PRIVATE KEY", sk),
		clientCert: write("client.pem", "CERTIFICATE", cc), clientKey: write("client-key.pem", "EC PRIVATE KEY", ck),
	}
}

func TestTLSClientCertificates(t *testing.T) {
	f := writeTLSFiles(t, t.TempDir())
	cfg := Config{ServerTLS: &ServerTLS{CertFile: f.serverCert, KeyFile: f.serverKey, ClientCAFile: f.ca}}
	if err := (Config{Listen: "0.0.0.0:0", ServerTLS: cfg.ServerTLS}).CheckListen(); err != nil {
		t.Fatalf("client certificates are authentication: %v", err)
	}
	srv, url := startAuthServer(t, cfg)
	// The embedded server's own connection is in-process, without TLS.
	if _, err := srv.JetStream().AccountInfo(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, url, Auth{TLSCA: f.ca}); err == nil {
		t.Fatal("a client without a certificate connected")
	}
	if _, err := connect(t, url, Auth{TLSCert: f.clientCert, TLSKey: f.clientKey}); err == nil {
		t.Fatal("a client that does not trust the server's CA connected")
	}
	c := mustConnect(t, url, Auth{TLSCert: f.clientCert, TLSKey: f.clientKey, TLSCA: f.ca})
	if !c.Conn().TLSRequired() {
		t.Fatal("the connection does not use TLS")
	}
	if _, err := c.JetStream().CreateKeyValue(ctx10(t), jetstream.KeyValueConfig{Bucket: "kv"}); err != nil {
		t.Fatal(err)
	}
}

// TestURLCredentialsRedacted: credentials in a URL work, and never appear
// in the client's log (a reconnect logs the URL), its ClientURL or Open's
// errors.
func TestURLCredentialsRedacted(t *testing.T) {
	const secret = "pa55-in-url"
	dir := t.TempDir()
	users := []User{{User: "ops", Password: secret, Role: RoleAdmin}}
	srv, url := startAuthServer(t, Config{DataDir: dir, ServerAuth: &ServerAuth{Users: users}})
	hostPort := strings.TrimPrefix(url, "nats://")
	credURL := "nats://ops:" + secret + "@" + hostPort
	c := mustConnect(t, credURL, Auth{})
	if got := c.ClientURL(); strings.Contains(got, secret) || got != "nats://ops:xxxxx@"+hostPort {
		t.Fatalf("ClientURL() = %q", got)
	}
	// A restart of the server on the same port: the client reconnects and
	// logs the URL it reconnected to.
	srv.Close()
	ctx := ctx10(t)
	again, err := Open(ctx, Config{Listen: hostPort, DataDir: dir, ServerAuth: &ServerAuth{Users: users}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(c.log.tail(1<<20), "reconnected to NATS") {
		if time.Now().After(deadline) {
			t.Fatalf("no reconnection logged:\n%s", c.log.tail(4096))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if log := c.log.tail(1 << 20); !strings.Contains(log, "ops:xxxxx@") {
		t.Fatalf("the reconnection's log line shows no redacted URL:\n%s", log)
	}
	// Errors: a refused password, a URL that does not parse, a server
	// that is not there.
	for _, u := range []string{
		"nats://ops:" + secret + "x@" + hostPort,
		"nats://ops:" + secret + "@" + hostPort + ":bad",
		"nats://" + secret + "@127.0.0.1:1",
	} {
		_, err := Open(ctx, Config{URL: u, ConnectTimeout: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(c.log, nil))})
		if err == nil {
			t.Fatalf("%s: connected", Redact(u))
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("an error shows the password: %v", err)
		}
	}
	if _, err := connect(t, credURL, Auth{User: "ops", Password: secret}); err == nil || !strings.Contains(err.Error(), "give one") || strings.Contains(err.Error(), secret) {
		t.Fatalf("credentials in the URL and in Auth: err %v", err)
	}
	if log := c.log.tail(1 << 20); strings.Contains(log, secret) {
		t.Fatalf("the log shows the password:\n%s", log)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"nats://host:4222":                       "nats://host:4222",
		"nats://alice:s3cret@host:4222":          "nats://alice:xxxxx@host:4222",
		"nats://tok3n@host:4222":                 "nats://xxxxx@host:4222",
		"tls://a:b@h1:4222,nats://h2:4222":       "tls://a:xxxxx@h1:4222,nats://h2:4222",
		"nats://a:p@ss/w:rd@host":                "nats://a:xxxxx@host",
		"alice:s3cret@host:4222":                 "alice:xxxxx@host:4222",
		"nats://h1:4222, nats://bob:pw@h2:4222 ": "nats://h1:4222, nats://bob:xxxxx@h2:4222 ",
		"":                                       "",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckListen(t *testing.T) {
	users := &ServerAuth{Users: []User{{User: "a", Password: "b", Role: RoleRead}}}
	for _, c := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{Listen: "127.0.0.1:4222"}, true},
		{Config{Listen: "[::1]:4222"}, true},
		{Config{Listen: "localhost:4222"}, true},
		{Config{Listen: "0.0.0.0:0"}, false},
		{Config{Listen: ":4222"}, false},
		{Config{Listen: "10.0.0.1:4222"}, false},
		{Config{Listen: "10.0.0.1:4222", ServerTLS: &ServerTLS{CertFile: "c", KeyFile: "k"}}, false}, // TLS without client certificates
		{Config{Listen: "10.0.0.1:4222", ServerAuth: users}, true},
		{Config{Listen: "0.0.0.0:4222", ServerAuth: &ServerAuth{Token: "t"}}, true},
	} {
		err := c.cfg.CheckListen()
		if (err == nil) != c.ok {
			t.Errorf("%+v: err %v, want ok=%v", c.cfg, err, c.ok)
		}
	}
}

func TestLoadAuthFile(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "auth.json")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, err := LoadAuthFile(write(`{"users": [{"user": "t", "password": "pw", "role": "train"}, {"nkey": "` + pub + `", "role": "rollout"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Users) != 2 || a.Users[1].NKey != pub || a.Users[0].Role != RoleTrain {
		t.Fatalf("loaded %+v", a)
	}
	for body, want := range map[string]string{
		`{"users": []}`: "no users",
		`{"users": [{"user": "t", "password": "hunter2", "role": "trainer"}]}`:                                        `role "trainer"`,
		`{"users": [{"user": "t", "password": "  ", "role": "train"}]}`:                                               "non-blank password",
		`{"users": [{"user": "t", "role": "train"}]}`:                                                                 "non-blank password",
		`{"users": [{"user": "t", "password": "hunter2", "nkey": "` + pub + `", "role": "train"}]}`:                   "not both",
		`{"users": [{"nkey": "SUAK", "role": "train"}]}`:                                                              "public NKey",
		`{"users": [{"user": "t", "password": "a", "role": "read"}, {"user": "t", "password": "b", "role": "read"}]}`: "twice",
		`{"users": [{"user": "t", "password": "hunter2", "role": "read", "perms": "all"}]}`:                           "unknown field",
	} {
		_, err := LoadAuthFile(write(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one saying %q", body, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("an error shows a password: %v", err)
		}
	}
	if err := (&ServerAuth{Token: "t", Users: a.Users}).Validate(); err == nil {
		t.Error("a token and users together passed")
	}
}

func TestAuthFlags(t *testing.T) {
	for _, env := range []string{EnvUser, EnvPassword, EnvToken, EnvCreds, EnvNKey} {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pw := file("pw", "  from-file\n")
	blank := file("blank", " \n")
	parse := func(args ...string) (Auth, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f := AddAuthFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f.Auth()
	}
	if a, err := parse(); err != nil || !a.Empty() {
		t.Fatalf("no flags, no environment: %+v, %v", a, err)
	}
	if a, err := parse("--nats-user", "u", "--nats-password-file", pw); err != nil || a.User != "u" || a.Password != "from-file" {
		t.Fatalf("user and password file: %+v, %v", a, err)
	}
	t.Setenv(EnvUser, "env-user")
	t.Setenv(EnvPassword, " from-env ")
	if a, err := parse(); err != nil || a.User != "env-user" || a.Password != "from-env" {
		t.Fatalf("from the environment: %+v, %v", a, err)
	}
	if a, err := parse("--nats-user", "flag-user", "--nats-password-file", pw); err != nil || a.User != "flag-user" || a.Password != "from-file" {
		t.Fatalf("flags win over the environment: %+v, %v", a, err)
	}
	os.Unsetenv(EnvUser)
	os.Unsetenv(EnvPassword)
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--nats-user", "u", "--nats-password-file", blank}, nil, "empty"},
		{[]string{"--nats-user", "u"}, map[string]string{EnvPassword: "  "}, "blank"},
		{nil, map[string]string{EnvToken: ""}, "blank"},
		{[]string{"--nats-user", "u"}, nil, "no password"},
		{[]string{"--nats-password-file", pw}, nil, "without a user"},
		{[]string{"--nats-token-file", pw}, map[string]string{EnvCreds: "/x.creds"}, "several kinds"},
		{[]string{"--nats-nkey-file", "/x.nk", "--nats-creds", "/x.creds"}, nil, "several kinds"},
		{[]string{"--nats-tls-cert", "c.pem"}, nil, "its key"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		_, err := parse(c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: err %v, want one saying %q", c.args, c.env, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "from-file") {
			t.Errorf("an error shows the secret: %v", err)
		}
		for k := range c.env {
			os.Unsetenv(k)
		}
	}
	if a, err := parse("--nats-token-file", pw); err != nil || a.Token != "from-file" {
		t.Fatalf("token file: %+v, %v", a, err)
	}
	t.Setenv(EnvCreds, " /etc/troupe/user.creds ")
	if a, err := parse(); err != nil || a.CredsFile != "/etc/troupe/user.creds" {
		t.Fatalf("creds from the environment: %+v, %v", a, err)
	}
}
