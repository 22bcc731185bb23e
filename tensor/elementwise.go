package tensor

import (
	"fmt"
	"math"
)

// Element-wise kernels over equal-length []float32 slices. dst may alias any
// input. Lengths that differ panic with a message naming them.

func kSameLen(op string, names string, lens ...int) {
	for _, l := range lens[1:] {
		if l != lens[0] {
			panic(fmt.Sprintf("tensor: %s: lengths of %s differ: %v", op, names, lens))
		}
	}
}

// VecAdd sets dst[i] = a[i] + b[i].
func VecAdd(dst, a, b []float32) {
	kSameLen("VecAdd", "(dst, a, b)", len(dst), len(a), len(b))
	a, b = a[:len(dst)], b[:len(dst)]
	if kUseAVX2 && len(dst) >= 8 {
		addAVX2(dst, a, b)
		k := len(dst) &^ 7
		dst, a, b = dst[k:], a[k:], b[k:]
	}
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

// VecSub sets dst[i] = a[i] - b[i].
func VecSub(dst, a, b []float32) {
	kSameLen("VecSub", "(dst, a, b)", len(dst), len(a), len(b))
	a, b = a[:len(dst)], b[:len(dst)]
	if kUseAVX2 && len(dst) >= 8 {
		subAVX2(dst, a, b)
		k := len(dst) &^ 7
		dst, a, b = dst[k:], a[k:], b[k:]
	}
	for i := range dst {
		dst[i] = a[i] - b[i]
	}
}

// VecMul sets dst[i] = a[i] · b[i].
func VecMul(dst, a, b []float32) {
	kSameLen("VecMul", "(dst, a, b)", len(dst), len(a), len(b))
	a, b = a[:len(dst)], b[:len(dst)]
	if kUseAVX2 && len(dst) >= 8 {
		mulAVX2(dst, a, b)
		k := len(dst) &^ 7
		dst, a, b = dst[k:], a[k:], b[k:]
	}
	for i := range dst {
		dst[i] = a[i] * b[i]
	}
}

// VecDiv sets dst[i] = a[i] / b[i].
func VecDiv(dst, a, b []float32) {
	kSameLen("VecDiv", "(dst, a, b)", len(dst), len(a), len(b))
	a, b = a[:len(dst)], b[:len(dst)]
	if kUseAVX2 && len(dst) >= 8 {
		divAVX2(dst, a, b)
		k := len(dst) &^ 7
		dst, a, b = dst[k:], a[k:], b[k:]
	}
	for i := range dst {
		dst[i] = a[i] / b[i]
	}
}

// VecAddScalar sets dst[i] = a[i] + s.
func VecAddScalar(dst, a []float32, s float32) {
	kSameLen("VecAddScalar", "(dst, a)", len(dst), len(a))
	a = a[:len(dst)]
	if kUseAVX2 && len(dst) >= 8 {
		addScalarAVX2(dst, a, s)
		k := len(dst) &^ 7
		dst, a = dst[k:], a[k:]
	}
	for i := range dst {
		dst[i] = a[i] + s
	}
}

// VecMulScalar sets dst[i] = a[i] · s.
func VecMulScalar(dst, a []float32, s float32) {
	kSameLen("VecMulScalar", "(dst, a)", len(dst), len(a))
	a = a[:len(dst)]
	if kUseAVX2 && len(dst) >= 8 {
		scaleAVX2(dst, a, s)
		k := len(dst) &^ 7
		dst, a = dst[k:], a[k:]
	}
	for i := range dst {
		dst[i] = a[i] * s
	}
}

// VecScalarSub sets dst[i] = s - a[i].
func VecScalarSub(dst, a []float32, s float32) {
	kSameLen("VecScalarSub", "(dst, a)", len(dst), len(a))
	a = a[:len(dst)]
	for i := range dst {
		dst[i] = s - a[i]
	}
}

// VecScalarDiv sets dst[i] = s / a[i].
func VecScalarDiv(dst, a []float32, s float32) {
	kSameLen("VecScalarDiv", "(dst, a)", len(dst), len(a))
	a = a[:len(dst)]
	for i := range dst {
		dst[i] = s / a[i]
	}
}

// AddRowVec adds the length-cols vector v to each of the rows of a
// (rows×cols), writing dst: the bias-add broadcast.
func AddRowVec(dst, a, v []float32, rows, cols int) {
	kCheckRows("AddRowVec", rows, cols, len(dst), len(a))
	if len(v) != cols {
		panic(fmt.Sprintf("tensor: AddRowVec: vector has length %d, rows are %d×%d", len(v), rows, cols))
	}
	for r := 0; r < rows; r++ {
		d, s := dst[r*cols:(r+1)*cols], a[r*cols:(r+1)*cols]
		VecAdd(d, s, v)
	}
}

// SumCols writes the column sums of src (rows×cols) to dst (length cols): the
// gradient of AddRowVec with respect to the vector.
func SumCols(dst, src []float32, rows, cols int) {
	kCheckRows("SumCols", rows, cols, len(src))
	if len(dst) != cols {
		panic(fmt.Sprintf("tensor: SumCols: dst has length %d, src is %d×%d", len(dst), rows, cols))
	}
	clear(dst)
	for r := 0; r < rows; r++ {
		VecAdd(dst, dst, src[r*cols:(r+1)*cols])
	}
}

// kCheckRows panics unless every length equals rows·cols.
func kCheckRows(op string, rows, cols int, lens ...int) {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("tensor: %s: negative shape %d×%d", op, rows, cols))
	}
	for _, l := range lens {
		if l != rows*cols {
			panic(fmt.Sprintf("tensor: %s: shape %d×%d needs %d elements, slice lengths are %v", op, rows, cols, rows*cols, lens))
		}
	}
}

// VecReLU sets dst[i] = max(src[i], 0).
func VecReLU(dst, src []float32) {
	kSameLen("VecReLU", "(dst, src)", len(dst), len(src))
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] = max(x, 0)
	}
}

// ReLUBackward sets dx[i] = dy[i] where x[i] > 0, else 0.
func ReLUBackward(dx, dy, x []float32) {
	kSameLen("ReLUBackward", "(dx, dy, x)", len(dx), len(dy), len(x))
	dy, x = dy[:len(dx)], x[:len(dx)]
	for i := range dx {
		if x[i] > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// VecExp sets dst[i] = e**src[i] (see Exp32 for accuracy and range).
func VecExp(dst, src []float32) {
	kSameLen("VecExp", "(dst, src)", len(dst), len(src))
	src = src[:len(dst)]
	if kUseAVX2 && len(dst) >= 8 {
		kExpShiftSum(dst, src, 0)
		k := len(dst) &^ 7
		dst, src = dst[k:], src[k:]
	}
	for i, x := range src {
		dst[i] = Exp32(x)
	}
}

// ExpBackward sets dx = dy·y where y = exp(x) is the forward output.
func ExpBackward(dx, dy, y []float32) { VecMul(dx, dy, y) }

// VecLog sets dst[i] = log(src[i]) (see Log32).
func VecLog(dst, src []float32) {
	kSameLen("VecLog", "(dst, src)", len(dst), len(src))
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] = Log32(x)
	}
}

// LogBackward sets dx = dy / x.
func LogBackward(dx, dy, x []float32) { VecDiv(dx, dy, x) }

// VecTanh sets dst[i] = tanh(src[i]).
func VecTanh(dst, src []float32) {
	kSameLen("VecTanh", "(dst, src)", len(dst), len(src))
	src = src[:len(dst)]
	if kUseAVX2 && len(dst) >= 8 {
		tanhAVX2(dst, src)
		k := len(dst) &^ 7
		dst, src = dst[k:], src[k:]
	}
	for i, x := range src {
		dst[i] = Tanh32(x)
	}
}

// TanhBackward sets dx = dy·(1 - y²) where y = tanh(x) is the forward output.
func TanhBackward(dx, dy, y []float32) {
	kSameLen("TanhBackward", "(dx, dy, y)", len(dx), len(dy), len(y))
	dy, y = dy[:len(dx)], y[:len(dx)]
	for i := range dx {
		dx[i] = dy[i] * (1 - y[i]*y[i])
	}
}

// VecSigmoid sets dst[i] = 1/(1+e**-src[i]).
func VecSigmoid(dst, src []float32) {
	kSameLen("VecSigmoid", "(dst, src)", len(dst), len(src))
	src = src[:len(dst)]
	if kUseAVX2 && len(dst) >= 8 {
		kSigmoidVec(dst, src)
		k := len(dst) &^ 7
		dst, src = dst[k:], src[k:]
	}
	for i, x := range src {
		x = -x
		y := min(max(x, exp32Lo), exp32Hi)
		t := y*log2e32 + roundMag
		n := math.Float32bits(t) - math.Float32bits(roundMag)
		fn := t - roundMag
		r := y - fn*ln2Hi32 - fn*ln2Lo32
		p := 1 + r*(1+r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
		p *= math.Float32frombits((n + 127) << 23)
		if x < exp32Lo {
			p = 0
		}
		dst[i] = 1 / (1 + p)
	}
}

// SigmoidBackward sets dx = dy·y·(1-y) where y is the forward output.
func SigmoidBackward(dx, dy, y []float32) {
	kSameLen("SigmoidBackward", "(dx, dy, y)", len(dx), len(dy), len(y))
	dy, y = dy[:len(dx)], y[:len(dx)]
	for i := range dx {
		dx[i] = dy[i] * y[i] * (1 - y[i])
	}
}
