package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/troupe-ml/troupe/swarm"
)

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  troupe swarm serve [flags]     run swarm server(s)
  troupe swarm models            list the model presets
  troupe lm COMMAND [flags]      pretrained Hugging Face models: logprobs, tokenize, render, generate, init, export
Run "troupe swarm serve -h" for the flags.
`)
	os.Exit(2)
}

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "lm" {
		if err := lmMain(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return
			}
			fmt.Fprintln(os.Stderr, "troupe lm:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 3 || os.Args[1] != "swarm" {
		usage()
	}
	switch os.Args[2] {
	case "serve":
		if err := serve(os.Args[3:]); err != nil {
			fmt.Fprintln(os.Stderr, "troupe:", err)
			os.Exit(1)
		}
	case "models":
		listModels()
	default:
		usage()
	}
}

func listModels() {
	var names []string
	for n := range swarm.Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := swarm.Presets[n]
		m := swarm.NewTabularPolicy(p)
		fmt.Printf("%-9s tabular order-%d byte policy, %d parameters, %s lr %g\n", n, p.Order, m.NumParams(), p.Optimizer, p.LR)
	}
	names = names[:0]
	for n := range swarm.LMPresets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := swarm.LMPresets[n]
		fmt.Printf("%-9s transformer dim %d, %d layers, %d heads, context %d, adam lr %g\n", n, c.LM.Dim, c.LM.Layers, c.LM.Heads, c.LM.MaxLen, c.LR)
	}
}

func newModel(name string) (swarm.Model, error) {
	if _, ok := swarm.LMPresets[name]; ok {
		return swarm.NewLMPreset(name)
	}
	return swarm.NewPresetModel(name)
}

type spec struct {
	model string
	port  int
}

func parseMulti(s string) ([]spec, error) {
	var out []spec
	for _, part := range strings.Split(s, ",") {
		name, port, ok := strings.Cut(strings.TrimSpace(part), ":")
		p, err := strconv.Atoi(port)
		if !ok || err != nil || p < 0 || p > 65535 {
			return nil, fmt.Errorf("--multi entry %q: want model:port", part)
		}
		out = append(out, spec{name, p})
	}
	return out, nil
}

func serve(args []string) error {
	fs := flag.NewFlagSet("troupe swarm serve", flag.ContinueOnError)
	model := fs.String("model", "small", "model preset (see troupe swarm models)")
	port := fs.Int("port", 10086, "port to listen on")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	multi := fs.String("multi", "", "several servers in this process: model:port,model:port,...")
	publicURL := fs.String("public-url", "", "base URL handed to clients in openai_base_url (default: the request's Host)")
	ckptDir := fs.String("checkpoint-dir", "", "checkpoint directory (one subdirectory per model with --multi)")
	ckptEvery := fs.Int("checkpoint-every", 0, "checkpoint every N training steps (0: only on shutdown)")
	config := fs.String("config", "", "AgentJet training YAML to apply at start")
	batch := fs.Int("batch-size", 0, "tasks per training batch (overrides the config)")
	repeat := fs.Int("num-repeat", 0, "episodes per task (overrides the config)")
	autostart := fs.Bool("autostart", false, "start the engine at once instead of waiting for start_engine")
	maxBody := fs.Int64("max-body-bytes", 1<<20, "request body limit")
	maxReq := fs.Int("max-request-tokens", 16384, "n × max_tokens limit of one chat completion")
	maxEp := fs.Int("max-episode-tokens", 1<<20, "tokens one episode may record (prompt + sampled)")
	var hfo hfServeOptions
	hfo.flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	specs := []spec{{*model, *port}}
	if *multi != "" {
		var err error
		if specs, err = parseMulti(*multi); err != nil {
			return err
		}
	}
	mk := newModel
	if hfo.modelDir != "" {
		var closeBase func() error
		var err error
		if specs, mk, closeBase, err = hfo.models(*port); err != nil {
			return err
		}
		defer closeBase()
	}
	tc := swarm.DefaultTrainConfig()
	if *config != "" {
		y, err := os.ReadFile(*config)
		if err != nil {
			return err
		}
		if err := tc.ApplyYAML(string(y)); err != nil {
			return fmt.Errorf("%s: %w", *config, err)
		}
	}
	if *batch > 0 {
		tc.BatchSize = *batch
	}
	if *repeat > 0 {
		tc.NumRepeat = *repeat
	}
	tc.CheckpointEvery = *ckptEvery
	admin := os.Getenv("TROUPE_ADMIN_TOKEN")
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	type running struct {
		s  *swarm.Server
		hs *http.Server
	}
	var rs []running
	errc := make(chan error, len(specs))
	for _, sp := range specs {
		m, err := mk(sp.model)
		if err != nil {
			return err
		}
		dir := *ckptDir
		if dir != "" && len(specs) > 1 {
			dir = filepath.Join(dir, fmt.Sprintf("%s-%d", sp.model, sp.port))
		}
		s, err := swarm.NewServer(swarm.ServerConfig{Model: m, Train: tc, PublicURL: *publicURL, AdminToken: admin,
			CheckpointDir: dir, MaxBodyBytes: *maxBody, MaxRequestTokens: *maxReq, MaxEpisodeTokens: *maxEp, Logger: log})
		if err != nil {
			return err
		}
		if *autostart {
			if err := s.Start(); err != nil {
				return err
			}
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(sp.port)))
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
		rs = append(rs, running{s, hs})
		log.Info("swarm server listening", "model", sp.model, "addr", ln.Addr().String(), "autostart", *autostart, "admin_token", admin != "")
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var runErr error
	select {
	case s := <-sig:
		log.Info("shutting down", "signal", s.String())
	case runErr = <-errc:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func(r running) {
			defer wg.Done()
			r.hs.Shutdown(ctx)
			if err := r.s.Close(); err != nil {
				log.Error("final checkpoint failed", "err", err)
			}
		}(r)
	}
	wg.Wait()
	return runErr
}
