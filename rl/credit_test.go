package rl

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestComponentRewards checks the decoupled normalization against
// examples computed by hand.
func TestComponentRewards(t *testing.T) {
	tests := []struct {
		name    string
		groups  []string
		comps   []map[string]float64
		weights map[string]float64
		want    []float64
	}{{
		// Group a: "team" is constant (no signal); "own" is 0 and 2:
		// mean 1, std 1, so -1 and +1, weighted 0.5. Group b: "team" is 0
		// and 2 (-1, +1); "own" constant.
		name:    "per group, per component",
		groups:  []string{"a", "a", "b", "b"},
		comps:   []map[string]float64{{"team": 1, "own": 0}, {"team": 1, "own": 2}, {"team": 0, "own": 1}, {"team": 2, "own": 1}},
		weights: map[string]float64{"own": 0.5},
		want:    []float64{-0.5, 0.5, -1, 1},
	}, {
		// A large-scale component does not swamp a small one: "big" is
		// 0/100/0/100 and "small" 0/0/1/1 in one group; each is ±1 after
		// normalization, so the episode best on both (the last) gets 2
		// and the one worst on both (the first) -2.
		name:   "scale does not matter",
		groups: []string{"g", "g", "g", "g"},
		comps:  []map[string]float64{{"big": 0, "small": 0}, {"big": 100, "small": 0}, {"big": 0, "small": 1}, {"big": 100, "small": 1}},
		want:   []float64{-2, 0, 0, 2},
	}, {
		// A missing component counts as 0: "bonus" is 3 for one episode of
		// three: mean 1, std √2.
		name:   "missing component",
		groups: []string{"g", "g", "g"},
		comps:  []map[string]float64{{"bonus": 3}, {}, nil},
		want:   []float64{2 / 1.4142135623730951, -1 / 1.4142135623730951, -1 / 1.4142135623730951},
	}}
	for _, tt := range tests {
		got := ComponentRewards(tt.groups, tt.comps, tt.weights, 0)
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}
