// Package grpo trains pretrained language models (package nn/hf) with LoRA
// adapters by GRPO on a dataset of prompts and reward functions, the
// library route to what TRL's GRPOTrainer(model, reward_funcs,
// train_dataset) does, for a team: several agents, each its own adapter
// over one shared frozen base, its own reward functions and its own
// datasets, trained in one loop.
//
//	cfg := grpo.Config{
//		Model: base, Tokenizer: tok,
//		Train: train, Eval: held,
//		Agents: []grpo.Agent{
//			{Name: "terse", Rewards: []grpo.Reward{{Name: "short", Func: short}}},
//			{Name: "polite", Rewards: []grpo.Reward{{Name: "please", Func: please}, {Name: "short", Weight: 0.5, Func: short}}},
//		},
//		Steps: 200, OutDir: "out/run1",
//	}
//	tr, err := grpo.New(cfg)
//	...
//	err = tr.Run(ctx)
//
// Each step, for every agent: PromptsPerStep examples are drawn (each
// epoch a new permutation of the agent's training set), the chat template
// renders them, and GroupSize completions of each are sampled with the
// agent's adapter, their behaviour log-probabilities recorded. The reward
// functions score every completion; the agent's reward is their weighted
// sum. rl.GRPO turns each group's rewards into advantages and takes one
// AdamW step on the adapter, with a k3 penalty KLCoef·KL(π‖π_base) to the
// base model (the adapter switched off) when KLCoef is positive.
//
// Every EvalEvery steps each agent answers its held-out examples greedily
// and the mean of each reward is logged. Every SaveEvery steps a
// checkpoint is written: OutDir/checkpoint-<step>/<agent>/ holds the
// adapter in PEFT's layout (adapter_config.json,
// adapter_model.safetensors: hf.LoadLoRA or PEFT's
// PeftModel.from_pretrained read it) and trainer_state.safetensors (the
// adapter with its optimizer's moments), beside
// OutDir/checkpoint-<step>/trainer_state.json. With Resume, Run continues
// from the latest checkpoint of OutDir; every random draw is a function of
// Seed, the step and the agent, so the resumed run is the run that was not
// stopped, bit for bit. At the end the adapters are written to
// OutDir/<agent>/ and each agent's training and evaluation rewards to
// OutDir/reward.png.
//
// Metrics go to OutDir/metrics.jsonl, one JSON object per agent per step
// (Metrics: "kind" train or eval, reward mean and standard deviation,
// each reward function's mean, loss, policy_loss_after, kl, clip_frac,
// grad_norm, completion length, share of completions that stopped,
// seconds), and one progress line per step to Config.Log.
//
// The package lives beside rl, not in it: package rl keeps its algorithms
// free of any model (it imports nothing of nn), while this trainer needs
// nn/hf's models, tokenizers and adapter files and rl/policies' LoRA
// policy.
package grpo
