package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"examples/translation/corpus"
	"examples/translation/grader"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	rlmetrics "github.com/troupe-ml/troupe/rl/metrics"
)

// options are a run's hyper-parameters and where it runs and writes.
type options struct {
	Config
	quick    bool
	out      string // report, plots, warm-start cache
	cacheDir string // warm-start cache (default <out>/cache)
	ports    string // the two local servers' ports
	servers  string // host:port,host:port of servers running elsewhere
	pool     string // comma-separated run directories to pool
	hfOut    string // folder to write Qwen3-shaped warm starts to, instead of running
	profile  string
}

// parseOptions reads the arguments: DefaultConfig (QuickConfig with
// -quick), then -config's file, then each -set in order.
func parseOptions(args []string) (options, error) {
	var o options
	var file string
	var sets []string
	fs := flag.NewFlagSet("translation", flag.ContinueOnError)
	fs.BoolVar(&o.quick, "quick", false, "smoke test: tiny models, a short warm start and 4 GRPO steps per server (well under a minute); writes to out/translation-quick")
	fs.StringVar(&file, "config", "", "run file of hyper-parameters: lines of \"key: value\" (a flat YAML map, as the report's settings block) or a JSON object")
	fs.Func("set", "set one hyper-parameter, key=value (repeatable; after -config)", func(v string) error { sets = append(sets, v); return nil })
	fs.StringVar(&o.out, "out", "", "output folder: report, plots, warm-start cache (default out/translation, or out/translation-quick with -quick)")
	fs.StringVar(&o.cacheDir, "cache", "", "warm-start checkpoint cache (default <out>/cache)")
	fs.StringVar(&o.ports, "ports", "10086,10087", "ports of the small and larger model's servers (0,0: any free ones)")
	fs.StringVar(&o.servers, "servers", "", "host:port,host:port of swarm servers already running elsewhere (no local servers, no evaluation)")
	fs.StringVar(&o.pool, "pool", "", "pool finished runs instead of running: comma-separated -out folders of one configuration with different rl-seed; writes pooled.md to -out")
	var smallDir, largeDir string
	fs.StringVar(&smallDir, "small-model-dir", "", "a pretrained Hugging Face model directory for agents 1 and 3 instead of the warm-started small model (with -large-model-dir; sets small-model-dir)")
	fs.StringVar(&largeDir, "large-model-dir", "", "a pretrained Hugging Face model directory for agent 2 (sets large-model-dir)")
	fs.StringVar(&o.hfOut, "export-hf", "", "warm-start Qwen3-shaped models on the warm start's data and write them as Hugging Face checkpoints (with the tokenizer and its chat template) to DIR/small and DIR/large, instead of running; then run RL on them with -small-model-dir DIR/small -large-model-dir DIR/large")
	fs.StringVar(&o.profile, "profile", "", "write a profile (cpu, mem, allocs, block, mutex, trace) to <out>/profile")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: translation [flags]\n\nFlags:\n")
		fs.PrintDefaults()
		c := DefaultConfig()
		fmt.Fprintf(fs.Output(), "\nHyper-parameters (-config, -set) and their defaults (Config in config.go says what each means):\n%s", c.String())
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	out := "out/translation"
	o.Config = DefaultConfig()
	if o.quick {
		o.Config, out = QuickConfig(), "out/translation-quick"
	}
	o.out = cmp.Or(o.out, out)
	if file != "" {
		if err := o.LoadFile(file); err != nil {
			return o, err
		}
	}
	if smallDir != "" {
		sets = append(sets, "small-model-dir="+smallDir)
	}
	if largeDir != "" {
		sets = append(sets, "large-model-dir="+largeDir)
	}
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return o, fmt.Errorf("-set %q: want key=value", s)
		}
		if err := o.Set(strings.TrimSpace(k), v); err != nil {
			return o, fmt.Errorf("-set: %w", err)
		}
	}
	return o, o.check()
}

func main() {
	o, err := parseOptions(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "translation:", err)
		os.Exit(2)
	}
	if o.quick {
		fmt.Fprintf(os.Stderr, "translation: smoke test (-quick): tiny models and 4 GRPO steps check that the pipeline runs and learns; its figures say nothing about the workflow (report in %s)\n", o.out)
	}
	stop, err := rlmetrics.StartProfile(o.profile, filepath.Join(o.out, "profile"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "translation:", err)
		os.Exit(2)
	}
	if o.pool != "" {
		err = pool(strings.Split(o.pool, ","), o.out, o.Seed)
	} else {
		_, err = run(o)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "translation:", err)
		os.Exit(1)
	}
}

var t0 = time.Now()

func logf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] "+f+"\n", append([]any{time.Since(t0).Seconds()}, a...)...)
}

// env is what the rollouts and the evaluation share: tokenizer, graders, budgets.
type env struct {
	tok *tokenizer.Tokenizer
	qg  *grader.TranslationQualityGrader
	// Agents 1 and 3's token budget (agent 3 gets 16 more for its tags) and
	// agent 2's: an item takes 20–39 tokens, two 50–69, so 80 fits two.
	maxTok, maxDetTok   int
	maxRough            int     // runes of the rough translation agents 2 and 3 get
	rlTemp, rlTempLarge float64 // the rollouts' sampling temperatures
}

// tasks are the train split's tasks and the ones the report evaluates.
func (o *options) tasks(d *corpus.Dataset) (train, eval []task) {
	eval = makeTasks(map[string][]corpus.Pair{"test": d.Test, "val": d.Val}[o.EvalSplit], d.Glossary, o.MaxEn, o.MaxZh)
	if o.EvalN > 0 && len(eval) > o.EvalN {
		eval = eval[:o.EvalN]
	}
	return makeTasks(d.Train, d.Glossary, o.MaxEn, o.MaxZh), eval
}

// run takes a run's phases in order (see doc.go) and writes the report.
func run(o options) (*report, error) {
	d, err := corpus.Load()
	if err != nil {
		return nil, err
	}
	train, test := o.tasks(d)
	logf("data: %d train / %d %s tasks (of %d/%d pairs), glossary %d terms, %d acronyms",
		len(train), len(test), o.EvalSplit, len(d.Train), len(d.Test), len(d.Glossary.Terms), len(d.Acronyms))
	tok, err := trainTokenizer(train, d.Glossary, o.Vocab)
	if err != nil {
		return nil, err
	}
	e := &env{tok: tok, qg: &grader.TranslationQualityGrader{Glossary: d.Glossary, Acronyms: d.Acronyms},
		maxTok: 40, maxDetTok: 80, maxRough: 2 * o.MaxZh, rlTemp: o.RLTemp, rlTempLarge: o.RLTempLarge}
	if o.hfOut != "" {
		return nil, o.exportHF(e, d, train, o.hfOut)
	}
	var w *warmed
	if o.SmallModelDir != "" {
		var closeBases func()
		if w, closeBases, err = o.pretrainedStarts(train); err != nil {
			return nil, err
		}
		defer closeBases()
	} else if w, err = o.warmStarts(e, d, train); err != nil {
		return nil, err
	}
	rep := &report{opts: o, lossSmall: w.lossSmall, lossLarge: w.lossLarge, nTrain: len(train), nTest: len(test)}
	local := o.servers == ""
	if local {
		logf("evaluating the warm start on %d %s sentences", len(test), o.EvalSplit)
		if rep.aloneBefore, rep.flowBefore, err = e.evaluate(w.dec[0], w.dec[1], test); err != nil {
			return nil, err
		}
		for _, t := range test {
			rep.sentences = append(rep.sentences, t.En)
		}
	}
	srv, err := o.startServers(e, w)
	if err != nil {
		return nil, err
	}
	defer srv.close()
	if err := o.rlPhase(e, w, srv, rep); err != nil {
		return nil, err
	}
	if local {
		logf("evaluating after RL")
		if rep.aloneAfter, rep.flowAfter, err = e.evaluate(w.dec[0], w.dec[1], test); err != nil {
			return nil, err
		}
		if rep.detFixed, err = e.detectOn(w.dec[1], test, rep.flowBefore.seen); err != nil {
			return nil, err
		}
	}
	rep.seconds = time.Since(t0).Seconds()
	if err := rep.write(o.out); err != nil {
		return nil, err
	}
	logf("report: %s", filepath.Join(o.out, "report.md"))
	return rep, nil
}

// rlSeed is the RL phase's seed.
func (o *options) rlSeed() uint64 { return cmp.Or(o.RLSeed, o.Seed) }

// rlSteps is the GRPO steps per server: steps for the miniatures,
// lora-steps for pretrained models.
func (o *options) rlSteps() int {
	if o.SmallModelDir != "" {
		return o.LoRASteps
	}
	return o.Steps
}
