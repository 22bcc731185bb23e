package distill

import (
	"fmt"
	"strings"
	"time"

	G "gorgonia.org/gorgonia"
)

// Surrogate returns a scalar node whose gradient with respect to logits is
// grad: sum(logits ⊙ grad), with grad an input node that is filled with
// dL/dlogits computed outside the graph (by Loss or Binary) before each run.
// Backpropagating it through a Gorgonia model trains the model on a loss
// evaluated in Go.
func Surrogate(logits, grad *G.Node) (*G.Node, error) {
	if !logits.Shape().Eq(grad.Shape()) {
		panic(fmt.Sprintf("distill: Surrogate logits shape %v != grad shape %v", logits.Shape(), grad.Shape()))
	}
	p, err := G.HadamardProd(logits, grad)
	if err != nil {
		return nil, fmt.Errorf("distill: surrogate: %w", err)
	}
	return G.Sum(p)
}

// Report compares a teacher and its distilled student.
type Report struct {
	Metric                         string        // name of the quality metric (for example "AUC")
	TeacherQuality, StudentQuality float64       // the metric for each
	TeacherParams, StudentParams   int           // parameter counts
	TeacherTime, StudentTime       time.Duration // inference time per example
}

// Retention is the student's quality as a fraction of the teacher's.
func (r Report) Retention() float64 { return r.StudentQuality / r.TeacherQuality }

// SpeedUp is how many times faster the student infers.
func (r Report) SpeedUp() float64 { return float64(r.TeacherTime) / float64(r.StudentTime) }

// Markdown renders the report as a table.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| model | %s | parameters | inference / example |\n|---|---|---|---|\n", r.Metric)
	fmt.Fprintf(&b, "| teacher | %.4f | %d | %v |\n", r.TeacherQuality, r.TeacherParams, r.TeacherTime)
	fmt.Fprintf(&b, "| student | %.4f | %d | %v |\n", r.StudentQuality, r.StudentParams, r.StudentTime)
	fmt.Fprintf(&b, "\nStudent keeps %.1f%% of the teacher's %s at %.1f× the speed with %.1f× fewer parameters.\n",
		100*r.Retention(), r.Metric, r.SpeedUp(), float64(r.TeacherParams)/float64(max(r.StudentParams, 1)))
	return b.String()
}

// CountParams sums the element counts of nodes.
func CountParams(nodes G.Nodes) int {
	n := 0
	for _, p := range nodes {
		n += p.Shape().TotalSize()
	}
	return n
}
