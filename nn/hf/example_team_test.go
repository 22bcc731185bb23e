package hf_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode"

	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/rl/grpo"
)

// A team of two agents, each a LoRA adapter over one shared base with its
// own reward functions, trained together by package rl/grpo's Trainer:
// "shout" is paid for capital letters, "count" for digits and, at half
// weight, for answers of at most eight characters. Each is evaluated on
// held-out prompts before and after training, checkpointed, and its final
// adapter is written in PEFT's layout, which LoadLoRA reads back.
func Example_team() {
	m, tok, done := loadTiny(1)
	defer done()
	share := func(s string, is func(rune) bool) float64 {
		var n, k float64
		for _, r := range s {
			n++
			if is(r) {
				k++
			}
		}
		return k / max(n, 1)
	}
	upper := grpo.Reward{Name: "upper", Func: func(c grpo.Completion) float64 { return share(c.Text, unicode.IsUpper) }}
	digits := grpo.Reward{Name: "digits", Func: func(c grpo.Completion) float64 { return share(c.Text, unicode.IsDigit) }}
	short := grpo.Reward{Name: "short", Weight: 0.5, Func: func(c grpo.Completion) float64 {
		if len([]rune(c.Text)) <= 8 {
			return 1
		}
		return 0
	}}
	var train, eval []grpo.Example
	for i, topic := range []string{"the sea", "a cat", "bread", "rain", "music", "a map", "snow", "tea", "a door", "the moon"} {
		ex := grpo.Example{Prompt: []hf.Message{{Role: "user", Content: "Say something about " + topic + "."}}}
		if i < 8 {
			train = append(train, ex)
		} else {
			eval = append(eval, ex)
		}
	}
	out, err := os.MkdirTemp("", "team")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(out)
	tr, err := grpo.New(grpo.Config{
		Model: m, Tokenizer: tok, Train: train, Eval: eval,
		Agents: []grpo.Agent{
			{Name: "shout", Rewards: []grpo.Reward{upper}},
			{Name: "count", Rewards: []grpo.Reward{digits, short}},
		},
		Steps: 20, PromptsPerStep: 2, GroupSize: 8, MaxTokens: 12, LR: 1e-2,
		LoRA: hf.LoRAConfig{Rank: 8}, EvalEvery: 20, OutDir: out, Seed: 1,
		Log: io.Discard, // progress lines go to os.Stderr by default
	})
	if err != nil {
		panic(err)
	}
	if err := tr.Run(context.Background()); err != nil {
		panic(err)
	}
	first, last := map[string]float64{}, map[string]float64{}
	for _, r := range tr.History() {
		if r.Kind == "eval" {
			if _, ok := first[r.Agent]; !ok {
				first[r.Agent] = r.Reward
			}
			last[r.Agent] = r.Reward
		}
	}
	for _, a := range []string{"shout", "count"} {
		fmt.Printf("%s: held-out reward rose by more than 0.3: %v\n", a, last[a] > first[a]+0.3)
	}
	ad, err := hf.LoadLoRA(m, filepath.Join(out, "shout"))
	if err != nil {
		panic(err)
	}
	prompt, _ := tok.ApplyChatTemplate(eval[0].Prompt, true)
	seqs := []hf.Seq{{Prompt: prompt, Target: tok.Encode("HELLO")}}
	a, _ := m.TokenLogProbs(tr.Adapter("shout"), seqs)
	b, _ := m.TokenLogProbs(ad, seqs)
	same := true
	for i := range a[0] {
		same = same && a[0][i] == b[0][i]
	}
	fmt.Println("reloaded shout adapter, identical log-probs:", same)
	for _, f := range []string{"metrics.jsonl", "reward.png", "checkpoint-20/trainer_state.json", "count/adapter_model.safetensors"} {
		_, err := os.Stat(filepath.Join(out, f))
		fmt.Println(f, err == nil)
	}
	// Output:
	// shout: held-out reward rose by more than 0.3: true
	// count: held-out reward rose by more than 0.3: true
	// reloaded shout adapter, identical log-probs: true
	// metrics.jsonl true
	// reward.png true
	// checkpoint-20/trainer_state.json true
	// count/adapter_model.safetensors true
}
