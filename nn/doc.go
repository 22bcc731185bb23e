// Package nn builds neural-network layers and models as Gorgonia expression
// graphs, with troupe's own fused, differentiable ops doing the heavy work on
// the kernels of package tensor.
//
// Parameters live in a named store independent of any one graph, so a model
// trained in a graph built for one input shape can be used in another.
// Package rl trains nn models with policy gradients; packages swarm, ensemble
// and distill serve, fuse and compress them.
package nn
