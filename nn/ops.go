package nn

import (
	"fmt"
	"math"

	kern "github.com/troupe-ml/troupe/tensor"
	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

// LinearOp returns x·w + b as one fused op. x has any number of leading
// dimensions, which are flattened to rows; w is in×out; b (length out) may be
// nil. The forward is one Gemm; the backward is two Gemms and a column sum.
func LinearOp(x, w, b *G.Node) *G.Node {
	in := lastDim(x)
	ws := w.Shape()
	if ws.Dims() != 2 || ws[0] != in {
		panic(fmt.Sprintf("nn: LinearOp: x %v does not match weight %v", x.Shape(), ws))
	}
	out := ws[1]
	if b != nil && (b.Shape().TotalSize() != out) {
		panic(fmt.Sprintf("nn: LinearOp: bias %v does not match weight %v", b.Shape(), ws))
	}
	rows := rowsOf(x)
	os := x.Shape().Clone()
	if os.Dims() == 0 {
		os = ts.Shape{out}
	} else {
		os[os.Dims()-1] = out
	}
	k := &kernel{name: "Linear", diff: []bool{true, true}}
	inputs := []*G.Node{x, w}
	if b != nil {
		k.diff = append(k.diff, true)
		inputs = append(inputs, b)
	}
	k.fwd = func(v [][]float32, y []float32) error {
		var beta float32
		if b != nil {
			for r := 0; r < rows; r++ {
				copy(y[r*out:(r+1)*out], v[2])
			}
			beta = 1
		}
		kern.Gemm(false, false, rows, out, in, 1, v[0], in, v[1], out, beta, y, out)
		return nil
	}
	k.each = []func(v [][]float32, _, dy, g []float32){
		func(v [][]float32, _, dy, g []float32) {
			kern.Gemm(false, true, rows, in, out, 1, dy, out, v[1], out, 0, g, in)
		},
		func(v [][]float32, _, dy, g []float32) {
			kern.Gemm(true, false, in, out, rows, 1, v[0], in, dy, out, 0, g, out)
		},
		func(v [][]float32, _, dy, g []float32) {
			copy(g, dy[:out])
			for r := 1; r < rows; r++ {
				kern.Axpy(1, dy[r*out:(r+1)*out], g)
			}
		},
	}
	k.full = true
	k.dev = &devKernel{
		fwd: func(_ kern.Backend, v []*ts.Dense, y *ts.Dense) error {
			y2 := rows2(y, rows, out)
			kern.MatMul(y2, rows2(v[0], rows, in), rows2(v[1], in, out))
			if b != nil {
				kern.Add(y2, y2, denseView(v[2], 0, ts.Shape{out}))
			}
			return nil
		},
		bwd: func(_ kern.Backend, v []*ts.Dense, _, dy *ts.Dense, g []*ts.Dense) error {
			dy2 := rows2(dy, rows, out)
			if g[0] != nil {
				kern.MatMulTrans(rows2(g[0], rows, in), dy2, rows2(v[1], in, out), false, true)
			}
			if g[1] != nil {
				kern.MatMulTrans(rows2(g[1], in, out), rows2(v[0], rows, in), dy2, true, false)
			}
			if len(g) > 2 && g[2] != nil {
				kern.Sum(denseView(g[2], 0, ts.Shape{out}), dy2, 0)
			}
			return nil
		},
	}
	return applyFused(k, os, inputs...)
}

// EmbeddingOp looks up rows of table (vocab×dim) for the token ids held, as
// float32 values, in ids (any shape). The result has shape ids.Shape()+[dim].
// Only table is differentiated; an id outside [0, vocab) is a run-time error.
func EmbeddingOp(table, ids *G.Node) *G.Node {
	tsh := table.Shape()
	if tsh.Dims() != 2 {
		panic(fmt.Sprintf("nn: EmbeddingOp: table must be a matrix, got %v", tsh))
	}
	vocab, dim := tsh[0], tsh[1]
	n := ids.Shape().TotalSize()
	os := append(ids.Shape().Clone(), dim)
	if ids.Shape().IsScalar() {
		os = ts.Shape{dim}
	}
	idx := make([]int, n)
	toIdx := func(f []float32) error {
		for i, v := range f {
			id := int(v)
			if id < 0 || id >= vocab || float32(id) != v {
				return fmt.Errorf("token id %v at %d outside vocabulary [0,%d)", v, i, vocab)
			}
			idx[i] = id
		}
		return nil
	}
	k := &kernel{name: "Embedding", diff: []bool{true, false}}
	k.fwd = func(v [][]float32, y []float32) error {
		if err := toIdx(v[1]); err != nil {
			return err
		}
		kern.EmbeddingGather(y, v[0], idx, dim)
		return nil
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		_ = toIdx(v[1])
		kern.EmbeddingScatterAdd(g[0], dy, idx, dim)
	}
	devIdx := func(t *ts.Dense) error {
		h, err := hostFloats(t)
		if err != nil {
			return err
		}
		return toIdx(h)
	}
	k.dev = &devKernel{
		fwd: func(_ kern.Backend, v []*ts.Dense, y *ts.Dense) error {
			if err := devIdx(v[1]); err != nil {
				return err
			}
			kern.Embedding(rows2(y, n, dim), v[0], idx)
			return nil
		},
		bwd: func(_ kern.Backend, v []*ts.Dense, _, dy *ts.Dense, g []*ts.Dense) error {
			if err := devIdx(v[1]); err != nil {
				return err
			}
			kern.EmbeddingBackward(g[0], rows2(dy, n, dim), idx)
			return nil
		},
	}
	return applyFused(k, os, table, ids)
}

// LayerNormOp normalises the last dimension of x (Ba, Kiros & Hinton 2016)
// and applies the gain gamma and shift beta (both of that length).
func LayerNormOp(x, gamma, beta *G.Node, eps float32) *G.Node {
	cols, rows := lastDim(x), rowsOf(x)
	if gamma.Shape().TotalSize() != cols || beta.Shape().TotalSize() != cols {
		panic(fmt.Sprintf("nn: LayerNormOp: x %v, gamma %v, beta %v", x.Shape(), gamma.Shape(), beta.Shape()))
	}
	mean, rstd := make([]float32, rows), make([]float32, rows)
	k := &kernel{name: "LayerNorm", diff: []bool{true, true, true}}
	k.fwd = func(v [][]float32, y []float32) error {
		kern.LayerNormRows(y, mean, rstd, v[0], v[1], v[2], rows, cols, eps)
		return nil
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		zero(g[1])
		zero(g[2])
		kern.LayerNormBackwardRows(g[0], g[1], g[2], dy, v[0], mean, rstd, v[1], rows, cols)
	}
	k.full = true
	var dmean, drstd *ts.Dense // the statistics on the device
	vec := func(t *ts.Dense) *ts.Dense { return denseView(t, 0, ts.Shape{cols}) }
	k.dev = &devKernel{
		fwd: func(b kern.Backend, v []*ts.Dense, y *ts.Dense) error {
			m, r := onEngine(&dmean, v[0], ts.Shape{rows}), onEngine(&drstd, v[0], ts.Shape{rows})
			b.LayerNorm(rows2(y, rows, cols), m, r, rows2(v[0], rows, cols), vec(v[1]), vec(v[2]), eps)
			return nil
		},
		bwd: func(b kern.Backend, v []*ts.Dense, _, dy *ts.Dense, g []*ts.Dense) error {
			b.Fill(g[1], 0)
			b.Fill(g[2], 0)
			b.LayerNormBackward(rows2(g[0], rows, cols), vec(g[1]), vec(g[2]), rows2(dy, rows, cols), rows2(v[0], rows, cols),
				dmean, drstd, vec(v[1]))
			return nil
		},
	}
	return applyFused(k, x.Shape(), x, gamma, beta)
}

// GELUOp applies the tanh approximation of GELU (Hendrycks & Gimpel 2016),
// gelu(x) = ½x(1 + tanh(√(2/π)(x + 0.044715x³))), with tensor.GELU forward
// and tensor.GELUBackward backward.
func GELUOp(x *G.Node) *G.Node {
	k := &kernel{name: "GELU", diff: []bool{true}, full: true}
	k.fwd = func(v [][]float32, y []float32) error { kern.GELU(y, v[0]); return nil }
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) { kern.GELUBackward(g[0], dy, v[0]) }
	k.dev = &devKernel{
		fwd: func(_ kern.Backend, v []*ts.Dense, y *ts.Dense) error { kern.Apply(kern.OpGELU, y, v[0]); return nil },
		bwd: func(_ kern.Backend, v []*ts.Dense, _, dy *ts.Dense, g []*ts.Dense) error {
			kern.ApplyBackward(kern.OpGELU, g[0], dy, v[0], nil)
			return nil
		},
	}
	return applyFused(k, x.Shape(), x)
}

// LogSoftmaxGatherOp returns, for each row n of logits (rows×vocab, leading
// dimensions flattened), log softmax(logits[n])[targets[n]]: the
// log-probability of the target token. targets holds float32 ids with one
// entry per row; a negative target marks padding and yields 0 (and no
// gradient). The result has the shape of targets.
func LogSoftmaxGatherOp(logits, targets *G.Node) *G.Node {
	vocab, rows := lastDim(logits), rowsOf(logits)
	if targets.Shape().TotalSize() != rows {
		panic(fmt.Sprintf("nn: LogSoftmaxGatherOp: logits %v but targets %v", logits.Shape(), targets.Shape()))
	}
	ls := make([]float32, rows*vocab)
	k := &kernel{name: "LogSoftmaxGather", diff: []bool{true, false}}
	k.fwd = func(v [][]float32, y []float32) error {
		kern.LogSoftmaxRows(ls, v[0], rows, vocab)
		return gatherRows(y, ls, v[1], vocab)
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		kern.SoftmaxRows(g[0], v[0], rows, vocab)
		softmaxGatherGrad(g[0], v[1], dy, nil, vocab)
	}
	k.full = true
	k.dev = gatherDevKernel(rows, vocab, false)
	return applyFused(k, targets.Shape(), logits, targets)
}

// devGather is the device state of LogSoftmaxGatherOp and CrossEntropyOp:
// the targets as flat indices into the rows×vocab log-softmax (row n's
// target at n·vocab+t, padding rows pointing at their first element), a
// 0/1 mask of the non-padding rows, and scratch, all allocated once on the
// logits' engine. The gather and the one-hot part of the gradient are
// EmbeddingGather and EmbeddingScatterAdd over the log-softmax viewed as a
// (rows·vocab)×1 table.
type devGather struct {
	rows, vocab int
	flat        []int
	maskH       []float32
	count       int
	ls, mask, d *ts.Dense
}

// targets reads the targets (host or device) and uploads the mask.
func (s *devGather) targets(t, ref *ts.Dense) error {
	tg, err := hostFloats(t)
	if err != nil {
		return err
	}
	s.count = 0
	for n, x := range tg {
		s.flat[n], s.maskH[n] = n*s.vocab, 0
		if x < 0 {
			continue
		}
		if int(x) >= s.vocab {
			return fmt.Errorf("target %v at row %d outside vocabulary [0,%d)", x, n, s.vocab)
		}
		s.flat[n], s.maskH[n] = n*s.vocab+int(x), 1
		s.count++
	}
	return upload(onEngine(&s.mask, ref, ts.Shape{s.rows}), s.maskH)
}

// gather writes the masked target log-probabilities of logits into y
// (rows elements).
func (s *devGather) gather(b kern.Backend, logits, y *ts.Dense) {
	ls := onEngine(&s.ls, logits, ts.Shape{s.rows, s.vocab})
	b.Softmax(ls, rows2(logits, s.rows, s.vocab), 1, true)
	b.EmbeddingGather(denseView(y, 0, ts.Shape{s.rows, 1}), denseView(ls, 0, ts.Shape{s.rows * s.vocab, 1}), s.flat)
	kern.Mul(y, y, s.mask)
}

// grad writes into g (rows×vocab) the gradient of Σ_n d_n·logp_n[t_n]
// where d (rows elements, zero on padding rows) is on the device:
// d_n·(onehot(t_n) − softmax_n).
func (s *devGather) grad(b kern.Backend, logits, g, d *ts.Dense) {
	g2 := rows2(g, s.rows, s.vocab)
	b.Softmax(g2, rows2(logits, s.rows, s.vocab), 1, false)
	nd := onEngine(&s.d, logits, ts.Shape{s.rows, 1})
	kern.MulScalar(nd, denseView(d, 0, ts.Shape{s.rows, 1}), -1)
	kern.Mul(g2, g2, nd)
	b.EmbeddingScatterAdd(denseView(g, 0, ts.Shape{s.rows * s.vocab, 1}), denseView(d, 0, ts.Shape{s.rows, 1}), s.flat)
}

// gatherDevKernel is the devKernel of LogSoftmaxGatherOp (mean false) and
// CrossEntropyOp (mean true: minus the mean over non-padding rows).
func gatherDevKernel(rows, vocab int, mean bool) *devKernel {
	s := &devGather{rows: rows, vocab: vocab, flat: make([]int, rows), maskH: make([]float32, rows)}
	var y, d *ts.Dense // CrossEntropyOp: the gathered rows; the row weights
	return &devKernel{
		fwd: func(b kern.Backend, v []*ts.Dense, out *ts.Dense) error {
			if err := s.targets(v[1], v[0]); err != nil {
				return err
			}
			if !mean {
				s.gather(b, v[0], denseView(out, 0, ts.Shape{rows}))
				return nil
			}
			s.gather(b, v[0], onEngine(&y, v[0], ts.Shape{rows}))
			kern.Sum(out, denseView(y, 0, ts.Shape{1, rows}), 1)
			kern.MulScalar(out, out, -1/float32(max(s.count, 1)))
			return nil
		},
		bwd: func(b kern.Backend, v []*ts.Dense, _, dy *ts.Dense, g []*ts.Dense) error {
			if err := s.targets(v[1], v[0]); err != nil {
				return err
			}
			w := onEngine(&d, v[0], ts.Shape{rows})
			if !mean {
				kern.Mul(w, denseView(dy, 0, ts.Shape{rows}), s.mask)
			} else {
				h, err := hostFloats(dy)
				if err != nil {
					return err
				}
				kern.MulScalar(w, s.mask, -h[0]/float32(max(s.count, 1)))
			}
			s.grad(b, v[0], g[0], w)
			return nil
		},
	}
}

// gatherRows sets y[n] = ls[n][targets[n]] for rows of width vocab: 0 where
// the target is negative (padding), an error where it is outside the
// vocabulary.
func gatherRows(y, ls, targets []float32, vocab int) error {
	for n, t := range targets {
		if t < 0 {
			y[n] = 0
			continue
		}
		if int(t) >= vocab {
			return fmt.Errorf("target %v at row %d outside vocabulary [0,%d)", t, n, vocab)
		}
		y[n] = ls[n*vocab+int(t)]
	}
	return nil
}

// softmaxGatherGrad turns g, holding softmax rows, into the gradient of the
// gathered log-probabilities: row n becomes d_n·(onehot(t_n) − softmax_n)
// with d_n = dy[n]·scale[n] (scale nil: 1), and 0 for padding rows.
func softmaxGatherGrad(g, targets, dy, scale []float32, vocab int) {
	for n, t := range targets {
		row := g[n*vocab : (n+1)*vocab]
		if t < 0 {
			zero(row)
			continue
		}
		d := dy[n]
		if scale != nil {
			d *= scale[n]
		}
		for i := range row {
			row[i] *= -d
		}
		row[int(t)] += d
	}
}

// TemperedLogSoftmaxGatherOp is LogSoftmaxGatherOp at a temperature per
// row: log softmax(logits[n]/τ_n)[targets[n]], with invTemps (one value per
// row, shaped like targets) holding 1/τ_n. It scores a token under the
// distribution a sampler draws from at temperature τ (without top-k or
// top-p truncation); a policy gradient of samples drawn at τ < 1 needs these
// log-probabilities, not those at temperature 1, to be the gradient of the
// sampled policy's expected reward. Only logits are differentiated: the
// gradient of row n is (dy_n/τ_n)(onehot(t_n) − softmax(logits[n]/τ_n)).
// Negative targets are padding (0, no gradient).
func TemperedLogSoftmaxGatherOp(logits, targets, invTemps *G.Node) *G.Node {
	vocab, rows := lastDim(logits), rowsOf(logits)
	if targets.Shape().TotalSize() != rows || invTemps.Shape().TotalSize() != rows {
		panic(fmt.Sprintf("nn: TemperedLogSoftmaxGatherOp: logits %v but targets %v and invTemps %v", logits.Shape(), targets.Shape(), invTemps.Shape()))
	}
	scaled := make([]float32, rows*vocab)
	ls := make([]float32, rows*vocab)
	scale := func(x, s []float32) {
		for n := 0; n < rows; n++ {
			k := s[n]
			src, dst := x[n*vocab:(n+1)*vocab], scaled[n*vocab:(n+1)*vocab]
			for i, v := range src {
				dst[i] = v * k
			}
		}
	}
	k := &kernel{name: "TemperedLogSoftmaxGather", diff: []bool{true, false, false}}
	k.fwd = func(v [][]float32, y []float32) error {
		for n, s := range v[2] {
			if !(s > 0) || math.IsInf(float64(s), 0) {
				return fmt.Errorf("inverse temperature %v at row %d is not positive and finite", s, n)
			}
		}
		scale(v[0], v[2])
		kern.LogSoftmaxRows(ls, scaled, rows, vocab)
		return gatherRows(y, ls, v[1], vocab)
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		scale(v[0], v[2])
		kern.SoftmaxRows(g[0], scaled, rows, vocab)
		softmaxGatherGrad(g[0], v[1], dy, v[2], vocab)
	}
	k.full = true
	return applyFused(k, targets.Shape(), logits, targets, invTemps)
}

// CrossEntropyOp returns the mean over non-padding rows of
// −log softmax(logits[n])[targets[n]] as a scalar. Negative targets are
// padding and excluded from the mean.
func CrossEntropyOp(logits, targets *G.Node) *G.Node {
	vocab, rows := lastDim(logits), rowsOf(logits)
	if targets.Shape().TotalSize() != rows {
		panic(fmt.Sprintf("nn: CrossEntropyOp: logits %v but targets %v", logits.Shape(), targets.Shape()))
	}
	ls := make([]float32, rows*vocab)
	count := 0
	k := &kernel{name: "CrossEntropy", diff: []bool{true, false}}
	k.fwd = func(v [][]float32, y []float32) error {
		kern.LogSoftmaxRows(ls, v[0], rows, vocab)
		var s float64
		count = 0
		for n, t := range v[1] {
			if t < 0 {
				continue
			}
			if int(t) >= vocab {
				return fmt.Errorf("target %v at row %d outside vocabulary [0,%d)", t, n, vocab)
			}
			s -= float64(ls[n*vocab+int(t)])
			count++
		}
		if count > 0 {
			s /= float64(count)
		}
		y[0] = float32(s)
		return nil
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		kern.SoftmaxRows(g[0], v[0], rows, vocab)
		d := dy[0]
		if count > 0 {
			d /= float32(count)
		}
		for n, t := range v[1] {
			row := g[0][n*vocab : (n+1)*vocab]
			if t < 0 {
				zero(row)
				continue
			}
			for i := range row {
				row[i] *= d
			}
			row[int(t)] -= d
		}
	}
	k.full = true
	k.dev = gatherDevKernel(rows, vocab, true)
	return applyFused(k, ts.ScalarShape(), logits, targets)
}

// KLDivergenceOp returns the mean over rows of KL(softmax(p) ‖ softmax(q))
// for two logit tensors of the same shape (rows×classes, leading dimensions
// flattened), differentiable with respect to both.
func KLDivergenceOp(p, q *G.Node) *G.Node {
	if !p.Shape().Eq(q.Shape()) {
		panic(fmt.Sprintf("nn: KLDivergenceOp: shapes %v and %v differ", p.Shape(), q.Shape()))
	}
	c, rows := lastDim(p), rowsOf(p)
	lp, lq, pp := make([]float32, rows*c), make([]float32, rows*c), make([]float32, rows*c)
	klRow := make([]float64, rows)
	k := &kernel{name: "KLDivergence", diff: []bool{true, true}}
	k.fwd = func(v [][]float32, y []float32) error {
		kern.LogSoftmaxRows(lp, v[0], rows, c)
		kern.LogSoftmaxRows(lq, v[1], rows, c)
		kern.SoftmaxRows(pp, v[0], rows, c)
		var s float64
		for n := 0; n < rows; n++ {
			var r float64
			for i := n * c; i < (n+1)*c; i++ {
				r += float64(pp[i]) * float64(lp[i]-lq[i])
			}
			klRow[n] = r
			s += r
		}
		y[0] = float32(s / float64(rows))
		return nil
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		d := dy[0] / float32(rows)
		if g[0] != nil {
			for n := 0; n < rows; n++ {
				kl := float32(klRow[n])
				for i := n * c; i < (n+1)*c; i++ {
					g[0][i] = d * pp[i] * (lp[i] - lq[i] - kl)
				}
			}
		}
		if g[1] != nil {
			kern.SoftmaxRows(g[1], v[1], rows, c)
			for i := range g[1] {
				g[1][i] = d * (g[1][i] - pp[i])
			}
		}
	}
	k.full = true
	return applyFused(k, ts.ScalarShape(), p, q)
}

// LossFunc is the callback of ExternalLoss: given the values of a node
// (flattened, row-major), it returns a scalar loss and its gradient with
// respect to each value.
type LossFunc func(vals []float32) (loss float64, grad []float32)

// ExternalLoss returns a scalar node whose value is fn's loss over the
// values of x and whose gradient with respect to x is fn's gradient (times
// the upstream gradient). It lets losses computed in plain Go — the
// policy-gradient objectives of package rl, for instance — drive Gorgonia's
// backward pass. fn is called once per forward run; to change it between
// runs without rebuilding the graph pass a *LossFunc and reassign it. The
// vals slice fn receives is reused by later runs: copy it to keep it.
func ExternalLoss(x *G.Node, fn *LossFunc) *G.Node {
	n := x.Shape().TotalSize()
	vals := make([]float32, n)
	grad := make([]float32, n)
	k := &kernel{name: "ExternalLoss", diff: []bool{true}}
	k.fwd = func(v [][]float32, y []float32) error {
		copy(vals, v[0])
		if fn == nil || *fn == nil {
			return fmt.Errorf("no loss function set")
		}
		loss, g := (*fn)(vals)
		if len(g) != n {
			return fmt.Errorf("loss function returned %d gradients for %d values", len(g), n)
		}
		copy(grad, g)
		y[0] = float32(loss)
		return nil
	}
	k.bwd = func(_ [][]float32, _, dy []float32, g [][]float32) {
		for i, v := range grad {
			g[0][i] = v * dy[0]
		}
	}
	// On a device the values come to the host for fn, and the loss and the
	// gradient go back (a machine with a device engine marks every tensor it
	// holds as device memory, so the loss lives there too).
	scaled := make([]float32, n)
	loss := make([]float32, 1)
	k.dev = &devKernel{
		fwd: func(_ kern.Backend, v []*ts.Dense, y *ts.Dense) error {
			h, err := hostFloats(v[0])
			if err != nil {
				return err
			}
			if err := k.fwd([][]float32{h}, loss); err != nil {
				return err
			}
			return upload(y, loss)
		},
		bwd: func(_ kern.Backend, _ []*ts.Dense, _, dy *ts.Dense, g []*ts.Dense) error {
			h, err := hostFloats(dy)
			if err != nil {
				return err
			}
			for i, v := range grad {
				scaled[i] = v * h[0]
			}
			return upload(g[0], scaled)
		},
	}
	return applyFused(k, ts.ScalarShape(), x)
}

// MeanPoolOp averages x (B×T×D) over its middle axis, giving B×D.
func MeanPoolOp(x *G.Node) *G.Node {
	s := x.Shape()
	if s.Dims() != 3 {
		panic(fmt.Sprintf("nn: MeanPoolOp: want B×T×D, got %v", s))
	}
	b, t, d := s[0], s[1], s[2]
	k := &kernel{name: "MeanPool", diff: []bool{true}}
	inv := 1 / float32(t)
	k.fwd = func(v [][]float32, y []float32) error {
		zero(y)
		for i := 0; i < b; i++ {
			for j := 0; j < t; j++ {
				kern.Axpy(inv, v[0][(i*t+j)*d:(i*t+j+1)*d], y[i*d:(i+1)*d])
			}
		}
		return nil
	}
	k.bwd = func(_ [][]float32, _, dy []float32, g [][]float32) {
		for i := 0; i < b; i++ {
			for j := 0; j < t; j++ {
				kern.Axpy(inv, dy[i*d:(i+1)*d], g[0][(i*t+j)*d:(i*t+j+1)*d])
			}
		}
	}
	return applyFused(k, ts.Shape{b, d}, x)
}

// FeatureTokensOp turns a batch of F scalar features x (B×F) into B×F×D
// tokens: token f of row b is x[b,f]·w[f] + bias[f] (the feature tokenizer of
// Gorishniy et al. 2021, "Revisiting Deep Learning Models for Tabular Data").
func FeatureTokensOp(x, w, bias *G.Node) *G.Node {
	xs, wsh := x.Shape(), w.Shape()
	if xs.Dims() != 2 || wsh.Dims() != 2 || wsh[0] != xs[1] || !bias.Shape().Eq(wsh) {
		panic(fmt.Sprintf("nn: FeatureTokensOp: x %v, w %v, bias %v", xs, wsh, bias.Shape()))
	}
	b, f, d := xs[0], xs[1], wsh[1]
	k := &kernel{name: "FeatureTokens", diff: []bool{true, true, true}}
	k.fwd = func(v [][]float32, y []float32) error {
		for i := 0; i < b; i++ {
			copy(y[i*f*d:(i+1)*f*d], v[2])
			for j := 0; j < f; j++ {
				kern.Axpy(v[0][i*f+j], v[1][j*d:(j+1)*d], y[(i*f+j)*d:(i*f+j+1)*d])
			}
		}
		return nil
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		for i := 0; i < b; i++ {
			for j := 0; j < f; j++ {
				row := dy[(i*f+j)*d : (i*f+j+1)*d]
				var s float32
				for e, dv := range row {
					s += dv * v[1][j*d+e]
				}
				g[0][i*f+j] = s
				kern.Axpy(v[0][i*f+j], row, g[1][j*d:(j+1)*d])
				kern.Axpy(1, row, g[2][j*d:(j+1)*d])
			}
		}
	}
	return applyFused(k, ts.Shape{b, f, d}, x, w, bias)
}

// ColSliceOp returns columns [from, to) of the matrix x (leading dimensions
// flattened to rows).
func ColSliceOp(x *G.Node, from, to int) *G.Node {
	c, rows := lastDim(x), rowsOf(x)
	if from < 0 || to > c || from >= to {
		panic(fmt.Sprintf("nn: ColSliceOp: columns [%d,%d) of %v", from, to, x.Shape()))
	}
	w := to - from
	os := x.Shape().Clone()
	os[os.Dims()-1] = w
	k := &kernel{name: "ColSlice", diff: []bool{true}}
	k.fwd = func(v [][]float32, y []float32) error {
		for r := 0; r < rows; r++ {
			copy(y[r*w:(r+1)*w], v[0][r*c+from:r*c+to])
		}
		return nil
	}
	k.bwd = func(_ [][]float32, _, dy []float32, g [][]float32) {
		for r := 0; r < rows; r++ {
			copy(g[0][r*c+from:r*c+to], dy[r*w:(r+1)*w])
		}
	}
	return applyFused(k, os, x)
}

// TimeSliceOp returns x[:, t, :] of a B×T×C tensor as B×C.
func TimeSliceOp(x *G.Node, t int) *G.Node {
	s := x.Shape()
	if s.Dims() != 3 || t < 0 || t >= s[1] {
		panic(fmt.Sprintf("nn: TimeSliceOp: step %d of %v", t, s))
	}
	b, T, c := s[0], s[1], s[2]
	k := &kernel{name: "TimeSlice", diff: []bool{true}}
	k.fwd = func(v [][]float32, y []float32) error {
		for i := 0; i < b; i++ {
			copy(y[i*c:(i+1)*c], v[0][(i*T+t)*c:(i*T+t+1)*c])
		}
		return nil
	}
	k.bwd = func(_ [][]float32, _, dy []float32, g [][]float32) {
		for i := 0; i < b; i++ {
			copy(g[0][(i*T+t)*c:(i*T+t+1)*c], dy[i*c:(i+1)*c])
		}
	}
	return applyFused(k, ts.Shape{b, c}, x)
}

// TimeStackOp stacks T matrices of shape B×C into a B×T×C tensor.
func TimeStackOp(xs ...*G.Node) *G.Node {
	s := xs[0].Shape()
	if s.Dims() != 2 {
		panic(fmt.Sprintf("nn: TimeStackOp: want B×C matrices, got %v", s))
	}
	b, c, T := s[0], s[1], len(xs)
	diff := make([]bool, T)
	for i, x := range xs {
		if !x.Shape().Eq(s) {
			panic(fmt.Sprintf("nn: TimeStackOp: shape %v differs from %v", x.Shape(), s))
		}
		diff[i] = true
	}
	k := &kernel{name: "TimeStack", diff: diff}
	k.fwd = func(v [][]float32, y []float32) error {
		for t := 0; t < T; t++ {
			for i := 0; i < b; i++ {
				copy(y[(i*T+t)*c:(i*T+t+1)*c], v[t][i*c:(i+1)*c])
			}
		}
		return nil
	}
	for t := 0; t < T; t++ {
		k.each = append(k.each, func(_ [][]float32, _, dy, g []float32) {
			for i := 0; i < b; i++ {
				copy(g[i*c:(i+1)*c], dy[(i*T+t)*c:(i*T+t+1)*c])
			}
		})
	}
	return applyFused(k, ts.Shape{b, T, c}, xs...)
}

func sigmoid(x float32) float32 { return kern.Sigmoid32(x) }

func tanh32(x float32) float32 { return kern.Tanh32(x) }

// LSTMCellOp is one step of a long short-term memory cell (Hochreiter &
// Schmidhuber 1997, with the forget gate of Gers et al. 2000). z (B×4H) holds
// the gate pre-activations x·Wx + h·Wh + b in the order input, forget,
// candidate, output; cPrev and hPrev are B×H. mask (length B, 1 = step is
// real, 0 = padding) may be nil; where it is 0 the state is carried over
// unchanged. The result is B×2H: the new h in columns [0,H) and the new c in
// [H,2H) (cut them apart with ColSliceOp).
func LSTMCellOp(z, cPrev, hPrev, mask *G.Node) *G.Node {
	zs := z.Shape()
	if zs.Dims() != 2 || zs[1]%4 != 0 {
		panic(fmt.Sprintf("nn: LSTMCellOp: z must be B×4H, got %v", zs))
	}
	b, h := zs[0], zs[1]/4
	if !cPrev.Shape().Eq(ts.Shape{b, h}) || !hPrev.Shape().Eq(ts.Shape{b, h}) {
		panic(fmt.Sprintf("nn: LSTMCellOp: z %v, c %v, h %v", zs, cPrev.Shape(), hPrev.Shape()))
	}
	inputs := []*G.Node{z, cPrev, hPrev}
	diff := []bool{true, true, true}
	if mask != nil {
		if mask.Shape().TotalSize() != b {
			panic(fmt.Sprintf("nn: LSTMCellOp: mask %v for batch %d", mask.Shape(), b))
		}
		inputs = append(inputs, mask)
		diff = append(diff, false)
	}
	gates := make([]float32, b*4*h) // activated gates i, f, g, o
	tc := make([]float32, b*h)      // tanh(c)
	k := &kernel{name: "LSTMCell", diff: diff}
	k.fwd = func(v [][]float32, y []float32) error {
		for r := 0; r < b; r++ {
			m := float32(1)
			if mask != nil {
				m = v[3][r]
			}
			zr, gr := v[0][r*4*h:(r+1)*4*h], gates[r*4*h:(r+1)*4*h]
			for j := 0; j < h; j++ {
				i, f, g, o := sigmoid(zr[j]), sigmoid(zr[h+j]), tanh32(zr[2*h+j]), sigmoid(zr[3*h+j])
				gr[j], gr[h+j], gr[2*h+j], gr[3*h+j] = i, f, g, o
				cp, hp := v[1][r*h+j], v[2][r*h+j]
				c := f*cp + i*g
				t := tanh32(c)
				tc[r*h+j] = t
				y[r*2*h+j] = m*(o*t) + (1-m)*hp
				y[r*2*h+h+j] = m*c + (1-m)*cp
			}
		}
		return nil
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		for r := 0; r < b; r++ {
			m := float32(1)
			if mask != nil {
				m = v[3][r]
			}
			gr := gates[r*4*h : (r+1)*4*h]
			for j := 0; j < h; j++ {
				i, f, gg, o := gr[j], gr[h+j], gr[2*h+j], gr[3*h+j]
				dh, dc := dy[r*2*h+j], dy[r*2*h+h+j]
				t := tc[r*h+j]
				cp := v[1][r*h+j]
				// through the mask
				dhn, dcn := m*dh, m*dc
				dcTot := dcn + dhn*o*(1-t*t)
				do := dhn * t
				di := dcTot * gg
				dg := dcTot * i
				df := dcTot * cp
				zr := g[0][r*4*h : (r+1)*4*h]
				zr[j] = di * i * (1 - i)
				zr[h+j] = df * f * (1 - f)
				zr[2*h+j] = dg * (1 - gg*gg)
				zr[3*h+j] = do * o * (1 - o)
				g[1][r*h+j] = dcTot*f + (1-m)*dc
				g[2][r*h+j] = (1 - m) * dh
			}
		}
	}
	k.full = true
	return applyFused(k, ts.Shape{b, 2 * h}, inputs...)
}

// AddOp returns x + y for tensors of the same shape (a residual connection).
func AddOp(x, y *G.Node) *G.Node {
	if !x.Shape().Eq(y.Shape()) {
		panic(fmt.Sprintf("nn: AddOp: shapes %v and %v differ", x.Shape(), y.Shape()))
	}
	k := &kernel{name: "Add", diff: []bool{true, true}}
	k.fwd = func(v [][]float32, out []float32) error {
		kern.VecAdd(out, v[0], v[1])
		return nil
	}
	cp := func(_ [][]float32, _, dy, g []float32) { copy(g, dy) }
	k.each = []func(v [][]float32, _, dy, g []float32){cp, cp}
	k.full = true
	k.dev = &devKernel{
		fwd: func(_ kern.Backend, v []*ts.Dense, out *ts.Dense) error { kern.Add(out, v[0], v[1]); return nil },
		bwd: func(b kern.Backend, _ []*ts.Dense, _, dy *ts.Dense, g []*ts.Dense) error {
			for _, gi := range g {
				if gi != nil {
					b.Copy(gi, dy)
				}
			}
			return nil
		},
	}
	return applyFused(k, x.Shape(), x, y)
}

// LSTMLayerOp runs one LSTM layer over a whole sequence in a single op:
// proj (B×T×4H) holds the input projections x_t·Wx + b for every step, wh
// (H×4H) is the recurrent weight, mask (B×T, 1 real / 0 padding; may be nil)
// freezes a row's state on padded steps, and the result (B×T×H) is the
// hidden state after every step (starting from zero state). The cell is
// that of LSTMCellOp; the backward pass is backpropagation through time
// inside the op, with one Gemm per step for the recurrent input and one for
// the recurrent weight's gradient.
func LSTMLayerOp(proj, wh, mask *G.Node) *G.Node {
	ps := proj.Shape()
	if ps.Dims() != 3 || ps[2]%4 != 0 {
		panic(fmt.Sprintf("nn: LSTMLayerOp: proj must be B×T×4H, got %v", ps))
	}
	B, T, H := ps[0], ps[1], ps[2]/4
	if !wh.Shape().Eq(ts.Shape{H, 4 * H}) {
		panic(fmt.Sprintf("nn: LSTMLayerOp: proj %v needs wh %v, got %v", ps, ts.Shape{H, 4 * H}, wh.Shape()))
	}
	inputs := []*G.Node{proj, wh}
	diff := []bool{true, true}
	if mask != nil {
		if mask.Shape().TotalSize() != B*T {
			panic(fmt.Sprintf("nn: LSTMLayerOp: mask %v for proj %v", mask.Shape(), ps))
		}
		inputs, diff = append(inputs, mask), append(diff, false)
	}
	H4 := 4 * H
	gates := make([]float32, T*B*H4) // activated i, f, g, o per step
	cs := make([]float32, (T+1)*B*H) // c_{t} at index t+1; c_{-1} = 0
	hs := make([]float32, (T+1)*B*H) // h likewise
	tcs := make([]float32, T*B*H)    // tanh(c_new) per step
	z := make([]float32, B*H4)
	dz := make([]float32, B*H4)
	dh := make([]float32, B*H)
	dc := make([]float32, B*H)
	dhNext := make([]float32, B*H)
	cc, sc := make([]float32, B*H), make([]float32, B*H)
	maskAt := func(v [][]float32, b, t int) float32 {
		if mask == nil {
			return 1
		}
		return v[2][b*T+t]
	}
	k := &kernel{name: "LSTMLayer", diff: diff}
	k.fwd = func(v [][]float32, y []float32) error {
		for t := 0; t < T; t++ {
			hp, cp := hs[t*B*H:(t+1)*B*H], cs[t*B*H:(t+1)*B*H]
			hn, cn := hs[(t+1)*B*H:(t+2)*B*H], cs[(t+1)*B*H:(t+2)*B*H]
			for b := 0; b < B; b++ {
				copy(z[b*H4:(b+1)*H4], v[0][(b*T+t)*H4:(b*T+t+1)*H4])
			}
			kern.Gemm(false, false, B, H4, H, 1, hp, H, v[1], H4, 1, z, H4)
			gt := gates[t*B*H4 : (t+1)*B*H4]
			tc := tcs[t*B*H : (t+1)*B*H]
			// Gates with the vectorised sigmoid: tanh(x) = 2σ(2x) − 1.
			for b := 0; b < B; b++ {
				zg := z[b*H4+2*H : b*H4+3*H]
				for j := range zg {
					zg[j] *= 2
				}
			}
			kern.VecSigmoid(gt, z)
			for b := 0; b < B; b++ {
				gr := gt[b*H4 : (b+1)*H4]
				for j := 2 * H; j < 3*H; j++ {
					gr[j] = 2*gr[j] - 1
				}
				for j := 0; j < H; j++ {
					c := gr[H+j]*cp[b*H+j] + gr[j]*gr[2*H+j]
					cc[b*H+j] = c
					sc[b*H+j] = 2 * c
				}
			}
			kern.VecSigmoid(tc, sc)
			for b := 0; b < B; b++ {
				m := maskAt(v, b, t)
				gr := gt[b*H4 : (b+1)*H4]
				for j := 0; j < H; j++ {
					x := b*H + j
					th := 2*tc[x] - 1
					tc[x] = th
					hn[x] = m*(gr[3*H+j]*th) + (1-m)*hp[x]
					cn[x] = m*cc[x] + (1-m)*cp[x]
					y[(b*T+t)*H+j] = hn[x]
				}
			}
		}
		return nil
	}
	k.bwd = func(v [][]float32, _, dy []float32, g [][]float32) {
		dproj, dwh := g[0], g[1]
		zero(dwh)
		zero(dhNext)
		zero(dc)
		for t := T - 1; t >= 0; t-- {
			hp, cp := hs[t*B*H:(t+1)*B*H], cs[t*B*H:(t+1)*B*H]
			gt := gates[t*B*H4 : (t+1)*B*H4]
			tc := tcs[t*B*H : (t+1)*B*H]
			for b := 0; b < B; b++ {
				m := maskAt(v, b, t)
				gr, dzr := gt[b*H4:(b+1)*H4], dz[b*H4:(b+1)*H4]
				for j := 0; j < H; j++ {
					x := b*H + j
					dhv := dy[(b*T+t)*H+j] + dhNext[x]
					dcv := dc[x]
					i, f, gg, o := gr[j], gr[H+j], gr[2*H+j], gr[3*H+j]
					th := tc[x]
					dhn, dcn := m*dhv, m*dcv
					dcTot := dcn + dhn*o*(1-th*th)
					dzr[j] = dcTot * gg * i * (1 - i)
					dzr[H+j] = dcTot * cp[x] * f * (1 - f)
					dzr[2*H+j] = dcTot * i * (1 - gg*gg)
					dzr[3*H+j] = dhn * th * o * (1 - o)
					dc[x] = dcTot*f + (1-m)*dcv
					dh[x] = (1 - m) * dhv
				}
				copy(dproj[(b*T+t)*H4:(b*T+t+1)*H4], dzr)
			}
			// dh_{t-1} = dz·Whᵀ + carried part; dWh += h_{t-1}ᵀ·dz.
			copy(dhNext, dh)
			kern.Gemm(false, true, B, H, H4, 1, dz, H4, v[1], H4, 1, dhNext, H)
			kern.Gemm(true, false, H, H4, B, 1, hp, H, dz, H4, 1, dwh, H4)
		}
	}
	k.full = true
	return applyFused(k, ts.Shape{B, T, H}, inputs...)
}
