package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/dashboard"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/registry"
)

var dashboardCommand = command{
	name:    "dashboard",
	summary: "serve a live dashboard of a run directory: each agent's reward, loss, KL, entropy and more side by side, drill-down into a step's groups and completions",
	setup:   dashboardSetup,
	examples: `  troupe dashboard --checkpoint-dir runs/team --listen 127.0.0.1:8080
  troupe dashboard --checkpoint-dir runs/team --nats nats://10.0.0.1:4222 --nats-user dashboard   # also the registry's servers`,
}

func dashboardSetup(fs *flag.FlagSet) func(cmdIO, []string) error {
	dir := fs.String("checkpoint-dir", "", "the run directory (swarm serve's --checkpoint-dir), or a directory holding several (required)")
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on (loopback only: the pages show the run's completions)")
	natsURL := fs.String("nats", "", "NATS server whose registry lists the run's swarm servers (credentials: the --nats-* flags)")
	natsAuth := bus.AddAuthFlags(fs)
	logger := logFlags(fs)
	return func(cio cmdIO, _ []string) error {
		log, err := logger(cio.stderr)
		if err != nil {
			return err
		}
		if *dir == "" {
			return errors.New("dashboard: --checkpoint-dir is required")
		}
		return runDashboard(*dir, *listen, *natsURL, natsAuth, cio.stdout, log)
	}
}

func runDashboard(dir, listen, natsURL string, natsAuth *bus.AuthFlags, stdout io.Writer, log *slog.Logger) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return errors.New("dashboard: --listen " + listen + ": " + err.Error())
	}
	if err := swarm.CheckListen(host, ""); err != nil {
		return errors.New("dashboard: --listen: only a loopback address is allowed (the pages show every completion of the run)")
	}
	cfg := dashboard.Config{Dir: dir, Logger: log}
	if natsURL != "" {
		auth, err := natsAuth.Auth()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b, err := bus.Open(ctx, bus.Config{URL: natsURL, Auth: auth, Logger: log})
		cancel()
		if err != nil {
			return err
		}
		defer b.Close()
		cfg.Servers = func(ctx context.Context) ([]dashboard.ServerInfo, error) {
			list, err := registry.List(ctx, b.JetStream(), "")
			out := make([]dashboard.ServerInfo, len(list))
			for i, f := range list {
				out[i] = dashboard.ServerInfo{Model: f.Model, URL: f.URL, Role: f.Role, GlobalStep: f.GlobalStep, OpenEpisodes: f.OpenEpisodes, Updated: f.Updated}
			}
			return out, err
		}
	}
	d, err := dashboard.New(cfg)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	doors, err := openDoorsAt([]string{listen}, httpx.Timeouts{Write: -1}, log, errc)
	if err != nil {
		d.Close()
		return err
	}
	doors[0].set(httpx.Guard(d, httpx.GuardConfig{})) // a local page other sites must not read through the browser
	log.Info("dashboard listening", "url", "http://"+doors[0].ln.Addr().String()+"/", "dir", dir)
	io.WriteString(stdout, "http://"+doors[0].ln.Addr().String()+"/\n")
	runErr := waitSignal(log, errc)
	d.Close() // ends the event streams, so that the drain does not wait for them
	shutdown(doors, nil)
	return runErr
}
