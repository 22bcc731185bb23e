package swarm

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/troupe-ml/troupe/rl"
)

// TestTabularGradient checks ForwardBackward against central finite
// differences of loss = Σ c_it · log p(a_it) for both context orders.
func TestTabularGradient(t *testing.T) {
	for _, cfg := range []TabularConfig{
		{Name: "o1", Order: 1, Optimizer: "sgd", LR: 1, InitScale: 0.5, Seed: 7},
		{Name: "o2", Order: 2, Rows: 31, Optimizer: "sgd", LR: 1, InitScale: 0.5, Seed: 8},
	} {
		t.Run(cfg.Name, func(t *testing.T) {
			p := NewTabularPolicy(cfg)
			r := rand.New(rand.NewPCG(1, 2))
			batch := make([]rl.Sample, 3)
			coef := make([][]float32, len(batch))
			for i := range batch {
				for j := 0; j < 4; j++ {
					batch[i].Prompt = append(batch[i].Prompt, r.IntN(4)+'a')
				}
				for j := 0; j < 5; j++ {
					batch[i].Actions = append(batch[i].Actions, r.IntN(5)+'a')
					coef[i] = append(coef[i], float32(r.NormFloat64()))
				}
			}
			lossOf := func() float64 {
				lp, err := p.LogProbs(batch)
				if err != nil {
					t.Fatal(err)
				}
				var l float64
				for i := range lp {
					for j := range lp[i] {
						l += float64(coef[i][j]) * float64(lp[i][j])
					}
				}
				return l
			}
			err := p.ForwardBackward(batch, func(logp, _ [][]float32) (float64, [][]float32, [][]float32) {
				return 0, coef, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got := append([]float64(nil), p.grad...)
			want := make([]float64, len(got))
			const h = 1e-2
			check := func(k int) bool { // the tokens used plus a sample of the rest
				tok := k % ByteVocab
				if testing.Short() {
					return tok >= 'a' && tok <= 'e' || k%997 == 0
				}
				return (tok >= 'a'-1 && tok <= 'f') || k%97 == 0
			}
			for k := range p.W {
				if !check(k) {
					continue
				}
				w0 := p.W[k]
				p.W[k] = w0 + h
				lp := lossOf()
				p.W[k] = w0 - h
				lm := lossOf()
				p.W[k] = w0
				want[k] = (lp - lm) / (2 * h)
			}
			for k := range got {
				if !check(k) {
					got[k] = 0
				}
			}
			if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 2e-3)); d != "" {
				t.Errorf("gradient mismatch (-fd +analytic):\n%s", d)
			}
		})
	}
}

// TestTabularSaveLoad checks that a checkpoint restores parameters,
// optimizer state and version exactly: training continues identically.
func TestTabularSaveLoad(t *testing.T) {
	cfg := TabularConfig{Name: "m", Order: 2, Rows: 64, Optimizer: "adam", LR: 0.1, InitScale: 0.01, Seed: 5}
	a := NewTabularModel(cfg)
	batch := []rl.Sample{
		{TaskID: "x", Prompt: []int{'a'}, Actions: []int{'b', 'c'}, LogProbs: []float32{-5.5, -5.5}, Reward: 1},
		{TaskID: "x", Prompt: []int{'a'}, Actions: []int{'d'}, LogProbs: []float32{-5.5}, Reward: 0},
	}
	for i := 0; i < 3; i++ {
		if _, err := a.Train(batch); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := a.Save(&buf); err != nil {
		t.Fatal(err)
	}
	b := NewTabularModel(cfg)
	if err := b.Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if a.Version() != 3 || b.Version() != 3 || a.Checksum() != b.Checksum() {
		t.Fatalf("after load: versions %d/%d checksums %x/%x", a.Version(), b.Version(), a.Checksum(), b.Checksum())
	}
	a.Train(batch)
	b.Train(batch)
	if a.Checksum() != b.Checksum() {
		t.Fatal("training diverged after load: optimizer state not restored")
	}
	if err := NewTabularModel(Presets["small"]).Load(bytes.NewReader(buf.Bytes())); err == nil {
		t.Fatal("loading an order-2 checkpoint into an order-1 model should fail")
	}
	if err := b.Load(bytes.NewReader(buf.Bytes()[:100])); err == nil {
		t.Fatal("loading a truncated checkpoint should fail")
	}
}

// TestGRPOLearns trains a small policy directly (no server) to emit 'a' and
// checks that the mean reward rises.
func TestGRPOLearns(t *testing.T) {
	m := NewTabularModel(Presets["small"])
	prompt, _ := m.ChatPrompt([]Message{{Role: "user", Content: "say a"}})
	r := rand.New(rand.NewPCG(3, 4))
	reward := func(toks []int) float64 { return closeness(toks, 'a', 4) }
	meanReward := func() float64 {
		var s float64
		for i := 0; i < 200; i++ {
			g, _ := m.Generate(context.Background(), [][]int{prompt}, GenerateOptions{MaxTokens: 4, Temperature: 1, Rand: []*rand.Rand{r}})
			s += reward(g[0].Tokens)
		}
		return s / 200
	}
	before := meanReward()
	for step := 0; step < 150; step++ {
		var batch []rl.Sample
		for k := 0; k < 16; k++ {
			g, _ := m.Generate(context.Background(), [][]int{prompt}, GenerateOptions{MaxTokens: 4, Temperature: 1, Rand: []*rand.Rand{r}})
			batch = append(batch, rl.Sample{TaskID: "t", Prompt: prompt, Actions: g[0].Tokens, LogProbs: g[0].LogProbs, Reward: reward(g[0].Tokens)})
		}
		if _, err := m.Train(batch); err != nil {
			t.Fatal(err)
		}
	}
	after := meanReward()
	t.Logf("mean reward before %.3f after %.3f", before, after)
	if !(after > before+0.2) {
		t.Fatalf("GRPO did not learn: reward %.3f -> %.3f", before, after)
	}
}

func TestParseYAMLConfig(t *testing.T) {
	y := `ajet:
  project_name: x   # comment
  data:
    train_batch_size: 8
    max_prompt_length: 3000
  rollout:
    num_repeat: 4
    user_workflow: "tutorial.x->Y"
    list:
    - a
    - b
  swarm_mode_sample_collection_method: rollout_until_finish_enough_non_dummy_tasks
  trainer_common:
    algorithm:
      adv_estimator: grpo
troupe:
  max_staleness: 2
`
	tc := DefaultTrainConfig()
	if err := tc.ApplyYAML(y); err != nil {
		t.Fatal(err)
	}
	if tc.BatchSize != 8 || tc.NumRepeat != 4 || tc.MaxPromptTokens != 3000 || tc.MaxStaleness != 2 || tc.CollectionMethod != CollectNonDummyTasks {
		t.Fatalf("parsed %+v", tc)
	}
	bad := DefaultTrainConfig()
	if err := bad.ApplyYAML("ajet:\n  trainer_common:\n    algorithm:\n      adv_estimator: gae\n"); err == nil {
		t.Fatal("gae should be refused")
	}
	if err := bad.ApplyYAML("ajet:\n  data:\n    train_batch_size: lots\n"); err == nil {
		t.Fatal("non-integer batch size should be refused")
	}
}

// closeness is the test reward: the mean over maxTokens positions of
// 1 − |byte − target|/256 (an end-of-sequence or missing token scores 0).
func closeness(toks []int, target, maxTokens int) float64 {
	var s float64
	for _, t := range toks {
		if t < 256 {
			d := t - target
			if d < 0 {
				d = -d
			}
			s += 1 - float64(d)/256
		}
	}
	return s / float64(maxTokens)
}
