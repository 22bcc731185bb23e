// troupe:arch compute_70
//
// Element-wise kernels: binary ops with NumPy-style broadcasting over up to
// four dimensions (a stride of 0 broadcasts), unary maps, fill, axpy, and the
// tanh-approximation GELU (Hendrycks & Gimpel 2016) forward and backward with
// the same formula as tensor.GELU / tensor.GELUBackward. All use grid-stride
// loops, so any grid size is correct.
#include "common.cuh"

enum { OP_ADD = 0, OP_SUB = 1, OP_MUL = 2, OP_DIV = 3, OP_MAX = 4, OP_MIN = 5 };

__device__ __forceinline__ float binop(int op, float x, float y) {
	switch (op) {
	case OP_ADD: return x + y;
	case OP_SUB: return x - y;
	case OP_MUL: return x * y;
	case OP_DIV: return x / y;
	case OP_MAX: return fmaxf(x, y);
	default: return fminf(x, y);
	}
}

// binary_bcast: out (contiguous, shape n0×n1×n2×n3) = a op b, where a and b
// are read through per-dimension element strides (0 = broadcast).
extern "C" __global__ void binary_bcast(float *out, const float *a, const float *b, int op,
		int n0, int n1, int n2, int n3,
		long long a0, long long a1, long long a2, long long a3,
		long long b0, long long b1, long long b2, long long b3) {
	long long total = (long long)n0 * n1 * n2 * n3;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
			i += (long long)gridDim.x * blockDim.x) {
		long long r = i;
		int i3 = r % n3; r /= n3;
		int i2 = r % n2; r /= n2;
		int i1 = r % n1; r /= n1;
		int i0 = (int)r;
		float x = a[i0 * a0 + i1 * a1 + i2 * a2 + i3 * a3];
		float y = b[i0 * b0 + i1 * b1 + i2 * b2 + i3 * b3];
		out[i] = binop(op, x, y);
	}
}

// binary_same: the common no-broadcast case, out[i] = a[i] op b[i].
extern "C" __global__ void binary_same(float *out, const float *a, const float *b, int op, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
			i += (long long)gridDim.x * blockDim.x)
		out[i] = binop(op, a[i], b[i]);
}

enum { U_SCALE = 0, U_EXP = 1, U_LOG = 2, U_TANH = 3, U_RELU = 4, U_NEG = 5, U_SQRT = 6,
	U_SQUARE = 7, U_ADDC = 8, U_SIGMOID = 9 };

// unary: out[i] = f(x[i]); alpha is the factor of U_SCALE and the constant of U_ADDC.
extern "C" __global__ void unary(float *out, const float *x, int op, float alpha, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
			i += (long long)gridDim.x * blockDim.x) {
		float v = x[i], r;
		switch (op) {
		case U_SCALE: r = alpha * v; break;
		case U_EXP: r = expf(v); break;
		case U_LOG: r = logf(v); break;
		case U_TANH: r = tanhf(v); break;
		case U_RELU: r = fmaxf(v, 0.f); break;
		case U_NEG: r = -v; break;
		case U_SQRT: r = sqrtf(v); break;
		case U_SQUARE: r = v * v; break;
		case U_ADDC: r = v + alpha; break;
		default: r = 1.f / (1.f + expf(-v)); break;
		}
		out[i] = r;
	}
}

extern "C" __global__ void fill(float *out, float v, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
			i += (long long)gridDim.x * blockDim.x)
		out[i] = v;
}

// axpy: y += alpha·x (tensor.Axpy).
extern "C" __global__ void axpy(float alpha, const float *x, float *y, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
			i += (long long)gridDim.x * blockDim.x)
		y[i] = fmaf(alpha, x[i], y[i]);
}

#define GELU_C 0.7978845608028654f
#define GELU_A 0.044715f

extern "C" __global__ void gelu_fwd(float *out, const float *x, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
			i += (long long)gridDim.x * blockDim.x) {
		float u = x[i];
		out[i] = 0.5f * u * (1.f + tanhf(GELU_C * (u + GELU_A * u * u * u)));
	}
}

extern "C" __global__ void gelu_bwd(float *dx, const float *dy, const float *x, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
			i += (long long)gridDim.x * blockDim.x) {
		float u = x[i];
		float t = tanhf(GELU_C * (u + GELU_A * u * u * u));
		float d = 0.5f * (1.f + t) + 0.5f * u * (1.f - t * t) * GELU_C * (1.f + 3.f * GELU_A * u * u);
		dx[i] = dy[i] * d;
	}
}

// strided_copy: out (contiguous, n0×n1×n2×n3) = a read through element
// strides, plus beta·out when beta ≠ 0. With permuted strides it is a
// transpose/permute, e.g. splitting fused QKV [B][T][3][H][D] into per-head
// [B][H][T][D] for attention and merging the heads back.
extern "C" __global__ void strided_copy(float *out, const float *a, int n0, int n1, int n2, int n3,
		long long a0, long long a1, long long a2, long long a3, float beta) {
	long long total = (long long)n0 * n1 * n2 * n3;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
			i += (long long)gridDim.x * blockDim.x) {
		long long r = i;
		int i3 = r % n3; r /= n3;
		int i2 = r % n2; r /= n2;
		int i1 = r % n1; r /= n1;
		int i0 = (int)r;
		float x = a[i0 * a0 + i1 * a1 + i2 * a2 + i3 * a3];
		out[i] = beta == 0.f ? x : fmaf(beta, out[i], x);
	}
}
