// Package ensemble fuses models of different architectures (transformer,
// LSTM, MLP, rule engines) with a learned attention layer over their
// embeddings, assigns agents roles, and divides compute among them.
//
// Members are usually package nn models; package distill compresses an
// ensemble into a small student.
package ensemble
