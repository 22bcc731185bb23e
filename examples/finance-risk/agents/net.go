package agents

import (
	"fmt"
	"math"
	"math/rand/v2"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Params is a named set of parameter tensors shared by every graph a model
// is built into, so that training in one graph updates inference in another.
type Params struct {
	names []string
	vals  []*tensor.Dense
	rng   *rand.Rand
}

// NewParams starts an empty set initialised from seed.
func NewParams(seed uint64) *Params { return &Params{rng: rand.New(rand.NewPCG(seed, 0x9a7a))} }

// Get returns the parameter name of the given shape, creating it with
// N(0, scale²) entries the first time.
func (p *Params) Get(name string, scale float64, shape ...int) *tensor.Dense {
	for i, n := range p.names {
		if n == name {
			if !p.vals[i].Shape().Eq(tensor.Shape(shape)) {
				panic(fmt.Sprintf("agents: parameter %s has shape %v, asked for %v", name, p.vals[i].Shape(), shape))
			}
			return p.vals[i]
		}
	}
	n := 1
	for _, s := range shape {
		n *= s
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(p.rng.NormFloat64() * scale)
	}
	t := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
	p.names, p.vals = append(p.names, name), append(p.vals, t)
	return t
}

// Count is the total number of parameters.
func (p *Params) Count() int {
	n := 0
	for _, v := range p.vals {
		n += v.Shape().TotalSize()
	}
	return n
}

// Scope builds parameter nodes of a Params set into one graph.
type Scope struct {
	G     *G.ExprGraph
	P     *Params
	Nodes G.Nodes
	Decay G.Nodes // weights subject to L2 (not biases)
}

// Param returns the node of parameter name in the scope's graph.
func (s *Scope) Param(name string, scale float64, decay bool, shape ...int) *G.Node {
	t := s.P.Get(name, scale, shape...)
	n := G.NewTensor(s.G, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(t))
	s.Nodes = append(s.Nodes, n)
	if decay {
		s.Decay = append(s.Decay, n)
	}
	return n
}

// Linear is x W + b for x (B, in).
func (s *Scope) Linear(name string, x *G.Node, in, out int) *G.Node {
	w := s.Param(name+".W", math.Sqrt(2/float64(in+out)), true, in, out)
	b := s.Param(name+".b", 0, false, 1, out)
	return G.Must(G.BroadcastAdd(G.Must(G.Mul(x, w)), b, nil, []byte{0}))
}

// Net is a member model: it reads Width() float32 values per example and
// produces a logit (or regression output) and an embedding per example.
type Net interface {
	Width() int
	EmbDim() int
	Params() *Params
	// Build adds the model for a batch of B examples to s's graph, reading
	// input x of the model's input shape, and returns output (B) and
	// embedding (B, EmbDim).
	Build(s *Scope, x *G.Node, B int) (out, emb *G.Node)
	// InputShape is the shape of the input node for a batch of B examples;
	// its size is B*Width().
	InputShape(B int) tensor.Shape
}
