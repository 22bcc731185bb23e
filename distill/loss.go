package distill

import (
	"fmt"
	"math"
)

// Float is the element type of logits.
type Float interface{ ~float32 | ~float64 }

// Options configure the distillation loss.
type Options struct {
	// Temperature softens both distributions (Hinton et al. use 2-20); 0 means 2.
	Temperature float64
	// Alpha weighs the soft-target term; 1-Alpha weighs the hard-label
	// cross-entropy. Alpha must be in [0, 1].
	Alpha float64
	// IgnoreIndex marks rows (tokens) left out of the loss, such as padding
	// in a language model; rows whose label equals it contribute nothing.
	// Use a negative value (for instance -1); labels of counted rows must be
	// in [0, classes).
	IgnoreIndex int
}

func (o Options) temperature() float64 {
	if o.Temperature == 0 {
		return 2
	}
	return o.Temperature
}

// Loss is the knowledge-distillation loss of Hinton, Vinyals & Dean,
// "Distilling the Knowledge in a Neural Network" (2015), averaged over the
// counted rows of row-major (rows, classes) logits:
//
//	L = Alpha·T²·KL(softmax(t/T) ‖ softmax(s/T)) + (1-Alpha)·CE(y, softmax(s))
//
// where s are the student's logits, t the teacher's and T the temperature.
// The T² factor keeps the soft term's gradient on the scale of the hard one
// as T changes. For a language model each row is a token position
// (token-level KL); for a classifier each row is an example. When dst is not
// nil it receives dL/ds (same layout as student); rows that are ignored get
// zero gradient. It returns the loss and the number of counted rows.
func Loss[F Float](dst, student, teacher []F, labels []int, classes int, opt Options) (float64, int) {
	if classes <= 0 || len(student)%classes != 0 || len(teacher) != len(student) || len(labels)*classes != len(student) {
		panic(fmt.Sprintf("distill: student %d, teacher %d logits, %d labels, %d classes do not agree", len(student), len(teacher), len(labels), classes))
	}
	if dst != nil && len(dst) != len(student) {
		panic(fmt.Sprintf("distill: dst has %d elements, want %d", len(dst), len(student)))
	}
	if opt.Alpha < 0 || opt.Alpha > 1 {
		panic(fmt.Sprintf("distill: Alpha %g outside [0,1]", opt.Alpha))
	}
	T := opt.temperature()
	rows := len(labels)
	ps := make([]float64, classes)  // softmax(s/T)
	pt := make([]float64, classes)  // softmax(t/T)
	p1 := make([]float64, classes)  // softmax(s)
	lps := make([]float64, classes) // log softmax(s/T)
	lpt := make([]float64, classes)
	lp1 := make([]float64, classes)
	var loss float64
	n := 0
	for r := 0; r < rows; r++ {
		if labels[r] == opt.IgnoreIndex {
			continue
		}
		if labels[r] < 0 || labels[r] >= classes {
			panic(fmt.Sprintf("distill: label %d of row %d outside [0,%d)", labels[r], r, classes))
		}
		n++
	}
	if n == 0 {
		if dst != nil {
			clear(dst)
		}
		return 0, 0
	}
	inv := 1 / float64(n)
	for r := 0; r < rows; r++ {
		s, t := student[r*classes:(r+1)*classes], teacher[r*classes:(r+1)*classes]
		if labels[r] == opt.IgnoreIndex {
			if dst != nil {
				clear(dst[r*classes : (r+1)*classes])
			}
			continue
		}
		logSoftmax(lps, ps, s, 1/T)
		logSoftmax(lpt, pt, t, 1/T)
		logSoftmax(lp1, p1, s, 1)
		var kl float64
		for k := 0; k < classes; k++ {
			if pt[k] > 0 {
				kl += pt[k] * (lpt[k] - lps[k])
			}
		}
		ce := -lp1[labels[r]]
		loss += (opt.Alpha*T*T*kl + (1-opt.Alpha)*ce) * inv
		if dst != nil {
			d := dst[r*classes : (r+1)*classes]
			for k := 0; k < classes; k++ {
				g := opt.Alpha * T * (ps[k] - pt[k])
				hard := p1[k]
				if k == labels[r] {
					hard--
				}
				g += (1 - opt.Alpha) * hard
				d[k] = F(g * inv)
			}
		}
	}
	return loss, n
}

// logSoftmax writes log softmax(scale·x) and softmax(scale·x).
func logSoftmax[F Float](lp, p []float64, x []F, scale float64) {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v)*scale)
	}
	var z float64
	for k, v := range x {
		p[k] = math.Exp(float64(v)*scale - mx)
		z += p[k]
	}
	lz := math.Log(z)
	for k, v := range x {
		lp[k] = float64(v)*scale - mx - lz
		p[k] /= z
	}
}

// Binary is Loss for a binary classifier with one logit per example (the
// log-odds of class 1), treated as the two-class logits (0, z). dst, when
// not nil, receives dL/dz.
func Binary[F Float](dst, student, teacher []F, labels []int, opt Options) (float64, int) {
	n := len(student)
	if len(teacher) != n || len(labels) != n {
		panic(fmt.Sprintf("distill: Binary got %d student, %d teacher logits, %d labels", n, len(teacher), len(labels)))
	}
	s2, t2 := make([]F, 2*n), make([]F, 2*n)
	for i := range student {
		s2[2*i+1], t2[2*i+1] = student[i], teacher[i]
	}
	var d2 []F
	if dst != nil {
		if len(dst) != n {
			panic(fmt.Sprintf("distill: dst has %d elements, want %d", len(dst), n))
		}
		d2 = make([]F, 2*n)
	}
	loss, cnt := Loss(d2, s2, t2, labels, 2, opt)
	for i := range dst {
		dst[i] = d2[2*i+1]
	}
	return loss, cnt
}
