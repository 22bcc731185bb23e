package main

import (
	"testing"

	"github.com/troupe-ml/troupe/nn"
)

// TestSnapshotRestore checks that the checkpoint selection puts a model
// back exactly to the snapshot it keeps, whatever training did since.
func TestSnapshotRestore(t *testing.T) {
	lm := nn.NewLM(nn.NewStore(3), nn.LMConfig{Vocab: 11, Dim: 8, Layers: 1, Heads: 2, MaxLen: 16, Positions: nn.Rotary, CopyDim: 4})
	s := &selector{models: [2]*nn.LM{lm, lm}}
	s.snap[0] = snapshot(lm, nil)
	want := snapshot(lm, nil)
	for _, p := range lm.Store.Params() {
		for i := range p.Data() {
			p.Data()[i] += 1
		}
	}
	s.restore()
	for j, p := range lm.Store.Params() {
		for i, x := range p.Data() {
			if x != want[j][i] {
				t.Fatalf("param %s[%d] = %v after restore, want %v", p.Name, i, x, want[j][i])
			}
		}
	}
	// A reused snapshot buffer takes the new values.
	lm.Store.Params()[0].Data()[0] = 42
	if got := snapshot(lm, s.snap[0]); got[0][0] != 42 {
		t.Fatalf("reused snapshot has %v, want 42", got[0][0])
	}
}
