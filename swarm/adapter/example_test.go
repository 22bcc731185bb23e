package adapter_test

import (
	"context"
	"fmt"
	"io"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/adapter"
	"github.com/troupe-ml/troupe/swarm/tabular"
	"github.com/troupe-ml/troupe/textgen"
)

// ExampleNew makes a Model of parts that exist already: a tokenizer
// with a chat template, a sampler, an rl.Policy and a trainer (here all
// from the tabular model; an nn.LM's are lmmodel.TokenizerChat,
// lmmodel.Sampler and policies.LM). The Adapter counts the versions and
// keeps them across checkpoints; a swarm Server hosts it as any Model.
func ExampleNew() {
	tab := tabular.New(tabular.Presets["tiny"])
	model, err := adapter.New(adapter.Config{
		Name:      "my-model",
		Tokenizer: tab,
		Sampler:   tab,
		Policy:    tab.Policy,
		Trainer:   rl.NewREINFORCE(rl.REINFORCEConfig{}),
		MaxLen:    64,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var m swarm.Model = model // what NewServer takes

	prompt, _ := m.ChatPrompt(context.Background(), []api.Message{{Role: "user", Content: "hi"}}, nil)
	gens, _ := m.Generate(context.Background(), [][]int{prompt, prompt},
		textgen.GenerateOptions{MaxTokens: 5, Temperature: 1, Seed: 1}, nil)
	var batch []rl.Sample
	for i, g := range gens {
		batch = append(batch, rl.Sample{TaskID: "hi", Prompt: prompt, Actions: g.Tokens,
			LogProbs: g.LogProbs, Reward: float64(i), Version: m.Version()})
	}
	st, err := m.Train(batch)
	fmt.Println("trained on", st.Samples, "samples, error:", err)
	fmt.Println("version:", m.Version())
	fmt.Println(m.Save(io.Discard))
	// Output:
	// trained on 2 samples, error: <nil>
	// version: 1
	// model "my-model" has no checkpoint (its adapter.Config.State is nil)
}
