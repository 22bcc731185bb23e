// troupe:arch compute_70
//
// AdamW (Loshchilov & Hutter 2019): decoupled weight decay, then the Adam
// update with bias corrections bc1 = 1−β1^t and bc2 = 1−β2^t computed by the
// caller for step t.

extern "C" __global__ void adamw(float *p, const float *g, float *m, float *v, long long n, float lr,
		float beta1, float beta2, float eps, float wd, float bc1, float bc2) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
			i += (long long)gridDim.x * blockDim.x) {
		float gi = g[i];
		float mi = beta1 * m[i] + (1.f - beta1) * gi;
		float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
		m[i] = mi;
		v[i] = vi;
		float pi = p[i] * (1.f - lr * wd);
		p[i] = pi - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
	}
}
