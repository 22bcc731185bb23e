package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/internal/yamlkv"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/balance"
	"github.com/troupe-ml/troupe/swarm/lmmodel"
	"github.com/troupe-ml/troupe/swarm/record"
	"github.com/troupe-ml/troupe/swarm/tabular"
	"github.com/troupe-ml/troupe/swarm/team"
	"github.com/troupe-ml/troupe/swarm/trainconfig"
)

var swarmServeCommand = command{
	name:    "serve",
	summary: "run swarm server(s): AgentJet's swarm protocol and OpenAI chat completions for each model, trained on the rewards of its episodes",
	setup:   swarmServeSetup,
	groups: []flagGroup{
		{"Model", []string{"model", "multi", "model-dir", "agents", "lora", "lora-rank", "lora-alpha", "lr"}},
		{"Engine (--model-dir)", []string{"max-num-seqs", "max-num-batched-tokens", "kv-cache-gib", "max-queue", "openai-port"}},
		{"Training", []string{"config", "batch-size", "num-repeat", "max-staleness", "group-timeout-s", "drain-timeout-s",
			"normalize-reward-components", "reward-component-weights", "checkpoint-dir", "checkpoint-every", "autostart"}},
		{"Limits", []string{"max-body-bytes", "max-request-tokens", "max-episode-tokens", "max-open-per-client", "max-open-per-address",
			"max-discard-timeout", "max-abs-reward", "read-header-timeout", "read-timeout", "write-timeout", "idle-timeout"}},
		{"Distribution", []string{"nats", "nats-user", "nats-password-file", "nats-token-file", "nats-nkey-file", "nats-creds",
			"nats-tls-cert", "nats-tls-key", "nats-tls-ca", "role", "episode-key-file", "nats-replicas", "data-dir", "balance-episodes", "public-url"}},
		{"Security and operations", []string{"host", "port", "admin-token-file", "pprof", "log-level", "log-format"}},
	},
	examples: `  troupe swarm serve --model small --autostart
  troupe swarm serve --multi small:10086,lm-tiny:10087 --checkpoint-dir runs/a
  troupe swarm serve --model-dir Qwen3-0.6B --agents planner:8001,executor:8002 --checkpoint-dir runs/team
  TROUPE_ADMIN_TOKEN=... troupe swarm serve --host 0.0.0.0 --role rollout --nats nats://10.0.0.1:4222 --nats-user rollout --nats-password-file pw
  troupe swarm serve --config ajet.yaml   # AgentJet's YAML; troupe.<flag_name> keys set flags (the command line wins)`,
}

// swarmServe holds the flags of troupe swarm serve. Defaults come from the
// config types that own them (swarm, openai, httpx).
type swarmServe struct {
	cfg                                           swarm.ServerConfig // limits read straight into it
	model, multi, ckptDir, config, adminTokenFile string
	episodeKeyFile, componentWeights              string
	normalizeComponents                           bool
	groupTimeout, drainTimeout                    float64
	host, pprof, natsURL, dataDir                 string
	port, ckptEvery, batch, repeat, balance       int
	maxStaleness                                  int64
	autostart                                     bool
	hf                                            hfServeOptions
	natsAuth                                      *bus.AuthFlags
	logger                                        func(io.Writer) (*slog.Logger, error)
}

func swarmServeSetup(fs *flag.FlagSet) func(cmdIO, []string) error {
	o := &swarmServe{}
	c := &o.cfg
	fs.StringVar(&o.model, "model", "small", "model preset (see troupe swarm models)")
	fs.StringVar(&o.multi, "multi", "", "several servers in this process: model:port,model:port,...")
	o.hf.flags(fs)
	fs.StringVar(&o.config, "config", "", "AgentJet training YAML applied at start; its troupe.<flag_name> keys set this command's flags")
	fs.IntVar(&o.batch, "batch-size", 0, "tasks per training batch (default: the config's, else 4)")
	fs.IntVar(&o.repeat, "num-repeat", 0, "episodes per task, the GRPO group size (default: the config's, else 4)")
	fs.Int64Var(&o.maxStaleness, "max-staleness", swarm.DefaultTrainConfig().MaxStaleness, "train episodes sampled at most this many steps before the current one, off-policy from their recorded log-probs; staler ones are dropped (reason stale: /metrics, dropped.jsonl, troupe swarm status)")
	fs.BoolVar(&o.normalizeComponents, "normalize-reward-components", false, "normalize each of an episode's reward_components within its GRPO group before summing them (decoupled normalization; groups of episodes without components train on their reward)")
	fs.StringVar(&o.componentWeights, "reward-component-weights", "", "with --normalize-reward-components: name=weight,... (a component not named weighs 1)")
	fs.Float64Var(&o.groupTimeout, "group-timeout-s", swarm.DefaultTrainConfig().GroupTimeout.Seconds(), "seconds a task short of its num_repeat episodes waits for them before it trains as it is, in a partial batch (0: for ever)")
	fs.Float64Var(&o.drainTimeout, "drain-timeout-s", swarm.DefaultTrainConfig().DrainTimeout.Seconds(), "seconds a collected batch waits for open train episodes to end before it trains")
	fs.StringVar(&o.ckptDir, "checkpoint-dir", "", "run directory: checkpoint and training metrics (one subdirectory per model with --multi or --agents)")
	fs.IntVar(&o.ckptEvery, "checkpoint-every", 1, "checkpoint every N training steps (0: only on shutdown); episodes are released from the journal once a checkpoint holds them")
	fs.BoolVar(&o.autostart, "autostart", false, "start the engine at once instead of waiting for start_engine")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", openai.DefaultMaxBodyBytes, "request body limit")
	fs.IntVar(&c.MaxRequestTokens, "max-request-tokens", openai.DefaultMaxRequestTokens, "n × max_tokens limit of one chat completion")
	fs.IntVar(&c.MaxEpisodeTokens, "max-episode-tokens", swarm.DefaultMaxEpisodeTokens, "tokens one episode may record (prompt + sampled)")
	fs.IntVar(&c.MaxOpenPerClient, "max-open-per-client", swarm.DefaultMaxOpenPerClient, "open episodes one client_uuid may hold (429 beyond)")
	fs.IntVar(&c.MaxOpenPerAddress, "max-open-per-address", swarm.DefaultMaxOpenPerAddress, "open episodes all clients at one remote IP may hold (429 beyond; loopback and admins exempt)")
	fs.DurationVar(&c.MaxDiscardTimeout, "max-discard-timeout", swarm.DefaultMaxDiscardTimeout, "largest discard_episode_timeout a claim may ask for")
	fs.Float64Var(&c.MaxAbsReward, "max-abs-reward", swarm.DefaultMaxAbsReward, "largest |reward| end_episode accepts")
	fs.DurationVar(&c.Timeouts.ReadHeader, "read-header-timeout", httpx.DefaultTimeouts.ReadHeader, "time to read a request's headers")
	fs.DurationVar(&c.Timeouts.Read, "read-timeout", httpx.DefaultTimeouts.Read, "time to read a whole request, body included")
	fs.DurationVar(&c.Timeouts.Write, "write-timeout", httpx.DefaultTimeouts.Write, "time one response write may block (renewed per streamed chunk)")
	fs.DurationVar(&c.Timeouts.Idle, "idle-timeout", httpx.DefaultTimeouts.Idle, "keep-alive connection idle time")
	fs.StringVar(&o.natsURL, "nats", "", "NATS server or cluster holding the episode journal (nats://host:4222; credentials from the --nats-* flags); default: a server embedded in this process, storing under --data-dir")
	o.natsAuth = bus.AddAuthFlags(fs)
	fs.StringVar(&c.Role, "role", "", "rollout (serve and publish episodes, load published weights) or train (consume episodes, train, publish weights); default both in one process. Needs --nats")
	fs.StringVar(&o.episodeKeyFile, "episode-key-file", "", "file holding the key that signs journaled episodes (default: the TROUPE_EPISODE_KEY environment variable); the trainer and every front-end on one NATS need the same; without one, a single process keeps its own in its checkpoint or data directory")
	fs.IntVar(&c.JournalReplicas, "nats-replicas", 1, "copies of the episode stream and weights bucket on a NATS cluster (3 survives one node's loss)")
	fs.StringVar(&o.dataDir, "data-dir", "", "embedded NATS store (default: <checkpoint-dir>/nats; without either, finished episodes live in memory only)")
	fs.IntVar(&o.balance, "balance-episodes", 0, "with several models (--multi, --agents): share this many in-flight episodes among them by their reward progress; 0 leaves each its own limit")
	fs.StringVar(&c.PublicURL, "public-url", "", "base URL handed to clients in openai_base_url (default: the request's Host)")
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on; beyond loopback an admin token is required")
	fs.IntVar(&o.port, "port", 10086, "port to listen on")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "file holding the admin token (default: the TROUPE_ADMIN_TOKEN environment variable)")
	fs.StringVar(&o.pprof, "pprof", "", "serve net/http/pprof on this loopback address (e.g. 127.0.0.1:6060)")
	o.logger = logFlags(fs)
	return func(cio cmdIO, _ []string) error { return o.run(cio, fs) }
}

// spec is one server of the process: its model and port.
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
			return nil, fmt.Errorf("entry %q: want model:port", part)
		}
		out = append(out, spec{name, p})
	}
	return out, nil
}

// run is troupe swarm serve: bind the ports, build the models and their
// servers, serve until SIGTERM, then drain and checkpoint.
func (o *swarmServe) run(cio cmdIO, fs *flag.FlagSet) error {
	log, err := o.logger(cio.stderr)
	if err != nil {
		return err
	}
	if err := o.resolve(fs); err != nil {
		return err
	}
	specs, err := o.specs()
	if err != nil {
		return err
	}
	ports := portsOf(specs)
	if o.hf.openaiPort > 0 {
		if o.hf.modelDir == "" {
			return fmt.Errorf("--openai-port needs --model-dir")
		}
		ports = append(ports, o.hf.openaiPort)
	}
	errc := make(chan error, len(ports))
	doors, err := openDoors(o.host, ports, o.cfg.Timeouts, log, errc)
	if err != nil {
		return err
	}
	var servers []*swarm.Server
	var b *bus.Bus
	done := false
	defer func() {
		if !done { // a failed start: release what was set up
			closeDoors(doors)
			for _, s := range servers {
				s.Close()
			}
			if b != nil {
				b.Close()
			}
		}
	}()
	if o.pprof != "" {
		stop, err := startPprof(o.pprof, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	mk, closeModels, err := o.models(specs)
	if err != nil {
		return err
	}
	defer closeModels()
	if b, err = o.openBus(log); err != nil {
		return err
	}
	if servers, err = o.servers(specs, doors, mk, b, log); err != nil {
		return err
	}
	if err := o.serveOpenAI(specs, servers, doors, log); err != nil {
		return err
	}
	runErr := waitSignal(log, errc)
	done = true
	closers := make([]func(), len(servers))
	for i, s := range servers {
		closers[i] = func() {
			if err := s.Close(); err != nil {
				log.Error("final checkpoint failed", "err", err)
			}
		}
	}
	shutdown(doors, closers)
	if b != nil {
		b.Close() // after the servers: their final checkpoints acknowledge episodes
	}
	return runErr
}

// serveOpenAI gives the --openai-port door the plain OpenAI API of the
// base and the agents, when asked for.
func (o *swarmServe) serveOpenAI(specs []spec, servers []*swarm.Server, doors []*door, log *slog.Logger) error {
	if o.hf.openaiPort == 0 {
		return nil
	}
	srv, err := o.hf.openaiServer(specs, servers, log)
	if err != nil {
		return err
	}
	doors[len(specs)].set(srv.Handler())
	log.Info("openai api listening", "addr", doors[len(specs)].ln.Addr().String(), "models", len(specs)+1)
	return nil
}

// resolve applies the config file, builds the training config and checks
// the security of the listen address.
func (o *swarmServe) resolve(fs *flag.FlagSet) error {
	tc := swarm.DefaultTrainConfig()
	if o.config != "" {
		y, err := os.ReadFile(o.config)
		if err != nil {
			return err
		}
		if err := applyConfigFile(fs, string(y)); err != nil {
			return fmt.Errorf("%s: %w", o.config, err)
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
	tc.MaxStaleness, tc.CheckpointEvery = o.maxStaleness, o.ckptEvery
	tc.GroupTimeout, tc.DrainTimeout = seconds(o.groupTimeout), seconds(o.drainTimeout)
	tc.NormalizeRewardComponents = o.normalizeComponents
	w, err := trainconfig.ParseComponentWeights(o.componentWeights)
	if err != nil {
		return fmt.Errorf("--reward-component-weights: %w", err)
	}
	tc.RewardComponentWeights = w
	if err := tc.Validate(); err != nil {
		return err
	}
	key, err := record.ReadKey(o.episodeKeyFile)
	if err != nil {
		return err
	}
	o.cfg.EpisodeKey, o.cfg.EpisodeKeyDir = key, o.dataDir
	o.cfg.Train = tc
	tok, err := adminToken(o.adminTokenFile)
	if err != nil {
		return err
	}
	o.cfg.AdminToken = tok
	return swarm.CheckListen(o.host, tok)
}

// seconds is a flag's seconds as a duration; beyond a million or negative
// it is left to TrainConfig.Validate to refuse.
func seconds(s float64) time.Duration {
	if !(s >= 0 && s <= 1e6) {
		return -1
	}
	return time.Duration(s * float64(time.Second))
}

// specs lists the servers of the process.
func (o *swarmServe) specs() ([]spec, error) {
	switch {
	case o.hf.modelDir != "" && o.hf.agents != "":
		s, err := parseMulti(o.hf.agents)
		if err != nil {
			return nil, fmt.Errorf("--agents: %w", err)
		}
		return s, nil
	case o.hf.modelDir != "":
		return []spec{{filepath.Base(filepath.Clean(o.hf.modelDir)), o.port}}, nil
	case o.multi != "":
		s, err := parseMulti(o.multi)
		if err != nil {
			return nil, fmt.Errorf("--multi: %w", err)
		}
		return s, nil
	}
	return []spec{{o.model, o.port}}, nil
}

func portsOf(specs []spec) []int {
	ports := make([]int, len(specs))
	for i, sp := range specs {
		ports[i] = sp.port
	}
	return ports
}

// models returns the constructor of each spec's model: a preset, or an
// agent's LoRA adapter on the --model-dir base loaded once.
func (o *swarmServe) models(specs []spec) (func(string) (swarm.Model, error), func() error, error) {
	if o.hf.modelDir == "" {
		return newPresetModel, func() error { return nil }, nil
	}
	runDirs := map[string]string{}
	if o.ckptDir != "" {
		for _, sp := range specs {
			_, runDirs[sp.model] = o.runOf(specs, sp)
		}
	}
	return o.hf.models(specs, runDirs)
}

// runOf names a spec's episode journal and its run directory (empty
// without --checkpoint-dir): the run directory itself for one server, a
// subdirectory per server otherwise.
func (o *swarmServe) runOf(specs []spec, sp spec) (journal, dir string) {
	if len(specs) == 1 {
		return sp.model, o.ckptDir
	}
	journal = fmt.Sprintf("%s-%d", sp.model, sp.port)
	if o.ckptDir != "" {
		dir = filepath.Join(o.ckptDir, journal)
	}
	return journal, dir
}

func newPresetModel(name string) (swarm.Model, error) {
	if _, ok := lmmodel.Presets[name]; ok {
		return lmmodel.NewPreset(name)
	}
	return tabular.NewPreset(name)
}

// servers builds one swarm server per spec, starts it when --autostart,
// gives its door the server's handler, and balances them when asked.
func (o *swarmServe) servers(specs []spec, doors []*door, mk func(string) (swarm.Model, error), b *bus.Bus, log *slog.Logger) ([]*swarm.Server, error) {
	var servers []*swarm.Server
	var bal *balance.Balancer // set once every server exists
	var balMu sync.Mutex
	teams := team.NewMemory()
	for i, sp := range specs {
		m, err := mk(sp.model)
		if err != nil {
			return servers, err
		}
		cfg := o.cfg
		cfg.Model, cfg.Logger = m, log
		cfg.JournalName, cfg.CheckpointDir = o.runOf(specs, sp)
		if b != nil {
			cfg.JetStream = b.JetStream()
		} else {
			// The servers of this process form teams together.
			cfg.Teams = teams
		}
		cfg.RegistryURL = "http://" + doors[i].ln.Addr().String()
		cfg.OnTrainStep = func(ts swarm.TrainStep) {
			balMu.Lock()
			defer balMu.Unlock()
			if bal != nil {
				bal.Observe(i, ts)
			}
		}
		s, err := swarm.NewServer(cfg)
		if err != nil {
			return servers, err
		}
		servers = append(servers, s)
		if o.hf.eng != nil {
			if err := o.hf.metrics.Register(s.Registry(), o.hf.eng, filepath.Base(filepath.Clean(o.hf.modelDir))); err != nil {
				return servers, err
			}
		}
		if o.autostart {
			if err := s.Start(); err != nil {
				return servers, err
			}
		}
		doors[i].set(s.Handler())
		log.Info("swarm server listening", "model", sp.model, "addr", doors[i].ln.Addr().String(), "autostart", o.autostart, "admin_token", cfg.AdminToken != "")
	}
	if o.balance > 0 && len(servers) > 1 {
		nb, err := balance.New(servers, o.balance, 0.1, 0.1/float64(len(servers)))
		if err != nil {
			return servers, fmt.Errorf("--balance-episodes: %w", err)
		}
		log.Info("balancing in-flight episodes", "total", o.balance, "shares", nb.Apply())
		balMu.Lock()
		bal = nb
		balMu.Unlock()
	}
	return servers, nil
}

// openBus connects to --nats, or embeds a NATS server storing under
// --data-dir or <checkpoint-dir>/nats; nil when neither a NATS URL nor a
// directory is given (finished episodes then live in memory only).
func (o *swarmServe) openBus(log *slog.Logger) (*bus.Bus, error) {
	dir := o.dataDir
	if dir == "" && o.ckptDir != "" {
		dir = filepath.Join(o.ckptDir, "nats")
	}
	switch o.cfg.Role {
	case "", swarm.RoleRollout, swarm.RoleTrain:
	default:
		return nil, fmt.Errorf("--role %q: want rollout or train (or leave it out for both)", o.cfg.Role)
	}
	if o.cfg.Role != "" && o.natsURL == "" {
		return nil, fmt.Errorf("--role %s needs --nats: the trainer and its front-ends meet on a NATS server (troupe nats runs one)", o.cfg.Role)
	}
	if o.natsURL == "" && dir == "" {
		log.Warn("no --checkpoint-dir, --data-dir or --nats: finished episodes and weights are lost if the process dies")
		return nil, nil
	}
	auth, err := o.natsAuth.Auth()
	if err != nil {
		return nil, err
	}
	if o.natsURL != "" {
		dir = ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{URL: o.natsURL, Auth: auth, DataDir: dir, Name: "troupe-swarm", Logger: log})
	if err != nil {
		return nil, err
	}
	if b.Embedded() {
		log.Info("episode journal on an embedded NATS server", "store", dir)
	} else {
		log.Info("episode journal on NATS", "url", bus.Redact(o.natsURL))
	}
	return b, nil
}

// applyConfigFile sets the flags that a config file's troupe.<flag_name>
// keys name (underscores for dashes) and the command line left unset; a
// troupe key that is neither a flag nor a training key
// (swarm.TrainConfig.ApplyYAML) is an error, so that a typo is not ignored.
func applyConfigFile(fs *flag.FlagSet, yaml string) error {
	kv, err := yamlkv.Scalars(yaml)
	if err != nil {
		return err
	}
	set := setFlags(fs)
	for _, k := range sortedKeys(kv) {
		name, ok := strings.CutPrefix(k, "troupe.")
		if !ok {
			continue
		}
		flagName := strings.ReplaceAll(name, "_", "-")
		switch {
		case fs.Lookup(flagName) != nil:
			if !set[flagName] {
				if err := fs.Set(flagName, kv[k]); err != nil {
					return fmt.Errorf("%s: %w", k, err)
				}
			}
		case !trainconfig.IsKey(k):
			return fmt.Errorf("%s: no such setting (troupe keys are this command's flag names with underscores, or %s)", k, strings.Join(trainconfig.Keys(), ", "))
		}
	}
	return nil
}
