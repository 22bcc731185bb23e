// Package reward combines multi-objective rewards whose weights change over
// training.
//
// A reward is a set of named components (for example task, novelty, safety),
// each a function of a policy output. Multi scores a batch of outputs: every
// component is normalised by its running mean and standard deviation
// (Welford's algorithm, so that no component dominates by scale), then the
// normalised components are combined with a weight vector given by a Schedule
// of training progress in [0, 1]: Constant, Linear or Cosine interpolation
// between start and end vectors, Step (piecewise constant) or Adaptive, which
// moves weight from an "innovation" component to a "stability" one when the
// variance of the reward drops (a sign that exploration has collapsed onto a
// solution and the policy should now be made robust). Every component's raw
// mean and std and every weight is returned per step in a Log for the metrics
// writer.
//
// Novelty components are provided: TextNovelty scores a token sequence by one
// minus its largest n-gram Jaccard overlap with recent outputs, and
// VectorNovelty by the mean distance to the nearest recent vectors.
package reward
