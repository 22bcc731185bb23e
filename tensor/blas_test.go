package tensor

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gonum.org/v1/gonum/blas"
	G "gorgonia.org/gorgonia"
	gt "gorgonia.org/tensor"
)

func TestBLASSgemmMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, tr := range [][2]blas.Transpose{{blas.NoTrans, blas.NoTrans}, {blas.Trans, blas.NoTrans}, {blas.NoTrans, blas.ConjTrans}, {blas.Trans, blas.Trans}} {
		g := newGemmCase(r, tr[0] != blas.NoTrans, tr[1] != blas.NoTrans, 37, 41, 29, 2, 1, 3, 1.25, 0.5)
		BLAS{}.Sgemm(tr[0], tr[1], g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc)
		got := make([]float64, g.m*g.n)
		for i := range g.m {
			for j := range g.n {
				got[i*g.n+j] = float64(g.c[i*g.ldc+j])
			}
		}
		if diff := cmp.Diff(g.want, got, gemmTol(g.k, g.alpha, g.beta)); diff != "" {
			t.Fatalf("%v: mismatch (-want +got):\n%s", tr, diff)
		}
	}
}

// TestInstallGorgoniaMul builds a Gorgonia graph with Mul, runs it after
// Install, and checks that the product went through BLAS.Sgemm (call counter)
// and matches the float64 reference.
func TestInstallGorgoniaMul(t *testing.T) {
	prevG, prevT := G.WhichBLAS(), gt.WhichBLAS()
	defer func() { G.Use(prevG); gt.Use(prevT) }()
	Install()
	if _, ok := G.WhichBLAS().(BLAS); !ok {
		t.Fatalf("gorgonia BLAS is %T after Install", G.WhichBLAS())
	}
	if _, ok := gt.WhichBLAS().(BLAS); !ok {
		t.Fatalf("gorgonia.org/tensor BLAS is %T after Install", gt.WhichBLAS())
	}

	const m, k, n = 23, 19, 17
	r := rand.New(rand.NewPCG(23, 24))
	av, bv := randSlice(r, m*k), randSlice(r, k*n)
	g := G.NewGraph()
	x := G.NewMatrix(g, G.Float32, G.WithShape(m, k), G.WithName("x"), G.WithValue(gt.New(gt.WithShape(m, k), gt.WithBacking(av))))
	w := G.NewMatrix(g, G.Float32, G.WithShape(k, n), G.WithName("w"), G.WithValue(gt.New(gt.WithShape(k, n), gt.WithBacking(bv))))
	y := G.Must(G.Mul(x, w))
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	before := sgemmCalls.Load()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	if calls := sgemmCalls.Load() - before; calls < 1 {
		t.Fatalf("Gorgonia Mul made %d calls to BLAS.Sgemm", calls)
	}
	got64 := make([]float64, m*n)
	for i, v := range y.Value().Data().([]float32) {
		got64[i] = float64(v)
	}
	want := refGemm(false, false, m, n, k, 1, av, k, bv, n, 0, nil, n)
	if diff := cmp.Diff(want, got64, gemmTol(k, 1, 0)); diff != "" {
		t.Fatalf("Mul result (-want +got):\n%s", diff)
	}
}

// TestInstallBatchedMatMul checks Gorgonia's BatchedMatMul after Install.
func TestInstallBatchedMatMul(t *testing.T) {
	prevG, prevT := G.WhichBLAS(), gt.WhichBLAS()
	defer func() { G.Use(prevG); gt.Use(prevT) }()
	Install()
	const batch, m, k, n = 3, 5, 7, 6
	r := rand.New(rand.NewPCG(25, 26))
	av, bv := randSlice(r, batch*m*k), randSlice(r, batch*k*n)
	g := G.NewGraph()
	x := G.NewTensor(g, G.Float32, 3, G.WithShape(batch, m, k), G.WithName("x"), G.WithValue(gt.New(gt.WithShape(batch, m, k), gt.WithBacking(av))))
	w := G.NewTensor(g, G.Float32, 3, G.WithShape(batch, k, n), G.WithName("w"), G.WithValue(gt.New(gt.WithShape(batch, k, n), gt.WithBacking(bv))))
	y := G.Must(G.BatchedMatMul(x, w))
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	before := sgemmCalls.Load()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	if calls := sgemmCalls.Load() - before; calls < 1 {
		t.Fatalf("Gorgonia BatchedMatMul made %d calls to BLAS.Sgemm", calls)
	}
	got := y.Value().Data().([]float32)
	for i := 0; i < batch; i++ {
		want := refGemm(false, false, m, n, k, 1, av[i*m*k:], k, bv[i*k*n:], n, 0, nil, n)
		got64 := make([]float64, m*n)
		for j := range got64 {
			got64[j] = float64(got[i*m*n+j])
		}
		if diff := cmp.Diff(want, got64, gemmTol(k, 1, 0)); diff != "" {
			t.Fatalf("batch %d (-want +got):\n%s", i, diff)
		}
	}
}
