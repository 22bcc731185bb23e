package cuda

import (
	"strings"
	"testing"
)

func TestGridBlocks(t *testing.T) {
	for _, tc := range []struct{ n, threads, max, want int }{
		{0, 256, 100, 1}, {1, 256, 100, 1}, {256, 256, 100, 1}, {257, 256, 100, 2},
		{1 << 30, 256, 1056, 1056}, {1000, 256, 0, 4},
	} {
		if got := GridBlocks(tc.n, tc.threads, tc.max); got != tc.want {
			t.Errorf("GridBlocks(%d, %d, %d) = %d, want %d", tc.n, tc.threads, tc.max, got, tc.want)
		}
	}
}

func TestRowThreads(t *testing.T) {
	for cols := 1; cols < 20000; cols += 37 {
		n := RowThreads(cols)
		if n%32 != 0 || n < 32 || n > 1024 || (cols <= 256 && n < cols && n != 256) {
			t.Fatalf("RowThreads(%d) = %d", cols, n)
		}
	}
}

// TestKernelNamesExist checks that every name the wrappers compute is an
// entry point of an embedded module.
func TestKernelNamesExist(t *testing.T) {
	all := map[string]bool{}
	for _, m := range modules {
		for _, e := range m.Entries {
			all[e] = true
		}
	}
	var names []string
	names = append(names, "tf32gemm_nn_v4")
	for _, tf := range []bool{false, true} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				names = append(names, GemmKernel(tf, ta, tb))
			}
		}
	}
	for _, d := range []int{1, 64, 65, 128} {
		f, b := AttentionKernels(d)
		names = append(names, f, b)
	}
	for _, n := range names {
		if !all[n] {
			t.Errorf("kernel %q is not in any module", n)
		}
	}
	if GemmKernel(true, false, true) != "tf32gemm_nt" {
		t.Errorf("GemmKernel(true, false, true) = %q", GemmKernel(true, false, true))
	}
	// Tile sizes must match the kernel instantiations in attention.cu.
	src, _ := PTX("attention")
	if !strings.Contains(src, "attn_bwd_d128") || AttentionBackwardTile(128) != 16 || AttentionBackwardTile(64) != 32 {
		t.Error("attention backward tiles disagree with attention.cu")
	}
	defer func() {
		if recover() == nil {
			t.Error("AttentionKernels(129) did not panic")
		}
	}()
	AttentionKernels(129)
}

func TestGemmVec4(t *testing.T) {
	for _, c := range []struct {
		ta, tb  bool
		batch   int
		a       uintptr
		lda, sa int
		b       uintptr
		ldb, sb int
		want    bool
	}{
		{false, false, 1, 0x1000, 128, 0, 0x2000, 256, 0, true},
		{false, false, 1, 0x1004, 128, 0, 0x2000, 256, 0, false}, // A not 16-byte aligned
		{false, false, 1, 0x1000, 130, 0, 0x2000, 256, 0, false}, // lda not a multiple of 4
		{false, false, 1, 0x1000, 128, 0, 0x2000, 258, 0, false},
		{true, false, 1, 0x1000, 128, 0, 0x2000, 256, 0, false},
		{false, true, 1, 0x1000, 128, 0, 0x2000, 256, 0, false},
		{false, false, 3, 0x1000, 128, 130, 0x2000, 256, 512, false}, // batch stride
		{false, false, 3, 0x1000, 128, 128, 0x2000, 256, 512, true},
		{false, false, 1, 0x1000, 128, 130, 0x2000, 256, 0, true}, // stride unused
	} {
		if got := GemmVec4(c.ta, c.tb, c.batch, c.a, c.lda, c.sa, c.b, c.ldb, c.sb); got != c.want {
			t.Errorf("GemmVec4(%+v) = %v", c, got)
		}
	}
}

func TestCheckGemm(t *testing.T) {
	ok := []struct {
		ta, tb                   bool
		batch, m, n, k           int
		la, lda, sa, lb, ldb, sb int
		lc, ldc, sc              int
	}{
		{false, false, 1, 2, 3, 4, 8, 4, 0, 12, 3, 0, 6, 3, 0},
		{true, true, 1, 2, 3, 4, 8, 2, 0, 12, 4, 0, 6, 3, 0},
		{false, false, 3, 2, 3, 4, 24, 4, 8, 36, 3, 12, 18, 3, 6},
		{false, false, 1, 0, 3, 4, 0, 4, 0, 12, 3, 0, 0, 3, 0},
	}
	for i, c := range ok {
		if err := CheckGemm(c.ta, c.tb, c.batch, c.m, c.n, c.k, c.la, c.lda, c.sa, c.lb, c.ldb, c.sb, c.lc, c.ldc, c.sc); err != nil {
			t.Errorf("case %d: %v", i, err)
		}
	}
	bad := []struct {
		name string
		err  error
	}{
		{"short A", CheckGemm(false, false, 1, 2, 3, 4, 7, 4, 0, 12, 3, 0, 6, 3, 0)},
		{"small lda", CheckGemm(false, false, 1, 2, 3, 4, 8, 3, 0, 12, 3, 0, 6, 3, 0)},
		{"short batched C", CheckGemm(false, false, 3, 2, 3, 4, 24, 4, 8, 36, 3, 12, 17, 3, 6)},
		{"negative", CheckGemm(false, false, 1, -1, 3, 4, 8, 4, 0, 12, 3, 0, 6, 3, 0)},
	}
	for _, b := range bad {
		if b.err == nil {
			t.Errorf("%s: no error", b.name)
		}
	}
	if !strings.Contains(bad[0].err.Error(), "A has 7 elements") {
		t.Errorf("error does not name the operand: %v", bad[0].err)
	}
}
