package pipeline

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/troupe-ml/troupe/ensemble"
	"github.com/troupe-ml/troupe/nn"
	G "gorgonia.org/gorgonia"
)

// Fusion is the trained attention fusion over frozen members: their
// outputs are packed into rows (Outputs.Rows) that ensemble.AttentionModel
// reads. The attention's parameters live in Store under the scope
// "fusion", so nn.SaveCheckpoint saves them as it saves any nn model.
type Fusion struct {
	Store  *nn.Store
	Losses []float64 // training loss per epoch
	dims   []int
	tr     *nn.Trainer
}

// FusionConfig configures TrainFusion.
type FusionConfig struct {
	Dim, Heads, Epochs, Batch int
	// LR and WeightDecay are AdamW's (decoupled decay; biases exempt).
	LR, WeightDecay float64
	Seed            uint64
	VoteOnly        bool
}

// DefaultFusionConfig is used by the example.
func DefaultFusionConfig() FusionConfig {
	return FusionConfig{Dim: 16, Heads: 4, Epochs: 60, Batch: 100, LR: 3e-3, WeightDecay: 1e-2, Seed: 3}
}

// Rows packs the examples as ensemble.AttentionModel reads them: per
// example the members' embeddings, their logits, then their mask.
func (o *Outputs) Rows() [][]float32 {
	M := NumMembers
	rows := make([][]float32, o.N)
	for i := range rows {
		var r []float32
		for m := 0; m < M; m++ {
			E := o.EmbDim[m]
			r = append(r, o.Emb[m][i*E:(i+1)*E]...)
		}
		for m := 0; m < M; m++ {
			r = append(r, o.Logit[m][i])
		}
		rows[i] = append(r, o.Mask[i*M:(i+1)*M]...)
	}
	return rows
}

// TrainFusion trains the attention fusion on member outputs o and labels y
// (mean binary cross-entropy of the fused logit, AdamW, gradients clipped
// to norm 5).
func TrainFusion(o *Outputs, y []int, cfg FusionConfig) (*Fusion, error) {
	if len(y) != o.N {
		return nil, fmt.Errorf("pipeline: fusion: %d labels for %d examples", len(y), o.N)
	}
	store := nn.NewStore(cfg.Seed)
	att := ensemble.AttentionModel(o.EmbDims(), ensemble.AttentionConfig{Dim: cfg.Dim, Heads: cfg.Heads, VoteOnly: cfg.VoteOnly})
	model := func(s *nn.Scope, x *G.Node) *G.Node { return att(s.Sub("fusion"), x) }
	fu := &Fusion{Store: store, dims: append([]int(nil), o.EmbDims()...),
		tr: nn.NewTrainer(store, model, nn.NewAdamW(nn.Constant(cfg.LR), cfg.WeightDecay), nn.TrainConfig{ClipNorm: 5})}
	rows := o.Rows()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xf05e))
	for ep := 0; ep < cfg.Epochs; ep++ {
		perm := rng.Perm(o.N)
		var tot float64
		nb := 0
		for start := 0; start < o.N; start += cfg.Batch {
			idx := perm[start:min(start+cfg.Batch, o.N)]
			batch := make([][]float32, len(idx))
			for k, i := range idx {
				batch[k] = rows[i]
			}
			l, err := fu.tr.ForwardBackward(batch, func(out [][]float32) (float64, [][]float32) {
				var loss float64
				g := make([][]float32, len(out))
				inv := 1 / float64(len(out))
				for k, r := range out {
					z, t := float64(r[0]), float64(y[idx[k]])
					loss += (softplus(z) - t*z) * inv
					g[k] = make([]float32, len(r))
					g[k][0] = float32((1/(1+math.Exp(-z)) - t) * inv)
				}
				return loss, g
			})
			if err != nil && !errors.Is(err, nn.ErrNonFinite) {
				return nil, fmt.Errorf("pipeline: fusion: %w", err)
			}
			if _, _, err := fu.tr.Step(); err != nil {
				return nil, fmt.Errorf("pipeline: fusion: %w", err)
			}
			tot += l
			nb++
		}
		fu.Losses = append(fu.Losses, tot/float64(nb))
	}
	return fu, nil
}

func softplus(z float64) float64 {
	if z > 30 {
		return z
	}
	return math.Log1p(math.Exp(z))
}

// Predict returns the fused logits (n) and the attention weights averaged
// over heads (n, M) of the examples of o.
func (fu *Fusion) Predict(o *Outputs) (logit []float32, weights []float32, err error) {
	if !slices.Equal(o.EmbDims(), fu.dims) {
		return nil, nil, fmt.Errorf("pipeline: fusion trained on embedding widths %v, given %v", fu.dims, o.EmbDims())
	}
	const B = 200
	M := NumMembers
	logit, weights = make([]float32, o.N), make([]float32, o.N*M)
	rows := o.Rows()
	for start := 0; start < o.N; start += B {
		out, err := fu.tr.Predict(rows[start:min(start+B, o.N)])
		if err != nil {
			return nil, nil, fmt.Errorf("pipeline: fusion: %w", err)
		}
		for k, r := range out {
			logit[start+k] = r[0]
			copy(weights[(start+k)*M:(start+k+1)*M], r[1:])
		}
	}
	return logit, weights, nil
}

// PredictAll fuses each member set's outputs and averages the fused
// logits and the attention weights.
func (fu *Fusion) PredictAll(os []*Outputs) (logit []float32, weights []float32, err error) {
	for k, o := range os {
		z, w, err := fu.Predict(o)
		if err != nil {
			return nil, nil, err
		}
		if k == 0 {
			logit, weights = make([]float32, len(z)), make([]float32, len(w))
		}
		for i := range z {
			logit[i] += z[i] / float32(len(os))
		}
		for i := range w {
			weights[i] += w[i] / float32(len(os))
		}
	}
	return logit, weights, nil
}

// ParamCount is the number of fusion parameters.
func (fu *Fusion) ParamCount() int { return fu.Store.NumParams() }
