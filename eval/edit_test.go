package eval

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// editRef is the Levenshtein recurrence evaluated directly (exponential
// time, for short inputs): the definition EditDistance's two-row programme
// must agree with.
func editRef(a, b []rune) int {
	switch {
	case len(a) == 0:
		return len(b)
	case len(b) == 0:
		return len(a)
	}
	sub := editRef(a[1:], b[1:])
	if a[0] != b[0] {
		sub++
	}
	return min(sub, editRef(a[1:], b)+1, editRef(a, b[1:])+1)
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"same", "same", 0},
		{"kitten", "sitting", 3}, {"flaw", "lawn", 2}, {"矩的矢量", "矩阵的向量", 2},
	} {
		if got := EditDistance([]rune(c.a), []rune(c.b)); got != c.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	word := func() []rune {
		w := make([]rune, r.IntN(7))
		for i := range w {
			w[i] = rune('a' + r.IntN(3))
		}
		return w
	}
	for range 300 {
		a, b := word(), word()
		if got, want := EditDistance(a, b), editRef(a, b); got != want {
			t.Fatalf("EditDistance(%q, %q) = %d, the recurrence gives %d", string(a), string(b), got, want)
		}
	}
}

func ExampleEditDistance() {
	fmt.Println(EditDistance([]rune("kitten"), []rune("sitting")))
	fmt.Println(EditDistance([]string{"the", "cat", "sat"}, []string{"the", "cat", "sat", "down"}))
	// Output:
	// 3
	// 1
}
