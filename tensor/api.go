package tensor

// This file fixes the kernel API that the rest of troupe codes against (the
// shared contract; signatures do not change). The bodies dispatch to the
// fast kernels in softmax.go, layernorm.go, gelu.go and embedding.go: single
// precision throughout (Exp32 instead of float64 math.Exp), unrolled loops,
// and rows split across cores when the work is large enough to pay
// (kParallelRows). Every kernel is checked against a float64 reference in
// kernels_test.go.

// Axpy computes y += alpha·x.
func Axpy(alpha float32, x, y []float32) {
	kSameLen("Axpy", "(x, y)", len(x), len(y))
	y = y[:len(x)]
	if kUseAVX2 && len(x) >= 8 {
		axpyAVX2(alpha, x, y)
		k := len(x) &^ 7
		x, y = x[k:], y[k:]
	}
	i := 0
	for ; i+4 <= len(x); i += 4 {
		y[i] += alpha * x[i]
		y[i+1] += alpha * x[i+1]
		y[i+2] += alpha * x[i+2]
		y[i+3] += alpha * x[i+3]
	}
	for ; i < len(x); i++ {
		y[i] += alpha * x[i]
	}
}

// SoftmaxRows writes the softmax of each of the rows×cols rows of src to dst.
// dst may alias src.
func SoftmaxRows(dst, src []float32, rows, cols int) {
	kCheckRows("SoftmaxRows", rows, cols, len(dst), len(src))
	SoftmaxAxis(dst, src, rows, cols, 1, false)
}

// LogSoftmaxRows writes the log-softmax of each row of src to dst. dst may
// alias src.
func LogSoftmaxRows(dst, src []float32, rows, cols int) {
	kCheckRows("LogSoftmaxRows", rows, cols, len(dst), len(src))
	SoftmaxAxis(dst, src, rows, cols, 1, true)
}

// LayerNormRows normalises each row of src (rows×cols) to zero mean and unit
// variance, then scales by gamma and shifts by beta (both of length cols).
// mean and rstd (length rows) receive the statistics the backward pass needs.
func LayerNormRows(dst, mean, rstd, src, gamma, beta []float32, rows, cols int, eps float32) {
	kCheckLayerNorm("LayerNormRows", rows, cols, []int{len(dst), len(src)}, []int{len(mean), len(rstd)}, []int{len(gamma), len(beta)})
	if cols == 0 {
		return
	}
	kParallelRows(rows, cols, kParMinStreaming, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			mean[r], rstd[r] = kLayerNormRow(dst[r*cols:(r+1)*cols], src[r*cols:(r+1)*cols], gamma, beta, eps)
		}
	})
}

// LayerNormBackwardRows computes dx and accumulates dgamma and dbeta (+=) for
// LayerNormRows, given dy, the input x and the saved mean and rstd.
func LayerNormBackwardRows(dx, dgamma, dbeta, dy, x, mean, rstd, gamma []float32, rows, cols int) {
	kCheckLayerNorm("LayerNormBackwardRows", rows, cols, []int{len(dx), len(dy), len(x)}, []int{len(mean), len(rstd)}, []int{len(dgamma), len(dbeta), len(gamma)})
	if cols == 0 {
		return
	}
	w := kWorkers(rows, cols, kParMinStreaming)
	if w <= 1 {
		for r := 0; r < rows; r++ {
			o := r * cols
			kLayerNormBackwardRow(dx[o:o+cols], dgamma, dbeta, dy[o:o+cols], x[o:o+cols], gamma, mean[r], rstd[r])
		}
		return
	}
	// Each worker but the first accumulates dgamma/dbeta privately; the
	// partial sums are added at the end.
	part := make([]float32, 2*cols*(w-1))
	kParallelRows(rows, cols, kParMinStreaming, func(wi, lo, hi int) {
		dg, db := dgamma, dbeta
		if wi > 0 {
			p := part[2*cols*(wi-1) : 2*cols*wi]
			dg, db = p[:cols], p[cols:]
		}
		for r := lo; r < hi; r++ {
			o := r * cols
			kLayerNormBackwardRow(dx[o:o+cols], dg, db, dy[o:o+cols], x[o:o+cols], gamma, mean[r], rstd[r])
		}
	})
	for wi := 1; wi < w; wi++ {
		p := part[2*cols*(wi-1) : 2*cols*wi]
		VecAdd(dgamma, dgamma, p[:cols])
		VecAdd(dbeta, dbeta, p[cols:])
	}
}

// GELU applies the tanh approximation of the Gaussian error linear unit
// (Hendrycks & Gimpel 2016) element-wise. dst may alias src.
func GELU(dst, src []float32) {
	kSameLen("GELU", "(dst, src)", len(dst), len(src))
	kParallelRows(len(dst), 1, kParMinTranscendental, func(_, lo, hi int) {
		kGELUChunk(dst[lo:hi], src[lo:hi])
	})
}

// GELUBackward writes dx = dy·GELU'(x). dx may alias dy.
func GELUBackward(dx, dy, x []float32) {
	kSameLen("GELUBackward", "(dx, dy, x)", len(dx), len(dy), len(x))
	kParallelRows(len(dx), 1, kParMinTranscendental, func(_, lo, hi int) {
		kGELUBackwardChunk(dx[lo:hi], dy[lo:hi], x[lo:hi])
	})
}

// EmbeddingGather copies row ids[i] of table (rows of width dim) to row i of dst.
// An id outside the table panics with the id and the table's shape.
func EmbeddingGather(dst, table []float32, ids []int, dim int) {
	kCheckEmbedding("EmbeddingGather", dst, "dst", table, "table", ids, dim)
	for i, id := range ids {
		copy(dst[i*dim:(i+1)*dim], table[id*dim:(id+1)*dim])
	}
}

// EmbeddingScatterAdd adds row i of dy into row ids[i] of dtable.
func EmbeddingScatterAdd(dtable, dy []float32, ids []int, dim int) {
	kCheckEmbedding("EmbeddingScatterAdd", dy, "dy", dtable, "dtable", ids, dim)
	for i, id := range ids {
		Axpy(1, dy[i*dim:(i+1)*dim], dtable[id*dim:(id+1)*dim])
	}
}
