package gradcomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"gonum.org/v1/gonum/mat"
)

func randVec(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	x := randVec(rng, 1000)
	for _, tc := range []struct {
		codec Codec
		bytes int
	}{{Raw, 5 + 4000}, {Q8, 5 + 8 + 1000}, {TopK, 5 + 4 + 8*100}, {TopKQ8, 5 + 4 + 5*100 + 8}} {
		t.Run(tc.codec.String(), func(t *testing.T) {
			c := New(Options{Codec: tc.codec, Frac: 0.1})
			msg := c.Compress(nil, x)
			if len(msg) != tc.bytes || c.BytesOut != int64(tc.bytes) || c.BytesIn != 4000 {
				t.Fatalf("message of %d bytes, want %d", len(msg), tc.bytes)
			}
			y, err := Decode(nil, msg)
			if err != nil || len(y) != len(x) {
				t.Fatalf("decode: %v, %d values", err, len(y))
			}
			lo, hi := slicesMinMax(x)
			step := float64(hi-lo) / 255
			switch tc.codec {
			case Raw:
				for i := range x {
					if x[i] != y[i] {
						t.Fatalf("raw: %d: %v != %v", i, x[i], y[i])
					}
				}
			case Q8:
				for i := range x {
					if math.Abs(float64(x[i]-y[i])) > step/2*1.0001 {
						t.Fatalf("q8: %d: error %v > half step %v", i, x[i]-y[i], step/2)
					}
				}
			case TopK, TopKQ8:
				mags := make([]float64, len(x))
				for i, v := range x {
					mags[i] = math.Abs(float64(v))
				}
				sort.Float64s(mags)
				th := mags[len(mags)-100]
				kept := 0
				for i := range x {
					if y[i] != 0 {
						kept++
						if math.Abs(float64(x[i])) < th {
							t.Fatalf("kept %d (|x|=%v) below the top-100 threshold %v", i, x[i], th)
						}
					} else if math.Abs(float64(x[i])) > th {
						t.Fatalf("dropped %d (|x|=%v) above the threshold", i, x[i])
					}
				}
				if kept != 100 {
					t.Fatalf("kept %d, want 100", kept)
				}
			}
		})
	}
}

func slicesMinMax(x []float32) (lo, hi float32) {
	lo, hi = x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	return
}

// TestErrorFeedbackConservesMass: with error feedback, the decoded messages
// plus the final residual sum to the sum of the inputs.
func TestErrorFeedbackConservesMass(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, codec := range []Codec{Q8, TopK, TopKQ8} {
		c := New(Options{Codec: codec, Frac: 0.05, ErrorFeedback: true})
		n := 300
		in := make([]float64, n)
		out := make([]float64, n)
		for s := 0; s < 50; s++ {
			g := randVec(rng, n)
			y, err := Decode(nil, c.Compress(nil, g))
			if err != nil {
				t.Fatal(err)
			}
			for i := range g {
				in[i] += float64(g[i])
				out[i] += float64(y[i])
			}
		}
		for i := range in {
			if d := in[i] - out[i] - float64(c.Residual()[i]); math.Abs(d) > 1e-3 {
				t.Fatalf("%v: coordinate %d: inputs − sent − residual = %g", codec, i, d)
			}
		}
	}
}

func TestDecodeCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	x := randVec(rng, 64)
	for _, codec := range []Codec{Raw, Q8, TopK, TopKQ8} {
		msg := New(Options{Codec: codec, Frac: 0.25}).Compress(nil, x)
		for cut := 0; cut < len(msg); cut += 3 {
			if _, err := Decode(nil, msg[:cut]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%v truncated to %d: err %v", codec, cut, err)
			}
		}
	}
	bad := New(Options{Codec: TopK, Frac: 0.25}).Compress(nil, x)
	bad[headerLen+4] = 0xff // first index far out of range
	bad[headerLen+5] = 0xff
	if _, err := Decode(nil, bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("out-of-range index: %v", err)
	}
	if _, err := Decode(nil, []byte{99, 0, 0, 0, 0}); !errors.Is(err, ErrCorrupt) {
		t.Fatal("unknown codec accepted")
	}
}

func TestGaussian(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	g := randVec(rng, 10000) // norm ≈ 100
	d := &Gaussian{Clip: 1, Rng: rng}
	norm := d.Privatize(g)
	var n2 float64
	for _, v := range g {
		n2 += float64(v) * float64(v)
	}
	if norm < 90 || math.Abs(math.Sqrt(n2)-1) > 1e-5 {
		t.Fatalf("clip: norm before %g after %g", norm, math.Sqrt(n2))
	}
	// noise only: zero input, σC = 0.5
	z := make([]float32, 20000)
	(&Gaussian{Clip: 0.25, NoiseMultiplier: 2, Rng: rng}).Privatize(z)
	var s2 float64
	for _, v := range z {
		s2 += float64(v) * float64(v)
	}
	if sd := math.Sqrt(s2 / float64(len(z))); math.Abs(sd-0.5) > 0.01 {
		t.Fatalf("noise std %g, want 0.5", sd)
	}
	// Epsilon equals the minimum over a fine grid of RDP orders.
	for _, tc := range []struct {
		sigma float64
		steps int
	}{{1.1, 100}, {4, 1000}, {0.8, 1}} {
		best := math.Inf(1)
		for a := 1.0001; a < 2000; a *= 1.0005 {
			best = min(best, float64(tc.steps)*a/(2*tc.sigma*tc.sigma)+math.Log(1e5)/(a-1))
		}
		if got := Epsilon(tc.sigma, tc.steps, 1e-5); math.Abs(got-best) > 1e-3*best {
			t.Errorf("Epsilon(%g, %d) = %g, grid minimum %g", tc.sigma, tc.steps, got, best)
		}
	}
}

// lsq is f(w) = 1/(2m)‖Aw − b‖² + λ/2‖w‖², strongly convex.
type lsq struct {
	A      [][]float64
	b      []float64
	lambda float64
}

func newLSQ(rng *rand.Rand, m, d int) *lsq {
	p := &lsq{lambda: 1e-3}
	w := make([]float64, d)
	for i := range w {
		w[i] = rng.NormFloat64()
	}
	for i := 0; i < m; i++ {
		row := make([]float64, d)
		var y float64
		for j := range row {
			row[j] = rng.NormFloat64() / math.Sqrt(float64(d))
			y += row[j] * w[j]
		}
		p.A = append(p.A, row)
		p.b = append(p.b, y+0.3*rng.NormFloat64())
	}
	return p
}

func (p *lsq) f(w []float64) float64 {
	var s float64
	for i, row := range p.A {
		r := -p.b[i]
		for j, a := range row {
			r += a * w[j]
		}
		s += r * r
	}
	var n2 float64
	for _, x := range w {
		n2 += x * x
	}
	return s/(2*float64(len(p.A))) + p.lambda/2*n2
}

// grad is the minibatch gradient over rows idx.
func (p *lsq) grad(g []float32, w []float64, idx []int) {
	d := len(w)
	acc := make([]float64, d)
	for _, i := range idx {
		row := p.A[i]
		r := -p.b[i]
		for j, a := range row {
			r += a * w[j]
		}
		for j, a := range row {
			acc[j] += r * a
		}
	}
	for j := range acc {
		g[j] = float32(acc[j]/float64(len(idx)) + p.lambda*w[j])
	}
}

// optimum solves the normal equations (AᵀA/m + λI) w = Aᵀb/m.
func (p *lsq) optimum() float64 {
	m, d := len(p.A), len(p.A[0])
	A := mat.NewDense(m, d, nil)
	for i, row := range p.A {
		A.SetRow(i, row)
	}
	var H mat.Dense
	H.Mul(A.T(), A)
	H.Scale(1/float64(m), &H)
	for j := 0; j < d; j++ {
		H.Set(j, j, H.At(j, j)+p.lambda)
	}
	var rhs mat.VecDense
	rhs.MulVec(A.T(), mat.NewVecDense(m, p.b))
	rhs.ScaleVec(1/float64(m), &rhs)
	var w mat.VecDense
	if err := w.SolveVec(&H, &rhs); err != nil {
		panic(err)
	}
	return p.f(w.RawVector().Data)
}

// sgdRun runs minibatch SGD with a decaying step; every gradient goes through
// c (nil: uncompressed). The minibatch sequence depends only on seed.
func sgdRun(p *lsq, c *Compressor, steps int, seed uint64) float64 {
	m, d := len(p.A), len(p.A[0])
	rng := rand.New(rand.NewPCG(seed, 9))
	w := make([]float64, d)
	g := make([]float32, d)
	idx := make([]int, 32)
	var msg []byte
	var dec []float32
	for t := 0; t < steps; t++ {
		for k := range idx {
			idx[k] = rng.IntN(m)
		}
		p.grad(g, w, idx)
		if c != nil {
			msg = c.Compress(msg[:0], g)
			var err error
			if dec, err = Decode(dec[:0], msg); err != nil {
				panic(err)
			}
			copy(g, dec)
		}
		lr := 1.0 / (1 + float64(t)/500)
		for j := range w {
			w[j] -= lr * float64(g[j])
		}
	}
	return p.f(w)
}

// TestCompressedSGDConverges is the bar: SGD whose gradients go through
// compression with error feedback reaches the uncompressed objective within
// 0.5% while sending at least 75% fewer bytes than float32 gradients.
func TestCompressedSGDConverges(t *testing.T) {
	steps := 4000
	if testing.Short() {
		steps = 1000
	}
	rng := rand.New(rand.NewPCG(5, 5))
	p := newLSQ(rng, 512, 256)
	fstar := p.optimum()
	base := sgdRun(p, nil, steps, 1)
	t.Logf("f* = %.6f, uncompressed SGD f = %.6f (gap %.3g)", fstar, base, base-fstar)
	for _, tc := range []struct {
		opt Options
		bar bool // must meet the ≥75% / ≤0.5% bar
	}{
		{Options{Codec: Q8, ErrorFeedback: true}, false}, // 74.5%: header makes it just under 75%
		{Options{Codec: TopK, Frac: 0.1, ErrorFeedback: true}, true},
		{Options{Codec: TopKQ8, Frac: 0.1, ErrorFeedback: true}, true},
		{Options{Codec: TopKQ8, Frac: 0.05, ErrorFeedback: true}, true},
		{Options{Codec: TopK, Frac: 0.1}, false}, // no error feedback: reported, not required
	} {
		if testing.Short() && !tc.bar {
			continue // reported configurations only in the full run
		}
		name := fmt.Sprintf("%v/frac=%g/ef=%v", tc.opt.Codec, tc.opt.Frac, tc.opt.ErrorFeedback)
		c := New(tc.opt)
		f := sgdRun(p, c, steps, 1)
		worse := (f - base) / base
		t.Logf("%-26s f = %.6f (%+.4f%% vs uncompressed; excess over f* %.3g vs %.3g), bytes saved %.2f%%",
			name, f, 100*worse, f-fstar, base-fstar, 100*c.Saved())
		if tc.bar && (worse > 0.005 || c.Saved() < 0.75) {
			t.Errorf("%s misses the bar: %+.3f%% objective, %.2f%% bytes saved", name, 100*worse, 100*c.Saved())
		}
	}
}

func ExampleCompressor() {
	g := []float32{0.1, -3, 0.2, 0.05, 2.5, -0.01, 0, 0.3}
	c := New(Options{Codec: TopK, Frac: 0.25, ErrorFeedback: true})
	msg := c.Compress(nil, g)
	y, _ := Decode(nil, msg)
	fmt.Println(y)
	fmt.Println(c.Residual())
	fmt.Printf("%d bytes instead of %d\n", len(msg), 4*len(g))
	// Output:
	// [0 -3 0 0 2.5 0 0 0]
	// [0.1 0 0.2 0.05 0 -0.01 0 0.3]
	// 25 bytes instead of 32
}

func BenchmarkCompress(b *testing.B) {
	for _, n := range []int{1 << 12, 1 << 16, 1 << 20} {
		for _, opt := range []Options{
			{Codec: Q8, ErrorFeedback: true},
			{Codec: TopK, Frac: 0.1, ErrorFeedback: true},
			{Codec: TopKQ8, Frac: 0.01, ErrorFeedback: true},
		} {
			b.Run(fmt.Sprintf("%v/frac=%g/n=%d", opt.Codec, opt.Frac, n), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(6, 6))
				g := randVec(rng, n)
				c := New(opt)
				var msg []byte
				b.SetBytes(int64(4 * n))
				for b.Loop() {
					msg = c.Compress(msg[:0], g)
				}
				b.ReportMetric(100*c.Saved(), "%saved")
				b.ReportMetric(float64(len(msg)), "B/msg")
			})
		}
	}
}

// With NoiseMultiplier 0 the Gaussian mechanism only clips: the gradient
// (3, 4) of norm 5 is scaled to norm 1.
func ExampleGaussian() {
	g := []float32{3, 4}
	d := Gaussian{Clip: 1, NoiseMultiplier: 0, Rng: rand.New(rand.NewPCG(1, 2))}
	norm := d.Privatize(g)
	fmt.Println(norm, g)
	// Output: 5 [0.6 0.8]
}

// Epsilon accounts the privacy of repeated releases: one release with σ = 1
// and δ = 1e-5 gives ε = 1/2 + 2·sqrt(log(1e5)/2) ≈ 5.30; more noise or
// fewer steps give a smaller ε.
func ExampleEpsilon() {
	fmt.Printf("%.2f %.2f %.2f\n", Epsilon(1, 1, 1e-5), Epsilon(4, 1, 1e-5), Epsilon(1, 100, 1e-5))
	// Output: 5.30 1.23 97.99
}

// FuzzDecode: a message is either an error wrapping ErrCorrupt or a vector
// of exactly the declared length. Messages declaring more than 2^20 values
// are passed over: Decode allocates the declared length, so a 9-byte top-k
// message with k = 0 can ask for up to 2^32 floats (see docs/experiments/2026-12-02-audit.md).
func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(8, 8))
	x := randVec(rng, 37)
	for _, codec := range []Codec{Raw, Q8, TopK, TopKQ8} {
		f.Add(New(Options{Codec: codec, Frac: 0.2}).Compress(nil, x))
	}
	f.Add([]byte{byte(TopK), 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) >= headerLen && binary.LittleEndian.Uint32(msg[1:]) > 1<<20 {
			return
		}
		prefix := []float32{42}
		out, err := Decode(prefix, msg)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if n := int(binary.LittleEndian.Uint32(msg[1:])); len(out) != 1+n || out[0] != 42 {
			t.Fatalf("decoded %d values after the prefix, header says %d", len(out)-1, n)
		}
	})
}

// A nine-byte top-k message that declares 2³²−1 values must be refused before
// anything is allocated.
func TestDecodeRefusesHugeDeclaredLength(t *testing.T) {
	msg := make([]byte, headerLen+4)
	msg[0] = byte(TopK)
	binary.LittleEndian.PutUint32(msg[1:], math.MaxUint32)
	if _, err := Decode(nil, msg); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode of a message declaring %d values: err = %v, want ErrCorrupt", uint32(math.MaxUint32), err)
	}
}
