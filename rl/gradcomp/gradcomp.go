package gradcomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Codec identifies a message encoding.
type Codec uint8

const (
	// Raw sends float32 values unchanged.
	Raw Codec = iota + 1
	// Q8 sends each value as a uint8 on a linear grid between the tensor's
	// minimum and maximum (round to nearest).
	Q8
	// TopK sends the k largest-magnitude entries as (uint32 index, float32).
	TopK
	// TopKQ8 sends the k largest-magnitude entries as (uint32 index, uint8)
	// with the values linearly quantised.
	TopKQ8
)

func (c Codec) String() string {
	switch c {
	case Raw:
		return "raw"
	case Q8:
		return "q8"
	case TopK:
		return "topk"
	case TopKQ8:
		return "topk-q8"
	}
	return fmt.Sprintf("Codec(%d)", uint8(c))
}

const headerLen = 5

// ErrCorrupt is wrapped by Decode errors for malformed messages.
var ErrCorrupt = errors.New("gradcomp: corrupt message")

// Options configures a Compressor.
type Options struct {
	// Codec is the encoding (default Raw).
	Codec Codec
	// Frac is the fraction of entries TopK and TopKQ8 keep (default 0.01);
	// at least one entry is kept.
	Frac float64
	// ErrorFeedback carries the compression residual to the next call.
	ErrorFeedback bool
	// DP, when non-nil, clips and noises the gradient before compression.
	DP *Gaussian
}

// Compressor encodes successive gradients of one tensor (or one flattened
// parameter vector). It keeps the error-feedback residual, so use one
// Compressor per tensor and sender. Not safe for concurrent use.
type Compressor struct {
	opt      Options
	residual []float32
	buf      []float32
	dec      []float32
	idx      []int32
	mags     []float32
	sel      []float32

	// BytesIn and BytesOut accumulate the float32 size (4n) and the encoded
	// size of every message.
	BytesIn, BytesOut int64
}

// New returns a Compressor.
func New(opt Options) *Compressor {
	if opt.Codec == 0 {
		opt.Codec = Raw
	}
	if opt.Frac <= 0 {
		opt.Frac = 0.01
	}
	return &Compressor{opt: opt}
}

// Residual returns the error-feedback memory (nil before the first call or
// without error feedback).
func (c *Compressor) Residual() []float32 { return c.residual }

// Saved returns the fraction of bytes saved so far: 1 − BytesOut/BytesIn.
func (c *Compressor) Saved() float64 {
	if c.BytesIn == 0 {
		return 0
	}
	return 1 - float64(c.BytesOut)/float64(c.BytesIn)
}

// Compress appends the encoding of g to dst and returns it. g is not
// modified.
func (c *Compressor) Compress(dst []byte, g []float32) []byte {
	n := len(g)
	c.buf = append(c.buf[:0], g...)
	if c.opt.DP != nil {
		c.opt.DP.Privatize(c.buf)
	}
	if c.opt.ErrorFeedback {
		if len(c.residual) != n {
			c.residual = make([]float32, n)
		}
		for i, r := range c.residual {
			c.buf[i] += r
		}
	}
	start := len(dst)
	dst = c.encode(dst, c.buf)
	if c.opt.ErrorFeedback {
		var err error
		c.dec, err = Decode(c.dec[:0], dst[start:])
		if err != nil {
			panic("gradcomp: own message does not decode: " + err.Error())
		}
		for i := range c.residual {
			c.residual[i] = c.buf[i] - c.dec[i]
		}
	}
	c.BytesIn += int64(4 * n)
	c.BytesOut += int64(len(dst) - start)
	return dst
}

func (c *Compressor) encode(dst []byte, x []float32) []byte {
	n := len(x)
	dst = append(dst, byte(c.opt.Codec))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	switch c.opt.Codec {
	case Raw:
		for _, v := range x {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		}
	case Q8:
		dst = appendQ8(dst, x)
	case TopK, TopKQ8:
		k := int(math.Ceil(c.opt.Frac * float64(n)))
		k = max(1, min(k, n))
		if n == 0 {
			k = 0
		}
		c.idx, c.mags, c.sel = topK(c.idx[:0], c.mags, c.sel, x, k)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(k))
		for _, i := range c.idx {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(i))
		}
		if c.opt.Codec == TopK {
			for _, i := range c.idx {
				dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x[i]))
			}
		} else {
			vals := c.sel[:0] // scratch no longer needed
			for _, i := range c.idx {
				vals = append(vals, x[i])
			}
			dst = appendQ8(dst, vals)
		}
	default:
		panic(fmt.Sprintf("gradcomp: unknown codec %d", c.opt.Codec))
	}
	return dst
}

// appendQ8 appends min and scale (float32) and one byte per value.
func appendQ8(dst []byte, x []float32) []byte {
	lo, hi := float32(0), float32(0)
	if len(x) > 0 {
		lo, hi = x[0], x[0]
	}
	for _, v := range x {
		lo = min(lo, v)
		hi = max(hi, v)
	}
	scale := (hi - lo) / 255
	dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(lo))
	dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(scale))
	for _, v := range x {
		var q float32
		if scale > 0 {
			q = float32(math.Round(float64((v - lo) / scale)))
		}
		dst = append(dst, byte(min(max(q, 0), 255)))
	}
	return dst
}

func readQ8(dst []float32, msg []byte, n int) ([]float32, error) {
	if len(msg) < 8+n {
		return nil, fmt.Errorf("%w: q8 payload of %d bytes for %d values", ErrCorrupt, len(msg), n)
	}
	lo := math.Float32frombits(binary.LittleEndian.Uint32(msg))
	scale := math.Float32frombits(binary.LittleEndian.Uint32(msg[4:]))
	for _, q := range msg[8 : 8+n] {
		dst = append(dst, lo+float32(q)*scale)
	}
	return dst, nil
}

// topK appends the indices of the k largest |x| to idx, in increasing
// index order; mags and sel are scratch buffers, returned grown.
func topK(idx []int32, mags, sel []float32, x []float32, k int) ([]int32, []float32, []float32) {
	if k == 0 {
		return idx, mags, sel
	}
	// threshold by selection on magnitudes
	mags = mags[:0]
	for _, v := range x {
		mags = append(mags, float32(math.Abs(float64(v))))
	}
	sel = append(sel[:0], mags...)
	th := quickselect(sel, len(sel)-k)
	// take all strictly above, then fill with ties in index order
	above := 0
	for _, m := range mags {
		if m > th {
			above++
		}
	}
	ties := k - above
	for i, m := range mags {
		if m > th || (m == th && ties > 0) {
			if m == th {
				ties--
			}
			idx = append(idx, int32(i))
		}
	}
	return idx, mags, sel
}

// quickselect returns the k-th smallest element (0-based), reordering a.
func quickselect(a []float32, k int) float32 {
	lo, hi := 0, len(a)-1
	for lo < hi {
		p := a[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for a[i] < p {
				i++
			}
			for a[j] > p {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		if k <= j {
			hi = j
		} else if k >= i {
			lo = i
		} else {
			return a[k]
		}
	}
	return a[k]
}

// MaxDecodeValues bounds the length a message may declare (default 1<<26
// values, 256 MiB of float32), so that a corrupt or hostile header cannot make
// Decode allocate without limit. Raise it for larger gradient tensors.
var MaxDecodeValues = 1 << 26

// Decode appends the gradient encoded in msg to dst and returns it.
// Malformed messages, and messages declaring more than MaxDecodeValues values,
// return an error wrapping ErrCorrupt.
func Decode(dst []float32, msg []byte) ([]float32, error) {
	if len(msg) < headerLen {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(msg))
	}
	codec := Codec(msg[0])
	n := int(binary.LittleEndian.Uint32(msg[1:]))
	if n > MaxDecodeValues {
		// A sparse message can be tiny yet declare billions of values:
		// refuse before allocating.
		return nil, fmt.Errorf("%w: declares %d values, more than MaxDecodeValues (%d)", ErrCorrupt, n, MaxDecodeValues)
	}
	body := msg[headerLen:]
	switch codec {
	case Raw:
		if len(body) != 4*n {
			return nil, fmt.Errorf("%w: raw payload of %d bytes for %d values", ErrCorrupt, len(body), n)
		}
		for i := 0; i < n; i++ {
			dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:])))
		}
		return dst, nil
	case Q8:
		if len(body) != 8+n {
			return nil, fmt.Errorf("%w: q8 payload of %d bytes for %d values", ErrCorrupt, len(body), n)
		}
		return readQ8(dst, body, n)
	case TopK, TopKQ8:
		if len(body) < 4 {
			return nil, fmt.Errorf("%w: truncated top-k header", ErrCorrupt)
		}
		k := int(binary.LittleEndian.Uint32(body))
		body = body[4:]
		want := 8 * k
		if codec == TopKQ8 {
			want = 5*k + 8
		}
		if k > n || len(body) != want {
			return nil, fmt.Errorf("%w: top-k payload of %d bytes for k=%d of %d", ErrCorrupt, len(body), k, n)
		}
		base := len(dst)
		dst = append(dst, make([]float32, n)...)
		out := dst[base:]
		var vals []float32
		if codec == TopK {
			vals = make([]float32, k)
			for j := range vals {
				vals[j] = math.Float32frombits(binary.LittleEndian.Uint32(body[4*k+4*j:]))
			}
		} else {
			var err error
			if vals, err = readQ8(nil, body[4*k:], k); err != nil {
				return nil, err
			}
		}
		for j := 0; j < k; j++ {
			i := int(binary.LittleEndian.Uint32(body[4*j:]))
			if i >= n {
				return nil, fmt.Errorf("%w: index %d ≥ %d", ErrCorrupt, i, n)
			}
			out[i] = vals[j]
		}
		return dst, nil
	}
	return nil, fmt.Errorf("%w: unknown codec %d", ErrCorrupt, msg[0])
}

// Gaussian is the Gaussian mechanism on a gradient vector: clip to L2 norm
// Clip, add N(0, (NoiseMultiplier·Clip)²) to each coordinate. See the package
// documentation for the privacy accounting.
type Gaussian struct {
	Clip            float64
	NoiseMultiplier float64
	Rng             *rand.Rand
}

// Privatize clips and noises g in place and returns its norm before
// clipping. It panics without an Rng or with a non-positive Clip.
func (d *Gaussian) Privatize(g []float32) float64 {
	if d.Rng == nil || d.Clip <= 0 {
		panic("gradcomp: Gaussian needs Rng and Clip > 0")
	}
	var n2 float64
	for _, v := range g {
		n2 += float64(v) * float64(v)
	}
	norm := math.Sqrt(n2)
	scale := 1.0
	if norm > d.Clip {
		scale = d.Clip / norm
	}
	sd := d.NoiseMultiplier * d.Clip
	for i, v := range g {
		g[i] = float32(float64(v)*scale + sd*d.Rng.NormFloat64())
	}
	return norm
}

// Epsilon returns the ε of (ε, δ)-DP after steps releases of the Gaussian
// mechanism with noise multiplier sigma (noise std / L2 sensitivity), by RDP
// composition and the standard conversion (Mironov 2017, Prop. 3):
// ε = T/(2σ²) + sqrt(2T·log(1/δ))/σ, the exact minimum over the RDP order α
// of Tα/(2σ²) + log(1/δ)/(α−1).
func Epsilon(sigma float64, steps int, delta float64) float64 {
	if sigma <= 0 || delta <= 0 || delta >= 1 {
		return math.Inf(1)
	}
	a := float64(steps) / (2 * sigma * sigma)
	return a + 2*math.Sqrt(a*math.Log(1/delta))
}
