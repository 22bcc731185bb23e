// Package gradcomp compresses the gradients that agents exchange when they
// learn together without sharing parameters: 8-bit linear quantisation, top-k
// sparsification (optionally with 8-bit values), error feedback, and Gaussian
// noise with norm clipping for differential privacy.
//
// # Messages
//
// Compressor.Compress turns a float32 gradient into a self-describing byte
// message (a 5-byte header: codec id and element count, then the payload);
// Decode restores it on the receiving side. Sizes are the real encoded
// lengths: Raw costs 4n bytes of payload, Q8 n + 8 (per-tensor minimum and
// scale), TopK 8k (uint32 index and float32 value per kept entry) and TopK
// with Q8Values 5k + 8.
//
// # Error feedback
//
// Biased compressors (top-k, coarse quantisation) stall SGD unless what the
// compression dropped is carried over: with error feedback the compressor
// sends C(g_t + e_t) and keeps e_{t+1} = g_t + e_t − C(g_t + e_t) (Seide et al.
// 2014, "1-Bit Stochastic Gradient Descent"; Stich, Cordonnier & Jaggi 2018,
// "Sparsified SGD with Memory"; Karimireddy et al. 2019, "Error Feedback Fixes
// SignSGD"). Top-k sparsification follows Aji & Heafield 2017 and Lin et al.
// 2018 (Deep Gradient Compression).
//
// # Differential privacy
//
// Gaussian clips the gradient to L2 norm ≤ C and adds N(0, (σC)²) noise per
// coordinate before compression (compression and error feedback are then
// post-processing of the noised vector and cost no privacy). What this
// provides, exactly: the unit of privacy is one agent's whole gradient message
// of one step. Under add/remove adjacency (the clipped gradient is present or
// replaced by zero) its L2 sensitivity is C and σ = NoiseMultiplier; under
// replace-one adjacency (any other clipped gradient) it is 2C, so pass σ/2 to
// Epsilon. Each step is then the Gaussian
// mechanism, which is (α, α/(2σ²))-Rényi-DP for every α > 1 (Mironov 2017,
// "Rényi Differential Privacy"); T steps compose to (α, Tα/(2σ²))-RDP, which
// converts to (ε, δ)-DP with ε = min_α Tα/(2σ²) + log(1/δ)/(α−1) =
// T/(2σ²) + sqrt(2T·log(1/δ))/σ. Epsilon computes that figure. No privacy
// amplification by subsampling is claimed (the agent's own data sampling is
// not modelled), and per-example clipping is the caller's business: privacy
// for individual training examples needs per-example clipping upstream.
package gradcomp
