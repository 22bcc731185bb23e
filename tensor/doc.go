// Package tensor holds troupe's float32 tensors and the CPU kernels that
// every other package runs on.
//
// Tensors are gorgonia.org/tensor *tensor.Dense values, so they flow into
// Gorgonia expression graphs unchanged. The kernels work on plain []float32
// slices with explicit shapes and strides (the gonum/BLAS convention), and the
// Dense-level helpers wrap them.
//
// The centre of the package is Gemm, a cache-blocked, packed (BLIS-style)
// single-precision matrix multiply with AVX-512 and AVX2/FMA micro-kernels in
// Go assembly, chosen at run time from the CPU's features, and a pure-Go
// fallback (build tag purego forces it). Install makes it the BLAS that
// Gorgonia and gorgonia.org/tensor call, so every Gorgonia Mul and
// BatchedMatMul runs on it. GemmHalf multiplies float32 activations by
// 16-bit weights (bfloat16, binary16) as stored: with AVX2 the bfloat16
// panels stay 16-bit and the micro-kernel widens them in registers, beside
// its FMAs.
//
// # Slice kernels
//
// The shared contract (api.go) — Axpy, SoftmaxRows, LogSoftmaxRows,
// LayerNormRows, LayerNormBackwardRows, GELU, GELUBackward, EmbeddingGather,
// EmbeddingScatterAdd — plus:
//
//   - element-wise: VecAdd, VecSub, VecMul, VecDiv, VecAddScalar,
//     VecMulScalar, VecScalarSub, VecScalarDiv, AddRowVec (bias broadcast),
//     SumCols (its gradient), VecExp, VecLog, VecTanh, VecSigmoid, VecReLU
//     and ExpBackward, LogBackward, TanhBackward, SigmoidBackward,
//     ReLUBackward;
//   - reductions: VecSum, VecMean, VecMax, VecArgMax, SumSquares,
//     GlobalNorm, ClipScale, and along an axis ReduceAxis, ArgMaxAxis
//     (SumRows, MeanRows, MaxRows, ArgMaxRows for the last axis);
//   - SoftmaxAxis and SoftmaxBackwardAxis along any axis of a tensor seen
//     as outer×n×inner, SoftmaxBackwardRows, LogSoftmaxBackwardRows;
//   - AdamW, the decoupled-weight-decay Adam update (Loshchilov & Hutter
//     2019) with bias correction and an optional gradient scale for
//     global-norm clipping;
//   - Exp32, Log32, Tanh32, Sigmoid32: single-precision transcendental
//     functions (relative error about 2e-7, measured by the tests) that
//     keep float64 math.Exp out of the inner loops.
//
// Slice kernels panic, naming the lengths or shapes, when their arguments
// disagree. Row-wise kernels (softmax, layer norm, GELU) split their rows
// over GOMAXPROCS goroutines once the work is large enough to pay for it.
//
// # Dense-level API
//
// New, Zeros, Full, FromSlice, RandN (seeded *rand.Rand from math/rand/v2)
// and Data build and expose float32 tensors. Add, Sub, Mul, Div broadcast
// with numpy's rules (BroadcastShape); AddScalar, SubScalar, MulScalar,
// DivScalar, ScalarSub, ScalarDiv; Exp, Log, Tanh, Sigmoid, ReLU, Gelu
// (Apply, with ApplyBackward for the gradients); Sum, Mean, Max, ArgMax
// along an axis and SumAll; Softmax, LogSoftmax and their backward along an
// axis; LayerNorm and LayerNormBackward over the last axis; Embedding and
// EmbeddingBackward; MatMul and MatMulTrans (2-D or batched 3-D, on Gemm);
// AdamWStep and GlobalNormOf. Functions that produce a tensor take the
// destination first, gonum style: nil means allocate. Shape errors panic with
// a message naming the shapes.
//
// # Dispatch and devices
//
// Every Dense-level function validates its operands, allocates what is
// missing on the operands' engine, and then calls one method of a Backend —
// the kernel set as an interface over *tensor.Dense (MatMul, Unary and
// UnaryBackward including GELU, Binary with broadcasting, BinaryScalar,
// Reduce, ArgMax, Softmax, SoftmaxBackward, LayerNorm, LayerNormBackward,
// EmbeddingGather, EmbeddingScatterAdd, AdamW, SumSquares). The backend is
// chosen from the tensor's gorgonia.org/tensor Engine: RegisterBackend(engine,
// backend) binds an engine type (for example package cuda's device engine,
// behind the cuda build tag) to its kernels, and tensors whose engine has no
// registered backend use CPU. Callers never change: the same Softmax call
// runs on the GPU for a tensor that lives there. Operands on different
// backends panic.
//
// Package nn builds its fused Gorgonia ops on these kernels; package cuda
// supplies device versions of the same kernel set behind the cuda build tag.
package tensor
