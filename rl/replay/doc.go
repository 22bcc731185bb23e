// Package replay is a prioritized experience replay buffer (Schaul et al.
// 2016, "Prioritized Experience Replay", ICLR) over a sum-tree.
//
// Item i is sampled with probability P(i) = p_i^α / Σ_k p_k^α and carries the
// importance-sampling weight w_i = (N·P(i))^−β / max_k w_k, which corrects the
// bias of non-uniform sampling when β = 1 (β is annealed from β₀ towards 1
// over training, see Anneal). New items get the largest priority seen so far,
// so each is sampled at least once with high probability. The buffer holds at
// most Capacity items and evicts the oldest. All methods are safe for
// concurrent use: any number of producers may Add while one learner Samples
// and Updates priorities.
package replay
