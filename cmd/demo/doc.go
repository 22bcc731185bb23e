// Command demo is what `make demo` runs for now: it builds a small Gorgonia
// graph — a two-layer MLP classifying a seeded, noisy two-dimensional XOR
// pattern — trains it with Adam on Gorgonia's TapeMachine, and prints the
// loss falling, the final accuracy and a verdict computed from those
// measurements. The data, the initial weights and the training are all
// seeded, so every run prints the same numbers.
//
// The graph's tensors are troupe tensors (gorgonia.org/tensor *Dense built
// with package tensor), and the accuracy is read out with tensor.ArgMax.
package main
