package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/balance"
	"github.com/troupe-ml/troupe/swarm/lmmodel"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// command is one entry of the subcommand tree: a leaf runs, a group
// dispatches to its subcommands. A new subcommand is one more entry.
type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) error
	sub           []command
}

var commands = []command{
	{name: "swarm", summary: "swarm servers (AgentJet's protocol, OpenAI chat completions)", sub: []command{
		{name: "serve", summary: "run swarm server(s)", run: serveCmd},
		{name: "models", summary: "list the model presets", run: modelsCmd},
		{name: "frontends", summary: "list the servers registered on a NATS (model, URL, role, step)", run: frontendsCmd},
	}},
	{name: "lm", summary: "pretrained Hugging Face models: logprobs, tokenize, render, generate, init, export", run: lmCmd},
	{name: "nats", summary: "a NATS server with JetStream for several processes or machines (the one troupe embeds)", run: natsCmd},
	{name: "version", summary: "print the version", run: versionCmd},
}

func lmCmd(args []string, stdout, stderr io.Writer) error {
	err := lmMain(args, os.Stdin, stdout)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		err = fmt.Errorf("lm: %w", err)
	}
	return err
}

// errUsage marks a command-line mistake (exit status 2, usage printed).
var errUsage = errors.New("usage")

func main() { os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr)) }

// runCLI executes the command line and returns the exit status: 0 on success
// and for -h, 2 for usage errors, 1 for failures.
func runCLI(args []string, stdout, stderr io.Writer) int {
	err := dispatch(commands, "troupe", args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintln(stderr, "troupe:", err)
		return 1
	}
}

func dispatch(cmds []command, path string, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printCommands(stderr, path, cmds)
		return errUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printCommands(stdout, path, cmds)
		return flag.ErrHelp
	}
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		if c.sub != nil {
			return dispatch(c.sub, path+" "+c.name, args[1:], stdout, stderr)
		}
		return c.run(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n", path, args[0])
	printCommands(stderr, path, cmds)
	return errUsage
}

func printCommands(w io.Writer, path string, cmds []command) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", path)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun \"%s <command> -h\" for a command's flags.\n", path)
}

// parseCmdFlags parses a subcommand's flags: -h prints the flags to stdout
// (flag.ErrHelp, exit 0), a mistake prints them to stderr (errUsage).
func parseCmdFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case err == nil:
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return errUsage
		}
		return nil
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "usage of %s:\n", fs.Name())
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return flag.ErrHelp
	default:
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return errUsage
	}
}

// logFlags adds --log-level and --log-format to a subcommand; the returned
// function builds the logger once the flags are parsed.
func logFlags(fs *flag.FlagSet) func(w io.Writer) (*slog.Logger, error) {
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	format := fs.String("log-format", "text", "log format: text or json")
	return func(w io.Writer) (*slog.Logger, error) {
		var lv slog.Level
		if err := lv.UnmarshalText([]byte(*level)); err != nil {
			return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", *level)
		}
		opts := &slog.HandlerOptions{Level: lv}
		switch *format {
		case "text":
			return slog.New(slog.NewTextHandler(w, opts)), nil
		case "json":
			return slog.New(slog.NewJSONHandler(w, opts)), nil
		}
		return nil, fmt.Errorf("--log-format %q: want text or json", *format)
	}
}

func versionCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("troupe version", flag.ContinueOnError)
	if err := parseCmdFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintln(stdout, versionString())
	return nil
}

// versionString is the module version and the VCS state the binary was
// built from, as the Go toolchain recorded them.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "troupe (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, when, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	out := "troupe " + v
	if rev != "" {
		out += " " + rev[:min(12, len(rev))] + dirty
	}
	if when != "" {
		out += " " + when
	}
	return out + " " + bi.GoVersion
}

func modelsCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("troupe swarm models", flag.ContinueOnError)
	if err := parseCmdFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	var names []string
	for n := range tabular.Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := tabular.Presets[n]
		m := policies.NewTabular(p)
		fmt.Fprintf(stdout, "%-9s tabular order-%d byte policy, %d parameters, %s lr %g\n", n, p.Order, m.NumParams(), p.Optimizer, p.LR)
	}
	names = names[:0]
	for n := range lmmodel.Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := lmmodel.Presets[n]
		fmt.Fprintf(stdout, "%-9s transformer dim %d, %d layers, %d heads, context %d, adam lr %g\n", n, c.LM.Dim, c.LM.Layers, c.LM.Heads, c.LM.MaxLen, c.LR)
	}
	return nil
}

func newModel(name string) (swarm.Model, error) {
	if _, ok := lmmodel.Presets[name]; ok {
		return lmmodel.NewPreset(name)
	}
	return tabular.NewPreset(name)
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

// serve runs "troupe swarm serve" with the process's stdout and stderr.
func serve(args []string) error { return serveCmd(args, os.Stdout, os.Stderr) }

// serveOptions are the flags of troupe swarm serve.
type serveOptions struct {
	model, host, multi, publicURL, ckptDir, config, adminTokenFile, pprofAddr string
	natsURL, dataDir, role                                                    string
	port, ckptEvery, batch, repeat, maxReq, maxEp, maxPerClient, replicas     int
	balance, maxPerAddr                                                       int
	autostart                                                                 bool
	maxBody                                                                   int64
	maxReward                                                                 float64
	maxDiscard, readHeader, read, write, idle                                 time.Duration
	logger                                                                    func(io.Writer) (*slog.Logger, error)
	hf                                                                        hfServeOptions
}

func serveFlags(fs *flag.FlagSet) *serveOptions {
	o := &serveOptions{}
	fs.StringVar(&o.model, "model", "small", "model preset (see troupe swarm models)")
	fs.IntVar(&o.port, "port", 10086, "port to listen on")
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on; beyond loopback an admin token is required")
	fs.StringVar(&o.multi, "multi", "", "several servers in this process: model:port,model:port,...")
	fs.StringVar(&o.publicURL, "public-url", "", "base URL handed to clients in openai_base_url (default: the request's Host)")
	fs.StringVar(&o.ckptDir, "checkpoint-dir", "", "run directory: checkpoint and training metrics (one subdirectory per model with --multi)")
	fs.IntVar(&o.ckptEvery, "checkpoint-every", 1, "checkpoint every N training steps (0: only on shutdown); episodes are released from the journal once a checkpoint holds them")
	fs.StringVar(&o.natsURL, "nats", "", "NATS server or cluster holding the episode journal (nats://host:4222); default: a server embedded in this process, storing under --data-dir")
	fs.StringVar(&o.role, "role", "", "rollout (serve and publish episodes, load published weights) or train (consume episodes, train, publish weights); default both in one process. Needs --nats")
	fs.IntVar(&o.balance, "balance-episodes", 0, "with several models (--multi, --agents): share this many in-flight episodes among them by their reward progress (ensemble's softmax scheduler); 0 leaves each its own limit")
	fs.IntVar(&o.replicas, "nats-replicas", 1, "copies of the episode stream and weights bucket on a NATS cluster (3 survives one node's loss)")
	fs.StringVar(&o.dataDir, "data-dir", "", "embedded NATS store (default: <checkpoint-dir>/nats; without either, finished episodes live in memory only)")
	fs.StringVar(&o.config, "config", "", "AgentJet training YAML to apply at start")
	fs.IntVar(&o.batch, "batch-size", 0, "tasks per training batch (overrides the config)")
	fs.IntVar(&o.repeat, "num-repeat", 0, "episodes per task (overrides the config)")
	fs.BoolVar(&o.autostart, "autostart", false, "start the engine at once instead of waiting for start_engine")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "file holding the admin token (default: the TROUPE_ADMIN_TOKEN environment variable)")
	fs.Int64Var(&o.maxBody, "max-body-bytes", 1<<20, "request body limit")
	fs.IntVar(&o.maxReq, "max-request-tokens", 16384, "n × max_tokens limit of one chat completion")
	fs.IntVar(&o.maxEp, "max-episode-tokens", 1<<20, "tokens one episode may record (prompt + sampled)")
	fs.IntVar(&o.maxPerClient, "max-open-per-client", 256, "open episodes one client_uuid may hold (429 beyond)")
	fs.IntVar(&o.maxPerAddr, "max-open-per-address", 1024, "open episodes all clients at one remote IP may hold (429 beyond; loopback and admins exempt)")
	fs.DurationVar(&o.maxDiscard, "max-discard-timeout", time.Hour, "largest discard_episode_timeout a claim may ask for")
	fs.Float64Var(&o.maxReward, "max-abs-reward", 1e6, "largest |reward| end_episode accepts")
	fs.DurationVar(&o.readHeader, "read-header-timeout", 10*time.Second, "time to read a request's headers")
	fs.DurationVar(&o.read, "read-timeout", 30*time.Second, "time to read a whole request, body included")
	fs.DurationVar(&o.write, "write-timeout", 60*time.Second, "time one response write may block (renewed per streamed chunk)")
	fs.DurationVar(&o.idle, "idle-timeout", 120*time.Second, "keep-alive connection idle time")
	fs.StringVar(&o.pprofAddr, "pprof", "", "serve net/http/pprof on this loopback address (e.g. 127.0.0.1:6060)")
	o.hf.flags(fs)
	o.logger = logFlags(fs)
	return o
}

// adminToken reads the admin token from --admin-token-file or the
// environment.
func (o *serveOptions) adminToken() (string, error) {
	if o.adminTokenFile == "" {
		return os.Getenv("TROUPE_ADMIN_TOKEN"), nil
	}
	b, err := os.ReadFile(o.adminTokenFile)
	if err != nil {
		return "", fmt.Errorf("--admin-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--admin-token-file %s is empty", o.adminTokenFile)
	}
	return tok, nil
}

// bootingHandler answers while the model loads: the port is bound before
// the model boots, so a client learns at once that the server exists.
var bootingHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "5")
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, `{"detail":"the model is loading; try again shortly","error":{"message":"the model is loading; try again shortly","type":"server_error","param":null,"code":"loading"}}`+"\n")
})

// swapHandler serves bootingHandler until the swarm server is ready.
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}
func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func serveCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("troupe swarm serve", flag.ContinueOnError)
	o := serveFlags(fs)
	if err := parseCmdFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	log, err := o.logger(stderr)
	if err != nil {
		return err
	}
	if err := selectDevice(o.hf.device); err != nil {
		return err
	}
	specs := []spec{{o.model, o.port}}
	switch {
	case o.hf.modelDir != "" && o.hf.agents != "":
		if specs, err = parseMulti(o.hf.agents); err != nil {
			return fmt.Errorf("--agents: %w", err)
		}
	case o.hf.modelDir != "":
		specs = []spec{{filepath.Base(filepath.Clean(o.hf.modelDir)), o.port}}
	case o.multi != "":
		if specs, err = parseMulti(o.multi); err != nil {
			return err
		}
	}
	tc := swarm.DefaultTrainConfig()
	if o.config != "" {
		y, err := os.ReadFile(o.config)
		if err != nil {
			return err
		}
		if err := tc.ApplyYAML(string(y)); err != nil {
			return fmt.Errorf("%s: %w", o.config, err)
		}
	}
	if o.batch > 0 {
		tc.BatchSize = o.batch
	}
	if o.repeat > 0 {
		tc.NumRepeat = o.repeat
	}
	tc.CheckpointEvery = o.ckptEvery
	admin, err := o.adminToken()
	if err != nil {
		return err
	}
	if err := swarm.CheckListen(o.host, admin); err != nil {
		return err
	}

	// Bind every port first: a taken port fails in milliseconds, not after
	// the model loads, and clients get 503 instead of a refused connection
	// while it does.
	type running struct {
		s  *swarm.Server
		hs *http.Server
		sw *swapHandler
		ln net.Listener
	}
	rs := make([]running, len(specs))
	errc := make(chan error, len(specs)+1)
	shutDown := false
	var b *bus.Bus
	defer func() {
		if shutDown {
			return
		}
		for _, r := range rs { // a failed start: release what was set up
			if r.hs != nil {
				r.hs.Close()
			}
			if r.s != nil {
				r.s.Close()
			}
		}
		if b != nil {
			b.Close()
		}
	}()
	for i, sp := range specs {
		ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(sp.port)))
		if err != nil {
			return err
		}
		sw := &swapHandler{}
		sw.set(bootingHandler)
		hs := &http.Server{Handler: sw, ReadHeaderTimeout: o.readHeader, ReadTimeout: o.read, WriteTimeout: o.write, IdleTimeout: o.idle,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
		rs[i] = running{hs: hs, sw: sw, ln: ln}
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	if o.pprofAddr != "" {
		stop, err := startPprof(o.pprofAddr, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	mk := newModel
	if o.hf.modelDir != "" {
		var closeBase func() error
		if _, mk, closeBase, err = o.hf.models(o.port); err != nil {
			return err
		}
		defer closeBase()
	}
	if b, err = o.openBus(log); err != nil {
		return err
	}
	var bal *balance.Balancer // set once every server exists
	var balMu sync.Mutex
	for i, sp := range specs {
		m, err := mk(sp.model)
		if err != nil {
			return err
		}
		dir := o.ckptDir
		journal := sp.model
		if len(specs) > 1 {
			journal = fmt.Sprintf("%s-%d", sp.model, sp.port)
			if dir != "" {
				dir = filepath.Join(dir, journal)
			}
		}
		var js jetstream.JetStream
		if b != nil {
			js = b.JetStream()
		}
		idx := i
		onStep := func(ts swarm.TrainStep) {
			balMu.Lock()
			bb := bal
			balMu.Unlock()
			if bb != nil {
				bb.Observe(idx, ts)
			}
		}
		s, err := swarm.NewServer(swarm.ServerConfig{Model: m, Train: tc, PublicURL: o.publicURL, AdminToken: admin,
			JetStream: js, JournalName: journal, Role: o.role, JournalReplicas: o.replicas, OnTrainStep: onStep,
			RegistryURL:   "http://" + rs[i].ln.Addr().String(),
			CheckpointDir: dir, MaxBodyBytes: o.maxBody, MaxRequestTokens: o.maxReq, MaxEpisodeTokens: o.maxEp,
			MaxOpenPerClient: o.maxPerClient, MaxOpenPerAddress: o.maxPerAddr, MaxDiscardTimeout: o.maxDiscard, MaxAbsReward: o.maxReward,
			Timeouts: httpx.Timeouts{ReadHeader: o.readHeader, Read: o.read, Write: o.write, Idle: o.idle}, Logger: log})
		if err != nil {
			return err
		}
		rs[i].s = s
		if o.autostart {
			if err := s.Start(); err != nil {
				return err
			}
		}
		rs[i].sw.set(s.Handler())
		log.Info("swarm server listening", "model", sp.model, "addr", rs[i].ln.Addr().String(), "autostart", o.autostart, "admin_token", admin != "")
	}
	if o.balance > 0 && len(rs) > 1 {
		servers := make([]*swarm.Server, len(rs))
		for i, r := range rs {
			servers[i] = r.s
		}
		nb, err := balance.New(servers, o.balance, 0.1, 0.1/float64(len(servers)))
		if err != nil {
			return fmt.Errorf("--balance-episodes: %w", err)
		}
		log.Info("balancing in-flight episodes", "total", o.balance, "shares", nb.Apply())
		balMu.Lock()
		bal = nb
		balMu.Unlock()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	var runErr error
	select {
	case s := <-sig:
		log.Info("shutting down", "signal", s.String())
	case runErr = <-errc:
	}
	shutDown = true
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
	if b != nil {
		b.Close() // after the servers: their final checkpoints acknowledge episodes
	}
	return runErr
}

// openBus connects to --nats, or embeds a NATS server storing under
// --data-dir or <checkpoint-dir>/nats; nil when neither a NATS URL nor a
// directory is given (finished episodes then live in memory only).
func (o *serveOptions) openBus(log *slog.Logger) (*bus.Bus, error) {
	dir := o.dataDir
	if dir == "" && o.ckptDir != "" {
		dir = filepath.Join(o.ckptDir, "nats")
	}
	switch o.role {
	case "", swarm.RoleRollout, swarm.RoleTrain:
	default:
		return nil, fmt.Errorf("--role %q: want rollout or train (or leave it out for both)", o.role)
	}
	if o.role != "" && o.natsURL == "" {
		return nil, fmt.Errorf("--role %s needs --nats: the trainer and its front-ends meet on a NATS server (troupe nats runs one)", o.role)
	}
	if o.natsURL == "" && dir == "" {
		log.Warn("no --checkpoint-dir, --data-dir or --nats: finished episodes and weights are lost if the process dies")
		return nil, nil
	}
	if o.natsURL != "" {
		dir = ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: o.natsURL, DataDir: dir, Name: "troupe-swarm", Logger: log})
	if err != nil {
		return nil, err
	}
	if b.Embedded() {
		log.Info("episode journal on an embedded NATS server", "store", dir)
	} else {
		log.Info("episode journal on NATS", "url", o.natsURL)
	}
	return b, nil
}

// startPprof serves net/http/pprof on a loopback address of its own, never
// on the swarm ports: profiles reveal memory contents and cost CPU.
func startPprof(addr string, log *slog.Logger) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof %q: only a loopback address is allowed", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	log.Info("pprof listening", "addr", ln.Addr().String())
	return func() { hs.Close() }, nil
}
