package hf

import "math"

// rope holds the rotary-position frequencies of Hugging Face's rotate_half
// convention: a head's dimension j < D/2 pairs with j + D/2 and turns by
// angle pos·invFreq[j].
type rope struct {
	half    int
	invFreq []float64
	// cos and sin are tabulated for positions below len(cos)/half.
	cos, sin []float32
}

// newRope computes the inverse frequencies as transformers does, including
// Llama 3's frequency-dependent scaling.
func newRope(c Config) *rope {
	d := c.HeadDim
	r := &rope{half: d / 2, invFreq: make([]float64, d/2)}
	for j := range r.invFreq {
		// transformers: 1 / base^(arange(0, d, 2).float() / d), in float32.
		r.invFreq[j] = float64(float32(1 / math.Pow(c.RopeTheta, float64(float32(2*j)/float32(d)))))
	}
	if s := c.RopeScaling; s != nil {
		switch s.Type {
		case "linear":
			for j := range r.invFreq {
				r.invFreq[j] /= s.Factor
			}
		case "llama3":
			old := float64(s.OriginalMaxPositionEmbeddings)
			lowWave := old / s.LowFreqFactor
			highWave := old / s.HighFreqFactor
			for j, f := range r.invFreq {
				wave := 2 * math.Pi / f
				switch {
				case wave < highWave: // high frequency: kept
				case wave > lowWave: // low frequency: interpolated
					r.invFreq[j] = f / s.Factor
				default: // between: a smooth blend of the two
					smooth := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
					r.invFreq[j] = (1-smooth)*f/s.Factor + smooth*f
				}
			}
		}
	}
	r.tabulate(min(c.MaxPos, ropeTable))
	return r
}

// ropeTable is the number of positions tabulated when a model loads; the
// tables are then read-only, so models are safe for concurrent use, and
// positions beyond them are computed per call.
const ropeTable = 8192

// tabulate fills cos and sin for positions below n.
func (r *rope) tabulate(n int) {
	r.cos = make([]float32, n*r.half)
	r.sin = make([]float32, n*r.half)
	for p := 0; p < n; p++ {
		r.angles(r.cos[p*r.half:(p+1)*r.half], r.sin[p*r.half:(p+1)*r.half], p)
	}
}

// angles computes one position's cosines and sines.
func (r *rope) angles(cos, sin []float32, p int) {
	for j, f := range r.invFreq {
		// transformers multiplies position by frequency in float32.
		a := float64(float32(p) * float32(f))
		cos[j] = float32(math.Cos(a))
		sin[j] = float32(math.Sin(a))
	}
}

// rotate turns each of the heads of x (heads×2·half, contiguous) to
// position pos; inverse turns them back (the gradient of rotate, as the
// rotation is orthogonal).
func (r *rope) rotate(x []float32, heads, pos int, inverse bool) {
	h := r.half
	var cs, sn []float32
	if (pos+1)*h <= len(r.cos) {
		cs, sn = r.cos[pos*h:(pos+1)*h], r.sin[pos*h:(pos+1)*h]
	} else {
		cs, sn = make([]float32, h), make([]float32, h)
		r.angles(cs, sn, pos)
	}
	for k := 0; k < heads; k++ {
		x1 := x[k*2*h : k*2*h+h]
		x2 := x[k*2*h+h : (k+1)*2*h]
		if inverse {
			for j := range x1 {
				a, b := x1[j], x2[j]
				x1[j] = a*cs[j] + b*sn[j]
				x2[j] = b*cs[j] - a*sn[j]
			}
			continue
		}
		for j := range x1 {
			a, b := x1[j], x2[j]
			x1[j] = a*cs[j] - b*sn[j]
			x2[j] = b*cs[j] + a*sn[j]
		}
	}
}
