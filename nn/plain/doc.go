// Package plain builds troupe's nn layers from Gorgonia's own primitive ops
// only (Mul, BatchedMatMul, SoftMax, broadcasting arithmetic, Reshape,
// Transpose, Slice), with the same parameter names and shapes as the fused
// layers of package nn, so one Store drives both. It is the baseline of the
// benchmarks ("the same computation as plain Gorgonia") and a cross-check
// of the fused ops' outputs and gradients. It is not meant for training.
package plain
