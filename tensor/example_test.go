package tensor_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/tensor"
)

func ExampleSoftmax() {
	logits := tensor.FromSlice([]float32{1, 2, 3, 0, 0, 0}, 2, 3)
	p := tensor.Softmax(nil, logits, -1) // along the last axis
	fmt.Printf("%.4f\n", tensor.Data(p))
	// Output: [0.0900 0.2447 0.6652 0.3333 0.3333 0.3333]
}

func ExampleLogSoftmax() {
	logits := tensor.FromSlice([]float32{0, 0, 0, 0}, 4)
	fmt.Printf("%.4f\n", tensor.Data(tensor.LogSoftmax(nil, logits, 0)))
	// Output: [-1.3863 -1.3863 -1.3863 -1.3863]
}

func ExampleAdd() {
	x := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	bias := tensor.FromSlice([]float32{10, 20, 30}, 3) // broadcast over rows
	y := tensor.Add(nil, x, bias)
	fmt.Println(y.Shape(), tensor.Data(y))
	// Output: (2, 3) [11 22 33 14 25 36]
}

func ExampleSum() {
	x := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	fmt.Println(tensor.Data(tensor.Sum(nil, x, 0)), tensor.Data(tensor.Sum(nil, x, 1)))
	fmt.Println(tensor.ArgMax(x, 1).Data())
	// Output:
	// [5 7 9] [6 15]
	// [2 2]
}

func ExampleMatMul() {
	a := tensor.FromSlice([]float32{1, 2, 3, 4}, 2, 2)
	b := tensor.FromSlice([]float32{5, 6, 7, 8}, 2, 2)
	fmt.Println(tensor.Data(tensor.MatMul(nil, a, b)))
	// Output: [19 22 43 50]
}

func ExampleLayerNorm() {
	x := tensor.FromSlice([]float32{1, 2, 3, 4}, 1, 4)
	gamma := tensor.Full(1, 4)
	beta := tensor.Zeros(4)
	y, mean, rstd := tensor.LayerNorm(nil, x, gamma, beta, 0)
	fmt.Printf("%.4f mean=%.2f rstd=%.4f\n", tensor.Data(y), tensor.Data(mean), tensor.Data(rstd))
	// Output: [-1.3416 -0.4472 0.4472 1.3416] mean=[2.50] rstd=[0.8944]
}

func ExampleRandN() {
	rng := rand.New(rand.NewPCG(1, 2))
	w := tensor.RandN(rng, 2, 3)
	fmt.Println(w.Shape(), len(tensor.Data(w)))
	// Output: (2, 3) 6
}

func ExampleSoftmaxRows() {
	src := []float32{0, 1, 2, 3}
	dst := make([]float32, 4)
	tensor.SoftmaxRows(dst, src, 2, 2)
	fmt.Printf("%.4f\n", dst)
	// Output: [0.2689 0.7311 0.2689 0.7311]
}

func ExampleAdamW() {
	param := []float32{1, -1}
	grad := []float32{0.5, -0.5}
	m, v := make([]float32, 2), make([]float32, 2)
	tensor.AdamW(param, grad, m, v, tensor.AdamWParams{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1})
	// The first Adam step moves each parameter by lr against its gradient's sign.
	fmt.Printf("%.4f\n", param)
	// Output: [0.9000 -0.9000]
}

func ExampleEmbedding() {
	table := tensor.FromSlice([]float32{0, 1, 10, 11, 20, 21}, 3, 2) // vocab 3, dim 2
	ids := []int{2, 0, 2}
	y := tensor.Embedding(nil, table, ids)
	fmt.Println(y.Shape(), tensor.Data(y))
	// The backward pass scatters: row 2 was used twice, so it gets twice the gradient.
	dtable := tensor.Zeros(3, 2)
	tensor.EmbeddingBackward(dtable, tensor.Full(1, 3, 2), ids)
	fmt.Println(tensor.Data(dtable))
	// Output:
	// (3, 2) [20 21 0 1 20 21]
	// [1 1 0 0 2 2]
}

func ExampleMatMulTrans() {
	a := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	gram := tensor.MatMulTrans(nil, a, a, false, true) // a·aᵀ
	fmt.Println(gram.Shape(), tensor.Data(gram))
	// Output: (2, 2) [14 32 32 77]
}

func ExampleGELU() {
	// The flat kernel behind tensor.Gelu: the tanh approximation of
	// x·Φ(x) (Hendrycks & Gimpel 2016).
	x := []float32{-1, 0, 1, 3}
	y := make([]float32, len(x))
	tensor.GELU(y, x)
	fmt.Printf("%.4f\n", y)
	// Output: [-0.1588 0.0000 0.8412 2.9964]
}
