package grpo_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/rl/grpo"
)

// byteModel writes and loads a random qwen3-byte model with its tokenizer.
func byteModel(t testing.TB, seed uint64) (*hf.Model, *hf.Tokenizer) {
	t.Helper()
	dir := t.TempDir()
	if err := hf.WriteRandom(dir, hf.Shapes["qwen3-byte"], seed, hf.WriteOptions{DType: "F32", InitStd: 0.1}); err != nil {
		t.Fatal(err)
	}
	if err := tokenizer.ByteChatML().WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	m, tok, err := hf.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, tok
}

// share is the fraction of c's characters for which is holds.
func share(c grpo.Completion, is func(rune) bool) float64 {
	var n, k int
	for _, r := range c.Text {
		n++
		if is(r) {
			k++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(k) / float64(n)
}

// The toy team: "shout" is paid for capital letters, "count" for digits
// and for answers of at most eight characters.
var (
	upper  = grpo.Reward{Name: "upper", Func: func(c grpo.Completion) float64 { return share(c, unicode.IsUpper) }}
	digits = grpo.Reward{Name: "digits", Func: func(c grpo.Completion) float64 { return share(c, unicode.IsDigit) }}
	short  = grpo.Reward{Name: "short", Weight: 0.5, Func: func(c grpo.Completion) float64 {
		if len([]rune(c.Text)) <= 8 {
			return 1
		}
		return 0
	}}
)

func toyData() (train, eval []grpo.Example) {
	topics := []string{"the sea", "a cat", "bread", "rain", "music", "a map", "snow", "tea", "a door", "the moon", "salt", "a bell", "ink", "wind", "a lamp", "stone"}
	for i, tp := range topics {
		ex := grpo.Example{Prompt: []hf.Message{{Role: "user", Content: "Say something about " + tp + "."}}}
		if i < 12 {
			train = append(train, ex)
		} else {
			eval = append(eval, ex)
		}
	}
	return train, eval
}

func toyConfig(m *hf.Model, tok *hf.Tokenizer, seed uint64) grpo.Config {
	train, eval := toyData()
	return grpo.Config{
		Model: m, Tokenizer: tok, Train: train, Eval: eval,
		Agents: []grpo.Agent{
			{Name: "shout", Rewards: []grpo.Reward{upper}},
			{Name: "count", Rewards: []grpo.Reward{digits, short}},
		},
		Steps: 30, PromptsPerStep: 2, GroupSize: 8, MaxTokens: 12, LR: 1e-2,
		LoRA: hf.LoRAConfig{Rank: 8, Seed: seed}, EvalEvery: 10, Seed: seed, Log: io.Discard,
	}
}

// evalCurve returns an agent's evaluation rewards by step.
func evalCurve(ms []grpo.Metrics, agent string) (steps []int, reward []float64) {
	for _, m := range ms {
		if m.Agent == agent && m.Kind == "eval" {
			steps, reward = append(steps, m.Step), append(reward, m.Reward)
		}
	}
	return steps, reward
}

// TestTrainerLearns: on the toy team, every agent's held-out greedy
// reward rises from its start, on three seeds; the files of a run are
// written.
func TestTrainerLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two agents for 30 steps on three seeds")
	}
	for _, seed := range []uint64{1, 2, 3} {
		m, tok := byteModel(t, seed)
		cfg := toyConfig(m, tok, seed)
		cfg.OutDir = t.TempDir()
		tr, err := grpo.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"shout", "count"} {
			steps, r := evalCurve(tr.History(), a)
			t.Logf("seed %d, %s: held-out reward at steps %v: %.3f", seed, a, steps, r)
			if len(r) != 4 || !(r[len(r)-1] > r[0]+0.2) {
				t.Errorf("seed %d, %s: held-out reward %.3f, want a rise of 0.2", seed, a, r)
			}
		}
		for _, f := range []string{"metrics.jsonl", "reward.png", "checkpoint-30/trainer_state.json",
			"checkpoint-30/shout/adapter_model.safetensors", "count/adapter_config.json"} {
			if _, err := os.Stat(filepath.Join(cfg.OutDir, f)); err != nil {
				t.Errorf("seed %d: %v", seed, err)
			}
		}
		rows, err := grpo.ReadMetrics(filepath.Join(cfg.OutDir, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 2*30+2*4 || !slices.EqualFunc(rows, tr.History(), func(a, b grpo.Metrics) bool { return a.Step == b.Step && a.Reward == b.Reward }) {
			t.Errorf("seed %d: metrics.jsonl has %d rows, want the history's %d", seed, len(rows), len(tr.History()))
		}
	}
}

// TestResumeIdentical: a run stopped after its checkpoint at step 2 and
// resumed continues as the run that was not stopped: the same training
// metrics and, at step 4, the same adapters bit for bit.
func TestResumeIdentical(t *testing.T) {
	m, tok := byteModel(t, 1)
	run := func(out string, steps int, resume bool) *grpo.Trainer {
		cfg := toyConfig(m, tok, 5)
		cfg.OutDir, cfg.Steps, cfg.SaveEvery, cfg.Resume = out, steps, 2, resume
		tr, err := grpo.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	whole := run(t.TempDir(), 4, false)
	// A run that stopped after step 3, its last checkpoint at step 2:
	// resuming drops the rows of step 3 and takes it again.
	out := t.TempDir()
	run(out, 3, false)
	if err := os.RemoveAll(filepath.Join(out, "checkpoint-3")); err != nil {
		t.Fatal(err)
	}
	resumed := run(out, 4, true)
	if resumed.Step() != 4 {
		t.Fatalf("resumed run at step %d, want 4", resumed.Step())
	}
	for _, a := range []string{"shout", "count"} {
		p, q := whole.Adapter(a).Params(), resumed.Adapter(a).Params()
		for i := range p {
			if !slices.Equal(p[i].Data(), q[i].Data()) {
				t.Errorf("agent %s: %s differs after resuming", a, p[i].Name)
			}
		}
	}
	train := func(ms []grpo.Metrics) []string {
		var out []string
		for _, m := range ms {
			if m.Kind == "train" {
				out = append(out, fmt.Sprintf("%d %s %.9g %.9g %.9g", m.Step, m.Agent, m.Reward, m.Loss, m.GradNorm))
			}
		}
		return out
	}
	rows, err := grpo.ReadMetrics(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := train(whole.History()), train(rows); !slices.Equal(a, b) {
		t.Errorf("training metrics differ:\nwhole   %v\nresumed %v", a, b)
	}
	if a, b := train(whole.History()), train(resumed.History()); !slices.Equal(a, b) {
		t.Errorf("history differs:\nwhole   %v\nresumed %v", a, b)
	}
}

// TestKLToBase: with KLCoef the KL to the base is measured: zero at the
// first step (LoRA's B starts at zero, so the adapter is the base) and
// positive once the adapter has moved.
func TestKLToBase(t *testing.T) {
	m, tok := byteModel(t, 1)
	cfg := toyConfig(m, tok, 1)
	cfg.Steps, cfg.KLCoef, cfg.Eval = 5, 0.1, nil
	tr, err := grpo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := tr.History()
	if len(h) != 10 {
		t.Fatalf("%d rows, want 10 (no evaluation without Eval examples)", len(h))
	}
	if math.Abs(h[0].KL) > 1e-6 || !(h[len(h)-1].KL > 1e-6) {
		t.Errorf("KL at step 1 %g (want 0), at step 5 %g (want > 0)", h[0].KL, h[len(h)-1].KL)
	}
	for _, r := range h {
		if r.Kind != "train" || r.Samples != 16 || r.CompletionLen <= 0 || r.CompletionLen > 12 || len(r.Rewards) == 0 {
			t.Errorf("row %+v", r)
		}
	}
}

// TestConfigErrors: configurations that cannot train are refused with the
// reason, and a reward that is not a number stops the run naming it.
func TestConfigErrors(t *testing.T) {
	m, tok := byteModel(t, 1)
	for _, tc := range []struct {
		mod  func(*grpo.Config)
		want string
	}{
		{func(c *grpo.Config) { c.Agents = nil }, "no Agents"},
		{func(c *grpo.Config) { c.Agents[1].Name = "shout" }, `two agents are named "shout"`},
		{func(c *grpo.Config) { c.Agents[0].Name = "a/b" }, "plain file name"},
		{func(c *grpo.Config) { c.Agents[0].Rewards = nil }, `agent "shout" has no reward functions`},
		{func(c *grpo.Config) { c.GroupSize = 1 }, "at least two completions"},
		{func(c *grpo.Config) { c.Train = nil }, "no training examples"},
		{func(c *grpo.Config) { c.Resume, c.OutDir = true, "" }, "Resume needs OutDir"},
	} {
		cfg := toyConfig(m, tok, 1)
		tc.mod(&cfg)
		if _, err := grpo.New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error with %q", err, tc.want)
		}
	}
	cfg := toyConfig(m, tok, 1)
	cfg.Agents[1].Rewards = []grpo.Reward{{Name: "broken", Func: func(grpo.Completion) float64 { return math.NaN() }}}
	tr, err := grpo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Run(context.Background()); err == nil || !strings.Contains(err.Error(), `reward "broken" scored NaN`) {
		t.Errorf("NaN reward: %v", err)
	}
}
