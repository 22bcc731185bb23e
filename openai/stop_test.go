package openai

import (
	"strings"
	"testing"
)

// sequence inside one long token, one spanning tokens, special tokens.
func TestStopFunc(t *testing.T) {
	vocab := map[int]string{
		0: "aa" + "STOP" + strings.Repeat("b", 40), // long token with a stop near its start
		1: "xxST", 2: "OPyy", 3: "", 4: "S", 5: "T", 6: "O", 7: "P",
	}
	tb := func(t int) []byte {
		if t == 3 {
			return nil
		}
		return []byte(vocab[t])
	}
	cases := []struct {
		toks  []int
		stops []string
		at    int // index of the token that stops; -1: none
	}{
		{[]int{0}, []string{"STOP"}, 0},
		{[]int{1, 2}, []string{"STOP"}, 1},
		{[]int{4, 5, 3, 6, 7}, []string{"STOP"}, 4},
		{[]int{4, 5, 3, 6, 1}, []string{"STOP"}, -1},
		{[]int{1, 1, 1, 2}, []string{"zz", "TOPy"}, 3},
		{[]int{4, 4, 4, 4, 4, 4, 5}, []string{"ST"}, 6},
		{[]int{0, 1}, []string{"bx"}, 1},
	}
	for _, c := range cases {
		stop := stopFunc(tb, 2, c.stops)
		got := -1
		for k := range c.toks {
			if stop(1, c.toks[:k+1]) {
				got = k
				break
			}
		}
		if got != c.at {
			t.Errorf("tokens %v, stops %q: stopped at %d, want %d", c.toks, c.stops, got, c.at)
		}
	}
	// a long run of tokens without a stop keeps its memory bounded and
	// still finds a stop that spans the trimmed boundary
	stop := stopFunc(tb, 1, []string{"bbxxSTOP"})
	toks := []int{}
	for k := 0; k < 200; k++ {
		toks = append(toks, 0)
		if stop(0, toks) {
			t.Fatalf("stopped at %d", k)
		}
	}
	toks = append(toks, 1)
	if stop(0, toks) {
		t.Fatal("stopped on a proper prefix of the stop sequence")
	}
	if !stop(0, append(toks, 2)) {
		t.Fatal("missed a stop sequence spanning three tokens after a long run")
	}
}
