package ensemble

import (
	"fmt"
	"math"
	"testing"
)

func TestSchedulerFloorAndTemperature(t *testing.T) {
	for _, tc := range []struct {
		temp, floor float64
	}{{0.01, 0.1}, {1, 0.05}, {100, 0}, {0.1, 0.25}} {
		s := NewScheduler(4, tc.temp, tc.floor, 0)
		for i, c := range []float64{1, 0.5, -2, 0.9} {
			s.Observe(i, c)
		}
		sh := s.Shares()
		var sum float64
		for i, v := range sh {
			sum += v
			if v < tc.floor-1e-12 {
				t.Fatalf("T=%g floor=%g: agent %d share %g below floor", tc.temp, tc.floor, i, v)
			}
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Fatalf("shares sum %g", sum)
		}
		if !(sh[0] >= sh[3] && sh[3] >= sh[1] && sh[1] >= sh[2]) {
			t.Fatalf("shares not ordered by contribution: %v", sh)
		}
		alloc := s.Allocate(100)
		tot := 0
		for i, a := range alloc {
			tot += a
			if a < int(tc.floor*100) {
				t.Fatalf("agent %d got %d units, floor %g", i, a, tc.floor)
			}
		}
		if tot != 100 {
			t.Fatalf("allocated %d", tot)
		}
		switch {
		case tc.temp <= 0.01: // winner takes all above the floor
			if math.Abs(sh[0]-(1-3*tc.floor)) > 1e-3 {
				t.Fatalf("low temperature: %v", sh)
			}
		case tc.temp >= 100: // nearly uniform
			if math.Abs(sh[0]-sh[2]) > 0.02 {
				t.Fatalf("high temperature: %v", sh)
			}
		}
	}
	// The moving average forgets with Decay.
	s := NewScheduler(2, 1, 0, 0.5)
	s.Observe(0, 2)
	s.Observe(0, 0)
	if c := s.Contributions(); c[0] != 1 {
		t.Fatalf("EMA %v", c)
	}
}

func TestRolesReassignment(t *testing.T) {
	r := NewRoles(4, 0)
	for i, c := range []float64{0.1, 0.9, 0.5, 0.3} {
		r.Observe(i, c)
	}
	got := r.Reassign(0)
	want := []Role{Optimizer, Optimizer, Validator, Optimizer}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("easy round: %v, want %v", got, want)
	}
	// Hard task: both non-leading non-validators explore, weakest first.
	got = r.Reassign(1)
	want = []Role{Explorer, Optimizer, Validator, Explorer}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hard round: %v, want %v", got, want)
	}
	// Contributions change: agent 0 becomes best.
	for i, c := range []float64{2, 0.1, 0.5, 0.3} {
		r.Observe(i, c)
	}
	got = r.Reassign(0.3)
	want = []Role{Optimizer, Explorer, Validator, Optimizer}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after change: %v, want %v", got, want)
	}
	if len(r.History) == 0 || r.History[len(r.History)-1].Round != 3 {
		t.Fatalf("history %+v", r.History)
	}
	for _, a := range r.History {
		if a.From == a.To {
			t.Fatalf("logged a non-change %+v", a)
		}
	}
}

func ExampleScheduler() {
	s := NewScheduler(3, 0.5, 0.1, 0)
	s.Observe(0, 1.0) // recent reward contributions
	s.Observe(1, 0.2)
	s.Observe(2, 0.0)
	fmt.Println(s.Allocate(100))
	// Output: [62 21 17]
}

func ExampleRoles() {
	r := NewRoles(3, 0)
	for i, c := range []float64{0.2, 0.8, 0.5} {
		r.Observe(i, c)
	}
	fmt.Println(r.Reassign(0.9))
	for _, a := range r.History {
		fmt.Println(a.Agent, a.From, "->", a.To)
	}
	// Output:
	// [explorer optimizer validator]
	// 0 optimizer -> explorer
	// 2 optimizer -> validator
}
