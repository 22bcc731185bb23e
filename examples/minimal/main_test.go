package main

import (
	"io"
	"testing"
)

// TestRewardRises runs the example (seeded, so the curve is the same every
// run) and checks that training raised the reward: the last three steps'
// mean against the first three's.
func TestRewardRises(t *testing.T) {
	curve, err := run(15, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	mean := func(xs []float64) float64 {
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	first, last := mean(curve[:3]), mean(curve[len(curve)-3:])
	t.Logf("mean reward per step: %.2f", curve)
	if !(last > first+0.4) {
		t.Fatalf("reward did not rise: first three steps %.2f, last three %.2f", first, last)
	}
}

func TestReward(t *testing.T) {
	for _, tt := range []struct {
		answer string
		want   float64
	}{{"ab", 1}, {"a", 0.5}, {"A!", 0}, {"", 0}, {"z\ufffd", 0.5}} {
		if got := reward(tt.answer); got != tt.want {
			t.Errorf("reward(%q) = %v, want %v", tt.answer, got, tt.want)
		}
	}
}
