// Package nn builds neural-network layers and models as Gorgonia expression
// graphs, with troupe's own fused, differentiable ops doing the heavy work on
// the kernels of package tensor.
//
// # Ops
//
// Each fused op (LinearOp, EmbeddingOp, LayerNormOp, GELUOp,
// SelfAttentionOp, CrossAttentionOp, LogSoftmaxGatherOp,
// TemperedLogSoftmaxGatherOp, CrossEntropyOp,
// KLDivergenceOp, LSTMCellOp, CopyMixOp, ExternalLoss, and small helpers) is a Gorgonia
// op implementing the symbolic-differentiation interface (SDOp): its
// SymDiff adds a gradient op whose Do runs the backward kernels, so
// G.Grad works across fused and ordinary Gorgonia ops. Every op's gradient
// is checked against central finite differences of a float64 reference.
//
// # Parameters and layers
//
// Parameters live in a Store under hierarchical names ("blocks.3.attn.qkv.w"),
// independent of any graph, so one model can be trained in a graph built for
// one input shape and used in another. Layers are functions over a Scope, a
// position in the name hierarchy bound to one graph (the GoMLX style):
// Linear, Embedding, LayerNorm, MLP, MultiHeadAttention, CrossAttention,
// TransformerBlock (pre-LN), TokenSetEncoder (tabular features, numeric
// and categorical columns: EncoderConfig.Categories), LSTM,
// ClassificationHead, RegressionHead, and the decoder-only language model LM,
// optionally with a pointer (copy) head (LMConfig.CopyDim; CopyMixOp, See
// et al. 2017) that mixes the vocabulary softmax with attention over the
// tokens seen so far, so spans of the context are reproduced exactly.
//
// # Training
//
// LMTrainer and Trainer cache one compiled graph per input-shape bucket,
// read only outputs and parameter gradients from Gorgonia's TapeMachine,
// accumulate gradients across ForwardBackward calls, and Step with an
// Optimizer (Adam, AdamW, SGD with momentum; Constant and WarmupCosine
// schedules) after optional global-norm clipping. An example with a
// Temperature is scored under softmax(logits/Temperature), the distribution
// Generate samples from at that temperature (TemperedLogSoftmaxGatherOp). A NaN or Inf in the loss
// or gradients skips the step. Losses written in plain Go (the policy
// gradients of package rl) enter the graph through ExternalLoss.
//
// # Generation and checkpoints
//
// LM.Generate samples outside any graph, directly on the tensor kernels with
// a per-request key/value cache, batched, returning the log-probability of
// every sampled token (equal to LMTrainer.TokenLogProbs for the same tokens)
// and, on request, the most likely alternatives at each position
// (GenerateOptions.TopLogProbs). Decoding steps of a few rows multiply by
// the weights with a matrix-vector kernel instead of the packing GEMM
// (SetDecodeGEMVRows).
// SaveCheckpoint and LoadCheckpoint store parameters, optimizer state and
// string metadata (such as a tokenizer) in the safetensors format, written
// atomically and verified by a SHA-256 checksum.
//
// Package rl trains nn models with policy gradients; packages swarm, ensemble
// and distill serve, fuse and compress them.
package nn
