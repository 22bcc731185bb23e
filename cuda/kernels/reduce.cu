// troupe:arch compute_70
//
// Reductions: along the last axis (one block per row), along the first axis
// (column sums, e.g. bias gradients; accumulating), and over everything.
#include "common.cuh"

// reduce_rows: out[r] = sum (op 0) or max (op 1) of row r of x (rows×cols).
extern "C" __global__ void reduce_rows(float *out, const float *x, int rows, int cols, int op) {
	__shared__ float scratch[32];
	int r = blockIdx.x;
	if (r >= rows) return;
	const float *xr = x + (long long)r * cols;
	float v = op == 0 ? 0.f : -TROUPE_INF;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) v = op == 0 ? v + xr[c] : fmaxf(v, xr[c]);
	v = op == 0 ? block_sum(v, scratch) : block_max(v, scratch);
	if (threadIdx.x == 0) out[r] = v;
}

// reduce_cols: out[c] = beta·out[c] + Σ_r x[r][c]. Block (32, 8) covers 32
// columns; the 8 row-groups are combined in shared memory.
extern "C" __global__ void reduce_cols(float *out, const float *x, int rows, int cols, float beta) {
	__shared__ float part[8][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float v = 0.f;
	if (c < cols)
		for (int r = threadIdx.y; r < rows; r += 8) v += x[(long long)r * cols + c];
	part[threadIdx.y][threadIdx.x] = v;
	__syncthreads();
	if (threadIdx.y == 0 && c < cols) {
		float s = 0.f;
#pragma unroll
		for (int i = 0; i < 8; i++) s += part[i][threadIdx.x];
		out[c] = beta == 0.f ? s : fmaf(beta, out[c], s);
	}
}

// reduce_all: *out += Σ x (the caller zeroes *out first). Block partial sums
// are combined with one atomicAdd per block.
extern "C" __global__ void reduce_all(float *out, const float *x, long long n) {
	__shared__ float scratch[32];
	float v = 0.f;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
			i += (long long)gridDim.x * blockDim.x)
		v += x[i];
	v = block_sum(v, scratch);
	if (threadIdx.x == 0) atomicAdd(out, v);
}
