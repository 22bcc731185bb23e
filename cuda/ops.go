//go:build troupecuda

package cuda

import (
	"fmt"
	"math"
	"unsafe"
)

// This file holds the device versions of package tensor's kernels, with the
// same argument order and semantics (row-major, rows×cols) but Buffers in
// place of slices and an error for driver failures. Every call is enqueued on
// the engine's current stream and returns before the work is done; ToHost
// (or Synchronize) waits. Shape errors are programmer errors and panic with a
// message naming the sizes, like package tensor.

// launch enqueues kernel name with the given grid and block. Arguments are
// Buffer (a device pointer), int32, int64 or float32, matching the kernel's
// C parameter types.
func (e *Engine) launch(name string, grid, block [3]int, args ...any) error {
	fn, ok := e.fns[name]
	if !ok {
		return fmt.Errorf("cuda: kernel %s is not loaded on this GPU (compute capability %d)", name, e.cc)
	}
	// cu's Launch reads 8 bytes through every parameter pointer, so each
	// argument gets an 8-byte slot; the kernel uses the low 4 bytes of int32
	// and float32 arguments (little-endian).
	slots := make([]uint64, len(args))
	ptrs := make([]unsafe.Pointer, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case Buffer:
			slots[i] = uint64(v.ptr)
		case int32:
			slots[i] = uint64(uint32(v))
		case int64:
			slots[i] = uint64(v)
		case float32:
			slots[i] = uint64(math.Float32bits(v))
		default:
			panic(fmt.Sprintf("cuda: launch %s: argument %d has type %T", name, i, a))
		}
		ptrs[i] = unsafe.Pointer(&slots[i])
	}
	err := e.do(func() error {
		return fn.Launch(grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, e.stream.s, ptrs)
	})
	if err != nil {
		return fmt.Errorf("cuda: launch %s grid %v block %v: %w", name, grid, block, err)
	}
	return nil
}

func i32(v int) int32 {
	if v > math.MaxInt32 || v < math.MinInt32 {
		panic(fmt.Sprintf("cuda: size %d does not fit a kernel's int", v))
	}
	return int32(v)
}

// grid1D returns a grid-stride launch for n elements.
func (e *Engine) grid1D(n int) ([3]int, [3]int) {
	blocks := GridBlocks(n, 256, e.sms*8)
	return [3]int{blocks, 1, 1}, [3]int{256, 1, 1}
}

// rowBlock returns a block for the one-block-per-row kernels.
func rowBlock(cols int) [3]int { return [3]int{RowThreads(cols), 1, 1} }

// ---- GEMM ----

// Gemm computes C = alpha·op(A)·op(B) + beta·C on the device, with the
// arguments of tensor.Gemm. With TF32 on (compute capability 8.0+) it runs on
// the tensor cores in TF32; otherwise in FP32 on the CUDA cores.
func (e *Engine) Gemm(transA, transB bool, m, n, k int, alpha float32, a Buffer, lda int, b Buffer, ldb int, beta float32, c Buffer, ldc int) error {
	return e.GemmBatched(transA, transB, 1, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0)
}

// GemmBatched runs batch GEMMs (tensor.GemmBatched); matrix i of A starts at
// element i·strideA, likewise B and C. All run in one launch.
func (e *Engine) GemmBatched(transA, transB bool, batch, m, n, k int, alpha float32, a Buffer, lda, strideA int, b Buffer, ldb, strideB int, beta float32, c Buffer, ldc, strideC int) error {
	if err := CheckGemm(transA, transB, batch, m, n, k, a.Len(), lda, strideA, b.Len(), ldb, strideB, c.Len(), ldc, strideC); err != nil {
		panic(err.Error())
	}
	if batch == 0 || m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		// C = beta·C.
		if beta == 1 {
			return nil
		}
		for i := 0; i < batch; i++ {
			for r := 0; r < m; r++ {
				row := c.Slice(i*strideC+r*ldc, i*strideC+r*ldc+n)
				if err := e.Unary(UnaryScale, row, row, beta); err != nil {
					return err
				}
			}
		}
		return nil
	}
	name := GemmKernel(e.tf32, transA, transB)
	if e.tf32 && GemmVec4(transA, transB, batch, a.ptr, lda, strideA, b.ptr, ldb, strideB) {
		name = "tf32gemm_nn_v4"
	}
	// gridDim.z is at most 65535: launch larger batches in chunks.
	for b0 := 0; b0 < batch; b0 += maxGridYZ {
		nb := min(batch-b0, maxGridYZ)
		grid := [3]int{(n + 127) / 128, (m + 127) / 128, nb}
		ab, bb, cb := offsetBuf(a, b0*strideA), offsetBuf(b, b0*strideB), offsetBuf(c, b0*strideC)
		err := e.launch(name, grid, [3]int{256, 1, 1},
			i32(m), i32(n), i32(k), alpha, ab, i32(lda), int64(strideA), bb, i32(ldb), int64(strideB), beta, cb, i32(ldc), int64(strideC))
		if err != nil {
			return err
		}
	}
	return nil
}

// maxGridYZ is CUDA's limit on gridDim.y and gridDim.z.
const maxGridYZ = 65535

// offsetBuf returns b advanced by off elements (the rest of the buffer).
func offsetBuf(b Buffer, off int) Buffer {
	if off == 0 {
		return b
	}
	return b.Slice(off, b.Len())
}

// ---- element-wise ----

// Binary computes out[i] = a[i] op b[i] for the first out.Len() elements.
func (e *Engine) Binary(op int, out, a, b Buffer) error {
	n := out.Len()
	need("Binary", "a", a, n)
	need("Binary", "b", b, n)
	g, bl := e.grid1D(n)
	return e.launch("binary_same", g, bl, out, a, b, i32(op), int64(n))
}

// BinaryBroadcast computes out = a op b with broadcasting: out is contiguous
// with shape (up to 4 dims); aStrides and bStrides give each operand's
// element stride per dimension of out, 0 where it broadcasts. For example a
// bias add of b (length cols) to a rows×cols matrix is shape {rows, cols},
// aStrides {cols, 1}, bStrides {0, 1}.
func (e *Engine) BinaryBroadcast(op int, out, a, b Buffer, shape, aStrides, bStrides []int) error {
	if len(shape) > 4 || len(aStrides) != len(shape) || len(bStrides) != len(shape) {
		panic(fmt.Sprintf("cuda: BinaryBroadcast: shape %v, strides %v and %v (up to 4 dims, one stride per dim)", shape, aStrides, bStrides))
	}
	sh, as, bs := [4]int{1, 1, 1, 1}, [4]int{}, [4]int{}
	off := 4 - len(shape)
	total := 1
	amax, bmax := 0, 0
	for i, d := range shape {
		sh[off+i], as[off+i], bs[off+i] = d, aStrides[i], bStrides[i]
		total *= d
		if d > 0 {
			amax += (d - 1) * aStrides[i]
			bmax += (d - 1) * bStrides[i]
		}
	}
	if total == 0 {
		return nil
	}
	need("BinaryBroadcast", "out", out, total)
	need("BinaryBroadcast", "a", a, amax+1)
	need("BinaryBroadcast", "b", b, bmax+1)
	g, bl := e.grid1D(total)
	return e.launch("binary_bcast", g, bl, out, a, b, i32(op), i32(sh[0]), i32(sh[1]), i32(sh[2]), i32(sh[3]),
		int64(as[0]), int64(as[1]), int64(as[2]), int64(as[3]), int64(bs[0]), int64(bs[1]), int64(bs[2]), int64(bs[3]))
}

// AddRowVector computes out[r][c] = a[r][c] + v[c] (a bias add).
func (e *Engine) AddRowVector(out, a, v Buffer, rows, cols int) error {
	return e.BinaryBroadcast(OpAdd, out, a, v, []int{rows, cols}, []int{cols, 1}, []int{0, 1})
}

// Unary computes out[i] = f(x[i]) over out.Len() elements.
func (e *Engine) Unary(op int, out, x Buffer, alpha float32) error {
	n := out.Len()
	need("Unary", "x", x, n)
	g, bl := e.grid1D(n)
	return e.launch("unary", g, bl, out, x, i32(op), alpha, int64(n))
}

// Fill sets every element of out to v.
func (e *Engine) Fill(out Buffer, v float32) error {
	g, bl := e.grid1D(out.Len())
	return e.launch("fill", g, bl, out, v, int64(out.Len()))
}

// Axpy computes y += alpha·x (tensor.Axpy) over x.Len() elements.
func (e *Engine) Axpy(alpha float32, x, y Buffer) error {
	need("Axpy", "y", y, x.Len())
	g, bl := e.grid1D(x.Len())
	return e.launch("axpy", g, bl, alpha, x, y, int64(x.Len()))
}

// GELU applies tensor.GELU to the first src.Len() elements.
func (e *Engine) GELU(dst, src Buffer) error {
	need("GELU", "dst", dst, src.Len())
	g, bl := e.grid1D(src.Len())
	return e.launch("gelu_fwd", g, bl, dst, src, int64(src.Len()))
}

// GELUBackward computes dx = dy·GELU'(x) (tensor.GELUBackward).
func (e *Engine) GELUBackward(dx, dy, x Buffer) error {
	n := x.Len()
	need("GELUBackward", "dx", dx, n)
	need("GELUBackward", "dy", dy, n)
	g, bl := e.grid1D(n)
	return e.launch("gelu_bwd", g, bl, dx, dy, x, int64(n))
}

// ---- reductions ----

// SumRows writes the sum of each row of x (rows×cols) to out (length rows).
func (e *Engine) SumRows(out, x Buffer, rows, cols int) error {
	return e.reduceRows(out, x, rows, cols, 0)
}

// MaxRows writes the maximum of each row of x to out.
func (e *Engine) MaxRows(out, x Buffer, rows, cols int) error {
	return e.reduceRows(out, x, rows, cols, 1)
}

func (e *Engine) reduceRows(out, x Buffer, rows, cols, op int) error {
	need("reduce rows", "x", x, rows*cols)
	need("reduce rows", "out", out, rows)
	if rows == 0 {
		return nil
	}
	return e.launch("reduce_rows", [3]int{rows, 1, 1}, rowBlock(cols), out, x, i32(rows), i32(cols), i32(op))
}

// SumCols computes out[c] = beta·out[c] + Σ_r x[r][c] (bias gradients with beta 1).
func (e *Engine) SumCols(out, x Buffer, rows, cols int, beta float32) error {
	need("SumCols", "x", x, rows*cols)
	need("SumCols", "out", out, cols)
	if cols == 0 {
		return nil
	}
	return e.launch("reduce_cols", [3]int{(cols + 31) / 32, 1, 1}, [3]int{32, 8, 1}, out, x, i32(rows), i32(cols), beta)
}

// Sum writes the sum of all x.Len() elements to out[0].
func (e *Engine) Sum(out, x Buffer) error {
	need("Sum", "out", out, 1)
	e.Memclr(out.Slice(0, 1))
	g, bl := e.grid1D(x.Len())
	return e.launch("reduce_all", g, bl, out, x, int64(x.Len()))
}

// ---- softmax family ----

func (e *Engine) rows2(name, op string, dst, src Buffer, rows, cols int) error {
	need(op, "src", src, rows*cols)
	need(op, "dst", dst, rows*cols)
	if rows == 0 || cols == 0 {
		return nil
	}
	return e.launch(name, [3]int{rows, 1, 1}, rowBlock(cols), dst, src, i32(rows), i32(cols))
}

// SoftmaxRows is tensor.SoftmaxRows on the device.
func (e *Engine) SoftmaxRows(dst, src Buffer, rows, cols int) error {
	return e.rows2("softmax_rows", "SoftmaxRows", dst, src, rows, cols)
}

// LogSoftmaxRows is tensor.LogSoftmaxRows on the device.
func (e *Engine) LogSoftmaxRows(dst, src Buffer, rows, cols int) error {
	return e.rows2("logsoftmax_rows", "LogSoftmaxRows", dst, src, rows, cols)
}

// SoftmaxBackwardRows computes dx = y⊙(dy − Σdy⊙y) per row, y = softmax output.
func (e *Engine) SoftmaxBackwardRows(dx, dy, y Buffer, rows, cols int) error {
	need("SoftmaxBackwardRows", "dy", dy, rows*cols)
	need("SoftmaxBackwardRows", "y", y, rows*cols)
	need("SoftmaxBackwardRows", "dx", dx, rows*cols)
	if rows == 0 || cols == 0 {
		return nil
	}
	return e.launch("softmax_bwd_rows", [3]int{rows, 1, 1}, rowBlock(cols), dx, dy, y, i32(rows), i32(cols))
}

// LogSoftmaxBackwardRows computes dx = dy − exp(y)·Σdy per row, y = log-softmax output.
func (e *Engine) LogSoftmaxBackwardRows(dx, dy, y Buffer, rows, cols int) error {
	need("LogSoftmaxBackwardRows", "dy", dy, rows*cols)
	need("LogSoftmaxBackwardRows", "y", y, rows*cols)
	need("LogSoftmaxBackwardRows", "dx", dx, rows*cols)
	if rows == 0 || cols == 0 {
		return nil
	}
	return e.launch("logsoftmax_bwd_rows", [3]int{rows, 1, 1}, rowBlock(cols), dx, dy, y, i32(rows), i32(cols))
}

// LogSoftmaxGather writes out[r] = log softmax(x[r])[ids[r]] (0 where
// ids[r] < 0) and the row log-sum-exp to lse, without materialising the
// log-softmax: the log-probabilities of taken actions in policy gradients.
// ids is an int32 buffer (IDsToDevice).
func (e *Engine) LogSoftmaxGather(out, lse, x, ids Buffer, rows, cols int) error {
	return e.rowPick("LogSoftmaxGather", "logsoftmax_gather", out, lse, x, ids, rows, cols)
}

// LogSoftmaxGatherBackward writes dx[r] = dout[r]·(onehot(ids[r]) − softmax(x[r])).
func (e *Engine) LogSoftmaxGatherBackward(dx, dout, x, lse, ids Buffer, rows, cols int) error {
	return e.rowPickBackward("LogSoftmaxGatherBackward", "logsoftmax_gather_bwd", dx, dout, x, lse, ids, rows, cols)
}

// CrossEntropy writes loss[r] = logΣexp(x[r]) − x[r][t[r]] (0 where t[r] < 0,
// the ignore index) and the row log-sum-exp to lse. t is int32 (IDsToDevice).
func (e *Engine) CrossEntropy(loss, lse, x, t Buffer, rows, cols int) error {
	return e.rowPick("CrossEntropy", "xent_fwd", loss, lse, x, t, rows, cols)
}

// CrossEntropyBackward writes dx[r] = dloss[r]·(softmax(x[r]) − onehot(t[r])).
func (e *Engine) CrossEntropyBackward(dx, dloss, x, lse, t Buffer, rows, cols int) error {
	return e.rowPickBackward("CrossEntropyBackward", "xent_bwd", dx, dloss, x, lse, t, rows, cols)
}

// rowPick launches a kernel that picks one entry per row of x by an int32
// index (log-softmax-gather, cross-entropy), writing a value per row to
// out and the row's log-sum-exp to lse.
func (e *Engine) rowPick(op, kernel string, out, lse, x, ids Buffer, rows, cols int) error {
	need(op, "x", x, rows*cols)
	need(op, "out", out, rows)
	need(op, "lse", lse, rows)
	need(op, "ids", ids, rows)
	if rows == 0 {
		return nil
	}
	return e.launch(kernel, [3]int{rows, 1, 1}, rowBlock(cols), out, lse, x, ids, i32(rows), i32(cols))
}

// rowPickBackward launches the backward kernel of a rowPick: dx from the
// gradient per row dout, x, lse and the indices.
func (e *Engine) rowPickBackward(op, kernel string, dx, dout, x, lse, ids Buffer, rows, cols int) error {
	need(op, "x", x, rows*cols)
	need(op, "dx", dx, rows*cols)
	need(op, "dout", dout, rows)
	need(op, "lse", lse, rows)
	need(op, "ids", ids, rows)
	if rows == 0 {
		return nil
	}
	return e.launch(kernel, [3]int{rows, 1, 1}, rowBlock(cols), dx, dout, x, lse, ids, i32(rows), i32(cols))
}

// ---- layer norm ----

// LayerNormRows is tensor.LayerNormRows on the device.
func (e *Engine) LayerNormRows(dst, mean, rstd, src, gamma, beta Buffer, rows, cols int, eps float32) error {
	for _, c := range []struct {
		n string
		b Buffer
		l int
	}{{"dst", dst, rows * cols}, {"src", src, rows * cols}, {"mean", mean, rows}, {"rstd", rstd, rows}, {"gamma", gamma, cols}, {"beta", beta, cols}} {
		need("LayerNormRows", c.n, c.b, c.l)
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return e.launch("layernorm_fwd", [3]int{rows, 1, 1}, rowBlock(cols), dst, mean, rstd, src, gamma, beta, i32(rows), i32(cols), eps)
}

// LayerNormBackwardRows is tensor.LayerNormBackwardRows on the device: it
// writes dx and accumulates (+=) dgamma and dbeta.
func (e *Engine) LayerNormBackwardRows(dx, dgamma, dbeta, dy, x, mean, rstd, gamma Buffer, rows, cols int) error {
	for _, c := range []struct {
		n string
		b Buffer
		l int
	}{{"dx", dx, rows * cols}, {"dy", dy, rows * cols}, {"x", x, rows * cols}, {"mean", mean, rows}, {"rstd", rstd, rows},
		{"gamma", gamma, cols}, {"dgamma", dgamma, cols}, {"dbeta", dbeta, cols}} {
		need("LayerNormBackwardRows", c.n, c.b, c.l)
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	if err := e.launch("layernorm_bwd_dx", [3]int{rows, 1, 1}, rowBlock(cols), dx, dy, x, mean, rstd, gamma, i32(rows), i32(cols)); err != nil {
		return err
	}
	return e.launch("layernorm_bwd_dgb", [3]int{(cols + 31) / 32, 1, 1}, [3]int{32, 8, 1}, dgamma, dbeta, dy, x, mean, rstd, i32(rows), i32(cols))
}

// ---- embeddings ----

// EmbeddingGather copies row ids[i] of table to row i of dst for every id in
// the int32 buffer ids (tensor.EmbeddingGather). Ids are not range-checked
// on the device: the caller validates them on the host.
func (e *Engine) EmbeddingGather(dst, table, ids Buffer, dim int) error {
	n := ids.Len()
	need("EmbeddingGather", "dst", dst, n*dim)
	if n == 0 || dim == 0 {
		return nil
	}
	g, bl := e.grid1D(n * dim)
	return e.launch("embedding_gather", g, bl, dst, table, ids, i32(n), i32(dim))
}

// EmbeddingScatterAdd adds row i of dy into row ids[i] of dtable
// (tensor.EmbeddingScatterAdd), with atomics for repeated ids.
func (e *Engine) EmbeddingScatterAdd(dtable, dy, ids Buffer, dim int) error {
	n := ids.Len()
	need("EmbeddingScatterAdd", "dy", dy, n*dim)
	if n == 0 || dim == 0 {
		return nil
	}
	g, bl := e.grid1D(n * dim)
	return e.launch("embedding_scatter_add", g, bl, dtable, dy, ids, i32(n), i32(dim))
}

// ---- optimiser ----

// AdamW applies one AdamW step (step counts from 1) to parameters p with
// gradients g and moment buffers m, v, all of p.Len() elements.
func (e *Engine) AdamW(p, g, m, v Buffer, step int, c AdamWConfig) error {
	n := p.Len()
	need("AdamW", "g", g, n)
	need("AdamW", "m", m, n)
	need("AdamW", "v", v, n)
	if step < 1 {
		panic(fmt.Sprintf("cuda: AdamW step %d (counts from 1)", step))
	}
	bc1 := float32(1 - math.Pow(float64(c.Beta1), float64(step)))
	bc2 := float32(1 - math.Pow(float64(c.Beta2), float64(step)))
	gr, bl := e.grid1D(n)
	return e.launch("adamw", gr, bl, p, g, m, v, int64(n), c.LR, c.Beta1, c.Beta2, c.Eps, c.WeightDecay, bc1, bc2)
}

// ---- attention ----

// Attention computes O = softmax(scale·Q·Kᵀ (+ causal mask))·V for bh
// independent heads, each a contiguous T×D matrix in q, k, v and o
// ([bh][T][D]), D ≤ 128, with the fused flash-attention kernel. lse (bh·T)
// receives each row's log-sum-exp for AttentionBackward.
func (e *Engine) Attention(o, lse, q, k, v Buffer, bh, T, D int, scale float32, causal bool) error {
	name, _ := AttentionKernels(D)
	for _, c := range []struct {
		n string
		b Buffer
	}{{"o", o}, {"q", q}, {"k", k}, {"v", v}} {
		need("Attention", c.n, c.b, bh*T*D)
	}
	need("Attention", "lse", lse, bh*T)
	if bh > maxGridYZ {
		panic(fmt.Sprintf("cuda: Attention: %d batch·heads > %d", bh, maxGridYZ))
	}
	if bh == 0 || T == 0 {
		return nil
	}
	return e.launch(name, [3]int{(T + 31) / 32, bh, 1}, [3]int{128, 1, 1}, o, lse, q, k, v, i32(T), i32(D), scale, b2i(causal))
}

// AttentionBackward computes dq, dk, dv from the forward's inputs, its output
// o, the saved lse and the output gradient do. It allocates (and frees) a
// bh·T scratch buffer.
func (e *Engine) AttentionBackward(dq, dk, dv, q, k, v, o, do, lse Buffer, bh, T, D int, scale float32, causal bool) error {
	_, name := AttentionKernels(D)
	for _, c := range []struct {
		n string
		b Buffer
	}{{"dq", dq}, {"dk", dk}, {"dv", dv}, {"q", q}, {"k", k}, {"v", v}, {"o", o}, {"do", do}} {
		need("AttentionBackward", c.n, c.b, bh*T*D)
	}
	need("AttentionBackward", "lse", lse, bh*T)
	if bh > maxGridYZ {
		panic(fmt.Sprintf("cuda: AttentionBackward: %d batch·heads > %d", bh, maxGridYZ))
	}
	if bh == 0 || T == 0 {
		return nil
	}
	rows := bh * T
	delta, err := e.NewBuffer(rows)
	if err != nil {
		return err
	}
	defer e.FreeBuffer(delta)
	if err := e.launch("attn_bwd_dot", [3]int{(rows*32 + 255) / 256, 1, 1}, [3]int{256, 1, 1}, delta, do, o, int64(rows), i32(D)); err != nil {
		return err
	}
	e.Memclr(dq.Slice(0, rows*D))
	tile := AttentionBackwardTile(D)
	return e.launch(name, [3]int{(T + tile - 1) / tile, bh, 1}, [3]int{128, 1, 1},
		dq, dk, dv, q, k, v, do, lse, delta, i32(T), i32(D), scale, b2i(causal))
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// StridedCopy writes out (contiguous, shape up to 4 dims) from a read
// through per-dimension element strides, adding beta·out when beta ≠ 0: a
// general permute. For example, with x a [B][T][H][D] buffer,
//
//	e.StridedCopy(out, x, []int{B, H, T, D}, []int{T*H*D, D, H*D, 1}, 0)
//
// writes the per-head layout [B][H][T][D] that Attention takes.
func (e *Engine) StridedCopy(out, a Buffer, shape, strides []int, beta float32) error {
	if len(shape) > 4 || len(strides) != len(shape) {
		panic(fmt.Sprintf("cuda: StridedCopy: shape %v with strides %v (up to 4 dims, one stride each)", shape, strides))
	}
	sh, st := [4]int{1, 1, 1, 1}, [4]int{}
	off := 4 - len(shape)
	total, amax := 1, 0
	for i, d := range shape {
		sh[off+i], st[off+i] = d, strides[i]
		total *= d
		if d > 0 {
			amax += (d - 1) * strides[i]
		}
	}
	if total == 0 {
		return nil
	}
	need("StridedCopy", "out", out, total)
	need("StridedCopy", "a", a, amax+1)
	g, bl := e.grid1D(total)
	return e.launch("strided_copy", g, bl, out, a, i32(sh[0]), i32(sh[1]), i32(sh[2]), i32(sh[3]),
		int64(st[0]), int64(st[1]), int64(st[2]), int64(st[3]), beta)
}

// AttentionDecode is one generation step with a KV cache: for each of bh
// heads the single query q[h] (D ≤ 128) attends to the first L cached rows of
// kcache[h] and vcache[h] ([bh][maxT][D]); o[h] gets the result. New keys and
// values are appended to the caches with CopyBuffer or StridedCopy before the
// call. It equals the last row of a causal Attention over the same L rows.
func (e *Engine) AttentionDecode(o, q, kcache, vcache Buffer, bh, L, maxT, D int, scale float32) error {
	if D < 1 || D > 128 || L < 0 || L > maxT {
		panic(fmt.Sprintf("cuda: AttentionDecode: D=%d (1..128), L=%d, maxT=%d", D, L, maxT))
	}
	need("AttentionDecode", "o", o, bh*D)
	need("AttentionDecode", "q", q, bh*D)
	need("AttentionDecode", "kcache", kcache, bh*maxT*D)
	need("AttentionDecode", "vcache", vcache, bh*maxT*D)
	if bh == 0 {
		return nil
	}
	return e.launch("attn_decode", [3]int{bh, 1, 1}, [3]int{128, 1, 1}, o, q, kcache, vcache, i32(L), i32(maxT), i32(D), scale)
}
