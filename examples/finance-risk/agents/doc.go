// Package agents holds the differentiable members of the finance-risk
// ensemble as Gorgonia graphs: a transformer encoder over the applicant's
// feature tokens (credit-risk agent), an LSTM over past market returns
// (market-volatility agent) and an MLP, with a shared trainer (Adam,
// mini-batches, L2) and batch inference.
//
// They are written directly on Gorgonia because package nn had not landed
// when this example was built; they follow the same layout (parameters as
// named tensors shared between a training graph and an inference graph) so
// that swapping in nn's layers changes only the Build functions.
package agents
