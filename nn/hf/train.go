package hf

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/tensor"
)

// Seq is one sequence to score: the log-probabilities of Target's tokens,
// each given Prompt and the Target tokens before it.
type Seq struct {
	Prompt, Target []int
}

// layout lays seqs end to end as one pass: the input tokens (each
// sequence's prompt and all but its last target token), their spans, and
// for every target token the row whose logits predict it.
func (m *Model) layout(seqs []Seq) (toks []int, spans []span, rows, targets []int, err error) {
	c := m.Config
	for i, s := range seqs {
		if len(s.Prompt) == 0 {
			return nil, nil, nil, nil, fmt.Errorf("hf: sequence %d has an empty prompt", i)
		}
		n := len(s.Prompt) + len(s.Target) - 1
		if len(s.Target) == 0 {
			n = len(s.Prompt)
		}
		if n > c.MaxPos {
			return nil, nil, nil, nil, fmt.Errorf("hf: sequence %d has %d tokens, max_position_embeddings is %d", i, n, c.MaxPos)
		}
		off := len(toks)
		toks = append(toks, s.Prompt...)
		toks = append(toks, s.Target[:max(len(s.Target)-1, 0)]...)
		for j, t := range s.Target {
			rows = append(rows, off+len(s.Prompt)-1+j)
			targets = append(targets, t)
		}
		spans = append(spans, span{off: off, n: n})
	}
	for i, t := range toks {
		if t < 0 || t >= c.Vocab {
			return nil, nil, nil, nil, fmt.Errorf("hf: token %d at input position %d is outside the vocabulary [0,%d)", t, i, c.Vocab)
		}
	}
	for i, t := range targets {
		if t < 0 || t >= c.Vocab {
			return nil, nil, nil, nil, fmt.Errorf("hf: target token %d (%d-th scored) is outside the vocabulary [0,%d)", t, i, c.Vocab)
		}
	}
	return toks, spans, rows, targets, nil
}

// headChunk is the number of rows whose vocabulary logits are computed
// at once (a 151936-token vocabulary makes a row 600 KB, so 256 rows take
// 155 MB). Each chunk widens and packs the whole vocabulary matrix once, so
// fewer, larger chunks cost less.
const headChunk = 256

// scoreRows computes log p(targets[i]) from the logits of hf's rows
// rows[i] under adapter ad's output projection. With keep it also returns
// the log-softmax of every row, for headBackward.
func (m *Model) scoreRows(ad *LoRA, hf []float32, rows, targets []int, keep bool) (logp []float32, lsm [][]float32) {
	c := m.Config
	H, V := c.Hidden, c.Vocab
	head := m.headMatrix(ad)
	logp = make([]float32, len(rows))
	n0 := min(headChunk, len(rows))
	x := make([]float32, n0*H)
	var buf []float32
	if !keep {
		buf = make([]float32, n0*V)
	}
	for lo := 0; lo < len(rows); lo += headChunk {
		n := min(headChunk, len(rows)-lo)
		for i := 0; i < n; i++ {
			r := rows[lo+i]
			copy(x[i*H:(i+1)*H], hf[r*H:(r+1)*H])
		}
		if keep {
			buf = make([]float32, n*V)
		}
		head.MulT(buf, x, n, 0)
		tensor.LogSoftmaxRows(buf[:n*V], buf[:n*V], n, V)
		for i := 0; i < n; i++ {
			logp[lo+i] = buf[i*V+targets[lo+i]]
		}
		if keep {
			lsm = append(lsm, buf)
		}
	}
	return logp, lsm
}

// headBackward turns dlogp, the loss gradient with respect to each scored
// row's target log-probability, into the gradient with respect to hf:
// dlogits = g·(onehot − softmax), dhf[row] += dlogits·W; with ad's
// trainable output projection also dW += dlogitsᵀ·hf[rows].
func (m *Model) headBackward(ad *LoRA, hf, dhf []float32, lsm [][]float32, rows, targets []int, dlogp []float32) {
	c := m.Config
	H, V := c.Hidden, c.Vocab
	head, hp := m.headMatrix(ad), ad.headParam()
	dx := make([]float32, min(headChunk, len(rows))*H)
	var x []float32
	if hp != nil {
		x = make([]float32, len(dx))
	}
	for ci, lo := 0, 0; lo < len(rows); ci, lo = ci+1, lo+headChunk {
		n := min(headChunk, len(rows)-lo)
		d := lsm[ci]
		for i := 0; i < n; i++ {
			g := dlogp[lo+i]
			row := d[i*V : (i+1)*V]
			tensor.VecExp(row, row) // the softmax, from the log-softmax
			tensor.VecMulScalar(row, row, -g)
			row[targets[lo+i]] += g
		}
		head.Mul(dx[:n*H], d, n, 0)
		if hp != nil {
			for i := 0; i < n; i++ {
				r := rows[lo+i]
				copy(x[i*H:(i+1)*H], hf[r*H:(r+1)*H])
			}
			tensor.Gemm(true, false, V, H, n, 1, d, V, x, H, 1, hp.Grad, H)
		}
		for i := 0; i < n; i++ {
			r := rows[lo+i]
			tensor.VecAdd(dhf[r*H:(r+1)*H], dhf[r*H:(r+1)*H], dx[i*H:(i+1)*H])
		}
	}
}

// TokenLogProbs returns, per sequence, the log-probability of each target
// token under the model with adapter ad (nil: the base alone).
func (m *Model) TokenLogProbs(ad *LoRA, seqs []Seq) ([][]float32, error) {
	toks, spans, rows, targets, err := m.layout(seqs)
	if err != nil {
		return nil, err
	}
	hf := m.forward(toks, withAdapter(spans, ad), nil, nil)
	logp, _ := m.scoreRows(ad, hf, rows, targets, false)
	return splitSeqs(logp, seqs), nil
}

// withAdapter sets every span's adapter to ad.
func withAdapter(spans []span, ad *LoRA) []span {
	for i := range spans {
		spans[i].ad = ad
	}
	return spans
}

func splitSeqs(flat []float32, seqs []Seq) [][]float32 {
	out := make([][]float32, len(seqs))
	at := 0
	for i, s := range seqs {
		out[i] = flat[at : at+len(s.Target) : at+len(s.Target)]
		at += len(s.Target)
	}
	return out
}

// ForwardBackward evaluates the target log-probabilities, calls loss with
// them, and adds the gradient of the returned loss with respect to the
// adapter's matrices to their Grad. The base receives no gradient and is
// never written. A NaN or infinite loss or loss gradient returns an error
// wrapping nn.ErrNonFinite and adds nothing.
func (m *Model) ForwardBackward(ad *LoRA, seqs []Seq, loss func(logp [][]float32) (float64, [][]float32)) (float64, error) {
	if ad == nil {
		return 0, fmt.Errorf("hf: ForwardBackward needs an adapter: the base model is frozen")
	}
	toks, spans, rows, targets, err := m.layout(seqs)
	if err != nil {
		return 0, err
	}
	var save acts
	hf := m.forward(toks, withAdapter(spans, ad), &save, nil)
	logp, lsm := m.scoreRows(ad, hf, rows, targets, true)
	l, grad := loss(splitSeqs(logp, seqs))
	if math.IsNaN(l) || math.IsInf(l, 0) {
		return l, fmt.Errorf("hf: loss is %v: %w", l, nn.ErrNonFinite)
	}
	if len(grad) != len(seqs) {
		return l, fmt.Errorf("hf: loss returned gradients for %d sequences, want %d", len(grad), len(seqs))
	}
	dlogp := make([]float32, 0, len(rows))
	for i, g := range grad {
		if len(g) != len(seqs[i].Target) {
			return l, fmt.Errorf("hf: loss returned %d gradients for sequence %d of %d targets", len(g), i, len(seqs[i].Target))
		}
		for _, v := range g {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return l, fmt.Errorf("hf: loss gradient is %v: %w", v, nn.ErrNonFinite)
			}
		}
		dlogp = append(dlogp, g...)
	}
	dhf := make([]float32, len(hf))
	m.headBackward(ad, hf, dhf, lsm, rows, targets, dlogp)
	m.backward(ad, toks, spans, &save, dhf)
	return l, nil
}

// CrossEntropy is the mean negative log-likelihood of every target token,
// for supervised fine-tuning with ForwardBackward.
func CrossEntropy(logp [][]float32) (float64, [][]float32) {
	var n int
	for _, s := range logp {
		n += len(s)
	}
	grad := make([][]float32, len(logp))
	if n == 0 {
		return 0, grad
	}
	var sum float64
	for i, s := range logp {
		grad[i] = make([]float32, len(s))
		for j, v := range s {
			sum -= float64(v)
			grad[i][j] = -1 / float32(n)
		}
	}
	return sum / float64(n), grad
}
