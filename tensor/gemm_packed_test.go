package tensor

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestGemmPacked(t *testing.T) {
	// Shapes around the blocking: k past kc (256), n past nc and not whole
	// panels, one row (decoding), a LoRA adapter's products (rank 16), and
	// enough work to split over rows or over columns.
	cases := []struct {
		m, n, k, pad   int
		transA, transB bool
		alpha, beta    float32
	}{
		{1, 16, 896, 0, false, true, 1, 0},
		{1, 4864, 16, 0, false, false, 0.5, 1},
		{8, 16, 4864, 2, false, true, 1, 0},
		{3, 700, 600, 3, true, false, 2, 0.25},
		{200, 33, 300, 1, false, true, 1, 1},
		{40, 1100, 70, 0, true, true, -1, 0},
		{5, 7, 1, 0, false, false, 1, 0},
		{0, 10, 10, 0, false, false, 1, 0},
		{4, 10, 0, 0, false, false, 1, 0.5},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("m=%d/n=%d/k=%d/tA=%v/tB=%v", tc.m, tc.n, tc.k, tc.transA, tc.transB)
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tc.m), uint64(tc.n*1000+tc.k)))
			ar, ac, br, bc := tc.m, tc.k, tc.k, tc.n
			if tc.transA {
				ar, ac = ac, ar
			}
			if tc.transB {
				br, bc = bc, br
			}
			lda, ldb, ldc := max(ac, 1)+tc.pad, max(bc, 1)+tc.pad, max(tc.n, 1)+tc.pad
			a, b, c := randSlice(r, ar*lda), randSlice(r, br*ldb), randSlice(r, tc.m*ldc)
			pb := PackB(tc.transB, tc.k, tc.n, b, ldb)
			if pb.K() != tc.k || pb.N() != tc.n {
				t.Fatalf("PackB: %d×%d, want %d×%d", pb.K(), pb.N(), tc.k, tc.n)
			}
			ref := refGemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
			for _, threads := range []int{1, 2, 3} {
				want := append([]float32(nil), c...)
				gemmParallel(gemmDefault, threads, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
				got := append([]float32(nil), c...)
				gemmParallelFrom(pb.kern, threads, tc.transA, tc.m, tc.n, tc.k, tc.alpha, a, lda, bSource{packed: pb}, tc.beta, got, ldc)
				for i := range got {
					if !sameBits(got[i], want[i]) {
						t.Fatalf("threads %d: C[%d] = %v, Gemm gives %v", threads, i, got[i], want[i])
					}
				}
				g64 := make([]float64, tc.m*tc.n)
				for i := 0; i < tc.m; i++ {
					for j := 0; j < tc.n; j++ {
						g64[i*tc.n+j] = float64(got[i*ldc+j])
					}
				}
				if d := diffGemm(ref, g64, tc.k, tc.alpha, tc.beta); d != "" {
					t.Fatalf("threads %d: against the float64 reference (-want +got):\n%s", threads, d)
				}
			}
		})
	}
}

func TestGemmPackedPanics(t *testing.T) {
	pb := PackB(false, 4, 3, make([]float32, 12), 3)
	for _, tc := range []struct {
		name, want string
		fn         func()
	}{
		{"short B", "PackB: B is 4×3 with ld 3, needs 12 elements, has 11", func() { PackB(false, 4, 3, make([]float32, 11), 3) }},
		{"small ldb", "leading dimension is 2 (want ≥ 3)", func() { PackB(true, 3, 3, make([]float32, 9), 2) }},
		{"negative", "negative size k=-1", func() { PackB(false, -1, 3, nil, 3) }},
		{"short A", "GemmPacked: A is 2×4 with ld 4, needs 8 elements, has 7", func() { GemmPacked(false, 2, 1, make([]float32, 7), 4, pb, 0, make([]float32, 6), 3) }},
		{"short C", "GemmPacked: C is 2×3 with ld 3, needs 6 elements, has 5", func() { GemmPacked(false, 2, 1, make([]float32, 8), 4, pb, 0, make([]float32, 5), 3) }},
		{"nil", "nil PackedB", func() { GemmPacked(false, 2, 1, make([]float32, 8), 4, nil, 0, make([]float32, 6), 3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, tc.want) {
					t.Fatalf("panic %q, want it to contain %q", msg, tc.want)
				}
			}()
			tc.fn()
		})
	}
}
