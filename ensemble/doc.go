// Package ensemble fuses models of different architectures (transformer,
// LSTM, MLP, rule engines) with a learned attention layer over their
// embeddings, assigns agents roles, and divides compute among them.
//
//   - Attention is a layer in package nn's style: a function of an
//     nn.Scope that builds a Gorgonia subgraph and keeps its parameters in
//     the scope's nn.Store, so the fusion trains with nn's optimizers and
//     trainers and is saved with nn.SaveCheckpoint like every nn model.
//     Each member's embedding is projected into a shared space, a
//     per-example query attends over the members in several heads, and the
//     fused logit is the attention-weighted vote of the member logits
//     (plus, unless VoteOnly, a learned correction from the attended
//     context). Members missing for an example are masked out (weight
//     exactly 0); the weights are a graph output, inspectable per example.
//     Members are frozen (their outputs are inputs of the graph;
//     AttentionModel reads them packed in rows, for nn.Trainer) or trained
//     jointly (their nodes are in the same graph).
//   - Roles reassigns optimizer, explorer and validator roles each round
//     from the agents' recent contributions and the task difficulty, and
//     logs every change.
//   - Scheduler divides a round's compute by a softmax over the agents'
//     recent contributions, with a temperature and a floor.
//
// Roles and Scheduler hold moving averages, not learned parameters. Members
// are usually package nn models; package distill compresses an ensemble
// into a small student. examples/finance-risk puts all three to work on
// credit and market data.
package ensemble
