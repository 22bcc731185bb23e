//go:build troupecuda

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestDeviceBlock(t *testing.T) {
	e := newTestEngine(t, false)
	cfg := BlockConfig{B: 2, T: 40, D: 64, H: 4}
	r := rand.New(rand.NewPCG(9, 1))
	N := cfg.B * cfg.T
	x, dy := randF32(r, N*cfg.D), randF32(r, N*cfg.D)
	p := BlockInit(cfg.D, 11)
	// Larger weights than the init so every path carries signal.
	for i := range p {
		p[i] *= 5
	}
	wy, wdx, wg := cpuBlock(p, x, dy, cfg)

	b, err := NewBlock(e, cfg, 11)
	ok(t, err)
	ok(t, e.Upload(b.Params, p))
	y, err := b.Forward(up(t, e, x))
	ok(t, err)
	approx(t, "Block y", down(t, e, y, N*cfg.D), wy, 1e-3, 1e-3)
	dx, err := b.Backward(up(t, e, dy))
	ok(t, err)
	approx(t, "Block dx", down(t, e, dx, N*cfg.D), wdx, 2e-3, 2e-3)
	got := down(t, e, b.Grads, len(wg))
	off := 0
	for _, s := range BlockParamShapes(cfg.D) {
		approx(t, "Block grad "+s.Name, got[off:off+s.Len], wg[off:off+s.Len], 2e-3, 2e-3)
		off += s.Len
	}
	// One AdamW step changes the parameters by about lr where gradients are nonzero.
	ok(t, b.Step(AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}))
	after := down(t, e, b.Params, len(p))
	var moved int
	for i := range p {
		if math.Abs(float64(after[i]-p[i])) > 5e-4 {
			moved++
		}
	}
	if moved < len(p)/2 {
		t.Errorf("AdamW step moved only %d of %d parameters", moved, len(p))
	}
}

func TestDeviceStridedCopy(t *testing.T) {
	e := newTestEngine(t, false)
	r := rand.New(rand.NewPCG(10, 1))
	rows, cols := 37, 19
	a, o := randF32(r, rows*cols), randF32(r, rows*cols)
	want := make([]float32, rows*cols)
	for i := 0; i < cols; i++ {
		for j := 0; j < rows; j++ {
			want[i*rows+j] = 0.5*o[i*rows+j] + a[j*cols+i]
		}
	}
	do := up(t, e, o)
	ok(t, e.StridedCopy(do, up(t, e, a), []int{cols, rows}, []int{1, cols}, 0.5))
	approx(t, "StridedCopy transpose", down(t, e, do, rows*cols), want, 1e-6, 1e-6)
}
