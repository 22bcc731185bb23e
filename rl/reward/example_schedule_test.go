package reward

import "fmt"

// The interpolating schedules move a weight vector from a start to an end
// value over training progress p ∈ [0, 1]: Linear at a constant rate, Cosine
// slowly at both ends and fastest in the middle.
func ExampleCosine() {
	lin := Linear([]float64{1, 0}, []float64{0, 1})
	cos := Cosine([]float64{1, 0}, []float64{0, 1})
	for _, p := range []float64{0, 0.25, 0.5, 1} {
		fmt.Printf("p=%.2f linear %.3f cosine %.3f\n", p, lin.Weights(p), cos.Weights(p))
	}
	// Output:
	// p=0.00 linear [1.000 0.000] cosine [1.000 0.000]
	// p=0.25 linear [0.750 0.250] cosine [0.854 0.146]
	// p=0.50 linear [0.500 0.500] cosine [0.500 0.500]
	// p=1.00 linear [0.000 1.000] cosine [0.000 1.000]
}

// A Step schedule switches weight vectors at fixed progress boundaries.
func ExampleNewStep() {
	s := NewStep([]float64{0.5}, []float64{1, 0}, []float64{0.2, 0.8})
	fmt.Println(s.Weights(0.49), s.Weights(0.5))
	// Output: [1 0] [0.2 0.8]
}

// Adaptive moves weight from one component to another once the smoothed
// variance of its signal falls below Threshold times its peak: here the
// second observation brings the average to 0.55 (above half the peak 1), the
// third to 0.325, which moves 10% of component 1's weight to component 2.
func ExampleAdaptive() {
	a := &Adaptive{Initial: []float64{1, 0.5, 0}, From: 1, To: 2, Rate: 0.1, Decay: 0.5}
	for _, v := range []float64{1, 0.1, 0.1} {
		a.Observe(v)
		fmt.Printf("%.3f shifted %d\n", a.Weights(0), a.Shifted)
	}
	// Output:
	// [1.000 0.500 0.000] shifted 0
	// [1.000 0.500 0.000] shifted 0
	// [1.000 0.450 0.050] shifted 1
}

// Welford keeps the running mean and population variance in one pass.
func ExampleWelford() {
	var w Welford
	for _, x := range []float64{2, 4, 4, 4, 5, 5, 7, 9} {
		w.Add(x)
	}
	fmt.Printf("mean %.1f std %.1f\n", w.Mean, w.Std())
	// Output: mean 5.0 std 2.0
}
