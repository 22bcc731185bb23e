// troupe:arch compute_80
//
// GEMM on the tensor cores in TF32 (Ampere and newer: compute capability 8.0+).
// Same contract as gemm.cu (row-major, tensor.Gemm's arguments, batched over
// gridDim.z), but products are rounded to TF32 (10-bit mantissa) and
// accumulated in FP32, like cuBLAS with TF32 math mode or PyTorch with
// torch.backends.cuda.matmul.allow_tf32 = True.
//
// Each block of 256 threads (8 warps as 2×4) computes a 128×128 tile of C;
// each warp owns 64×32 of it as 4×2 WMMA 16×16×8 accumulators. K is consumed
// 16 at a time through a two-stage cp.async pipeline (global→shared copies of
// the next stage overlap the tensor-core work on the current one), with
// zero-fill for the ragged edges. This file is compiled for compute_80 because
// both TF32 WMMA and cp.async need sm_80; the Go side only loads it on such GPUs.

#include <mma.h>
using namespace nvcuda;

#define TBM 128
#define TBN 128
#define TBK 16
#define APAD 4
#define BPAD 4

__device__ __forceinline__ void cp_async4(float *smem, const float *gmem, bool valid) {
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	int n = valid ? 4 : 0;
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
// cp_async16 copies bytes (0..16) of src to 16-byte aligned smem and zero-fills the rest.
__device__ __forceinline__ void cp_async16(float *smem, const float *gmem, int bytes) {
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;\n" ::); }
__device__ __forceinline__ void cp_async_wait0() { asm volatile("cp.async.wait_group 0;\n" ::); }

// VEC (only with TA = TB = false): every row of A and B starts 16-byte
// aligned (base pointers, lda, ldb and batch strides multiples of 4 floats),
// so tiles are copied 16 bytes at a time: 4 cp.async per thread per stage
// instead of 16.
template <bool TA, bool TB, bool VEC>
__device__ __forceinline__ void tgemm_body(int m, int n, int k, float alpha,
		const float *__restrict__ a, int lda, long long sa,
		const float *__restrict__ b, int ldb, long long sb, float beta,
		float *__restrict__ c, int ldc, long long sc) {
	__shared__ __align__(128) float As[2][TBM][TBK + APAD];
	__shared__ __align__(128) float Bs[2][TBK][TBN + BPAD];
	a += sa * blockIdx.z;
	b += sb * blockIdx.z;
	c += sc * blockIdx.z;
	const int t = threadIdx.x, warp = t >> 5, lane = t & 31;
	const int wm = warp >> 2, wn = warp & 3;
	const int bm = blockIdx.y * TBM, bn = blockIdx.x * TBN;

	int ai0, ap0, ais, aps;
	if (!TA) { ap0 = t % TBK; ai0 = t / TBK; ais = 256 / TBK; aps = 0; }
	else     { ai0 = t % TBM; ap0 = t / TBM; ais = 0; aps = 256 / TBM; }
	int bj0, bp0, bjs, bps;
	if (!TB) { bj0 = t % TBN; bp0 = t / TBN; bjs = 0; bps = 256 / TBN; }
	else     { bp0 = t % TBK; bj0 = t / TBK; bjs = 256 / TBK; bps = 0; }

	auto load = [&](int st, int k0) {
		if (VEC) {
#pragma unroll
			for (int s = 0; s < 2; s++) {
				int idx = t + 256 * s;
				int i = idx / (TBK / 4), p = (idx % (TBK / 4)) * 4;
				int gi = bm + i, gp = k0 + p;
				int nb = gi < m ? max(0, min(4, k - gp)) * 4 : 0;
				cp_async16(&As[st][i][p], nb ? a + (long long)gi * lda + gp : a, nb);
				int q = idx / (TBN / 4), j = (idx % (TBN / 4)) * 4;
				int gq = k0 + q, gj = bn + j;
				int nbb = gq < k ? max(0, min(4, n - gj)) * 4 : 0;
				cp_async16(&Bs[st][q][j], nbb ? b + (long long)gq * ldb + gj : b, nbb);
			}
		} else {
#pragma unroll
		for (int s = 0; s < 8; s++) {
			int i = ai0 + s * ais, p = ap0 + s * aps;
			int gi = bm + i, gp = k0 + p;
			bool ok = gi < m && gp < k;
			const float *src = ok ? (TA ? a + (long long)gp * lda + gi : a + (long long)gi * lda + gp) : a;
			cp_async4(&As[st][i][p], src, ok);
			int j = bj0 + s * bjs, q = bp0 + s * bps;
			int gj = bn + j, gq = k0 + q;
			bool okb = gj < n && gq < k;
			const float *srcb = okb ? (TB ? b + (long long)gj * ldb + gq : b + (long long)gq * ldb + gj) : b;
			cp_async4(&Bs[st][q][j], srcb, okb);
		}
		}
	};

	wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[4][2];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.f);

	const int nt = (k + TBK - 1) / TBK;
	load(0, 0);
	cp_async_commit();
	for (int kt = 0; kt < nt; kt++) {
		if (kt + 1 < nt) {
			load((kt + 1) & 1, (kt + 1) * TBK);
			cp_async_commit();
			cp_async_wait1();
		} else {
			cp_async_wait0();
		}
		__syncthreads();
		const int st = kt & 1;
#pragma unroll
		for (int kk = 0; kk < TBK; kk += 8) {
			wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> af[4];
			wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> bf[2];
#pragma unroll
			for (int i = 0; i < 4; i++) {
				wmma::load_matrix_sync(af[i], &As[st][wm * 64 + i * 16][kk], TBK + APAD);
#pragma unroll
				for (int e = 0; e < af[i].num_elements; e++) af[i].x[e] = wmma::__float_to_tf32(af[i].x[e]);
			}
#pragma unroll
			for (int j = 0; j < 2; j++) {
				wmma::load_matrix_sync(bf[j], &Bs[st][kk][wn * 32 + j * 16], TBN + BPAD);
#pragma unroll
				for (int e = 0; e < bf[j].num_elements; e++) bf[j].x[e] = wmma::__float_to_tf32(bf[j].x[e]);
			}
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
		}
		__syncthreads();
	}

	// Epilogue through a 16×16 per-warp staging area in (now idle) As.
	float *stage = &As[0][0][0] + warp * 256;
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 2; j++) {
			wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
			__syncwarp();
			for (int e = lane; e < 256; e += 32) {
				int row = bm + wm * 64 + i * 16 + e / 16, col = bn + wn * 32 + j * 16 + e % 16;
				if (row < m && col < n) {
					float *dst = c + (long long)row * ldc + col;
					float v = alpha * stage[e];
					if (beta != 0.f) v = fmaf(beta, *dst, v);
					*dst = v;
				}
			}
			__syncwarp();
		}
}

#define TGEMM_ENTRY(name, TA, TB, VEC)                                                  \
	extern "C" __global__ void __launch_bounds__(256, 2) name(int m, int n, int k,         \
			float alpha, const float *a, int lda, long long sa, const float *b, int ldb, \
			long long sb, float beta, float *c, int ldc, long long sc) {                  \
		tgemm_body<TA, TB, VEC>(m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc); \
	}

TGEMM_ENTRY(tf32gemm_nn, false, false, false)
TGEMM_ENTRY(tf32gemm_nt, false, true, false)
TGEMM_ENTRY(tf32gemm_tn, true, false, false)
TGEMM_ENTRY(tf32gemm_tt, true, true, false)
TGEMM_ENTRY(tf32gemm_nn_v4, false, false, true)
