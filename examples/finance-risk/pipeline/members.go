package pipeline

import (
	"fmt"
	"math"
	"math/rand/v2"

	"examples/finance-risk/agents"
	"examples/finance-risk/finrisk"
)

// Members of the ensemble, in fusion order.
const (
	Transformer = iota // credit-risk agent: transformer over feature tokens
	MLP                // MLP over the encoded features
	Market             // market-volatility agent (LSTM), no credit opinion of its own
	Rules              // compliance agent's rule engine (not differentiable)
	NumMembers
)

// MemberNames names the members.
var MemberNames = [NumMembers]string{"credit transformer", "MLP", "market LSTM", "rule engine"}

// Config sizes the members and their training.
type Config struct {
	TFDim, TFHeads, TFLayers, TFEpochs int
	MLPHidden, MLPEpochs               int
	LR                                 float64
	Seed                               uint64
}

// DefaultConfig is the full run's configuration; Quick a small one.
func DefaultConfig() Config {
	return Config{TFDim: 16, TFHeads: 2, TFLayers: 1, TFEpochs: 12, MLPHidden: 16, MLPEpochs: 20, LR: 2e-3, Seed: 1}
}

// QuickConfig trains briefly.
func QuickConfig() Config {
	c := DefaultConfig()
	c.TFEpochs, c.MLPEpochs = 4, 12
	return c
}

// Members are the credit members trained on one set of applicants: the
// transformer (nn.TokenSetEncoder over the encoded columns) and the MLP,
// both package agents' nn members, the calibrated rule score, and the
// market agent trained once for all.
type Members struct {
	Enc          *finrisk.Encoder
	TF, MLP      *agents.Net
	RuleA, RuleB float64 // calibration of the rule score: logit = A·score + B
	Market       *MarketAgent
	d            *Data
	// TFLoss and MLPLoss are the final training losses.
	TFLoss, MLPLoss float64
}

// ParamCounts returns the parameter counts of the transformer and the MLP.
func (ms *Members) ParamCounts() (tf, mlp int) { return ms.TF.ParamCount(), ms.MLP.ParamCount() }

// TrainMembers trains the credit members on the applicants idx.
func TrainMembers(d *Data, mk *MarketAgent, idx []int, cfg Config, seed uint64) (*Members, error) {
	rows, y := d.Rows(idx), d.Labels(idx)
	enc := finrisk.FitEncoder(d.Credit.Attrs, rows)
	ms := &Members{Enc: enc, Market: mk, d: d}
	yf := make([]float32, len(y))
	for i, v := range y {
		yf[i] = float32(v)
	}
	ms.TF = agents.NewTransformer(enc.Width, cfg.TFDim, cfg.TFLayers, cfg.TFHeads, seed, cfg.LR, 0.05)
	ms.MLP = agents.NewMLP(enc.Width, cfg.MLPHidden, seed+1, 3e-3, 0.05)
	x := enc.Matrix(rows)
	rng := rand.New(rand.NewPCG(seed, 0x22))
	for _, job := range []struct {
		net    *agents.Net
		epochs int
		loss   *float64
	}{{ms.TF, cfg.TFEpochs, &ms.TFLoss}, {ms.MLP, cfg.MLPEpochs, &ms.MLPLoss}} {
		for ep := 0; ep < job.epochs; ep++ {
			var err error
			if *job.loss, err = job.net.Epoch(x, yf, 100, agents.BCE, rng); err != nil {
				return nil, err
			}
		}
	}
	// Calibrate the rule score with a one-feature logistic regression.
	sc := make([]float32, len(rows))
	for i, r := range rows {
		sc[i] = float32(d.Comp.Score(r))
	}
	lr := finrisk.LogReg{L2: 1e-4}
	if err := lr.Fit(sc, len(rows), 1, y); err != nil {
		return nil, fmt.Errorf("rule calibration: %w", err)
	}
	ms.RuleA, ms.RuleB = lr.W[0], lr.B
	return ms, nil
}

// Outputs are the members' outputs on a set of applicants: per member a
// logit (n) and an embedding (n, EmbDim(m)), and the presence mask (n, M).
type Outputs struct {
	N      int
	Logit  [NumMembers][]float32
	Emb    [NumMembers][]float32
	EmbDim [NumMembers]int
	Mask   []float32
}

// EmbDims returns the embedding widths.
func (o *Outputs) EmbDims() []int { return o.EmbDim[:] }

// Outputs runs the members on rows, the raw rows of applicants idx (which
// give the application dates; rows may be counterfactuals of them).
func (ms *Members) Outputs(rows [][]float64, idx []int) (*Outputs, error) {
	n := len(rows)
	o := &Outputs{N: n, Mask: make([]float32, n*NumMembers)}
	x := ms.Enc.Matrix(rows)
	var err error
	if o.Logit[Transformer], o.Emb[Transformer], err = ms.TF.Run(x, n); err != nil {
		return nil, err
	}
	if o.Logit[MLP], o.Emb[MLP], err = ms.MLP.Run(x, n); err != nil {
		return nil, err
	}
	o.EmbDim[Transformer], o.EmbDim[MLP] = ms.TF.EmbDim(), ms.MLP.EmbDim()
	H := ms.Market.Net.EmbDim()
	o.EmbDim[Market] = H
	o.Logit[Market] = make([]float32, n) // no credit opinion
	o.Emb[Market] = make([]float32, n*H)
	for i, j := range idx {
		copy(o.Emb[Market][i*H:(i+1)*H], ms.Market.Emb[j*H:(j+1)*H])
	}
	nf := finrisk.NumRuleFlags + 3
	o.EmbDim[Rules] = nf
	o.Logit[Rules] = make([]float32, n)
	o.Emb[Rules] = make([]float32, n*nf)
	for i, r := range rows {
		s := ms.d.Comp.Score(r)
		o.Logit[Rules][i] = float32(ms.RuleA*s + ms.RuleB)
		copy(o.Emb[Rules][i*nf:], ms.d.Comp.Features(r))
		o.Emb[Rules][i*nf+nf-1] = float32(ms.Market.Out[idx[i]]) // the market forecast, as context for the rules
		o.Mask[i*NumMembers+Transformer] = 1
		o.Mask[i*NumMembers+MLP] = 1
		o.Mask[i*NumMembers+Rules] = 1
		if ms.d.MarketOK[idx[i]] {
			o.Mask[i*NumMembers+Market] = 1
		}
	}
	return o, nil
}

// Concat appends b's examples after a's.
func Concat(a, b *Outputs) *Outputs {
	if a == nil {
		return b
	}
	o := &Outputs{N: a.N + b.N, EmbDim: a.EmbDim, Mask: append(append([]float32(nil), a.Mask...), b.Mask...)}
	for m := 0; m < NumMembers; m++ {
		o.Logit[m] = append(append([]float32(nil), a.Logit[m]...), b.Logit[m]...)
		o.Emb[m] = append(append([]float32(nil), a.Emb[m]...), b.Emb[m]...)
	}
	return o
}

// Permute reorders the examples: out example i is o's example perm[i].
func (o *Outputs) Permute(perm []int) *Outputs {
	p := &Outputs{N: len(perm), EmbDim: o.EmbDim, Mask: make([]float32, len(perm)*NumMembers)}
	for m := 0; m < NumMembers; m++ {
		E := o.EmbDim[m]
		p.Logit[m] = make([]float32, len(perm))
		p.Emb[m] = make([]float32, len(perm)*E)
		for i, j := range perm {
			p.Logit[m][i] = o.Logit[m][j]
			copy(p.Emb[m][i*E:(i+1)*E], o.Emb[m][j*E:(j+1)*E])
		}
	}
	for i, j := range perm {
		copy(p.Mask[i*NumMembers:(i+1)*NumMembers], o.Mask[j*NumMembers:(j+1)*NumMembers])
	}
	return p
}

// Cross are cross-fitted members: the applicants of a training fold are
// split into k stratified parts, one member set is trained on each k-1
// parts, and its outputs on the held-out part are the out-of-fold outputs
// the fusion is trained on. At test time every member set is run (and
// fused) and the results are averaged, so the fusion only ever sees
// embeddings of the very networks it was trained with.
type Cross struct {
	Parts []*Members
	// OOF are the out-of-fold outputs per row variant (Orig, SexFlipped,
	// AgeFlipped, BothFlipped), in the order of the training indices.
	OOF [NumVariants]*Outputs
}

// CrossFit trains the k member sets for the applicants idx.
func CrossFit(d *Data, mk *MarketAgent, idx []int, k int, cfg Config, seed uint64) (*Cross, error) {
	y := d.Labels(idx)
	parts := finrisk.StratifiedFolds(y, k, seed+77)
	cr := &Cross{}
	var all [NumVariants]*Outputs
	var order []int
	sub := func(ii []int) []int {
		out := make([]int, len(ii))
		for a, b := range ii {
			out[a] = idx[b]
		}
		return out
	}
	for p, test := range parts {
		train := finrisk.TrainIndices(len(idx), test)
		ms, err := TrainMembers(d, mk, sub(train), cfg, seed+uint64(100*p))
		if err != nil {
			return nil, err
		}
		cr.Parts = append(cr.Parts, ms)
		ti := sub(test)
		for v := 0; v < NumVariants; v++ {
			o, err := ms.Outputs(d.Variant(ti, v), ti)
			if err != nil {
				return nil, err
			}
			all[v] = Concat(all[v], o)
		}
		order = append(order, test...)
	}
	inv := make([]int, len(order))
	for pos, i := range order {
		inv[i] = pos
	}
	for v := range all {
		cr.OOF[v] = all[v].Permute(inv)
	}
	return cr, nil
}

// Outputs runs every member set on rows (of applicants idx).
func (cr *Cross) Outputs(rows [][]float64, idx []int) ([]*Outputs, error) {
	var out []*Outputs
	for _, ms := range cr.Parts {
		o, err := ms.Outputs(rows, idx)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// MeanLogit averages member m's logits over the member sets.
func MeanLogit(os []*Outputs, m int) []float32 {
	out := make([]float32, os[0].N)
	for _, o := range os {
		for i, v := range o.Logit[m] {
			out[i] += v / float32(len(os))
		}
	}
	return out
}

// Sigmoid of a float32 logit.
func Sigmoid(z float32) float64 { return 1 / (1 + math.Exp(-float64(z))) }
