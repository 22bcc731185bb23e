// Sharing measures what agents gain by learning together over NATS, and
// what the exchange costs on the wire: several agent processes each train a
// small MLP on a private, non-IID shard of the German Credit data (one age
// band each), and the table compares no sharing, gradient sharing (raw,
// 8-bit, top-k with and without error feedback, with differential privacy)
// and attention-weighted parameter fusion, by bytes their sockets wrote and
// the held-out AUC.
//
//	go run ./examples/sharing          # full: 10 seeds, 300 steps (about a minute)
//	go run ./examples/sharing -quick   # 1 seed, fewer steps
//
// The table is printed and written to <out>/table.md.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"examples/finance-risk/finrisk"

	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/rl/gradcomp"
	"github.com/troupe-ml/troupe/rl/gradshare"
)

// Config configures a run.
type Config struct {
	Agents int    // agent processes per condition
	Seeds  int    // seeds (data split, initialisation, minibatches, noise)
	Steps  int    // training steps per agent
	Hidden int    // hidden units of the MLP (0: logistic regression)
	Out    string // directory of table.md ("" writes nothing)
	Data   string // data directory ("" is <repo>/data)
}

// DefaultConfig is the full run; Quick the smoke test.
func DefaultConfig() Config {
	return Config{Agents: 4, Seeds: 10, Steps: 300, Hidden: 16, Out: "out/sharing"}
}

// Quick shrinks c to one seed and fewer steps.
func (c Config) Quick() Config {
	c.Seeds, c.Steps = 1, 150
	return c
}

// The exchange settings of the table. Top-k keeps 10 % of the entries with
// 8-bit values; DP clips each gradient message to L2 norm dpClip, a little
// below the median norm of an agent's minibatch gradient here (about 0.36):
// a smaller clip shrinks the peers' gradients against the agent's own
// (which it applies unclipped), a larger one scales the noise up with it.
const (
	topFrac   = 0.1
	dpClip    = 0.3
	fuseRound = 20
)

func conditions(seed uint64) []condition {
	tk := gradshare.Settings{Codec: gradcomp.TopKQ8, Frac: topFrac}
	ef := tk
	ef.ErrorFeedback = true
	dp := func(sigma float64) gradshare.Settings {
		s := ef
		s.Clip, s.Noise, s.Seed = dpClip, sigma, seed
		return s
	}
	return []condition{
		{Name: "no sharing", Share: shareNone},
		{Name: "gradients, raw", Share: shareGrad, Grad: gradshare.Settings{Codec: gradcomp.Raw}},
		{Name: "gradients, q8", Share: shareGrad, Grad: gradshare.Settings{Codec: gradcomp.Q8}},
		{Name: "gradients, top-k", Share: shareGrad, Grad: tk},
		{Name: "gradients, top-k + EF", Share: shareGrad, Grad: ef},
		{Name: "gradients, top-k + EF + DP", Share: shareGrad, Grad: dp(0.3)},
		{Name: "gradients, top-k + EF + DP", Share: shareGrad, Grad: dp(3)},
		{Name: "parameter fusion", Share: shareParams, Round: fuseRound, Tau: 0.05},
		{Name: "parameter fusion", Share: shareParams, Round: fuseRound, Tau: 1},
	}
}

func (c condition) settings() string {
	switch c.Share {
	case shareGrad:
		return c.Grad.String()
	case shareParams:
		return fmt.Sprintf("raw params every %d steps, τ=%g", c.Round, c.Tau)
	}
	return "—"
}

// Row is one condition's measurements over agents and seeds.
type Row struct {
	Name, Settings string
	Share          string
	BytesPerStep   float64 // socket bytes written per agent per step
	RecvPerStep    float64 // socket bytes read per agent per step
	MsgPerStep     float64 // message bytes (payload) published per agent per step
	AUC, AUCsd     float64 // test AUC, mean and sd over agents × seeds
	Epsilon        float64 // ε at δ = 1e-5 per agent; 0 without DP
	// VsRaw and VsRawSE are the mean relative AUC change against raw
	// gradient sharing, paired by seed and agent (same split, shard,
	// initialisation and minibatches), in percent, and its standard error.
	VsRaw, VsRawSE float64
	aucs           []float64
}

// Report is a run's table.
type Report struct {
	Config    Config
	Params    int
	Inputs    int
	TrainRows []int
	Rows      []Row
	Elapsed   time.Duration
}

func main() {
	if spec := os.Getenv(agentEnv); spec != "" {
		if err := agentMain(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	cfg := DefaultConfig()
	quick := flag.Bool("quick", false, "one seed and 150 steps (seconds)")
	flag.IntVar(&cfg.Agents, "agents", cfg.Agents, "agent processes")
	flag.IntVar(&cfg.Seeds, "seeds", cfg.Seeds, "seeds")
	flag.IntVar(&cfg.Steps, "steps", cfg.Steps, "training steps per agent")
	flag.IntVar(&cfg.Hidden, "hidden", cfg.Hidden, "hidden units of each agent's MLP (0: logistic regression)")
	flag.StringVar(&cfg.Out, "out", cfg.Out, "directory for table.md")
	flag.StringVar(&cfg.Data, "data", "", "data directory (default <repo>/data; fetched when missing)")
	flag.Parse()
	if *quick {
		q := cfg.Quick()
		// explicit flags win over -quick
		flag.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "seeds":
				q.Seeds = cfg.Seeds
			case "steps":
				q.Steps = cfg.Steps
			}
		})
		cfg = q
	}
	if _, err := run(context.Background(), cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run measures every condition and prints the table to w.
func run(ctx context.Context, cfg Config, w io.Writer) (*Report, error) {
	if cfg.Agents < 2 || cfg.Seeds < 1 || cfg.Steps < fuseRound || cfg.Hidden < 0 {
		return nil, fmt.Errorf("sharing: need ≥ 2 agents, ≥ 1 seed, ≥ %d steps and hidden ≥ 0 (got %+v)", fuseRound, cfg)
	}
	start := time.Now()
	dataDir, err := finrisk.Fetch(cfg.Data)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("sharing: own executable: %w", err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bus.Open(ctx, bus.Config{Listen: "127.0.0.1:0", Logger: quiet, Name: "sharing"})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	rep := &Report{Config: cfg}
	for seed := range uint64(cfg.Seeds) {
		for ci, c := range conditions(seed) {
			spec := agentSpec{URL: b.ClientURL(), Group: fmt.Sprintf("s%d-c%d", seed, ci), Agents: cfg.Agents,
				Seed: seed, Steps: cfg.Steps, Hidden: cfg.Hidden, DataDir: dataDir, Cond: c}
			res, err := runAgents(ctx, exe, spec)
			if err != nil {
				return nil, fmt.Errorf("sharing: %s (%s), seed %d: %w", c.Name, c.settings(), seed, err)
			}
			if seed == 0 {
				rep.Rows = append(rep.Rows, Row{Name: c.Name, Settings: c.settings(), Share: c.Share})
				if ci == 0 {
					rep.Params, rep.Inputs = res[0].Params, res[0].Inputs
					for _, r := range res {
						rep.TrainRows = append(rep.TrainRows, r.TrainRows)
					}
				}
			}
			row := &rep.Rows[ci]
			for _, r := range res {
				k := float64(cfg.Steps * cfg.Agents * cfg.Seeds)
				row.BytesPerStep += float64(r.WireOut) / k
				row.RecvPerStep += float64(r.WireIn) / k
				row.MsgPerStep += float64(r.MsgOut) / k
				row.Epsilon = max(row.Epsilon, r.Epsilon)
				row.aucs = append(row.aucs, r.TestAUC)
			}
		}
	}
	raw := rep.raw()
	for i := range rep.Rows {
		r := &rep.Rows[i]
		r.AUC, r.AUCsd = meanSD(r.aucs)
		if raw != nil {
			d := make([]float64, len(r.aucs))
			for k, a := range r.aucs {
				d[k] = 100 * (a/raw.aucs[k] - 1)
			}
			m, sd := meanSD(d)
			r.VsRaw, r.VsRawSE = m, sd/math.Sqrt(float64(len(d)))
		}
	}
	rep.Elapsed = time.Since(start)
	table := rep.Markdown()
	fmt.Fprint(w, table)
	if cfg.Out != "" {
		if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
			return nil, fmt.Errorf("sharing: %w", err)
		}
		p := filepath.Join(cfg.Out, "table.md")
		if err := os.WriteFile(p, []byte(table), 0o644); err != nil {
			return nil, fmt.Errorf("sharing: %w", err)
		}
		fmt.Fprintf(w, "\nwritten to %s\n", p)
	}
	return rep, nil
}

// runAgents starts spec.Agents processes of exe, lets them start training
// together once all are subscribed, and collects their results.
func runAgents(ctx context.Context, exe string, spec agentSpec) ([]agentResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	type proc struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout *bufio.Reader
		stderr bytes.Buffer
	}
	procs := make([]*proc, spec.Agents)
	defer func() {
		for _, p := range procs {
			if p != nil && p.cmd.Process != nil && p.cmd.ProcessState == nil {
				p.cmd.Process.Kill()
				p.cmd.Wait()
			}
		}
	}()
	for i := range procs {
		s := spec
		s.Index = i
		js, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		p := &proc{cmd: exec.CommandContext(ctx, exe)}
		p.cmd.Env = append(os.Environ(), agentEnv+"="+string(js))
		p.cmd.Stderr = &p.stderr
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			return nil, err
		}
		out, err := p.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		p.stdout = bufio.NewReader(out)
		if err := p.cmd.Start(); err != nil {
			return nil, fmt.Errorf("start agent %d: %w", i, err)
		}
		procs[i] = p
	}
	fail := func(i int, err error) error {
		procs[i].cmd.Process.Kill()
		procs[i].cmd.Wait()
		return fmt.Errorf("agent %d: %w: %s", i, err, strings.TrimSpace(procs[i].stderr.String()))
	}
	for i, p := range procs {
		line, err := p.stdout.ReadString('\n')
		if err != nil || line != "ready\n" {
			return nil, fail(i, fmt.Errorf("no ready line (%q, %v)", line, err))
		}
	}
	for _, p := range procs {
		io.WriteString(p.stdin, "go\n")
	}
	res := make([]agentResult, spec.Agents)
	errs := make([]error, spec.Agents)
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() {
			line, err := p.stdout.ReadString('\n')
			if err == nil {
				err = json.Unmarshal([]byte(line), &res[i])
			}
			if werr := p.cmd.Wait(); werr != nil && err == nil {
				err = werr
			}
			if err != nil {
				errs[i] = fmt.Errorf("agent %d: %w: %s", i, err, strings.TrimSpace(p.stderr.String()))
			}
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

func meanSD(xs []float64) (float64, float64) {
	var m, v float64
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	if len(xs) < 2 {
		return m, 0
	}
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return m, math.Sqrt(v / float64(len(xs)-1))
}

// raw is the row of raw gradient sharing, nil when absent.
func (r *Report) raw() *Row {
	for i := range r.Rows {
		if r.Rows[i].Share == shareGrad && r.Rows[i].Settings == (gradshare.Settings{Codec: gradcomp.Raw}).String() {
			return &r.Rows[i]
		}
	}
	return nil
}

// Markdown renders the table with its settings.
func (r *Report) Markdown() string {
	var sb strings.Builder
	c := r.Config
	model := fmt.Sprintf("an MLP %d→%d→1", r.Inputs, c.Hidden)
	if c.Hidden == 0 {
		model = fmt.Sprintf("a logistic regression over %d features", r.Inputs)
	}
	fmt.Fprintf(&sb, "German Credit, %d agent processes on one NATS server (loopback TCP), each %s (%d parameters) trained %d steps (Adam, lr %g, batch %d) on its own age band of the training set (%v rows); test AUC on a common stratified 25 %% held-out set; %d seed(s).\n",
		c.Agents, model, r.Params, c.Steps, learnRate, batchSize, r.TrainRows, c.Seeds)
	fmt.Fprintf(&sb, "Bytes are what each agent's socket wrote during training (NATS PUB frames and flush pings), per agent per step; received is what it read. Top-k keeps %g %% of entries; DP clips each message to L2 norm %g and adds N(0,(σC)²), ε at δ=1e-5 after %d messages (add/remove one message, RDP).\n\n",
		100*topFrac, dpClip, c.Steps)
	sb.WriteString("| condition | settings | sent B/agent/step | traffic vs raw | received B/agent/step | test AUC (mean ± sd) | AUC vs raw (paired, ± s.e.) | ε |\n")
	sb.WriteString("|---|---|---:|---:|---:|---:|---:|---:|\n")
	raw := r.raw()
	for _, row := range r.Rows {
		traffic, dAUC := "—", "—"
		if raw != nil && raw.BytesPerStep > 0 {
			traffic = fmt.Sprintf("%+.1f %%", 100*(row.BytesPerStep/raw.BytesPerStep-1))
			dAUC = fmt.Sprintf("%+.2f ± %.2f %%", row.VsRaw, row.VsRawSE)
		}
		eps := "—"
		if row.Epsilon > 0 {
			eps = fmt.Sprintf("%.3g", row.Epsilon)
		}
		fmt.Fprintf(&sb, "| %s | %s | %.0f | %s | %.0f | %.4f ± %.4f | %s | %s |\n",
			row.Name, row.Settings, row.BytesPerStep, traffic, row.RecvPerStep, row.AUC, row.AUCsd, dAUC, eps)
	}
	fmt.Fprintf(&sb, "\n%d agent processes per condition and seed; measured in %.0f s.\n", c.Agents, r.Elapsed.Seconds())
	return sb.String()
}
