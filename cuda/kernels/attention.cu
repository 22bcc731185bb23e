// troupe:arch compute_70
//
// Fused scaled-dot-product attention, forward and backward, in the style of
// FlashAttention (Dao et al. 2022; the backward follows FlashAttention-2, Dao
// 2023): the T×T score matrix is never written to global memory. Q, K, V, O
// and their gradients are [BH][T][D] row-major (one contiguous T×D matrix per
// batch·head), D ≤ 128.
//
// Forward: a block takes BR query rows, keeps them in shared memory and walks
// the key/value tiles (only up to the diagonal when causal), keeping a running
// row maximum m, normaliser l and the unnormalised output in registers
// (online softmax, Milakov & Gimelshein 2018). It writes O and the row
// log-sum-exp L = m + log l for the backward pass.
//
// Backward: attn_bwd_dot computes Δ_i = Σ_d dO_id·O_id; then one block per
// BC-key tile keeps K_j, V_j in shared memory, walks the query tiles at or
// after it, recomputes P = exp(S − L) and accumulates dV_j += Pᵀ·dO and
// dK_j += dSᵀ·Q·scale in registers (dS = P ⊙ (dP − Δ), dP = dO·Vᵀ), while
// dQ_i += dS·K_j·scale goes to global memory with atomicAdd (dQ must be zero
// on entry).
//
// Two instantiations cover the head sizes within the 48 KiB of static shared
// memory: *_d64 (tiles of 32, D ≤ 64) and *_d128 (tiles of 32/16, D ≤ 128).
// Arithmetic is FP32 on the CUDA cores.
#include "common.cuh"

template <int BR, int BC, int MAXD>
__device__ __forceinline__ void attn_fwd_body(float *__restrict__ o, float *__restrict__ lse,
		const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
		int T, int D, float scale, int causal) {
	constexpr int NT = 128, TPR = NT / BR, NS = BC / TPR, ND = MAXD / TPR;
	__shared__ float Qs[BR][MAXD + 1];
	__shared__ float KVs[BC][MAXD + 1];
	__shared__ float Ps[BR][BC + 1];
	const int t = threadIdx.x, r = t / TPR, sub = t % TPR;
	const int q0 = blockIdx.x * BR;
	const long long base = (long long)blockIdx.y * T * D;
	q += base; k += base; v += base; o += base;
	lse += (long long)blockIdx.y * T;

	for (int i = t; i < BR * D; i += NT) {
		int rr = i / D, d = i % D;
		Qs[rr][d] = q0 + rr < T ? q[(long long)(q0 + rr) * D + d] * scale : 0.f;
	}
	float acc[ND];
#pragma unroll
	for (int j = 0; j < ND; j++) acc[j] = 0.f;
	float mi = -TROUPE_INF, li = 0.f;
	const int qi = q0 + r;
	int kend = T;
	if (causal) kend = min(T, q0 + BR);
	for (int k0 = 0; k0 < kend; k0 += BC) {
		__syncthreads();
		for (int i = t; i < BC * D; i += NT) {
			int rr = i / D, d = i % D;
			KVs[rr][d] = k0 + rr < T ? k[(long long)(k0 + rr) * D + d] : 0.f;
		}
		__syncthreads();
		float s[NS];
		float mx = -TROUPE_INF;
#pragma unroll
		for (int j = 0; j < NS; j++) {
			int c = sub + TPR * j, kj = k0 + c;
			float dot = 0.f;
			for (int d = 0; d < D; d++) dot = fmaf(Qs[r][d], KVs[c][d], dot);
			bool masked = kj >= T || qi >= T || (causal && kj > qi);
			s[j] = masked ? -TROUPE_INF : dot;
			mx = fmaxf(mx, s[j]);
		}
#pragma unroll
		for (int off = TPR / 2; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
		float mnew = fmaxf(mi, mx);
		float corr = mnew == -TROUPE_INF ? 1.f : expf(mi - mnew);
		float ps = 0.f;
#pragma unroll
		for (int j = 0; j < NS; j++) {
			float p = s[j] == -TROUPE_INF ? 0.f : expf(s[j] - mnew);
			Ps[r][sub + TPR * j] = p;
			ps += p;
		}
#pragma unroll
		for (int off = TPR / 2; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
		li = li * corr + ps;
		mi = mnew;
#pragma unroll
		for (int j = 0; j < ND; j++) acc[j] *= corr;
		__syncthreads();
		for (int i = t; i < BC * D; i += NT) {
			int rr = i / D, d = i % D;
			KVs[rr][d] = k0 + rr < T ? v[(long long)(k0 + rr) * D + d] : 0.f;
		}
		__syncthreads();
		for (int c = 0; c < BC; c++) {
			float p = Ps[r][c];
#pragma unroll
			for (int j = 0; j < ND; j++) {
				int d = sub + TPR * j;
				if (d < D) acc[j] = fmaf(p, KVs[c][d], acc[j]);
			}
		}
	}
	if (qi < T) {
		float inv = li > 0.f ? 1.f / li : 0.f;
#pragma unroll
		for (int j = 0; j < ND; j++) {
			int d = sub + TPR * j;
			if (d < D) o[(long long)qi * D + d] = acc[j] * inv;
		}
		if (sub == 0) lse[qi] = li > 0.f ? mi + logf(li) : -TROUPE_INF;
	}
}

extern "C" __global__ void __launch_bounds__(128) attn_fwd_d64(float *o, float *lse, const float *q, const float *k,
		const float *v, int T, int D, float scale, int causal) {
	attn_fwd_body<32, 32, 64>(o, lse, q, k, v, T, D, scale, causal);
}
extern "C" __global__ void __launch_bounds__(128) attn_fwd_d128(float *o, float *lse, const float *q, const float *k,
		const float *v, int T, int D, float scale, int causal) {
	attn_fwd_body<32, 32, 128>(o, lse, q, k, v, T, D, scale, causal);
}

// attn_bwd_dot: delta[r] = Σ_d dO[r][d]·O[r][d] over all BH·T rows, one warp per row.
extern "C" __global__ void attn_bwd_dot(float *delta, const float *dout, const float *out, long long rows, int D) {
	long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
	int lane = threadIdx.x & 31;
	if (r >= rows) return;
	float s = 0.f;
	for (int d = lane; d < D; d += 32) s += dout[r * D + d] * out[r * D + d];
	s = warp_sum(s);
	if (lane == 0) delta[r] = s;
}

template <int BR, int BC, int MAXD>
__device__ __forceinline__ void attn_bwd_body(float *__restrict__ dq, float *__restrict__ dk, float *__restrict__ dv,
		const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
		const float *__restrict__ dout, const float *__restrict__ lse, const float *__restrict__ delta,
		int T, int D, float scale, int causal) {
	constexpr int NT = 128;
	constexpr int KTPR = NT / BC, KND = MAXD / KTPR;   // per key row: dK/dV columns
	constexpr int QTPR = NT / BR, QNS = BC / QTPR, QND = MAXD / QTPR;
	__shared__ float Ks[BC][MAXD + 1];
	__shared__ float Vs[BC][MAXD + 1];
	__shared__ float Qs[BR][MAXD + 1];
	__shared__ float dOs[BR][MAXD + 1];
	__shared__ float Ps[BR][BC + 1];
	__shared__ float dSs[BR][BC + 1];
	const int t = threadIdx.x;
	const int k0 = blockIdx.x * BC;
	const long long base = (long long)blockIdx.y * T * D;
	q += base; k += base; v += base; dout += base; dq += base; dk += base; dv += base;
	lse += (long long)blockIdx.y * T;
	delta += (long long)blockIdx.y * T;

	for (int i = t; i < BC * D; i += NT) {
		int rr = i / D, d = i % D;
		bool ok = k0 + rr < T;
		Ks[rr][d] = ok ? k[(long long)(k0 + rr) * D + d] : 0.f;
		Vs[rr][d] = ok ? v[(long long)(k0 + rr) * D + d] : 0.f;
	}
	const int kr = t / KTPR, ksub = t % KTPR;
	const int qr = t / QTPR, qsub = t % QTPR;
	float dka[KND], dva[KND];
#pragma unroll
	for (int j = 0; j < KND; j++) { dka[j] = 0.f; dva[j] = 0.f; }

	int qstart = causal ? (k0 / BR) * BR : 0;
	for (int q0 = qstart; q0 < T; q0 += BR) {
		__syncthreads();
		for (int i = t; i < BR * D; i += NT) {
			int rr = i / D, d = i % D;
			bool ok = q0 + rr < T;
			Qs[rr][d] = ok ? q[(long long)(q0 + rr) * D + d] : 0.f;
			dOs[rr][d] = ok ? dout[(long long)(q0 + rr) * D + d] : 0.f;
		}
		__syncthreads();
		const int qi = q0 + qr;
		float L = qi < T ? lse[qi] : 0.f, De = qi < T ? delta[qi] : 0.f;
#pragma unroll
		for (int j = 0; j < QNS; j++) {
			int c = qsub + QTPR * j, kj = k0 + c;
			bool masked = kj >= T || qi >= T || (causal && kj > qi);
			float p = 0.f, ds = 0.f;
			if (!masked) {
				float s = 0.f, dp = 0.f;
				for (int d = 0; d < D; d++) {
					s = fmaf(Qs[qr][d], Ks[c][d], s);
					dp = fmaf(dOs[qr][d], Vs[c][d], dp);
				}
				p = expf(s * scale - L);
				ds = p * (dp - De);
			}
			Ps[qr][c] = p;
			dSs[qr][c] = ds;
		}
		__syncthreads();
		// dV, dK for this block's keys.
		for (int rr = 0; rr < BR; rr++) {
			float p = Ps[rr][kr], ds = dSs[rr][kr];
#pragma unroll
			for (int j = 0; j < KND; j++) {
				int d = ksub + KTPR * j;
				if (d < D) {
					dva[j] = fmaf(p, dOs[rr][d], dva[j]);
					dka[j] = fmaf(ds, Qs[rr][d], dka[j]);
				}
			}
		}
		// dQ for these queries (partial over this key tile).
		if (qi < T) {
#pragma unroll
			for (int j = 0; j < QND; j++) {
				int d = qsub + QTPR * j;
				if (d < D) {
					float s = 0.f;
					for (int c = 0; c < BC; c++) s = fmaf(dSs[qr][c], Ks[c][d], s);
					if (s != 0.f) atomicAdd(&dq[(long long)qi * D + d], s * scale);
				}
			}
		}
	}
	if (k0 + kr < T) {
#pragma unroll
		for (int j = 0; j < KND; j++) {
			int d = ksub + KTPR * j;
			if (d < D) {
				dk[(long long)(k0 + kr) * D + d] = dka[j] * scale;
				dv[(long long)(k0 + kr) * D + d] = dva[j];
			}
		}
	}
}

extern "C" __global__ void __launch_bounds__(128) attn_bwd_d64(float *dq, float *dk, float *dv, const float *q,
		const float *k, const float *v, const float *dout, const float *lse, const float *delta, int T, int D,
		float scale, int causal) {
	attn_bwd_body<32, 32, 64>(dq, dk, dv, q, k, v, dout, lse, delta, T, D, scale, causal);
}
extern "C" __global__ void __launch_bounds__(128) attn_bwd_d128(float *dq, float *dk, float *dv, const float *q,
		const float *k, const float *v, const float *dout, const float *lse, const float *delta, int T, int D,
		float scale, int causal) {
	attn_bwd_body<16, 16, 128>(dq, dk, dv, q, k, v, dout, lse, delta, T, D, scale, causal);
}

// attn_decode: one generation step with a KV cache. For each of the bh heads
// (one block each), the single query q[bh][D] attends to the first L rows of
// that head's key and value caches kc, vc ([bh][maxT][D]); o[bh][D] receives
// the result. Each of the 4 warps walks every 4th key with its own online
// softmax (lanes split D), and the warps' partial results are merged at the
// end. Memory-bound by design: it reads each cached K and V row once.
extern "C" __global__ void __launch_bounds__(128) attn_decode(float *o, const float *q, const float *kc,
		const float *vc, int L, int maxT, int D, float scale) {
	__shared__ float qs[128];
	__shared__ float wm[4], wl[4];
	__shared__ float wacc[4][128];
	const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
	const long long hb = (long long)blockIdx.x * maxT * D;
	q += (long long)blockIdx.x * D;
	o += (long long)blockIdx.x * D;
	if (t < D) qs[t] = q[t] * scale;
	__syncthreads();
	float m = -TROUPE_INF, l = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
	for (int j = warp; j < L; j += 4) {
		const float *kr = kc + hb + (long long)j * D, *vr = vc + hb + (long long)j * D;
		float s = 0.f;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			int d = lane + 32 * i;
			if (d < D) s = fmaf(qs[d], kr[d], s);
		}
		s = warp_sum(s);
		float mn = fmaxf(m, s);
		float corr = expf(m - mn), p = expf(s - mn);
		l = l * corr + p;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			int d = lane + 32 * i;
			acc[i] = acc[i] * corr + (d < D ? p * vr[d] : 0.f);
		}
		m = mn;
	}
	if (lane == 0) { wm[warp] = m; wl[warp] = l; }
#pragma unroll
	for (int i = 0; i < 4; i++) {
		int d = lane + 32 * i;
		if (d < 128) wacc[warp][d] = acc[i];
	}
	__syncthreads();
	if (t < D) {
		float M = fmaxf(fmaxf(wm[0], wm[1]), fmaxf(wm[2], wm[3]));
		float num = 0.f, den = 0.f;
#pragma unroll
		for (int w = 0; w < 4; w++) {
			float f = wm[w] == -TROUPE_INF ? 0.f : expf(wm[w] - M);
			num += f * wacc[w][t];
			den += f * wl[w];
		}
		o[t] = den > 0.f ? num / den : 0.f;
	}
}
