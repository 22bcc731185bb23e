// Shared helpers for troupe's CUDA kernels. Every kernel is extern "C" so its
// PTX entry name is exactly the name the Go side launches.
#pragma once

#define TROUPE_INF __int_as_float(0x7f800000)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum reduces v over the whole block (blockDim.x a multiple of 32, at
// most 1024) and returns the total to every thread. scratch holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float *scratch) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0) scratch[warp] = v;
	__syncthreads();
	int nw = blockDim.x >> 5;
	v = lane < nw ? scratch[lane] : 0.f;
	return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *scratch) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0) scratch[warp] = v;
	__syncthreads();
	int nw = blockDim.x >> 5;
	v = lane < nw ? scratch[lane] : -TROUPE_INF;
	return warp_max(v);
}
