package tensor

import "testing"

// An inner dimension of zero is a valid product: every element of the result
// is an empty sum, so MatMul must return zeros, not panic on a leading
// dimension of 0.
func TestMatMulEmptyInner(t *testing.T) {
	for _, tc := range []struct{ a, b, want []int }{
		{[]int{3, 0}, []int{0, 4}, []int{3, 4}},
		{[]int{2, 3, 0}, []int{2, 0, 5}, []int{2, 3, 5}},
		{[]int{2, 3, 0}, []int{0, 5}, []int{2, 3, 5}},
	} {
		c := Full(7, tc.want...) // garbage that must be overwritten
		got := MatMul(c, New(tc.a...), New(tc.b...))
		for i, v := range Data(got) {
			if v != 0 {
				t.Fatalf("MatMul %v·%v: element %d = %v, want 0", tc.a, tc.b, i, v)
			}
		}
	}
}
