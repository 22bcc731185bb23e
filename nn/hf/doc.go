// Package hf loads pretrained decoder-only language models in the Hugging
// Face layout (Qwen2, Qwen3, Llama and Mistral checkpoints: config.json and
// model.safetensors or its shards) and runs, samples and fine-tunes them
// with LoRA adapters on troupe's kernels.
//
// # Model
//
// Load reads a model directory. 16-bit weights (BF16, F16) stay 16-bit,
// memory-mapped from the files, and the GEMM widens them while packing
// (tensor.GemmHalf), so a 0.5B-parameter bf16 model holds about 1 GB.
// The architectures share one decoder: RMSNorm pre-norm blocks, grouped-
// query attention with rotary positions (rope_theta; Llama 3 and linear
// rope_scaling), a SwiGLU MLP, and tied or separate output embeddings;
// Qwen2's q/k/v biases, Qwen3's per-head q/k norms and explicit head_dim,
// Llama's attention and MLP biases and Mistral's sliding window are
// switches of Config. A Model is frozen and safe for concurrent use.
//
// # Chat
//
// Open loads a directory's model and tokenizer. Tokenizer.ApplyChatTemplate
// turns messages into prompt ids with the model's chat template; Model.Chat
// renders, generates until one of the tokenizer's StopTokens (the end of
// the assistant's turn) and decodes. Generate stops only at the StopTokens
// of its options.
//
// # Scoring, generation, training
//
// TokenLogProbs scores target tokens given prompts; Generate samples with a
// per-request key/value cache and returns the temperature-1 log-probability
// of every sampled token, equal to TokenLogProbs' for the same tokens up to
// float32 rounding. ForwardBackward runs the forward and backward passes
// by hand (the base is frozen, so only input gradients flow through it) and
// accumulates the gradients of a LoRA adapter's matrices; package
// rl/policies' LoRA makes an adapter an rl.Policy, so rl's GRPO, PPO,
// REINFORCE and RLOO train it; package rl/grpo runs the whole loop
// (datasets, reward functions, evaluation, checkpoints) for a team of
// adapters.
//
// # LoRA
//
// NewLoRA adds low-rank adapters with PEFT's options (rank, alpha, target
// modules among q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
// down_proj, rsLoRA scaling) over a shared base; several adapters, each
// with its own optimizer, share one Model in memory. modules_to_save
// (embed_tokens, lm_head, with ensure_weight_tying) gives an adapter a full
// trainable copy of the embedding or the output projection, for a base
// whose embedding is not trained yet. LoRA.Save and LoadLoRA
// use PEFT's files (adapter_config.json, adapter_model.safetensors with
// PEFT's tensor names); Model.Export merges an adapter into the weights and
// writes a full Hugging Face directory.
//
// WriteRandom writes random-weight checkpoints in the same layout, for tests
// and benchmarks where no weights can be downloaded.
package hf
