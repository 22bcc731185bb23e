package main

import (
	"context"
	"encoding/json"
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
	"github.com/troupe-ml/troupe/swarm"
)

// natsCmd runs "troupe nats": a NATS server with JetStream (the pinned
// nats-server module, as troupe embeds it) as a process of its own, for
// servers and trainers on several machines to share (--nats on their side),
// alone or as one node of a cluster.
func natsCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("troupe nats", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:4222", "client address (host:port)")
	dataDir := fs.String("data-dir", "", "JetStream store directory (required)")
	name := fs.String("name", "", "server name (default: troupe-nats-<port>)")
	cluster := fs.String("cluster", "", "cluster name; with it, --cluster-listen and --routes make this server one node of a cluster")
	clusterListen := fs.String("cluster-listen", "", "route address of this node (host:port)")
	routes := fs.String("routes", "", "the other nodes' route URLs, comma-separated (nats://host:6222,...)")
	syncAlways := fs.Bool("sync-always", false, "fsync every stored message (survives power loss; slower)")
	logger := logFlags(fs)
	if err := parseCmdFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	log, err := logger(stderr)
	if err != nil {
		return err
	}
	if *dataDir == "" {
		fmt.Fprintln(stderr, "troupe nats: --data-dir is required")
		return errUsage
	}
	// Cluster nodes on separate machines start minutes apart; each waits
	// for a majority.
	cfg := bus.Config{Listen: *listen, DataDir: *dataDir, Name: *name, SyncAlways: *syncAlways, Logger: log, ConnectTimeout: time.Minute}
	if cfg.Name == "" {
		_, port, _ := strings.Cut(*listen, ":")
		cfg.Name = "troupe-nats-" + port
	}
	if *cluster != "" {
		c := &bus.Cluster{Name: *cluster, Listen: *clusterListen}
		for _, r := range strings.Split(*routes, ",") {
			if r = strings.TrimSpace(r); r != "" {
				c.Routes = append(c.Routes, r)
			}
		}
		cfg.Cluster = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	b, err := bus.Open(ctx, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer b.Close()
	log.Info("nats listening", "url", b.ClientURL(), "store", *dataDir, "cluster", *cluster)
	// The URL on stdout lets a script that asked for port 0 find the port.
	fmt.Fprintln(stdout, b.ClientURL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	<-sig
	log.Info("nats shutting down")
	return nil
}

// frontendsCmd lists the registry: every swarm server on a NATS, as JSON
// lines.
func frontendsCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("troupe swarm frontends", flag.ContinueOnError)
	url := fs.String("nats", "nats://127.0.0.1:4222", "NATS server the swarm servers use")
	model := fs.String("model", "", "only this model's servers")
	if err := parseCmdFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: *url, Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer b.Close()
	list, err := swarm.ListFrontends(ctx, b.JetStream(), *model)
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
