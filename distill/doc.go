// Package distill transfers knowledge from a teacher (an ensemble or a larger
// model) into a smaller student with temperature-scaled KL divergence on soft
// targets plus the hard-label loss (Hinton, Vinyals & Dean 2015).
//
//   - Loss is the multi-class (or token-level, for language models) loss over
//     row-major logits, with the T² scaling and an IgnoreIndex for padding;
//     Binary is the same for one log-odds per example (a two-class
//     classifier). Both compute the loss and its gradient with respect to
//     the student's logits in Go, in float32 or float64.
//   - Surrogate connects that gradient to a Gorgonia graph: a scalar node
//     whose gradient with respect to the student's logits node is the one
//     computed by Loss or Binary, so Gorgonia backpropagates it into the
//     student's parameters.
//   - Report and CountParams summarise a distillation: quality retained,
//     parameters and inference speed-up.
//
// Subpackage distill/lm distils pretrained language models of nn/hf that
// share a tokenizer at the token level, on-policy (the student samples,
// the teacher's log-probabilities of its tokens give a per-token
// reverse-KL signal) or off-policy (the student learns the teacher's
// samples).
//
// The teacher is typically a package ensemble fusion of package nn models;
// examples/finance-risk distils its credit ensemble into a small MLP with
// Binary and reports the result with Report.
package distill
