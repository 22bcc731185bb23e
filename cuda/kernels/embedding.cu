// troupe:arch compute_70
//
// Embedding lookup and its gradient (tensor.EmbeddingGather /
// tensor.EmbeddingScatterAdd) with int32 ids. The scatter-add uses atomicAdd
// because repeated ids add into the same row.

extern "C" __global__ void embedding_gather(float *dst, const float *table, const int *ids, int n, int dim) {
	long long total = (long long)n * dim;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
			i += (long long)gridDim.x * blockDim.x) {
		int r = (int)(i / dim), c = (int)(i % dim);
		dst[i] = table[(long long)ids[r] * dim + c];
	}
}

extern "C" __global__ void embedding_scatter_add(float *dtable, const float *dy, const int *ids, int n, int dim) {
	long long total = (long long)n * dim;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
			i += (long long)gridDim.x * blockDim.x) {
		int r = (int)(i / dim), c = (int)(i % dim);
		atomicAdd(&dtable[(long long)ids[r] * dim + c], dy[i]);
	}
}
