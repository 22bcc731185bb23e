package finrisk

import (
	"fmt"
	"math"
	"os"
)

// Credit is the Statlog German Credit data: 1,000 applicants, 20 attributes
// (13 nominal, 7 numeric) and the class (good or bad credit risk).
type Credit struct {
	Attrs []Attribute // the 20 input attributes
	Rows  [][]float64 // raw values: nominal index or number, per applicant
	Bad   []int       // 1 when the applicant is a bad risk, 0 when good
}

// Column indices of the attributes used by the rules.
type creditCols struct {
	checking, duration, history, amount, savings, installment, personal, age, credits int
}

// LoadCredit reads credit-g.arff.
func LoadCredit(path string) (*Credit, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load credit: %w", err)
	}
	defer f.Close()
	rel, err := ReadARFF(f)
	if err != nil {
		return nil, fmt.Errorf("load credit %s: %w", path, err)
	}
	return CreditFromRelation(rel)
}

// CreditFromRelation checks that rel is the German Credit relation and
// splits off the class.
func CreditFromRelation(rel *Relation) (*Credit, error) {
	n := len(rel.Attrs)
	if n < 2 || rel.Attrs[n-1].Name != "class" || rel.Attrs[n-1].Kind != Nominal {
		return nil, fmt.Errorf("credit: last attribute must be the nominal 'class'")
	}
	bad := rel.Attrs[n-1].Index("bad")
	if bad < 0 {
		return nil, fmt.Errorf("credit: class has no value 'bad'")
	}
	c := &Credit{Attrs: rel.Attrs[:n-1]}
	for _, name := range []string{"checking_status", "duration", "credit_history", "credit_amount", "savings_status", "installment_commitment", "personal_status", "age", "existing_credits"} {
		if c.col(name) < 0 {
			return nil, fmt.Errorf("credit: missing attribute %q", name)
		}
	}
	for i, r := range rel.Rows {
		for j, v := range r {
			if math.IsNaN(v) {
				return nil, fmt.Errorf("credit: row %d attribute %s is missing", i+1, rel.Attrs[j].Name)
			}
		}
		c.Rows = append(c.Rows, r[:n-1])
		y := 0
		if int(r[n-1]) == bad {
			y = 1
		}
		c.Bad = append(c.Bad, y)
	}
	return c, nil
}

func (c *Credit) col(name string) int {
	for i := range c.Attrs {
		if c.Attrs[i].Name == name {
			return i
		}
	}
	return -1
}

func (c *Credit) cols() creditCols {
	return creditCols{c.col("checking_status"), c.col("duration"), c.col("credit_history"), c.col("credit_amount"),
		c.col("savings_status"), c.col("installment_commitment"), c.col("personal_status"), c.col("age"), c.col("existing_credits")}
}

// Encoder turns raw credit rows into model inputs: one-hot nominal
// attributes and standardised numeric ones (mean and deviation fitted on a
// training fold only), and feature tokens for the transformer member.
type Encoder struct {
	Attrs     []Attribute
	Offset    []int // first feature column of each attribute
	Width     int   // number of features
	Mean, Std []float64
}

// FitEncoder fits the standardisation on rows (a training fold).
func FitEncoder(attrs []Attribute, rows [][]float64) *Encoder {
	e := &Encoder{Attrs: attrs, Offset: make([]int, len(attrs)), Mean: make([]float64, len(attrs)), Std: make([]float64, len(attrs))}
	for j, a := range attrs {
		e.Offset[j] = e.Width
		if a.Kind == Nominal {
			e.Width += len(a.Values)
			continue
		}
		e.Width++
		var s, s2 float64
		for _, r := range rows {
			v := e.raw(j, r[j])
			s += v
			s2 += v * v
		}
		n := float64(len(rows))
		e.Mean[j] = s / n
		e.Std[j] = math.Sqrt(math.Max(s2/n-e.Mean[j]*e.Mean[j], 1e-12))
	}
	return e
}

// raw applies a log to the heavy-tailed credit amount.
func (e *Encoder) raw(j int, v float64) float64 {
	if e.Attrs[j].Name == "credit_amount" {
		return math.Log(v)
	}
	return v
}

// Encode writes the feature vector of row into dst (len Width) and returns it.
func (e *Encoder) Encode(dst []float32, row []float64) []float32 {
	if dst == nil {
		dst = make([]float32, e.Width)
	}
	clear(dst)
	for j, a := range e.Attrs {
		if a.Kind == Nominal {
			dst[e.Offset[j]+int(row[j])] = 1
		} else {
			dst[e.Offset[j]] = float32((e.raw(j, row[j]) - e.Mean[j]) / e.Std[j])
		}
	}
	return dst
}

// Matrix encodes rows into a row-major (len(rows), Width) matrix.
func (e *Encoder) Matrix(rows [][]float64) []float32 {
	out := make([]float32, len(rows)*e.Width)
	for i, r := range rows {
		e.Encode(out[i*e.Width:(i+1)*e.Width], r)
	}
	return out
}

// Tokens encodes rows as feature tokens: a row-major (len(rows)*A, Width)
// matrix whose row (i, a) holds applicant i's features of attribute a only
// (zero elsewhere). Multiplied by an embedding table (Width, d) it yields one
// token embedding per attribute: the value embedding for nominal attributes,
// the standardised value times the attribute's embedding for numeric ones.
func (e *Encoder) Tokens(rows [][]float64) []float32 {
	A := len(e.Attrs)
	out := make([]float32, len(rows)*A*e.Width)
	x := make([]float32, e.Width)
	for i, r := range rows {
		e.Encode(x, r)
		for a := range e.Attrs {
			end := e.Width
			if a+1 < A {
				end = e.Offset[a+1]
			}
			base := (i*A + a) * e.Width
			copy(out[base+e.Offset[a]:base+end], x[e.Offset[a]:end])
		}
	}
	return out
}

// Counterfactual kinds for the fairness rule.
const (
	FlipSex      = iota // swap the sex in personal_status, keep the marital group
	FlipAgeGroup        // move the applicant across the age-25 boundary
	NumFlips
)

// Counterfactual returns a copy of row with only the protected attribute of
// kind changed: sex (male div/sep <-> female div/dep/mar, male single <->
// female single, male mar/wid -> female div/dep/mar) or age group (under 25
// -> 35, 25 and over -> 22).
func (c *Credit) Counterfactual(row []float64, kind int) []float64 {
	cc := c.cols()
	out := append([]float64(nil), row...)
	switch kind {
	case FlipSex:
		a := &c.Attrs[cc.personal]
		swap := map[string]string{
			"male div/sep": "female div/dep/mar", "female div/dep/mar": "male div/sep",
			"male single": "female single", "female single": "male single",
			"male mar/wid": "female div/dep/mar",
		}
		if k := a.Index(swap[a.Values[int(row[cc.personal])]]); k >= 0 {
			out[cc.personal] = float64(k)
		}
	case FlipAgeGroup:
		if row[cc.age] < 25 {
			out[cc.age] = 35
		} else {
			out[cc.age] = 22
		}
	default:
		panic(fmt.Sprintf("finrisk: unknown counterfactual kind %d", kind))
	}
	return out
}

// Female reports whether personal_status names a woman.
func (c *Credit) Female(row []float64) bool {
	cc := c.cols()
	v := c.Attrs[cc.personal].Values[int(row[cc.personal])]
	return len(v) >= 6 && v[:6] == "female"
}
