package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"time"

	G "gorgonia.org/gorgonia"
	gt "gorgonia.org/tensor"

	"github.com/troupe-ml/troupe/tensor"
)

func main() {
	var (
		n      = flag.Int("n", 512, "training points")
		hidden = flag.Int("hidden", 32, "hidden units")
		steps  = flag.Int("steps", 400, "Adam steps (full batch)")
		lr     = flag.Float64("lr", 0.03, "learning rate")
		every  = flag.Int("every", 50, "print the loss every this many steps")
		seed   = flag.Uint64("seed", 1, "random seed")
	)
	flag.Parse()
	if err := run(*n, *hidden, *steps, *every, *lr, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// xorData returns n points uniform in [-1, 1]² labelled by the sign of
// x₀·x₁ (the XOR quadrants), with 5% of the labels flipped as noise, as
// inputs (n×2), one-hot targets (n×2) and labels.
func xorData(rng *rand.Rand, n int) (x, y *gt.Dense, labels []int) {
	xs, ys := make([]float32, 2*n), make([]float32, 2*n)
	labels = make([]int, n)
	for i := 0; i < n; i++ {
		a, b := 2*rng.Float64()-1, 2*rng.Float64()-1
		c := 0
		if a*b > 0 {
			c = 1
		}
		if rng.Float64() < 0.05 {
			c = 1 - c
		}
		xs[2*i], xs[2*i+1] = float32(a), float32(b)
		ys[2*i+c] = 1
		labels[i] = c
	}
	return tensor.FromSlice(xs, n, 2), tensor.FromSlice(ys, n, 2), labels
}

func run(n, hidden, steps, every int, lr float64, seed uint64) error {
	// Gorgonia's matrix products (the Mul nodes below) run on troupe's Gemm.
	tensor.Install()
	start := time.Now()
	rng := rand.New(rand.NewPCG(seed, 0xde30))
	xv, yv, labels := xorData(rng, n)

	// He-style initial weights from the seeded generator.
	w1v := tensor.MulScalar(nil, tensor.RandN(rng, 2, hidden), float32(math.Sqrt(2.0/2)))
	w2v := tensor.MulScalar(nil, tensor.RandN(rng, hidden, 2), float32(math.Sqrt(2.0/float64(hidden))))

	g := G.NewGraph()
	x := G.NewMatrix(g, gt.Float32, G.WithShape(n, 2), G.WithName("x"), G.WithValue(xv))
	y := G.NewMatrix(g, gt.Float32, G.WithShape(n, 2), G.WithName("y"), G.WithValue(yv))
	w1 := G.NewMatrix(g, gt.Float32, G.WithShape(2, hidden), G.WithName("w1"), G.WithValue(w1v))
	b1 := G.NewVector(g, gt.Float32, G.WithShape(hidden), G.WithName("b1"), G.WithValue(tensor.Zeros(hidden)))
	w2 := G.NewMatrix(g, gt.Float32, G.WithShape(hidden, 2), G.WithName("w2"), G.WithValue(w2v))
	b2 := G.NewVector(g, gt.Float32, G.WithShape(2), G.WithName("b2"), G.WithValue(tensor.Zeros(2)))

	h := G.Must(G.Tanh(G.Must(G.BroadcastAdd(G.Must(G.Mul(x, w1)), b1, nil, []byte{0}))))
	logits := G.Must(G.BroadcastAdd(G.Must(G.Mul(h, w2)), b2, nil, []byte{0}))
	logp := G.Must(G.LogSoftMax(logits))
	// cross-entropy: -mean over points of Σ_classes y·log p
	loss := G.Must(G.Neg(G.Must(G.Mean(G.Must(G.Sum(G.Must(G.HadamardProd(y, logp)), 1))))))

	var lossVal, logitsVal G.Value
	G.Read(loss, &lossVal)
	G.Read(logits, &logitsVal)
	params := G.Nodes{w1, b1, w2, b2}
	if _, err := G.Grad(loss, params...); err != nil {
		return fmt.Errorf("building gradients: %w", err)
	}
	vm := G.NewTapeMachine(g, G.BindDualValues(params...))
	defer vm.Close()
	solver := G.NewAdamSolver(G.WithLearnRate(lr))

	fmt.Printf("troupe demo: 2-layer MLP (2→%d→2, tanh) on %d noisy XOR points, Adam lr=%g, %d steps, seed %d\n", hidden, n, lr, steps, seed)
	fmt.Printf("Gorgonia BLAS: troupe Gemm installed (micro-kernel %s, %d threads)\n", tensor.GemmKernel(), tensor.Threads())
	var first, last float32
	var acc float64
	for step := 0; step <= steps; step++ {
		if err := vm.RunAll(); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		// Copy out what we keep: the machine reuses buffers (Gorgonia issue 576).
		last = lossVal.Data().(float32)
		if step == 0 {
			first = last
		}
		if step%every == 0 || step == steps {
			acc = accuracy(logitsVal.(*gt.Dense), labels)
			fmt.Printf("step %4d  loss %.4f  accuracy %5.1f%%\n", step, last, 100*acc)
		}
		if step < steps {
			if err := solver.Step(G.NodesToValueGrads(params)); err != nil {
				return fmt.Errorf("solver step %d: %w", step, err)
			}
		}
		vm.Reset()
	}
	if math.IsNaN(float64(last)) {
		return fmt.Errorf("loss became NaN")
	}
	// Held-out check outside the graph: fresh points through the trained
	// weights with troupe's Dense kernels (MatMul, broadcasting Add, Tanh).
	tx, _, tlabels := xorData(rng, 4*n)
	hv := tensor.Tanh(nil, tensor.Add(nil, tensor.MatMul(nil, tx, w1.Value().(*gt.Dense)), b1.Value().(*gt.Dense)))
	tlogits := tensor.Add(nil, tensor.MatMul(nil, hv, w2.Value().(*gt.Dense)), b2.Value().(*gt.Dense))
	testAcc := accuracy(tlogits, tlabels)

	verdict := "LEARNED"
	// The label noise caps accuracy near 95%; chance is 50%.
	if !(last < first/2 && testAcc >= 0.85) {
		verdict = "DID NOT LEARN"
	}
	fmt.Printf("final: training loss %.4f (from %.4f, %.1f× lower), training accuracy %.1f%%, held-out accuracy %.1f%% on %d new points (chance 50%%, label noise 5%%), %.2fs\n",
		last, first, float64(first/last), 100*acc, 100*testAcc, 4*n, time.Since(start).Seconds())
	fmt.Printf("verdict: %s (criterion: loss fell by more than half and held-out accuracy ≥ 85%%)\n", verdict)
	if verdict != "LEARNED" {
		return fmt.Errorf("training did not learn")
	}
	return nil
}

// accuracy compares the row-wise argmax of the logits with the labels.
func accuracy(logits *gt.Dense, labels []int) float64 {
	pred := tensor.ArgMax(logits, 1).Ints()
	hit := 0
	for i, c := range labels {
		if pred[i] == c {
			hit++
		}
	}
	return float64(hit) / float64(len(labels))
}
