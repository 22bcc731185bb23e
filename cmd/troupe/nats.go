package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/swarm/registry"
)

// natsOptions are the flags of troupe nats.
type natsOptions struct {
	listen, dataDir, name, cluster, clusterListen, routes string
	clusterTokenFile                                      string
	syncAlways                                            bool
	authFile, tokenFile, tlsCert, tlsKey, tlsCA           string
}

// natsCmd runs "troupe nats": a NATS server with JetStream (the pinned
// nats-server module, as troupe embeds it) as a process of its own, for
// servers and trainers on several machines to share (--nats on their side),
// alone or as one node of a cluster.
func natsCmd(fs *flag.FlagSet) func(cmdIO, []string) error {
	o := new(natsOptions)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:4222", "client address (host:port)")
	fs.StringVar(&o.dataDir, "data-dir", "", "JetStream store directory (required)")
	fs.StringVar(&o.name, "name", "", "server name (default: troupe-nats-<port>)")
	fs.StringVar(&o.cluster, "cluster", "", "cluster name; with it, --cluster-listen, --routes and --cluster-token-file make this server one node of a cluster")
	fs.StringVar(&o.clusterListen, "cluster-listen", "", "route address of this node (host:port)")
	fs.StringVar(&o.routes, "routes", "", "the other nodes' route URLs, comma-separated (nats://host:6222,...), without credentials")
	fs.StringVar(&o.clusterTokenFile, "cluster-token-file", "", "file holding the route secret, the same on every node: routes are accepted only from nodes that give it (required with a --cluster-listen beyond loopback; routes are not encrypted, so keep them on a private network)")
	fs.BoolVar(&o.syncAlways, "sync-always", false, "fsync every stored message (survives power loss; slower)")
	fs.StringVar(&o.authFile, "auth-file", "", `JSON file of the users and their roles: {"users": [{"user": "U", "password": "P or a bcrypt hash", "role": "R"}, {"nkey": "U... public key", "role": "R"}]}, R one of rollout, train, read, admin (see package bus)`)
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding one token that every client gives, with the admin role (instead of --auth-file)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "server certificate (PEM): clients must use TLS; with --tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the server certificate's key (PEM)")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "CA certificates (PEM): clients must present a certificate they sign")
	logger := logFlags(fs)
	return func(cio cmdIO, _ []string) error { return o.run(cio, logger) }
}

func (o *natsOptions) run(cio cmdIO, logger func(io.Writer) (*slog.Logger, error)) error {
	stdout, stderr := cio.stdout, cio.stderr
	log, err := logger(stderr)
	if err != nil {
		return err
	}
	if o.dataDir == "" {
		fmt.Fprintln(stderr, "troupe nats: --data-dir is required")
		return errUsage
	}
	// Cluster nodes on separate machines start minutes apart; each waits
	// for a majority.
	cfg := bus.Config{Listen: o.listen, DataDir: o.dataDir, Name: o.name, SyncAlways: o.syncAlways, Logger: log, ConnectTimeout: time.Minute}
	switch {
	case o.authFile != "" && o.tokenFile != "":
		return errors.New("nats: --auth-file and --token-file: give one")
	case o.authFile != "":
		if cfg.ServerAuth, err = bus.LoadAuthFile(o.authFile); err != nil {
			return fmt.Errorf("nats: %w", err)
		}
	case o.tokenFile != "":
		tok, err := bus.ReadSecretFile(o.tokenFile)
		if err != nil {
			return fmt.Errorf("nats: --token-file: %w", err)
		}
		cfg.ServerAuth = &bus.ServerAuth{Token: tok}
	}
	switch {
	case o.tlsCert != "" && o.tlsKey != "":
		cfg.ServerTLS = &bus.ServerTLS{CertFile: o.tlsCert, KeyFile: o.tlsKey, ClientCAFile: o.tlsCA}
	case o.tlsCert != "" || o.tlsKey != "" || o.tlsCA != "":
		return errors.New("nats: TLS needs --tls-cert and --tls-key (--tls-ca adds client certificates)")
	}
	if err := cfg.CheckListen(); err != nil {
		return fmt.Errorf("nats: %w; add --auth-file FILE (users and their roles), --token-file FILE (one admin token) or --tls-ca FILE with --tls-cert and --tls-key (client certificates), or listen on 127.0.0.1", err)
	}
	if cfg.Name == "" {
		_, port, _ := strings.Cut(o.listen, ":")
		cfg.Name = "troupe-nats-" + port
	}
	if o.cluster != "" {
		c := &bus.Cluster{Name: o.cluster, Listen: o.clusterListen}
		for _, r := range strings.Split(o.routes, ",") {
			if r = strings.TrimSpace(r); r != "" {
				c.Routes = append(c.Routes, r)
			}
		}
		if o.clusterTokenFile != "" {
			if c.Secret, err = bus.ReadSecretFile(o.clusterTokenFile); err != nil {
				return fmt.Errorf("nats: --cluster-token-file: %w", err)
			}
		}
		cfg.Cluster = c
	} else if o.clusterTokenFile != "" || o.clusterListen != "" || o.routes != "" {
		return errors.New("nats: --cluster-listen, --routes and --cluster-token-file need --cluster NAME")
	}
	if err := cfg.CheckClusterListen(); err != nil {
		return fmt.Errorf("nats: %w; add --cluster-token-file FILE (a route secret, the same on every node), or listen for routes on 127.0.0.1", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	b, err := bus.Open(ctx, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer b.Close()
	log.Info("nats listening", "url", bus.Redact(b.ClientURL()), "store", o.dataDir, "cluster", o.cluster, "auth", authMode(cfg), "route_auth", routeAuthMode(cfg))
	// The URL on stdout lets a script that asked for port 0 find the port.
	fmt.Fprintln(stdout, b.ClientURL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	<-sig
	log.Info("nats shutting down")
	return nil
}

// authMode names how the server authenticates clients, for its log.
func authMode(cfg bus.Config) string {
	mode := "none"
	switch a := cfg.ServerAuth; {
	case a != nil && a.Token != "":
		mode = "token"
	case a != nil:
		mode = fmt.Sprintf("%d users", len(a.Users))
	}
	if t := cfg.ServerTLS; t != nil && t.ClientCAFile != "" {
		mode += ", client certificates"
	} else if t != nil {
		mode += ", tls"
	}
	return mode
}

// frontendsCmd lists the registry: every swarm server on a NATS, as JSON
// lines.
func frontendsCmd(fs *flag.FlagSet) func(cmdIO, []string) error {
	url := fs.String("nats", "nats://127.0.0.1:4222", "NATS server the swarm servers use (credentials: the --nats-* flags)")
	model := fs.String("model", "", "only this model's servers")
	natsAuth := bus.AddAuthFlags(fs)
	return func(cio cmdIO, _ []string) error {
		return listFrontends(cio.stdout, cio.stderr, *url, *model, natsAuth)
	}
}

func listFrontends(stdout, stderr io.Writer, url0, model0 string, natsAuth *bus.AuthFlags) error {
	url, model := &url0, &model0
	auth, err := natsAuth.Auth()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: *url, Auth: auth, Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer b.Close()
	list, err := registry.List(ctx, b.JetStream(), *model)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for _, f := range list {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}

// routeAuthMode names how a cluster node authenticates routes, for its log:
// never the secret itself.
func routeAuthMode(cfg bus.Config) string {
	switch c := cfg.Cluster; {
	case c == nil:
		return "no cluster"
	case c.Secret != "":
		return "secret"
	}
	return "none"
}
