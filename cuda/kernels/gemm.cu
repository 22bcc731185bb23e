// troupe:arch compute_70
//
// FP32 GEMM on the CUDA cores: C = alpha·op(A)·op(B) + beta·C for row-major
// matrices, with the same argument conventions as tensor.Gemm, batched over
// gridDim.z with element strides between matrices.
//
// Classic shared-memory tiling: a 128×128 tile of C per block of 256 threads,
// K consumed 8 at a time through double-buffered shared memory, and an 8×8
// register micro-tile per thread split into 4+4 rows and columns so that the
// shared-memory reads are float4 and conflict-free. Global loads are mapped so
// that consecutive threads read consecutive addresses for every combination of
// transposes (the transposes are template parameters, four entry points).

#define BM 128
#define BN 128
#define BK 8

template <bool TA, bool TB>
__device__ __forceinline__ void sgemm_body(int m, int n, int k, float alpha,
		const float *__restrict__ a, int lda, long long sa,
		const float *__restrict__ b, int ldb, long long sb, float beta,
		float *__restrict__ c, int ldc, long long sc) {
	__shared__ __align__(16) float As[2][BK][BM];
	__shared__ __align__(16) float Bs[2][BK][BN];
	a += sa * blockIdx.z;
	b += sb * blockIdx.z;
	c += sc * blockIdx.z;
	const int t = threadIdx.x;
	const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;

	// Load mapping: 4 elements of A and 4 of B per thread per K step.
	// A tile is BM×BK (i, p). Non-transposed A is contiguous in p.
	int ai0, ap0, ais, aps;
	if (!TA) { ap0 = t % BK; ai0 = t / BK; ais = 256 / BK; aps = 0; }
	else     { ai0 = t % BM; ap0 = t / BM; ais = 0; aps = 256 / BM; }
	int bj0, bp0, bjs, bps;
	if (!TB) { bj0 = t % BN; bp0 = t / BN; bjs = 0; bps = 256 / BN; }
	else     { bp0 = t % BK; bj0 = t / BK; bjs = 256 / BK; bps = 0; }

	float ra[4], rb[4];
	auto load = [&](int k0) {
#pragma unroll
		for (int s = 0; s < 4; s++) {
			int i = bm + ai0 + s * ais, p = k0 + ap0 + s * aps;
			float v = 0.f;
			if (i < m && p < k) v = TA ? a[(long long)p * lda + i] : a[(long long)i * lda + p];
			ra[s] = v;
			int j = bn + bj0 + s * bjs, q = k0 + bp0 + s * bps;
			float w = 0.f;
			if (j < n && q < k) w = TB ? b[(long long)j * ldb + q] : b[(long long)q * ldb + j];
			rb[s] = w;
		}
	};
	auto store = [&](int buf) {
#pragma unroll
		for (int s = 0; s < 4; s++) {
			As[buf][ap0 + s * aps][ai0 + s * ais] = ra[s];
			Bs[buf][bp0 + s * bps][bj0 + s * bjs] = rb[s];
		}
	};

	const int tx = t % 16, ty = t / 16;
	float acc[8][8];
#pragma unroll
	for (int i = 0; i < 8; i++)
#pragma unroll
		for (int j = 0; j < 8; j++) acc[i][j] = 0.f;

	load(0);
	store(0);
	__syncthreads();
	int buf = 0;
	for (int k0 = 0; k0 < k; k0 += BK) {
		bool more = k0 + BK < k;
		if (more) load(k0 + BK);
#pragma unroll
		for (int p = 0; p < BK; p++) {
			float4 a0 = *(const float4 *)&As[buf][p][ty * 4];
			float4 a1 = *(const float4 *)&As[buf][p][64 + ty * 4];
			float4 b0 = *(const float4 *)&Bs[buf][p][tx * 4];
			float4 b1 = *(const float4 *)&Bs[buf][p][64 + tx * 4];
			float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
			float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
			for (int i = 0; i < 8; i++)
#pragma unroll
				for (int j = 0; j < 8; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
		}
		if (more) {
			store(buf ^ 1);
			__syncthreads();
			buf ^= 1;
		}
	}

#pragma unroll
	for (int i = 0; i < 8; i++) {
		int row = bm + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
		if (row >= m) continue;
#pragma unroll
		for (int j = 0; j < 8; j++) {
			int col = bn + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
			if (col >= n) continue;
			float *dst = c + (long long)row * ldc + col;
			float v = alpha * acc[i][j];
			if (beta != 0.f) v = fmaf(beta, *dst, v);
			*dst = v;
		}
	}
}

#define SGEMM_ENTRY(name, TA, TB)                                                       \
	extern "C" __global__ void __launch_bounds__(256, 2) name(int m, int n, int k,         \
			float alpha, const float *a, int lda, long long sa, const float *b, int ldb, \
			long long sb, float beta, float *c, int ldc, long long sc) {                  \
		sgemm_body<TA, TB>(m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc);   \
	}

SGEMM_ENTRY(sgemm_nn, false, false)
SGEMM_ENTRY(sgemm_nt, false, true)
SGEMM_ENTRY(sgemm_tn, true, false)
SGEMM_ENTRY(sgemm_tt, true, true)
