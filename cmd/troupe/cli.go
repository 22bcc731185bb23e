package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
)

// command is one entry of the command tree: a leaf sets up its flags and
// runs, a group dispatches to its subcommands. A new command is one more
// entry; every leaf's flags are parsed by runLeaf, the one parsing path.
type command struct {
	name, summary string
	// args names the positional arguments in the usage line ("MODEL_DIR");
	// nargs is how many are required, and at most that many are accepted.
	args  string
	nargs int
	// setup registers the leaf's flags on fs and returns what runs once
	// they are parsed, with the positional arguments.
	setup func(fs *flag.FlagSet) func(io cmdIO, args []string) error
	// groups order the flags in -h by topic; flags in no group are listed
	// last under "Other".
	groups []flagGroup
	// examples end the -h text.
	examples string
	sub      []command
}

// flagGroup is a titled list of flag names for -h.
type flagGroup struct {
	title string
	names []string
}

// cmdIO is what a command reads and writes.
type cmdIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// errUsage marks a command-line mistake (exit status 2, usage printed).
var errUsage = errors.New("usage")

func main() { os.Exit(runCLI(os.Args[1:], cmdIO{os.Stdin, os.Stdout, os.Stderr})) }

// runCLI executes the command line and returns the exit status: 0 on
// success and for -h, 2 for usage errors, 1 for failures.
func runCLI(args []string, cio cmdIO) int {
	err := dispatch(commands, "troupe", args, cio)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintln(cio.stderr, "troupe:", err)
		return 1
	}
}

func dispatch(cmds []command, path string, args []string, cio cmdIO) error {
	if len(args) == 0 {
		printCommands(cio.stderr, path, cmds)
		return errUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printCommands(cio.stdout, path, cmds)
		return flag.ErrHelp
	}
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		if c.sub != nil {
			return dispatch(c.sub, path+" "+c.name, args[1:], cio)
		}
		return runLeaf(c, path+" "+c.name, args[1:], cio)
	}
	fmt.Fprintf(cio.stderr, "%s: unknown command %q\n", path, args[0])
	printCommands(cio.stderr, path, cmds)
	return errUsage
}

func printCommands(w io.Writer, path string, cmds []command) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", path)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun \"%s <command> -h\" for a command's flags.\n", path)
}

// runLeaf parses a leaf's flags and positional arguments (flags may come
// before or after them, as in "troupe serve MODEL_DIR --port 8000") and
// runs it. -h prints the help to stdout (flag.ErrHelp, exit 0); a mistake
// prints it to stderr (errUsage).
func runLeaf(c command, path string, args []string, cio cmdIO) error {
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := c.setup(fs)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printHelp(cio.stdout, c, path, fs)
				return flag.ErrHelp
			}
			fmt.Fprintf(cio.stderr, "%s: %v\n", path, err)
			printHelp(cio.stderr, c, path, fs)
			return errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) > c.nargs {
		fmt.Fprintf(cio.stderr, "%s: unexpected argument %q\n", path, pos[c.nargs])
		printHelp(cio.stderr, c, path, fs)
		return errUsage
	}
	if len(pos) < c.nargs {
		fmt.Fprintf(cio.stderr, "%s: missing %s\n", path, c.args)
		printHelp(cio.stderr, c, path, fs)
		return errUsage
	}
	return run(cio, pos)
}

// printHelp prints a leaf's usage line, summary, flags by group, and
// examples.
func printHelp(w io.Writer, c command, path string, fs *flag.FlagSet) {
	usage := path
	if c.args != "" {
		usage += " " + c.args
	}
	fmt.Fprintf(w, "usage of %s [flags]\n\n%s\n", usage, c.summary)
	listed := map[string]bool{}
	groups := c.groups
	var other []string
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.ContainsFunc(groups, func(g flagGroup) bool { return slices.Contains(g.names, f.Name) }) {
			other = append(other, f.Name)
		}
	})
	if len(other) > 0 {
		title := "Other"
		if len(groups) == 0 {
			title = "Flags"
		}
		groups = append(slices.Clone(groups), flagGroup{title, other})
	}
	for _, g := range groups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.names {
			f := fs.Lookup(name)
			if f == nil || listed[name] {
				continue
			}
			listed[name] = true
			kind, help := flag.UnquoteUsage(f)
			line := "  -" + f.Name
			if kind != "" {
				line += " " + kind
			}
			fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(help, "\n", "\n    \t"))
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				fmt.Fprintf(w, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(w)
		}
	}
	if c.examples != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(c.examples, "\n"))
	}
}

// logFlags adds --log-level and --log-format to a command; the returned
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

// setFlags reports the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}
