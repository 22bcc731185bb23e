package ensemble_test

import (
	"fmt"

	"github.com/troupe-ml/troupe/ensemble"
	"github.com/troupe-ml/troupe/nn"
)

// Fusing two frozen members with nn.Trainer: each row packs the members'
// embeddings (widths 3 and 2), their logits and their presence mask.
// Member 1 is missing for the second example, so its weight there is 0.
func ExampleAttentionModel() {
	store := nn.NewStore(1)
	model := ensemble.AttentionModel([]int{3, 2}, ensemble.AttentionConfig{Dim: 4, Heads: 2, VoteOnly: true})
	tr := nn.NewTrainer(store, model, nn.NewAdamW(nn.Constant(1e-2), 0.01), nn.TrainConfig{ClipNorm: 5})
	rows := [][]float32{
		// e0 (3)      e1 (2)     logits     mask
		{1, 0, -1, 0.2, -0.3, 1.5, -0.5, 1, 1},
		{0.5, 0.5, 0, 9, 9, 2, 100, 1, 0},
	}
	out, err := tr.Predict(rows) // per row: fused logit, weight of member 0, weight of member 1
	if err != nil {
		panic(err)
	}
	fmt.Printf("example 2: weights %.1f %.1f, fused logit %.1f\n", out[1][1], out[1][2], out[1][0])
	fmt.Println(store.Names())
	// Output:
	// example 2: weights 1.0 0.0, fused logit 2.0
	// [in.0.b in.0.w in.1.b in.1.w k.w q.w]
}
