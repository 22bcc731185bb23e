package main

import (
	"flag"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/swarm/lmmodel"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// commands is troupe's command tree.
var commands = []command{
	{name: "swarm", summary: "swarm servers (AgentJet's protocol, OpenAI chat completions)", sub: []command{
		swarmServeCommand,
		{name: "models", summary: "list the model presets", setup: modelsCmd},
		{name: "frontends", summary: "list the servers registered on a NATS (model, URL, role, step)", setup: frontendsCmd},
		{name: "status", summary: "a swarm server's training status: episodes by state, dropped ones by reason and id", setup: swarmStatusCmd},
	}},
	serveCommand,
	dashboardCommand,
	{name: "lm", summary: "pretrained Hugging Face models: logprobs, tokenize, render, generate, init, export", sub: lmCommands},
	{name: "nats", summary: "a NATS server with JetStream for several processes or machines (the one troupe embeds)", setup: natsCmd},
	{name: "version", summary: "print the version", setup: versionCmd},
}

func versionCmd(*flag.FlagSet) func(cmdIO, []string) error {
	return func(cio cmdIO, _ []string) error {
		fmt.Fprintln(cio.stdout, versionString())
		return nil
	}
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

func modelsCmd(*flag.FlagSet) func(cmdIO, []string) error {
	return func(cio cmdIO, _ []string) error {
		for _, n := range sortedKeys(tabular.Presets) {
			p := tabular.Presets[n]
			m := policies.NewTabular(p)
			fmt.Fprintf(cio.stdout, "%-9s tabular order-%d byte policy, %d parameters, %s lr %g\n", n, p.Order, m.NumParams(), p.Optimizer, p.LR)
		}
		for _, n := range sortedKeys(lmmodel.Presets) {
			c := lmmodel.Presets[n]
			fmt.Fprintf(cio.stdout, "%-9s transformer dim %d, %d layers, %d heads, context %d, adam lr %g\n", n, c.LM.Dim, c.LM.Layers, c.LM.Heads, c.LM.MaxLen, c.LR)
		}
		return nil
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// splitList splits a comma-separated flag value, trimming blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
