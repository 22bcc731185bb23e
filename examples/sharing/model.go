package main

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"

	"examples/finance-risk/finrisk"
)

// mlp is a one-hidden-layer perceptron for binary classification,
// d → hidden (tanh) → 1 logit, with its parameters in one flat vector (the
// unit agents exchange): W1 (hidden×d, row-major), b1, w2, b2. hidden = 0
// is logistic regression (w2 over the inputs, b2).
type mlp struct {
	d, h  int
	theta []float64
	// scratch
	a []float64
}

func newMLP(d, h int, rng *rand.Rand) *mlp {
	m := &mlp{d: d, h: h, a: make([]float64, h)}
	m.theta = make([]float64, m.size())
	if h == 0 {
		return m // logistic regression starts at zero
	}
	lim := math.Sqrt(6 / float64(d+h)) // Glorot uniform
	for i := range h * d {
		m.theta[i] = lim * (2*rng.Float64() - 1)
	}
	lim2 := math.Sqrt(6 / float64(h+1))
	for i := range h {
		m.theta[h*d+h+i] = lim2 * (2*rng.Float64() - 1)
	}
	return m
}

func (m *mlp) size() int {
	if m.h == 0 {
		return m.d + 1
	}
	return m.h*m.d + 2*m.h + 1
}

// logit returns the model's logit for input x.
func (m *mlp) logit(x []float32) float64 {
	d, h := m.d, m.h
	if h == 0 {
		z := m.theta[d]
		for j, v := range x {
			z += m.theta[j] * float64(v)
		}
		return z
	}
	w2 := m.theta[h*d+h : h*d+2*h]
	z := m.theta[h*d+2*h]
	for i := range h {
		s := m.theta[h*d+i]
		row := m.theta[i*d : (i+1)*d]
		for j, v := range x {
			s += row[j] * float64(v)
		}
		m.a[i] = math.Tanh(s)
		z += w2[i] * m.a[i]
	}
	return z
}

// grad adds to g the gradient of the mean binary cross-entropy over the
// rows idx of x (row-major, width d) with labels y, and returns the loss.
func (m *mlp) grad(g []float64, x []float32, y []int, idx []int) float64 {
	d, h := m.d, m.h
	inv := 1 / float64(len(idx))
	var loss float64
	for _, r := range idx {
		xr := x[r*d : (r+1)*d]
		z := m.logit(xr)
		p := 1 / (1 + math.Exp(-z))
		t := float64(y[r])
		// log(1+e^z) − t·z, stable
		loss += (math.Max(z, 0) + math.Log1p(math.Exp(-math.Abs(z))) - t*z) * inv
		dz := (p - t) * inv
		if h == 0 {
			for j, v := range xr {
				g[j] += dz * float64(v)
			}
			g[d] += dz
			continue
		}
		w2 := m.theta[h*d+h : h*d+2*h]
		for i := range h {
			g[h*d+h+i] += dz * m.a[i]
			ds := dz * w2[i] * (1 - m.a[i]*m.a[i])
			g[h*d+i] += ds
			gr := g[i*d : (i+1)*d]
			for j, v := range xr {
				gr[j] += ds * float64(v)
			}
		}
		g[h*d+2*h] += dz
	}
	return loss
}

// scores returns the predicted probabilities of the bad class for rows idx.
func (m *mlp) scores(x []float32, idx []int) []float64 {
	out := make([]float64, len(idx))
	for k, r := range idx {
		out[k] = 1 / (1 + math.Exp(-m.logit(x[r*m.d:(r+1)*m.d])))
	}
	return out
}

// adam is Adam (Kingma & Ba 2015) with decoupled weight decay (AdamW).
type adam struct {
	lr, wd, b1, b2, eps float64
	m, v                []float64
	t                   int
}

func newAdam(n int, lr, wd float64) *adam {
	return &adam{lr: lr, wd: wd, b1: 0.9, b2: 0.999, eps: 1e-8, m: make([]float64, n), v: make([]float64, n)}
}

func (o *adam) step(theta, g []float64) {
	o.t++
	c1 := 1 - math.Pow(o.b1, float64(o.t))
	c2 := 1 - math.Pow(o.b2, float64(o.t))
	for i, gi := range g {
		o.m[i] = o.b1*o.m[i] + (1-o.b1)*gi
		o.v[i] = o.b2*o.v[i] + (1-o.b2)*gi*gi
		theta[i] -= o.lr * (o.m[i]/c1/(math.Sqrt(o.v[i]/c2)+o.eps) + o.wd*theta[i])
	}
}

// split is one seed's partition of the German Credit data: a stratified
// test set every agent is scored on, and the training applicants divided
// into one shard per agent by age (the youngest applicants to agent 0), so
// that each agent sees one age band, a different share of bad risks and a
// few hundred rows: a small, non-IID shard.
type split struct {
	x     []float32 // encoded rows (all applicants), width d
	y     []int
	d     int
	test  []int
	train [][]int // per agent: its training rows
	val   [][]int // per agent: its validation rows (every fifth of its shard)
	age   []float64
}

func loadSplit(dataDir string, agents int, seed uint64) (*split, error) {
	if agents < 1 {
		return nil, fmt.Errorf("sharing: %d agents", agents)
	}
	credit, err := finrisk.LoadCredit(filepath.Join(dataDir, finrisk.CreditFile))
	if err != nil {
		return nil, err
	}
	folds := finrisk.StratifiedFolds(credit.Bad, 4, seed)
	test := folds[0]
	train := finrisk.TrainIndices(len(credit.Bad), test)
	rows := make([][]float64, len(train))
	for k, i := range train {
		rows[k] = credit.Rows[i]
	}
	// The standardisation is fitted on all training rows: the agents
	// share one feature schema, as they share one model architecture.
	enc := finrisk.FitEncoder(credit.Attrs, rows)
	age := -1
	for j, a := range credit.Attrs {
		if a.Name == "age" {
			age = j
		}
	}
	if age < 0 {
		return nil, fmt.Errorf("sharing: credit data has no age attribute")
	}
	byAge := slices.Clone(train)
	slices.SortStableFunc(byAge, func(a, b int) int { return cmp.Compare(credit.Rows[a][age], credit.Rows[b][age]) })
	s := &split{x: enc.Matrix(credit.Rows), y: credit.Bad, d: enc.Width, test: test}
	for _, r := range credit.Rows {
		s.age = append(s.age, r[age])
	}
	for a := range agents {
		shard := byAge[a*len(byAge)/agents : (a+1)*len(byAge)/agents]
		var tr, va []int
		for k, i := range shard {
			if k%5 == 4 {
				va = append(va, i)
			} else {
				tr = append(tr, i)
			}
		}
		s.train = append(s.train, tr)
		s.val = append(s.val, va)
	}
	return s, nil
}

// auc is the AUC of m on rows idx.
func (s *split) auc(m *mlp, idx []int) float64 {
	y := make([]int, len(idx))
	for k, i := range idx {
		y[k] = s.y[i]
	}
	return finrisk.AUC(m.scores(s.x, idx), y)
}
