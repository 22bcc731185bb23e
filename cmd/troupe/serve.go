package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/hfmodel"
	"github.com/troupe-ml/troupe/textgen"
)

var serveCommand = command{
	name:    "serve",
	args:    "MODEL_DIR",
	nargs:   1,
	summary: "serve a pretrained Hugging Face model and its LoRA adapters as an OpenAI-compatible API (vLLM's command line): /v1/models, /v1/chat/completions, /v1/completions, all requests and adapters decoded together",
	setup:   serveSetup,
	groups: []flagGroup{
		{"Model", []string{"served-model-name", "lora-modules", "max-model-len"}},
		{"Engine", []string{"max-num-seqs", "max-num-batched-tokens", "kv-cache-gib", "max-queue"}},
		{"Server", []string{"host", "port", "api-key", "log-level", "log-format"}},
	},
	examples: `  troupe serve Qwen3-0.6B --port 8000
  troupe serve Qwen3-0.6B --served-model-name qwen --lora-modules planner=runs/planner,executor=runs/executor
  curl -s localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model": "planner", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 32}'`,
}

// engineFlags are the flags of a generation engine (vLLM's names).
type engineFlags struct {
	cfg   textgen.EngineConfig
	kvGiB float64
}

func (o *engineFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&o.cfg.MaxSeqs, "max-num-seqs", textgen.DefaultMaxSeqs, "sequences decoded together at most")
	fs.IntVar(&o.cfg.MaxBatchTokens, "max-num-batched-tokens", textgen.DefaultMaxBatchTokens, "prompt tokens one step prefills at most while nothing decodes")
	fs.Float64Var(&o.kvGiB, "kv-cache-gib", 0, "key/value cache budget in GiB (default: a quarter of the available memory, at most what --max-num-seqs full-context sequences take); requests beyond it wait, then get 503")
	fs.IntVar(&o.cfg.MaxQueue, "max-queue", textgen.DefaultMaxQueue, "requests waiting for the engine at most; beyond it 429")
}

func (o *engineFlags) config() textgen.EngineConfig {
	c := o.cfg
	if o.kvGiB > 0 {
		c.KVCacheBytes = int64(o.kvGiB * (1 << 30))
	}
	return c
}

// serveOptions are the flags of troupe serve.
type serveOptions struct {
	name, host, apiKeyFlag string
	port, maxModelLen      int
	loras                  loraModules
	engine                 engineFlags
	logger                 func(io.Writer) (*slog.Logger, error)
}

// loraModules is --lora-modules: name=DIR pairs, repeatable and
// comma-separated.
type loraModules []string

func (l *loraModules) String() string { return strings.Join(*l, ",") }
func (l *loraModules) Set(v string) error {
	for _, p := range splitList(v) {
		name, dir, ok := strings.Cut(p, "=")
		if !ok || name == "" || dir == "" {
			return fmt.Errorf("%q: want name=DIR", p)
		}
		*l = append(*l, p)
	}
	return nil
}

func serveSetup(fs *flag.FlagSet) func(cmdIO, []string) error {
	o := &serveOptions{}
	fs.StringVar(&o.name, "served-model-name", "", "the base model's name in the API (default: MODEL_DIR's base name)")
	fs.Var(&o.loras, "lora-modules", "name=DIR: a PEFT adapter served as model name (repeatable, or comma-separated)")
	fs.IntVar(&o.maxModelLen, "max-model-len", 0, "context length (default: the model's max_position_embeddings)")
	o.engine.register(fs)
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on; beyond loopback an API key is required")
	fs.IntVar(&o.port, "port", 8000, "port to listen on")
	fs.StringVar(&o.apiKeyFlag, "api-key", "", "API key clients must send as Authorization: Bearer (default: the TROUPE_API_KEY environment variable)")
	o.logger = logFlags(fs)
	return func(cio cmdIO, args []string) error { return o.run(cio, args[0]) }
}

func (o *serveOptions) run(cio cmdIO, dir string) error {
	log, err := o.logger(cio.stderr)
	if err != nil {
		return err
	}
	key := o.apiKeyFlag
	if key == "" {
		key = strings.TrimSpace(os.Getenv("TROUPE_API_KEY"))
	}
	if err := checkAPIListen(o.host, key); err != nil {
		return err
	}
	errc := make(chan error, 1)
	doors, err := openDoors(o.host, []int{o.port}, httpx.Timeouts{}, log, errc)
	if err != nil {
		return err
	}
	srv, closeModel, err := o.server(dir, key, log)
	if err != nil {
		closeDoors(doors)
		return err
	}
	defer closeModel()
	doors[0].set(srv.Handler())
	log.Info("serving", "addr", doors[0].ln.Addr().String(), "models", len(o.loras)+1, "api_key", key != "")
	runErr := waitSignal(log, errc)
	shutdown(doors, nil)
	return runErr
}

// server loads the model and its adapters onto one engine.
func (o *serveOptions) server(dir, key string, log *slog.Logger) (*openai.Server, func(), error) {
	log.Info("loading the model", "dir", dir)
	start := time.Now()
	base, err := hf.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	log.Info("loaded the model", "dir", dir, "seconds", time.Since(start).Round(time.Millisecond).Seconds())
	tok, err := hf.LoadTokenizer(dir)
	if err != nil {
		base.Close()
		return nil, nil, err
	}
	if o.maxModelLen > 0 {
		if o.maxModelLen > base.Config.MaxPos {
			base.Close()
			return nil, nil, fmt.Errorf("--max-model-len %d: the model's context is %d", o.maxModelLen, base.Config.MaxPos)
		}
		base.Config.MaxPos = o.maxModelLen
	}
	name := o.name
	if name == "" {
		name = filepath.Base(filepath.Clean(dir))
	}
	em := openai.NewEngineMetrics(name)
	ecfg := o.engine.config()
	em.Hooks(&ecfg)
	engine := hfmodel.NewEngine(base, ecfg)
	closeAll := func() { engine.Close(); base.Close() }
	models := []openai.ServedModel{}
	add := func(n, parent string, ad *hf.LoRA) error {
		m, err := hfmodel.NewInference(n, base, tok, engine, ad)
		if err != nil {
			return err
		}
		models = append(models, openai.ServedModel{Name: n, Parent: parent, Model: m, MaxLen: m.MaxLen()})
		return nil
	}
	err = add(name, "", nil)
	for _, l := range o.loras {
		if err != nil {
			break
		}
		n, d, _ := strings.Cut(l, "=")
		var ad *hf.LoRA
		if ad, err = hf.LoadLoRA(base, d); err == nil {
			err = add(n, name, ad)
		}
	}
	var srv *openai.Server
	if err == nil {
		srv, err = openai.NewServer(openai.ServerConfig{APIKey: key, Logger: log}, models...)
	}
	if err == nil {
		err = em.Register(srv.Registry(), engine, name)
	}
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return srv, closeAll, nil
}

// checkAPIListen refuses to serve beyond loopback without an API key.
func checkAPIListen(host, key string) error {
	if key != "" {
		return nil
	}
	if err := swarm.CheckListen(host, ""); err != nil {
		return errors.New("serve: refusing to listen beyond loopback without an API key (--api-key or TROUPE_API_KEY)")
	}
	return nil
}
