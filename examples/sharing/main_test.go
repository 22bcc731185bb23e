package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"examples/finance-risk/finrisk"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/troupe-ml/troupe/rl/gradcomp"
)

// TestMain runs the agent when the coordinator started this test binary as
// one (the coordinator re-executes its own binary).
func TestMain(m *testing.M) {
	if spec := os.Getenv(agentEnv); spec != "" {
		if err := agentMain(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// data returns the data directory, skipping the test without network.
func data(t *testing.T) string {
	t.Helper()
	dir, err := finrisk.Fetch("")
	if errors.Is(err, finrisk.ErrFetch) {
		t.Skipf("data fetch failed for lack of network: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestQuickRun runs the quick mode end to end (agent processes on a
// loopback NATS server) and checks the bytes against the message formats
// and the metrics against what sharing must do.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run of 36 agent processes skipped in -short mode")
	}
	cfg := DefaultConfig().Quick()
	cfg.Data, cfg.Out = data(t), t.TempDir()
	var out strings.Builder
	rep, err := run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	row := map[string]Row{}
	for _, r := range rep.Rows {
		row[r.Name+" / "+r.Settings] = r
	}
	get := func(name string, s fmt.Stringer) Row {
		key := name + " / " + s.String()
		r, ok := row[key]
		if !ok {
			t.Fatalf("no row %q", key)
		}
		return r
	}
	c := conditions(0)
	none, raw, q8, tk, ef, dpLo, dpHi, fuse := row["no sharing / —"], get(c[1].Name, c[1].Grad), get(c[2].Name, c[2].Grad),
		get(c[3].Name, c[3].Grad), get(c[4].Name, c[4].Grad), get(c[5].Name, c[5].Grad), get(c[6].Name, c[6].Grad), rep.Rows[7]

	// Bytes: every agent's socket wrote exactly one PUB frame per message
	// and the 6-byte PING of the final flush. Raw gradient messages are a
	// kind byte, the step as a uvarint, gradcomp's 5-byte header and 4n.
	n := rep.Params
	frames := func(subjLen int, size func(step int) int, steps []int) float64 {
		total := 6
		for _, s := range steps {
			sz := size(s)
			total += len(fmt.Sprintf("PUB %s %d\r\n", strings.Repeat("x", subjLen), sz)) + sz + 2
		}
		return float64(total) / float64(cfg.Steps)
	}
	uv := func(step int) int { return len(binary.AppendUvarint(nil, uint64(step))) }
	all := make([]int, cfg.Steps)
	var rounds []int
	for s := range all {
		all[s] = s
		if (s+1)%fuseRound == 0 {
			rounds = append(rounds, s)
		}
	}
	subj := len("troupe.grad.s0-c1.a0")
	for _, tc := range []struct {
		name string
		got  float64
		size func(int) int
		msgs []int
	}{
		{"raw", raw.BytesPerStep, func(s int) int { return 1 + uv(s) + 5 + 4*n }, all},
		{"q8", q8.BytesPerStep, func(s int) int { return 1 + uv(s) + 5 + 8 + n }, all},
		{"top-k", tk.BytesPerStep, func(s int) int { return 1 + uv(s) + 5 + 4 + 5*int(math.Ceil(topFrac*float64(n))) + 8 }, all},
		{"fusion", fuse.BytesPerStep, func(s int) int { return 1 + uv(s) + 8 + 5 + 4*n }, rounds},
	} {
		subjLen := subj
		if tc.name == "fusion" {
			subjLen = len("troupe.param.s0-c7.a0")
		}
		if want := frames(subjLen, tc.size, tc.msgs); math.Abs(tc.got-want) > 1e-9 {
			t.Errorf("%s: %.3f bytes per agent per step on the wire, want %.3f", tc.name, tc.got, want)
		}
	}
	if none.BytesPerStep != 0 {
		t.Errorf("no sharing sent %g bytes per step", none.BytesPerStep)
	}
	// Each agent receives its three peers' messages.
	if r := raw.RecvPerStep / raw.BytesPerStep; math.Abs(r-3) > 0.05 {
		t.Errorf("raw: received/sent = %.3f, want about 3", r)
	}

	// Metrics: sharing must help on these small non-IID shards, 8-bit
	// values must not hurt, error feedback must rescue top-k, and more DP
	// noise must cost more.
	if raw.AUC < none.AUC+0.02 {
		t.Errorf("raw sharing AUC %.4f not above no sharing %.4f + 0.02", raw.AUC, none.AUC)
	}
	if math.Abs(q8.AUC/raw.AUC-1) > 0.005 {
		t.Errorf("q8 AUC %.4f more than 0.5 %% from raw %.4f", q8.AUC, raw.AUC)
	}
	if ef.AUC <= tk.AUC {
		t.Errorf("top-k with error feedback AUC %.4f not above without %.4f", ef.AUC, tk.AUC)
	}
	if dpHi.AUC >= dpLo.AUC {
		t.Errorf("DP σ=3 AUC %.4f not below σ=0.3 %.4f", dpHi.AUC, dpLo.AUC)
	}
	for _, r := range []Row{dpLo, dpHi} {
		sigma := c[5].Grad.Noise
		if r.Settings == c[6].Grad.String() {
			sigma = c[6].Grad.Noise
		}
		if want := gradcomp.Epsilon(sigma, cfg.Steps, 1e-5); math.Abs(r.Epsilon-want) > 1e-9*want {
			t.Errorf("%s: ε %g, want %g", r.Settings, r.Epsilon, want)
		}
	}
	table, err := os.ReadFile(filepath.Join(cfg.Out, "table.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(table), "| condition | settings | sent B/agent/step |") || strings.Count(string(table), "\n| ") != len(rep.Rows)+1 {
		t.Errorf("table.md:\n%s", table)
	}
}

// TestMLPGradient checks the hand-written backward pass against central
// differences of the loss.
func TestMLPGradient(t *testing.T) {
	for _, h := range []int{0, 5} {
		rng := rand.New(rand.NewPCG(1, uint64(h)))
		const d, rows = 7, 9
		x := make([]float32, rows*d)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		y := make([]int, rows)
		idx := make([]int, rows)
		for i := range y {
			y[i], idx[i] = rng.IntN(2), i
		}
		m := newMLP(d, h, rng)
		for i := range m.theta {
			m.theta[i] += 0.3 * rng.NormFloat64()
		}
		g := make([]float64, m.size())
		m.grad(g, x, y, idx)
		num := make([]float64, m.size())
		scratch := make([]float64, m.size())
		const eps = 1e-6
		for i := range m.theta {
			v := m.theta[i]
			m.theta[i] = v + eps
			lp := m.grad(scratch, x, y, idx)
			m.theta[i] = v - eps
			lm := m.grad(scratch, x, y, idx)
			m.theta[i] = v
			num[i] = (lp - lm) / (2 * eps)
		}
		if !cmp.Equal(g, num, cmpopts.EquateApprox(1e-6, 1e-8)) {
			t.Errorf("hidden %d: gradient %v, central differences %v", h, g, num)
		}
	}
}

// TestSplit checks that the shards are disjoint age bands of the training
// set, apart from the test set.
func TestSplit(t *testing.T) {
	s, err := loadSplit(data(t), 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, i := range s.test {
		seen[i] = true
	}
	total := len(s.test)
	prevMax := math.Inf(-1)
	for a := range s.train {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, i := range append(slices.Clone(s.train[a]), s.val[a]...) {
			lo, hi = min(lo, s.age[i]), max(hi, s.age[i])
		}
		if lo < prevMax {
			t.Errorf("agent %d's ages %g..%g overlap the previous band (up to %g)", a, lo, hi, prevMax)
		}
		prevMax = hi
		for _, part := range [][]int{s.train[a], s.val[a]} {
			for _, i := range part {
				if seen[i] {
					t.Fatalf("row %d in two places", i)
				}
				seen[i] = true
			}
			total += len(part)
		}
	}
	if total != len(s.y) || len(s.test) != len(s.y)/4 {
		t.Errorf("%d rows placed, %d in test, of %d", total, len(s.test), len(s.y))
	}
	if _, err := loadSplit(t.TempDir(), 4, 0); err == nil {
		t.Error("missing data file: no error")
	}
}
