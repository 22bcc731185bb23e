package nn_test

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/troupe-ml/troupe/nn"
)

// A classifier over a table with one numeric column and one categorical
// column (integer codes 0…3, each with its own embedding row): the label is
// 1 for categories 1 and 2, which no monotone function of the code can tell.
func ExampleEncoderConfig_categories() {
	store := nn.NewStore(7)
	model := func(s *nn.Scope, x *G.Node) *G.Node {
		h := nn.TokenSetEncoder(s.Sub("enc"), x, nn.EncoderConfig{Dim: 8, Layers: 1, Heads: 2, Categories: []int{0, 4}})
		return nn.ClassificationHead(s.Sub("head"), h, 2)
	}
	tr := nn.NewTrainer(store, model, nn.NewAdamW(nn.Constant(1e-2), 0), nn.TrainConfig{})
	x := [][]float32{{0.3, 0}, {-0.5, 1}, {0.9, 2}, {-0.1, 3}, {-0.7, 0}, {0.2, 1}, {-0.4, 2}, {0.6, 3}}
	labels := []int{0, 1, 1, 0, 0, 1, 1, 0}
	for i := 0; i < 80; i++ {
		if _, err := tr.ClassifyStep(x, labels); err != nil {
			fmt.Println(err)
			return
		}
	}
	out, _ := tr.Predict(x[:4])
	var pred []bool
	for _, o := range out {
		pred = append(pred, o[1] > o[0])
	}
	fmt.Println(pred)
	fmt.Println(store.Param("enc.tok.table").Shape())
	// Output:
	// [false true true false]
	// (4, 8)
}
