package nn

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"

	G "gorgonia.org/gorgonia"
	ts "gorgonia.org/tensor"
)

// Param is one named parameter: its value, independent of any graph, and
// the gradient accumulated for it by training.
type Param struct {
	Name  string
	Value *ts.Dense // float32
	Grad  []float32 // same length as Value's data; accumulated by trainers
	// NoDecay exempts the parameter from weight decay (biases, norms).
	NoDecay bool
}

// Data returns the parameter's values as a flat float32 slice.
func (p *Param) Data() []float32 { return p.Value.Float32s() }

// Shape returns the parameter's shape.
func (p *Param) Shape() ts.Shape { return p.Value.Shape() }

// Initializer fills a new parameter's values using rng.
type Initializer func(rng *rand.Rand, shape ts.Shape, data []float32)

// Zeros initialises to 0.
func Zeros(_ *rand.Rand, _ ts.Shape, d []float32) { zero(d) }

// Ones initialises to 1.
func Ones(_ *rand.Rand, _ ts.Shape, d []float32) {
	for i := range d {
		d[i] = 1
	}
}

// Normal returns an initialiser drawing from N(0, std²).
func Normal(std float64) Initializer {
	return func(rng *rand.Rand, _ ts.Shape, d []float32) {
		for i := range d {
			d[i] = float32(rng.NormFloat64() * std)
		}
	}
}

// GlorotUniform draws from U(−a, a), a = √(6/(fan_in+fan_out)) (Glorot &
// Bengio 2010), treating the first axis as fan-in and the last as fan-out.
func GlorotUniform(rng *rand.Rand, s ts.Shape, d []float32) {
	in, out := s[0], s[s.Dims()-1]
	a := math.Sqrt(6 / float64(in+out))
	for i := range d {
		d[i] = float32((2*rng.Float64() - 1) * a)
	}
}

// Store holds named parameters independent of any graph. Names are
// hierarchical, dot-separated paths such as "blocks.3.attn.qkv.w". A
// parameter is created, and initialised from a generator seeded by the
// store's seed and the parameter's name, the first time a layer asks for it;
// later requests (in the same or another graph) get the same values. A
// Store is not safe for concurrent mutation.
type Store struct {
	seed   uint64
	params map[string]*Param
	order  []string
}

// NewStore returns an empty store whose initialisers are seeded by seed.
func NewStore(seed uint64) *Store {
	return &Store{seed: seed, params: map[string]*Param{}}
}

// Param returns the parameter called name, or nil.
func (s *Store) Param(name string) *Param { return s.params[name] }

// Params returns all parameters in creation order.
func (s *Store) Params() []*Param {
	out := make([]*Param, len(s.order))
	for i, n := range s.order {
		out[i] = s.params[n]
	}
	return out
}

// Names returns the sorted parameter names.
func (s *Store) Names() []string {
	n := append([]string(nil), s.order...)
	sort.Strings(n)
	return n
}

// NumParams is the total number of scalar parameters.
func (s *Store) NumParams() int {
	t := 0
	for _, p := range s.params {
		t += len(p.Grad)
	}
	return t
}

// ZeroGrad clears every gradient buffer.
func (s *Store) ZeroGrad() {
	for _, p := range s.params {
		zero(p.Grad)
	}
}

// GetOrCreate returns the parameter called name, creating it with the given
// shape and initialiser if needed. It panics if it exists with another shape.
func (s *Store) GetOrCreate(name string, shape ts.Shape, init Initializer) *Param {
	if p, ok := s.params[name]; ok {
		if !p.Value.Shape().Eq(shape) {
			panic(fmt.Sprintf("nn: parameter %q has shape %v, requested %v", name, p.Value.Shape(), shape))
		}
		return p
	}
	v := newDense(shape)
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(s.seed, h.Sum64()))
	if init == nil {
		init = GlorotUniform
	}
	init(rng, shape, v.Float32s())
	p := &Param{Name: name, Value: v, Grad: make([]float32, shape.TotalSize()), NoDecay: shape.Dims() < 2}
	s.params[name] = p
	s.order = append(s.order, name)
	return p
}

// Scope is a position in a store's name hierarchy bound to one expression
// graph: layers take a Scope, ask it for their parameters by short name and
// hand sub-scopes to the layers they contain (GoMLX's context pattern). The
// graph node of a parameter is created once per graph and holds the store's
// value tensor itself, so an optimizer updating the store updates every graph.
type Scope struct {
	store  *Store
	g      *G.ExprGraph
	prefix string
	shared *scopeShared
}

type scopeShared struct {
	nodes map[string]*G.Node
	used  []*Param
}

// NewScope returns the root scope of store for graph g.
func NewScope(store *Store, g *G.ExprGraph) *Scope {
	return &Scope{store: store, g: g, shared: &scopeShared{nodes: map[string]*G.Node{}}}
}

// Sub returns the child scope called name.
func (sc *Scope) Sub(name string) *Scope {
	c := *sc
	if c.prefix == "" {
		c.prefix = name
	} else {
		c.prefix = sc.prefix + "." + name
	}
	return &c
}

// In returns the child scope for index i (for example blocks.3).
func (sc *Scope) In(i int) *Scope { return sc.Sub(strconv.Itoa(i)) }

// Name is the scope's full dotted path.
func (sc *Scope) Name() string { return sc.prefix }

// Graph is the expression graph the scope builds into.
func (sc *Scope) Graph() *G.ExprGraph { return sc.g }

// Store is the parameter store behind the scope.
func (sc *Scope) Store() *Store { return sc.store }

// Param returns the graph node of the parameter name in this scope,
// creating the parameter (with init) on first use.
func (sc *Scope) Param(name string, shape ts.Shape, init Initializer) *G.Node {
	full := name
	if sc.prefix != "" {
		full = sc.prefix + "." + name
	}
	if n, ok := sc.shared.nodes[full]; ok {
		if !n.Shape().Eq(shape) {
			panic(fmt.Sprintf("nn: parameter %q has shape %v, requested %v", full, n.Shape(), shape))
		}
		return n
	}
	p := sc.store.GetOrCreate(full, shape, init)
	n := G.NewTensor(sc.g, ts.Float32, shape.Dims(), G.WithShape(shape.Clone()...), G.WithName(full), G.WithValue(p.Value))
	sc.shared.nodes[full] = n
	sc.shared.used = append(sc.shared.used, p)
	return n
}

// Used returns the parameters used in the scope's graph so far, with their
// nodes, in order of first use.
func (sc *Scope) Used() ([]*Param, G.Nodes) {
	ns := make(G.Nodes, len(sc.shared.used))
	for i, p := range sc.shared.used {
		ns[i] = sc.shared.nodes[p.Name]
	}
	return append([]*Param(nil), sc.shared.used...), ns
}

// Input adds a float32 input node of the given shape to the scope's graph.
func (sc *Scope) Input(name string, shape ...int) *G.Node {
	return G.NewTensor(sc.g, ts.Float32, len(shape), G.WithShape(shape...), G.WithName(name))
}
