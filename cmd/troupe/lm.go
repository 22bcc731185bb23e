package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-ml/troupe/device"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/nn/tokenizer/jinja"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/hfmodel"
	"github.com/troupe-ml/troupe/textgen"
)

const lmUsage = `usage: troupe lm COMMAND [flags]

Pretrained Hugging Face language models (Qwen2, Qwen3, Llama, Mistral) in a
model directory: config.json, model.safetensors (or shards), tokenizer.json,
tokenizer_config.json.

  logprobs --model-dir D --ids 1,2,3    one JSON object: "logprobs"[i] = log p(ids[i+1] | ids[..i])
  tokenize --model-dir D                each line of stdin -> a JSON array of ids (no special tokens added)
  render   --model-dir D                a JSON array of chat messages on stdin -> the prompt, generation prompt included
  generate --model-dir D                sample a reply to --prompt (or the JSON messages on stdin)
  init     --shape S --out D            write a random-weight checkpoint (shapes: %s)
  export   --model-dir D --lora A --out D2   merge a PEFT LoRA adapter and write a full model directory
Run "troupe lm COMMAND -h" for a command's flags.
`

func lmMain(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stdout, lmUsage, strings.Join(shapeNames(), ", "))
		return nil
	}
	cmds := map[string]func([]string, io.Reader, io.Writer) error{
		"logprobs": lmLogprobs, "tokenize": lmTokenize, "render": lmRender,
		"generate": lmGenerate, "init": lmInit, "export": lmExport,
	}
	run, ok := cmds[args[0]]
	if !ok {
		return fmt.Errorf("unknown command %q; run \"troupe lm -h\"", args[0])
	}
	return run(args[1:], stdin, stdout)
}

func shapeNames() []string {
	var out []string
	for n := range hf.Shapes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// lmFlags is a command's flag set with --model-dir and --device.
func lmFlags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("troupe lm "+name, flag.ContinueOnError)
	dir := fs.String("model-dir", "", "Hugging Face model directory (required)")
	fs.String("device", "cpu", deviceHelp)
	return fs, dir
}

const deviceHelp = "where the model runs: cpu, or cuda (a build with -tags troupecuda and an NVIDIA GPU)"

// selectDevice makes name the device tensors live on. Only the CPU runs
// troupe's models today: the device backend has no attention or decoding
// path yet, so asking for cuda is an error that says so rather than a
// silent fall-back to the CPU.
func selectDevice(name string) error {
	if name == "" || name == "cpu" {
		return nil
	}
	if err := device.Select(name); err != nil {
		return err
	}
	return fmt.Errorf("--device %s: troupe's language models do not run on the device yet (no device attention or decoding); use --device cpu", name)
}

func parseFlags(fs *flag.FlagSet, args []string, dir *string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if dir != nil && *dir == "" {
		return fmt.Errorf("%s: --model-dir is required", fs.Name())
	}
	if d := fs.Lookup("device"); d != nil {
		return selectDevice(d.Value.String())
	}
	return nil
}

func loadModel(dir, lora string) (*hf.Model, *hf.LoRA, error) {
	m, err := hf.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	if lora == "" {
		return m, nil, nil
	}
	ad, err := hf.LoadLoRA(m, lora)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, ad, nil
}

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

func lmLogprobs(args []string, _ io.Reader, stdout io.Writer) error {
	fs, dir := lmFlags("logprobs")
	idsFlag := fs.String("ids", "", "comma-separated token ids (at least two)")
	lora := fs.String("lora", "", "PEFT LoRA adapter directory to apply")
	if err := parseFlags(fs, args, dir); err != nil {
		return err
	}
	ids, err := parseIDs(*idsFlag)
	if err != nil {
		return err
	}
	if len(ids) < 2 {
		return errors.New("logprobs: --ids needs at least two ids")
	}
	m, ad, err := loadModel(*dir, *lora)
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

func lmTokenize(args []string, stdin io.Reader, stdout io.Writer) error {
	fs, dir := lmFlags("tokenize")
	if err := parseFlags(fs, args, dir); err != nil {
		return err
	}
	tok, err := hf.LoadTokenizer(*dir)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
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

func lmRender(args []string, stdin io.Reader, stdout io.Writer) error {
	fs, dir := lmFlags("render")
	noGen := fs.Bool("no-generation-prompt", false, "leave out the assistant turn's opening")
	toolsFile := fs.String("tools", "", "JSON file with an array of OpenAI-style tool definitions")
	thinking := fs.String("enable-thinking", "", `set the template variable enable_thinking ("true" or "false"; Qwen3)`)
	if err := parseFlags(fs, args, dir); err != nil {
		return err
	}
	tok, err := hf.LoadTokenizer(*dir)
	if err != nil {
		return err
	}
	msgs, err := chatInput(stdin)
	if err != nil {
		return err
	}
	in := jinja.ChatInput{Messages: msgs, AddGenerationPrompt: !*noGen, Extra: map[string]any{}}
	tools, err := readTools(*toolsFile)
	if err != nil {
		return err
	}
	if tools != nil {
		in.Extra["tools"] = tools
	}
	if *thinking != "" {
		b, err := strconv.ParseBool(*thinking)
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

func lmGenerate(args []string, stdin io.Reader, stdout io.Writer) error {
	fs, dir := lmFlags("generate")
	lora := fs.String("lora", "", "PEFT LoRA adapter directory to apply")
	prompt := fs.String("prompt", "", "user message (default: a JSON array of messages on stdin)")
	system := fs.String("system", "", "system message, with --prompt")
	maxTokens := fs.Int("max-tokens", 128, "tokens to generate at most")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topP := fs.Float64("top-p", 0, "nucleus sampling threshold (0: off)")
	seed := fs.Uint64("seed", 1, "random seed")
	asJSON := fs.Bool("json", false, "print a JSON object with the text, tokens and their log-probabilities")
	if err := parseFlags(fs, args, dir); err != nil {
		return err
	}
	var msgs []map[string]any
	if *prompt != "" {
		if *system != "" {
			msgs = append(msgs, map[string]any{"role": "system", "content": *system})
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": *prompt})
	} else {
		var err error
		if msgs, err = chatInput(stdin); err != nil {
			return err
		}
	}
	tok, err := hf.LoadTokenizer(*dir)
	if err != nil {
		return err
	}
	m, ad, err := loadModel(*dir, *lora)
	if err != nil {
		return err
	}
	defer m.Close()
	text, err := tok.Render(jinja.ChatInput{Messages: msgs, AddGenerationPrompt: true})
	if err != nil {
		return err
	}
	ids := tok.Encode(text)
	opts := textgen.GenerateOptions{MaxTokens: *maxTokens, Temperature: *temp, TopP: *topP, Seed: *seed, StopTokens: tok.StopTokens()}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	var emit func(textgen.TokenEvent)
	if !*asJSON {
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
	if *asJSON {
		return json.NewEncoder(w).Encode(map[string]any{"text": tok.Decode(g.Tokens, true), "tokens": g.Tokens,
			"logprobs": g.LogProbs, "finish_reason": g.FinishReason, "prompt_tokens": len(ids)})
	}
	_, err = w.WriteString("\n")
	return err
}

func lmInit(args []string, _ io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("troupe lm init", flag.ContinueOnError)
	shape := fs.String("shape", "qwen3-tiny", "model shape: "+strings.Join(shapeNames(), ", "))
	out := fs.String("out", "", "model directory to write (required)")
	tokDir := fs.String("tokenizer-dir", "", "copy this directory's tokenizer files into the model")
	seed := fs.Uint64("seed", 1, "random seed")
	dtype := fs.String("dtype", "BF16", "weight dtype: BF16, F16 or F32")
	if err := parseFlags(fs, args, nil); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("init: --out is required")
	}
	c, ok := hf.Shapes[*shape]
	if !ok {
		return fmt.Errorf("init: unknown shape %q (known: %s)", *shape, strings.Join(shapeNames(), ", "))
	}
	if err := hf.WriteRandom(*out, c, *seed, hf.WriteOptions{DType: safetensors.DType(strings.ToUpper(*dtype))}); err != nil {
		return err
	}
	if *tokDir != "" {
		if err := hf.CopyTokenizer(*tokDir, *out); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "wrote a random %s checkpoint (%d parameters) to %s\n", *shape, c.NumParams(), *out)
	return nil
}

func lmExport(args []string, _ io.Reader, stdout io.Writer) error {
	fs, dir := lmFlags("export")
	lora := fs.String("lora", "", "PEFT LoRA adapter directory to merge (required)")
	out := fs.String("out", "", "model directory to write (required)")
	dtype := fs.String("dtype", "BF16", "weight dtype: BF16, F16 or F32")
	if err := parseFlags(fs, args, dir); err != nil {
		return err
	}
	if *lora == "" || *out == "" {
		return errors.New("export: --lora and --out are required")
	}
	m, ad, err := loadModel(*dir, *lora)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Export(*out, ad, hf.WriteOptions{DType: safetensors.DType(strings.ToUpper(*dtype))}); err != nil {
		return err
	}
	if _, err := os.Stat(*dir + "/tokenizer.json"); err == nil {
		if err := hf.CopyTokenizer(*dir, *out); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "wrote the merged model to %s\n", *out)
	return nil
}

// hfServeOptions are swarm serve's flags for pretrained models.
type hfServeOptions struct {
	modelDir, lora, agents string
	device                 string
	rank                   int
	alpha, lr              float64
}

func (o *hfServeOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.modelDir, "model-dir", "", "serve a pretrained Hugging Face model directory: each agent a LoRA adapter over one shared base")
	fs.StringVar(&o.lora, "lora", "", "with --model-dir: PEFT adapter directories to start from, one for all agents or one per agent in --agents order (comma-separated)")
	fs.StringVar(&o.agents, "agents", "", "with --model-dir: name:port,name:port,... one adapter, optimizer, episode pool and server per agent")
	fs.IntVar(&o.rank, "lora-rank", 16, "with --model-dir: rank of new LoRA adapters")
	fs.Float64Var(&o.alpha, "lora-alpha", 32, "with --model-dir: alpha of new LoRA adapters")
	fs.Float64Var(&o.lr, "lr", 1e-5, "with --model-dir: AdamW learning rate of the adapters")
	fs.StringVar(&o.device, "device", "cpu", deviceHelp)
}

// models loads the base and its tokenizer once and returns the agents'
// specs and a constructor of each agent's model: its own LoRA adapter (new,
// or loaded from --lora) on the shared base.
func (o *hfServeOptions) models(port int) ([]spec, func(string) (swarm.Model, error), func() error, error) {
	name := filepath.Base(filepath.Clean(o.modelDir))
	specs := []spec{{name, port}}
	if o.agents != "" {
		var err error
		if specs, err = parseMulti(o.agents); err != nil {
			return nil, nil, nil, fmt.Errorf("--agents: %w", err)
		}
	}
	var loras []string
	if o.lora != "" {
		loras = strings.Split(o.lora, ",")
		if len(loras) != 1 && len(loras) != len(specs) {
			return nil, nil, nil, fmt.Errorf("--lora names %d adapters for %d agents: give one, or one per agent", len(loras), len(specs))
		}
	}
	base, err := hf.Load(o.modelDir)
	if err != nil {
		return nil, nil, nil, err
	}
	tok, err := hf.LoadTokenizer(o.modelDir)
	if err != nil {
		base.Close()
		return nil, nil, nil, err
	}
	index := map[string]int{}
	for i, sp := range specs {
		if _, dup := index[sp.model]; dup {
			base.Close()
			return nil, nil, nil, fmt.Errorf("agent %q is named twice", sp.model)
		}
		index[sp.model] = i
	}
	mk := func(agent string) (swarm.Model, error) {
		cfg := hfmodel.Config{Name: agent, Base: base, Tokenizer: tok, LR: o.lr,
			LoRAConfig: hf.LoRAConfig{Rank: o.rank, Alpha: o.alpha, Seed: uint64(index[agent] + 1)}}
		if len(loras) > 0 {
			dir := loras[0]
			if len(loras) > 1 {
				dir = loras[index[agent]]
			}
			ad, err := hf.LoadLoRA(base, dir)
			if err != nil {
				return nil, err
			}
			cfg.LoRA = ad
		}
		m, _, err := hfmodel.New(cfg)
		return m, err
	}
	return specs, mk, base.Close, nil
}
