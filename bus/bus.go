package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultMaxPayload is the largest message an embedded server accepts
// (NATS's own default is 1 MiB; a finished episode of a long chat, or a
// chunk of published weights, can be larger).
const DefaultMaxPayload = 8 << 20

// Config configures Open. The zero value runs an in-memory embedded server
// (nothing survives the process); set DataDir to keep the JetStream store.
type Config struct {
	// URL of an external NATS server or cluster ("nats://host:4222",
	// comma-separated for several seeds). Empty: run an embedded server.
	URL string
	// Name names the connection (and the embedded server) in NATS's
	// monitoring; "troupe" when empty.
	Name string
	// Auth is the client's credentials for the server at URL (see Auth);
	// credentials in the URL itself ("nats://user:pass@host") work too,
	// but not both. Log lines and errors show a URL through Redact.
	Auth Auth

	// The fields below apply to the embedded server only.

	// DataDir is the embedded JetStream store directory. Empty: the
	// store is in memory and lost with the process.
	DataDir string
	// Listen, when set ("127.0.0.1:4222", "0.0.0.0:0"), lets other
	// processes connect to the embedded server; empty opens no port.
	Listen string
	// Cluster joins the embedded server to a cluster of servers.
	Cluster *Cluster
	// SyncAlways fsyncs every stored message before acknowledging it
	// (survives power loss, not only a killed process; slower).
	SyncAlways bool
	// MaxPayload bounds one message (DefaultMaxPayload when zero).
	MaxPayload int32
	// ServerAuth, when set, makes the listener authenticate clients and
	// gives each user its role's permissions. Nil accepts any client:
	// see CheckListen.
	ServerAuth *ServerAuth
	// ServerTLS, when set, makes the listener speak TLS only, and with a
	// client CA requires client certificates.
	ServerTLS *ServerTLS

	// ConnectTimeout bounds the wait for the server (10 s when zero).
	ConnectTimeout time.Duration
	// Logger receives the embedded server's warnings and errors and the
	// connection's disconnects; slog.Default() when nil.
	Logger *slog.Logger
}

// Cluster is an embedded server's place in a NATS cluster.
type Cluster struct {
	// Name is the cluster's name, the same on every node.
	Name string
	// Listen is the host:port this node accepts routes on.
	Listen string
	// Routes are the other nodes' route URLs ("nats://10.0.0.2:6222").
	Routes []string
	// Size is the number of nodes, so that streams get one copy per node
	// (at most 3, JetStream's usual replication factor). Zero: len(Routes)+1.
	Size int
	// Secret is the route secret, the same on every node: the node
	// accepts a route only from a server that gives it (as user RouteUser
	// with this password), and gives it on the routes it opens, so Routes
	// carry no credentials. Empty: any server that reaches Listen may join
	// (see CheckClusterListen). Never logged. Routes are not encrypted:
	// keep Listen on a private network.
	Secret string
}

// RouteUser is the user name under which a clustered embedded server gives
// Cluster.Secret on its routes and expects it on the routes it accepts. A
// stock nats-server joins such a cluster with
// cluster { authorization { user: troupe, password: SECRET } }.
const RouteUser = "troupe"

// bcryptHash is how nats-server recognizes a bcrypt hash in place of a
// password (server/auth.go's validBcryptPrefix).
var bcryptHash = regexp.MustCompile(`^\$2[abxy]\$\d{2}\$`)

// Bus is a connection to NATS with JetStream, and the embedded server when
// there is one. Close it when done.
type Bus struct {
	srv      *server.Server
	nc       *nats.Conn
	js       jetstream.JetStream
	replicas int
	log      *slog.Logger
	tmpStore string // the embedded store without a DataDir, removed by Close
}

// Open connects to cfg.URL, or starts an embedded server and connects to it.
func Open(ctx context.Context, cfg Config) (*Bus, error) {
	cfg.Name = cmp.Or(cfg.Name, "troupe")
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, 10*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Bus{replicas: 1, log: cfg.Logger.With("component", "nats")}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A server cut off by the network sends no reset: only unanswered
		// pings show it. nats.go's default (every 2 minutes, two missed)
		// leaves a client writing into a dead connection for 6 minutes.
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				b.log.Warn("disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { b.log.Info("reconnected to NATS", "url", Redact(nc.ConnectedUrl())) }),
		// Asynchronous errors, a permissions violation among them (the
		// server drops a publish it denies; a request then times out).
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				b.log.Warn("NATS error", "subject", sub.Subject, "err", err)
			} else {
				b.log.Warn("NATS error", "err", err)
			}
		}),
	}
	url := cfg.URL
	if url == "" {
		srv, self, err := startServer(cfg, b.log)
		if err != nil {
			return nil, err
		}
		opts = append(opts, self...)
		b.srv = srv
		if cfg.DataDir == "" {
			b.tmpStore = srv.JetStreamConfig().StoreDir
		}
		opts = append(opts, nats.InProcessServer(srv))
		if cfg.Cluster != nil {
			b.replicas = min(3, cmp.Or(cfg.Cluster.Size, len(cfg.Cluster.Routes)+1))
		}
	} else {
		if urlHasUserInfo(url) && cfg.Auth.hasCredentials() {
			return nil, fmt.Errorf("bus: %s carries credentials and Config.Auth gives others: give one", Redact(url))
		}
		auth, err := cfg.Auth.options()
		if err != nil {
			return nil, err
		}
		opts = append(opts, auth...)
		opts = append(opts, nats.RetryOnFailedConnect(false))
	}
	// A server that is still starting (or restarting) is waited for up
	// to ConnectTimeout rather than failing the process at once.
	deadline := time.Now().Add(cfg.ConnectTimeout)
	nc, err := nats.Connect(url, opts...)
	for err != nil && url != "" && errors.Is(err, nats.ErrNoServers) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(250 * time.Millisecond)
		nc, err = nats.Connect(url, opts...)
	}
	if err != nil {
		b.shutdown()
		where := Redact(url)
		if where == "" {
			where = "the embedded server"
		}
		return nil, fmt.Errorf("bus: connect to %s: %w", where, redactErr(err, url))
	}
	b.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	b.js = js
	// Fail here, not at the first publish, when the server has no JetStream.
	actx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if err := awaitJetStream(actx, js); err != nil {
		b.Close()
		return nil, fmt.Errorf("bus: %s has no usable JetStream (a server needs -js; a cluster, a majority of its nodes up): %w", cmp.Or(Redact(url), "the embedded server"), redactErr(err, url))
	}
	return b, nil
}

// startServer starts the embedded server and returns it with the options
// that let Open's in-process connection authenticate to it.
func startServer(cfg Config, log *slog.Logger) (srv *server.Server, self []nats.Option, err error) {
	o := &server.Options{
		ServerName: cfg.Name,
		JetStream:  true,
		NoSigs:     true,
		MaxPayload: cmp.Or(cfg.MaxPayload, DefaultMaxPayload),
		SyncAlways: cfg.SyncAlways,
		// A connection with a slow consumer must not stall the server.
		WriteDeadline: 10 * time.Second,
	}
	if self, err = applyServerAuth(o, cfg.ServerAuth, cfg.ServerTLS); err != nil {
		return nil, nil, err
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, nil, fmt.Errorf("bus: data dir: %w", err)
		}
		o.StoreDir = cfg.DataDir
	} else {
		// No data dir: a store that lives and dies with the process.
		d, err := os.MkdirTemp("", "troupe-nats-")
		if err != nil {
			return nil, nil, fmt.Errorf("bus: temporary store: %w", err)
		}
		o.StoreDir = d
	}
	if cfg.Listen == "" {
		o.DontListen = true
	} else {
		host, port, err := splitHostPort(cfg.Listen)
		if err != nil {
			return nil, nil, fmt.Errorf("bus: listen address %q: %w", cfg.Listen, err)
		}
		o.Host, o.Port = host, port
	}
	if c := cfg.Cluster; c != nil {
		if c.Name == "" || c.Listen == "" {
			return nil, nil, errors.New("bus: a cluster needs a name and a listen address")
		}
		if cfg.Listen == "" {
			// nats-server starts its routes only once its client listener
			// is up: without one they never start, and Shutdown waits for
			// them forever.
			return nil, nil, errors.New("bus: a clustered server needs a client listen address (Config.Listen)")
		}
		if cfg.DataDir == "" {
			return nil, nil, errors.New("bus: a clustered server needs a data dir (replicated streams are stored in files)")
		}
		host, port, err := splitHostPort(c.Listen)
		if err != nil {
			return nil, nil, fmt.Errorf("bus: cluster listen address %q: %w", c.Listen, err)
		}
		o.Cluster = server.ClusterOpts{Name: c.Name, Host: host, Port: port}
		if c.Secret != "" {
			// nats-server would take a secret shaped like a bcrypt hash
			// for one and compare the plain secret other nodes give
			// against it: no route would ever be accepted.
			if bcryptHash.MatchString(c.Secret) {
				return nil, nil, errors.New("bus: the cluster's route secret looks like a bcrypt hash: every node gives the secret itself, so give the secret, not its hash")
			}
			// nats-server requires route authentication when the cluster
			// has a user, and gives these credentials on the routes that
			// gossip makes it open to nodes that Routes do not name.
			o.Cluster.Username, o.Cluster.Password = RouteUser, c.Secret
		}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Host == "" {
				return nil, nil, fmt.Errorf("bus: route %q is not a URL like nats://host:6222", Redact(r))
			}
			if u.User != nil {
				// A secret on the command line is in ps's output: it
				// comes from Cluster.Secret, the same for every route.
				return nil, nil, fmt.Errorf("bus: route %q carries credentials: routes take the cluster's route secret (Cluster.Secret) instead", Redact(r))
			}
			if c.Secret != "" {
				// nats-server gives a route it opens the credentials of
				// its URL.
				u.User = url.UserPassword(RouteUser, c.Secret)
			}
			o.Routes = append(o.Routes, u)
		}
	}
	if cfg.DataDir == "" {
		defer func() {
			if err != nil {
				os.RemoveAll(o.StoreDir)
			}
		}()
	}
	srv, err = server.NewServer(o)
	if err != nil {
		return nil, nil, fmt.Errorf("bus: embedded NATS server: %w", err)
	}
	srv.SetLoggerV2(slogAdapter{log}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(cfg.ConnectTimeout) {
		srv.Shutdown()
		return nil, nil, fmt.Errorf("bus: embedded NATS server not ready after %v", cfg.ConnectTimeout)
	}
	return srv, self, nil
}

func splitHostPort(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// Conn is the NATS connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream is the JetStream API over Conn.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Embedded reports whether the server runs inside this process.
func (b *Bus) Embedded() bool { return b.srv != nil }

// Server is the embedded server, nil when connected to an external one.
func (b *Bus) Server() *server.Server { return b.srv }

// ClientURL is the URL other processes connect to: the embedded server's
// listen address (empty when it opens no port), or the connected URL with
// its credentials redacted.
func (b *Bus) ClientURL() string {
	if b.srv == nil {
		return Redact(b.nc.ConnectedUrl())
	}
	if a := b.srv.Addr(); a != nil {
		return "nats://" + a.String()
	}
	return ""
}

// Replicas is the number of copies a stream or bucket should keep: the
// embedded cluster's size (at most 3), else 1. On an external server the
// caller decides (see StreamReplicas).
func (b *Bus) Replicas() int { return b.replicas }

// SetReplicas overrides Replicas (for an external cluster).
func (b *Bus) SetReplicas(n int) {
	if n > 0 {
		b.replicas = n
	}
}

// Close drains the connection and shuts the embedded server down, waiting
// for it so that its store is closed before Close returns.
func (b *Bus) Close() error {
	if b.nc != nil {
		// Acknowledgements are published without waiting: flush them
		// before the connection goes, or a clean shutdown could leave an
		// acknowledged episode to be replayed.
		b.nc.FlushTimeout(2 * time.Second)
		b.nc.Close()
	}
	b.shutdown()
	return nil
}

func (b *Bus) shutdown() {
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
	if b.tmpStore != "" {
		os.RemoveAll(filepath.Dir(b.tmpStore))
		b.tmpStore = ""
	}
}

// Subject turns a free-form name (a model's name) into one subject token:
// NATS subjects split on '.', and '*', '>' and whitespace are reserved.
func Subject(name string) string {
	var sb strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			sb.WriteRune(r)
		default:
			sb.WriteByte('_')
		}
	}
	if sb.Len() == 0 {
		return "_"
	}
	return sb.String()
}

type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(f string, v ...any) { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Warnf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Fatalf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Errorf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Debugf(f string, v ...any)  {}
func (a slogAdapter) Tracef(f string, v ...any)  {}
