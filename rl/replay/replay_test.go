package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// chiSquare returns Pearson's statistic of observed counts against expected
// probabilities.
func chiSquare(counts []int, probs []float64, n int) float64 {
	var x2 float64
	for i, c := range counts {
		e := probs[i] * float64(n)
		x2 += (float64(c) - e) * (float64(c) - e) / e
	}
	return x2
}

func TestSamplingFrequenciesChiSquare(t *testing.T) {
	// batch 1 is plain multinomial sampling (χ² ≈ df expected); batch 32 is
	// stratified, whose counts vary less than multinomial ones (lower χ²).
	for _, tc := range []struct {
		alpha float64
		batch int
	}{{0, 32}, {0.6, 32}, {1, 32}, {0.6, 1}} {
		alpha, batch := tc.alpha, tc.batch
		t.Run(fmt.Sprintf("alpha=%g/batch=%d", alpha, batch), func(t *testing.T) {
			const k = 50
			b := New[int](k, alpha)
			rng := rand.New(rand.NewPCG(1, uint64(alpha*10)+uint64(batch)))
			pr := make([]float64, k)
			var z float64
			for i := 0; i < k; i++ {
				p := 0.1 + 3*rng.Float64()
				b.Add(i, p)
				pr[i] = math.Pow(p, alpha)
				z += pr[i]
			}
			for i := range pr {
				pr[i] /= z
			}
			counts := make([]int, k)
			const draws = 200000
			for d := 0; d < draws/batch; d++ {
				for _, it := range b.Sample(batch, 0.4, rng) {
					counts[it.Value]++
					if math.Abs(it.Prob-pr[it.Value]) > 1e-12 {
						t.Fatalf("item %d: Prob %.6g want %.6g", it.Value, it.Prob, pr[it.Value])
					}
				}
			}
			x2 := chiSquare(counts, pr, draws)
			crit := distuv.ChiSquared{K: k - 1}.Quantile(0.999)
			t.Logf("χ² = %.1f (df %d, 0.999 critical %.1f)", x2, k-1, crit)
			if x2 > crit {
				t.Errorf("sampling frequencies do not match priorities: χ² %.1f > %.1f", x2, crit)
			}
			// the test has power: frequencies against the wrong exponent fail
			if alpha == 1 {
				wrong := make([]float64, k)
				for i := range wrong {
					wrong[i] = 1.0 / k
				}
				if chiSquare(counts, wrong, draws) < crit {
					t.Error("chi-square test cannot tell proportional from uniform")
				}
			}
		})
	}
}

func TestImportanceWeights(t *testing.T) {
	b := New[int](4, 1)
	ps := []float64{1, 2, 3, 4}
	for i, p := range ps {
		b.Add(i, p)
	}
	rng := rand.New(rand.NewPCG(2, 2))
	const beta = 0.5
	for _, it := range b.Sample(64, beta, rng) {
		P := ps[it.Value] / 10
		want := math.Pow(4*P, -beta) / math.Pow(4*0.1, -beta)
		if math.Abs(it.Weight-want) > 1e-12 {
			t.Fatalf("item %d weight %.6g want %.6g", it.Value, it.Weight, want)
		}
	}
	if Anneal(0.4, 0, 100) != 0.4 || Anneal(0.4, 50, 100) != 0.7 || Anneal(0.4, 200, 100) != 1 {
		t.Error("Anneal")
	}
}

func TestUpdateAndEviction(t *testing.T) {
	b := New[string](3, 1)
	a := b.Add("a", 1)
	b.Add("b", 1)
	b.Add("c", 1)
	b.Update([]uint64{a}, []float64{1000})
	rng := rand.New(rand.NewPCG(3, 3))
	hits := 0
	for _, it := range b.Sample(1000, 1, rng) {
		if it.Value == "a" {
			hits++
		}
	}
	if hits < 950 {
		t.Errorf("after raising its priority, a sampled %d/1000 times", hits)
	}
	b.Add("d", 1) // evicts a
	b.Update([]uint64{a}, []float64{1e9})
	items := b.Items()
	if len(items) != 3 || items[0].Value != "b" || items[2].Value != "d" {
		t.Fatalf("items after eviction %+v", items)
	}
	for _, it := range b.Sample(100, 1, rng) {
		if it.Value == "a" {
			t.Fatal("evicted item sampled")
		}
	}
	if id := b.Add("e", 0); b.Items()[2].Priority != 1000 || id != 4 {
		t.Errorf("Add with p=0 should use the max priority 1000: %+v", b.Items())
	}
}

// TestConcurrentProducers runs producers while a learner samples and updates;
// afterwards every ID is present exactly once (capacity not exceeded) or
// exactly the newest cap IDs remain (capacity exceeded).
func TestConcurrentProducers(t *testing.T) {
	for _, tc := range []struct{ capacity, writers, per int }{{4000, 8, 500}, {1000, 8, 500}} {
		t.Run(fmt.Sprint("cap=", tc.capacity), func(t *testing.T) {
			b := New[[2]int](tc.capacity, 0.6)
			var wg sync.WaitGroup
			for w := 0; w < tc.writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; i < tc.per; i++ {
						b.Add([2]int{w, i}, float64(1+i%7))
					}
				}(w)
			}
			done := make(chan struct{})
			go func() { // the learner
				defer close(done)
				rng := rand.New(rand.NewPCG(4, 4))
				for k := 0; k < 200; k++ {
					items := b.Sample(16, 0.5, rng)
					ids := make([]uint64, len(items))
					ps := make([]float64, len(items))
					for i, it := range items {
						ids[i], ps[i] = it.ID, 0.5+rng.Float64()
					}
					b.Update(ids, ps)
				}
			}()
			wg.Wait()
			<-done
			total := tc.writers * tc.per
			items := b.Items()
			want := min(total, tc.capacity)
			if len(items) != want || b.Len() != want {
				t.Fatalf("%d items held, want %d", len(items), want)
			}
			seen := map[[2]int]bool{}
			for k, it := range items {
				if seen[it.Value] {
					t.Fatalf("duplicate %v", it.Value)
				}
				seen[it.Value] = true
				if it.ID != uint64(total-want+k) {
					t.Fatalf("item %d has ID %d, want %d (oldest evicted first)", k, it.ID, total-want+k)
				}
			}
			// per writer, the kept values are the newest of that writer
			for w := 0; w < tc.writers; w++ {
				last := -1
				for _, it := range items {
					if it.Value[0] == w {
						if it.Value[1] <= last {
							t.Fatalf("writer %d values out of order", w)
						}
						last = it.Value[1]
					}
				}
				if want == total && last != tc.per-1 {
					t.Fatalf("writer %d lost items", w)
				}
			}
		})
	}
}

func ExampleBuffer() {
	b := New[string](100, 0.6)
	b.Add("rare", 0.1)
	b.Add("common", 10)
	rng := rand.New(rand.NewPCG(1, 2))
	n := map[string]int{}
	for _, it := range b.Sample(1000, 0.4, rng) {
		n[it.Value]++
	}
	fmt.Println(n["common"] > 10*n["rare"])
	// Output: true
}

func BenchmarkReplay(b *testing.B) {
	for _, capacity := range []int{1 << 10, 1 << 16, 1 << 20} {
		b.Run(fmt.Sprintf("add/cap=%d", capacity), func(b *testing.B) {
			buf := New[int](capacity, 0.6)
			i := 0
			for b.Loop() {
				buf.Add(i, float64(1+i%13))
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "adds/s")
		})
		b.Run(fmt.Sprintf("sample32+update/cap=%d", capacity), func(b *testing.B) {
			buf := New[int](capacity, 0.6)
			for i := 0; i < capacity; i++ {
				buf.Add(i, float64(1+i%13))
			}
			rng := rand.New(rand.NewPCG(1, 1))
			ids := make([]uint64, 32)
			ps := make([]float64, 32)
			for b.Loop() {
				for k, it := range buf.Sample(32, 0.5, rng) {
					ids[k], ps[k] = it.ID, it.Priority*1.01
				}
				buf.Update(ids, ps)
			}
			b.ReportMetric(32*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// Update re-prioritises sampled entries (typically with their new TD error
// or loss); with α = 1 the sampling probability is p/Σp, and with β = 1 the
// importance weights (N·P(i))^−β are normalised by their maximum.
func ExampleBuffer_Update() {
	b := New[string](10, 1)
	ida := b.Add("a", 1)
	idb := b.Add("b", 1)
	b.Update([]uint64{ida, idb}, []float64{1, 3})
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]Item[string]{}
	for _, it := range b.Sample(64, 1, rng) {
		seen[it.Value] = it
	}
	for _, v := range []string{"a", "b"} {
		fmt.Printf("%s: P=%.2f w=%.3f\n", v, seen[v].Prob, seen[v].Weight)
	}
	// Output:
	// a: P=0.25 w=1.000
	// b: P=0.75 w=0.333
}

// Anneal moves β linearly from beta0 to 1 over training (Schaul et al. 2016).
func ExampleAnneal() {
	fmt.Println(Anneal(0.4, 0, 100), Anneal(0.4, 50, 100), Anneal(0.4, 200, 100))
	// Output: 0.4 0.7 1
}
