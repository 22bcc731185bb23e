// Package cuda is troupe's GPU backend: device memory, streams, events and
// troupe's own CUDA kernels, driven through gorgonia.org/cu's driver API
// (contexts, module loading from PTX, launches, memory, streams, events; not
// cu's cuBLAS, cuDNN or NVRTC bindings, so the CUDA driver library is the only
// run-time dependency).
//
// # Build tag troupecuda
//
// Everything that imports gorgonia.org/cu is built only with the build tag
// troupecuda:
//
//	go build -tags troupecuda ./...
//
// The tag is not called "cuda" because Gorgonia v0.9.18 uses that tag for its
// own CUDA path, which needs cuDNN and generated code; troupe's tensor
// package imports Gorgonia, so "-tags cuda" cannot compile the tree. Without
// the tag this package holds only pure-Go parts that are tested everywhere:
// the caching allocator (CachingAllocator over a RawAllocator interface),
// launch geometry and argument checks, the embedded PTX and its checks.
// Building with the tag needs cuda.h and libcuda.so (Debian's
// nvidia-cuda-dev and nvidia-cuda-toolkit, installed by scripts/install-cuda.sh;
// the Makefile links against the libcuda stub), but no nvcc and no GPU.
//
// gorgonia.org/cu calls cuInit in its package init and exits the process when
// it fails, so a binary built with the tag dies at start-up on a machine
// without an NVIDIA driver and GPU, before any test can skip. CI therefore
// vets, builds and links the tag (make test-cuda-build) but runs the tagged
// tests only on GPU machines (scripts/device-check.sh). GPUPresent tells
// whether a GPU is visible without loading the driver.
//
// # Kernels
//
// The kernels are CUDA C in kernels/*.cu, compiled to PTX by nvcc (make ptx,
// i.e. scripts/ptx.sh) and committed; the PTX is embedded with go:embed and
// JIT-compiled by the driver for the GPU it runs on. Each source names its
// virtual architecture on its first line: compute_70 (Volta and newer) for
// everything except gemm_tf32.cu, which needs compute_80 (Ampere and newer)
// for TF32 WMMA and cp.async and is loaded only on such GPUs. PTX JITs forward,
// so compute_80 PTX runs on sm_80, sm_86, sm_89 and sm_90 (A100, L4, H100,
// H200); targeting compute_90 would exclude Ampere for no gain here (the
// kernels use no Hopper-only instructions). TestPTXFresh recompiles every
// source with the same command when nvcc is installed and fails when the
// result differs from the committed PTX; TestPTXAssembles runs ptxas for
// sm_90 (TROUPE_PTXAS=1).
//
//   - gemm.cu: FP32 GEMM, 128×128 block tiles, 8×8 register micro-tiles,
//     double-buffered shared memory; all four transpose combinations; batched.
//   - gemm_tf32.cu: TF32 tensor-core GEMM (WMMA m16n16k8) with a two-stage
//     cp.async pipeline.
//   - elementwise.cu: binary ops with 4-D broadcasting, unary maps, fill, axpy,
//     GELU forward/backward, strided copy (permutes, head split/merge).
//   - reduce.cu: row, column and full reductions.
//   - softmax.cu: softmax/log-softmax forward and backward, fused
//     log-softmax+gather (policy log-probs) and cross-entropy with backward.
//   - layernorm.cu: layer norm forward, backward dx and dgamma/dbeta.
//   - attention.cu: fused (flash) attention forward and backward, causal or not.
//   - embedding.cu: embedding gather and atomic scatter-add.
//   - optim.cu: AdamW.
//
// # Engine
//
// Engine (tag troupecuda) owns a device's primary context, the loaded modules,
// a CachingAllocator over cuMemAlloc and a current Stream. It implements
// gorgonia.org/tensor's Engine, so tensor.New(..., tensor.WithEngine(e))
// allocates on the device; ToDevice/ToHost and DenseToDevice/DenseToHost
// copy. Its methods mirror package tensor's kernels (Gemm, SoftmaxRows,
// LayerNormRows, GELU, EmbeddingGather, ...) on device Buffers, enqueued on
// the current stream. Block is a whole pre-LN transformer block (forward,
// backward, AdamW) on the device.
//
// # Package tensor's Dense-level API on the device
//
// DenseBackend implements package tensor's Backend with these kernels
// (mapping and the one host fallback, ArgMax, in its doc comment). Built
// with the tag, this package registers it for *Engine at init, so
// tensor.Add, Softmax, LayerNorm, MatMul, AdamWStep, ... on device tensors
// (from DenseToDevice, or allocated on an Engine) run on the GPU and return
// device tensors, without the caller changing. DenseBackend itself is pure Go
// over an interface of Engine's kernel methods; it is tested without a GPU
// against a host-memory fake device, and on a GPU against the CPU backend.
//
// Package nn dispatches the same way: its fused ops (Linear, Embedding,
// LayerNorm, GELU, Add, LogSoftmaxGather, CrossEntropy, ExternalLoss), its
// optimizers and its graph runs use the backend of their operands' engine,
// so a Gorgonia graph run on a machine with an Engine (G.WithEngine) and
// parameters on the device computes there (TestDeviceNNDispatch). Ops
// without a device implementation (attention, rotary embeddings, LSTM,
// CopyMix) return an error naming the op. Package device opens the engine
// for a --device cuda flag.
//
// # Device check
//
// scripts/device-check.sh prepare builds the tagged test binaries of ./cuda
// and ./benchmarks here into out/devcheck; scripts/device-check.sh run, on a
// GPU machine with out/devcheck carried along, runs the correctness tests,
// the GPU benchmarks and the PyTorch CUDA comparison (benchmarks/compare/cuda.py)
// within eight minutes and writes $OUT/results.txt.
package cuda
