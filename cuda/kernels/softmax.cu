// troupe:arch compute_70
//
// Row-wise softmax and log-softmax (forward and backward), the fused
// log-softmax+gather that policy-gradient losses need (log π(a|s) for the
// taken actions without materialising the log-softmax), and softmax
// cross-entropy forward/backward with an ignore index (< 0). One block per
// row; every reduction is max-subtracted for stability, as in tensor's CPU
// kernels.
#include "common.cuh"

// row_lse returns max and log Σ exp(x - max) of one row to every thread.
__device__ __forceinline__ void row_lse(const float *xr, int cols, float *scratch, float &mx, float &lse) {
	float m = -TROUPE_INF;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
	m = block_max(m, scratch);
	float s = 0.f;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
	s = block_sum(s, scratch);
	mx = m;
	lse = m + logf(s);
}

extern "C" __global__ void softmax_rows(float *dst, const float *src, int rows, int cols) {
	__shared__ float scratch[32];
	int r = blockIdx.x;
	if (r >= rows) return;
	const float *s = src + (long long)r * cols;
	float *d = dst + (long long)r * cols;
	float m, lse;
	row_lse(s, cols, scratch, m, lse);
	for (int c = threadIdx.x; c < cols; c += blockDim.x) d[c] = expf(s[c] - lse);
}

extern "C" __global__ void logsoftmax_rows(float *dst, const float *src, int rows, int cols) {
	__shared__ float scratch[32];
	int r = blockIdx.x;
	if (r >= rows) return;
	const float *s = src + (long long)r * cols;
	float *d = dst + (long long)r * cols;
	float m, lse;
	row_lse(s, cols, scratch, m, lse);
	for (int c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c] - lse;
}

// softmax_bwd_rows: dx = y ⊙ (dy − Σ dy⊙y), y the softmax output.
extern "C" __global__ void softmax_bwd_rows(float *dx, const float *dy, const float *y, int rows, int cols) {
	__shared__ float scratch[32];
	int r = blockIdx.x;
	if (r >= rows) return;
	long long o = (long long)r * cols;
	float s = 0.f;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) s += dy[o + c] * y[o + c];
	s = block_sum(s, scratch);
	for (int c = threadIdx.x; c < cols; c += blockDim.x) dx[o + c] = y[o + c] * (dy[o + c] - s);
}

// logsoftmax_bwd_rows: dx = dy − exp(y)·Σ dy, y the log-softmax output.
extern "C" __global__ void logsoftmax_bwd_rows(float *dx, const float *dy, const float *y, int rows, int cols) {
	__shared__ float scratch[32];
	int r = blockIdx.x;
	if (r >= rows) return;
	long long o = (long long)r * cols;
	float s = 0.f;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) s += dy[o + c];
	s = block_sum(s, scratch);
	for (int c = threadIdx.x; c < cols; c += blockDim.x) dx[o + c] = dy[o + c] - expf(y[o + c]) * s;
}

// logsoftmax_gather: out[r] = x[r, ids[r]] − logΣexp(x[r]); lse[r] is saved
// for the backward pass. ids[r] < 0 gives 0.
extern "C" __global__ void logsoftmax_gather(float *out, float *lse, const float *x, const int *ids, int rows, int cols) {
	__shared__ float scratch[32];
	int r = blockIdx.x;
	if (r >= rows) return;
	const float *xr = x + (long long)r * cols;
	float m, l;
	row_lse(xr, cols, scratch, m, l);
	if (threadIdx.x == 0) {
		int id = ids[r];
		out[r] = id >= 0 ? xr[id] - l : 0.f;
		lse[r] = l;
	}
}

// logsoftmax_gather_bwd: dx[r] = dout[r]·(onehot(ids[r]) − softmax(x[r])).
extern "C" __global__ void logsoftmax_gather_bwd(float *dx, const float *dout, const float *x, const float *lse,
		const int *ids, int rows, int cols) {
	int r = blockIdx.x;
	if (r >= rows) return;
	long long o = (long long)r * cols;
	int id = ids[r];
	float g = id >= 0 ? dout[r] : 0.f, l = lse[r];
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		dx[o + c] = g * ((c == id ? 1.f : 0.f) - expf(x[o + c] - l));
}

// xent_fwd: loss[r] = logΣexp(x[r]) − x[r, t[r]] (0 where t[r] < 0); lse saved.
extern "C" __global__ void xent_fwd(float *loss, float *lse, const float *x, const int *t, int rows, int cols) {
	__shared__ float scratch[32];
	int r = blockIdx.x;
	if (r >= rows) return;
	const float *xr = x + (long long)r * cols;
	float m, l;
	row_lse(xr, cols, scratch, m, l);
	if (threadIdx.x == 0) {
		int id = t[r];
		loss[r] = id >= 0 ? l - xr[id] : 0.f;
		lse[r] = l;
	}
}

// xent_bwd: dx[r] = dloss[r]·(softmax(x[r]) − onehot(t[r])); rows with t < 0 get 0.
extern "C" __global__ void xent_bwd(float *dx, const float *dloss, const float *x, const float *lse, const int *t,
		int rows, int cols) {
	int r = blockIdx.x;
	if (r >= rows) return;
	long long o = (long long)r * cols;
	int id = t[r];
	float g = id >= 0 ? dloss[r] : 0.f, l = lse[r];
	for (int c = threadIdx.x; c < cols; c += blockDim.x)
		dx[o + c] = g * (expf(x[o + c] - l) - (c == id ? 1.f : 0.f));
}
