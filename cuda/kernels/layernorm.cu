// troupe:arch compute_70
//
// Layer normalisation (Ba, Kiros & Hinton 2016) over the last axis, matching
// tensor.LayerNormRows and tensor.LayerNormBackwardRows: the forward saves
// mean and 1/σ per row; the backward computes dx one block per row and
// accumulates dgamma/dbeta (+=) with a column reduction (no atomics, so the
// result is deterministic).
#include "common.cuh"

extern "C" __global__ void layernorm_fwd(float *dst, float *mean, float *rstd, const float *src,
		const float *gamma, const float *beta, int rows, int cols, float eps) {
	__shared__ float scratch[32];
	int r = blockIdx.x;
	if (r >= rows) return;
	const float *s = src + (long long)r * cols;
	float *d = dst + (long long)r * cols;
	float sum = 0.f;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += s[c];
	float mu = block_sum(sum, scratch) / cols;
	float sq = 0.f;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) { float z = s[c] - mu; sq += z * z; }
	float var = block_sum(sq, scratch) / cols;
	float rs = rsqrtf(var + eps);
	for (int c = threadIdx.x; c < cols; c += blockDim.x) d[c] = (s[c] - mu) * rs * gamma[c] + beta[c];
	if (threadIdx.x == 0) { mean[r] = mu; rstd[r] = rs; }
}

// layernorm_bwd_dx: dx = rstd·(g − mean(g) − x̂·mean(g⊙x̂)), g = dy⊙gamma.
extern "C" __global__ void layernorm_bwd_dx(float *dx, const float *dy, const float *x, const float *mean,
		const float *rstd, const float *gamma, int rows, int cols) {
	__shared__ float scratch[32];
	int r = blockIdx.x;
	if (r >= rows) return;
	long long o = (long long)r * cols;
	float mu = mean[r], rs = rstd[r];
	float s1 = 0.f, s2 = 0.f;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) {
		float xh = (x[o + c] - mu) * rs, g = dy[o + c] * gamma[c];
		s1 += g;
		s2 += g * xh;
	}
	s1 = block_sum(s1, scratch) / cols;
	s2 = block_sum(s2, scratch) / cols;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) {
		float xh = (x[o + c] - mu) * rs, g = dy[o + c] * gamma[c];
		dx[o + c] = rs * (g - s1 - xh * s2);
	}
}

// layernorm_bwd_dgb: dgamma[c] += Σ_r dy·x̂, dbeta[c] += Σ_r dy. Block (32, 8).
extern "C" __global__ void layernorm_bwd_dgb(float *dgamma, float *dbeta, const float *dy, const float *x,
		const float *mean, const float *rstd, int rows, int cols) {
	__shared__ float pg[8][33], pb[8][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float g = 0.f, b = 0.f;
	if (c < cols)
		for (int r = threadIdx.y; r < rows; r += 8) {
			long long o = (long long)r * cols + c;
			float d = dy[o];
			g += d * (x[o] - mean[r]) * rstd[r];
			b += d;
		}
	pg[threadIdx.y][threadIdx.x] = g;
	pb[threadIdx.y][threadIdx.x] = b;
	__syncthreads();
	if (threadIdx.y == 0 && c < cols) {
		float sg = 0.f, sb = 0.f;
#pragma unroll
		for (int i = 0; i < 8; i++) { sg += pg[i][threadIdx.x]; sb += pb[i][threadIdx.x]; }
		dgamma[c] += sg;
		dbeta[c] += sb;
	}
}
