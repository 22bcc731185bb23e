package gradshare

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/troupe-ml/troupe/rl/gradcomp"
)

// Subject prefixes: gradients go to GradPrefix.<group>.<agent>, parameters
// to ParamPrefix.<group>.<agent>.
const (
	GradPrefix  = "troupe.grad"
	ParamPrefix = "troupe.param"
)

// Message kinds, the first payload byte.
const (
	kindGrad  byte = 1
	kindParam byte = 2
)

// Settings says how gradients are compressed and privatised.
type Settings struct {
	// Codec is the encoding (gradcomp.Raw when zero).
	Codec gradcomp.Codec
	// Frac is the fraction of entries top-k codecs keep (0.01 when zero).
	Frac float64
	// ErrorFeedback carries what compression dropped to the next message.
	ErrorFeedback bool
	// Noise is the DP noise multiplier σ; zero sends no noise. With
	// Noise > 0 each gradient is clipped to L2 norm Clip first.
	Noise float64
	// Clip is the DP clipping norm C (required when Noise > 0).
	Clip float64
	// Seed seeds the DP noise (together with the agent's name).
	Seed uint64
}

// String describes the settings in one line ("topk-q8 10% +EF, DP C=1 σ=0.8").
func (s Settings) String() string {
	c := s.Codec
	if c == 0 {
		c = gradcomp.Raw
	}
	var b strings.Builder
	b.WriteString(c.String())
	if c == gradcomp.TopK || c == gradcomp.TopKQ8 {
		f := s.Frac
		if f <= 0 {
			f = 0.01
		}
		fmt.Fprintf(&b, " %s%%", strconv.FormatFloat(100*f, 'g', 4, 64))
	}
	if s.ErrorFeedback {
		b.WriteString(" +EF")
	}
	if s.Noise > 0 {
		fmt.Fprintf(&b, ", DP C=%g σ=%g", s.Clip, s.Noise)
	}
	return b.String()
}

// Config configures Join.
type Config struct {
	// Group names the group; Agent names this agent within it. Both are
	// single subject tokens: letters, digits, '-' and '_'.
	Group, Agent string
	// Grad says how Publish encodes gradients.
	Grad Settings
	// Param is the codec of PublishParams (gradcomp.Raw when zero; Q8
	// also works, top-k codecs make little sense for parameters).
	Param gradcomp.Codec
	// Size, when positive, is the length of every gradient and parameter
	// vector: a message declaring another length is dropped before it is
	// decoded (a sparse message can be tiny yet declare millions of
	// values).
	Size int
}

// Update is one peer's latest message, decoded.
type Update struct {
	Agent    string
	Step     int
	Values   []float32 // the decoded gradient or parameters; not to be modified
	Score    float64   // the validation score of a parameter message
	Bytes    int       // the message's size (payload and header block)
	Received time.Time
}

// Age is how long ago the update arrived.
func (u Update) Age() time.Duration { return time.Since(u.Received) }

// Stats counts the group's traffic. Bytes are message sizes as NATS counts
// them against max_payload (payload plus header block); SentWire is the
// whole frame the client writes for each published message (protocol line,
// message, CRLF).
type Stats struct {
	SentMsgs, SentBytes, SentWire int64
	RecvMsgs, RecvBytes           int64
	// Dropped counts received messages that did not decode; LastError is
	// the latest such error.
	Dropped   int64
	LastError error
}

// Group is one agent's membership of a sharing group. Its methods are safe
// for concurrent use.
type Group struct {
	nc        *nats.Conn
	cfg       Config
	gradSubj  string
	paramSubj string
	subs      []*nats.Subscription
	pubMu     sync.Mutex // serialises the compressors and publishing
	comp      *gradcomp.Compressor
	pcomp     *gradcomp.Compressor
	buf       []byte
	dpMsgs    int
	mu        sync.Mutex
	grads     map[string]*history
	params    map[string]*history
	changed   chan struct{}
	stats     Stats
}

// history holds an agent's last two updates of one kind: in lockstep
// training (Gather) a peer can be at most one step ahead of this agent, so
// the update of the step being gathered is always one of them.
type history struct{ last, prev *Update }

func (h *history) add(u *Update) { h.prev, h.last = h.last, u }

func (h *history) at(step int) *Update {
	if h.prev != nil && h.prev.Step == step {
		return h.prev
	}
	return h.last
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Join subscribes to the group's gradient and parameter subjects. Connect
// nc with nats.NoEcho() to keep the server from sending the agent's own
// messages back (they are ignored, but they cost bytes).
func Join(nc *nats.Conn, cfg Config) (*Group, error) {
	if nc == nil {
		return nil, errors.New("gradshare: nil connection")
	}
	if !validToken(cfg.Group) || !validToken(cfg.Agent) {
		return nil, fmt.Errorf("gradshare: group %q and agent %q must be non-empty subject tokens (letters, digits, '-', '_')", cfg.Group, cfg.Agent)
	}
	s := cfg.Grad
	if s.Noise < 0 || (s.Noise > 0 && s.Clip <= 0) {
		return nil, fmt.Errorf("gradshare: DP noise multiplier %g needs a positive clip norm (got %g)", s.Noise, s.Clip)
	}
	if cfg.Size < 0 {
		return nil, fmt.Errorf("gradshare: negative vector size %d", cfg.Size)
	}
	if s.Frac < 0 || s.Frac > 1 {
		return nil, fmt.Errorf("gradshare: top-k fraction %g outside [0, 1]", s.Frac)
	}
	opt := gradcomp.Options{Codec: s.Codec, Frac: s.Frac, ErrorFeedback: s.ErrorFeedback}
	if s.Noise > 0 {
		h := fnv.New64a()
		h.Write([]byte(cfg.Agent))
		opt.DP = &gradcomp.Gaussian{Clip: s.Clip, NoiseMultiplier: s.Noise, Rng: rand.New(rand.NewPCG(s.Seed, h.Sum64()))}
	}
	g := &Group{
		nc:        nc,
		cfg:       cfg,
		gradSubj:  GradPrefix + "." + cfg.Group + "." + cfg.Agent,
		paramSubj: ParamPrefix + "." + cfg.Group + "." + cfg.Agent,
		comp:      gradcomp.New(opt),
		pcomp:     gradcomp.New(gradcomp.Options{Codec: cfg.Param}),
		grads:     map[string]*history{},
		params:    map[string]*history{},
		changed:   make(chan struct{}),
	}
	for _, prefix := range []string{GradPrefix, ParamPrefix} {
		sub, err := nc.Subscribe(prefix+"."+cfg.Group+".*", g.receive)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("gradshare: subscribe to %s.%s.*: %w", prefix, cfg.Group, err)
		}
		g.subs = append(g.subs, sub)
	}
	// The subscriptions must be known to the server before the first
	// publish of any peer that has already joined.
	if err := nc.Flush(); err != nil {
		g.Close()
		return nil, fmt.Errorf("gradshare: flush subscriptions: %w", err)
	}
	return g, nil
}

// Close unsubscribes. It does not close the connection.
func (g *Group) Close() error {
	var errs []error
	for _, s := range g.subs {
		errs = append(errs, s.Unsubscribe())
	}
	g.subs = nil
	return errors.Join(errs...)
}

// Publish compresses grad (after clipping and noising it with DP settings)
// and publishes it as the agent's update of step. grad is not modified.
func (g *Group) Publish(step int, grad []float32) error {
	g.pubMu.Lock()
	defer g.pubMu.Unlock()
	if step < 0 {
		return fmt.Errorf("gradshare: negative step %d", step)
	}
	b := append(g.buf[:0], kindGrad)
	b = binary.AppendUvarint(b, uint64(step))
	b = g.comp.Compress(b, grad)
	g.buf = b
	if g.cfg.Grad.Noise > 0 {
		g.dpMsgs++
	}
	return g.publish(g.gradSubj, b)
}

// PublishParams publishes the agent's parameters of step with its
// validation score (higher is better; Fuse weights by it).
func (g *Group) PublishParams(step int, params []float32, score float64) error {
	g.pubMu.Lock()
	defer g.pubMu.Unlock()
	if step < 0 {
		return fmt.Errorf("gradshare: negative step %d", step)
	}
	if math.IsNaN(score) || math.IsInf(score, 0) {
		return fmt.Errorf("gradshare: score %g is not finite", score)
	}
	b := append(g.buf[:0], kindParam)
	b = binary.AppendUvarint(b, uint64(step))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(score))
	b = g.pcomp.Compress(b, params)
	g.buf = b
	return g.publish(g.paramSubj, b)
}

func (g *Group) publish(subj string, b []byte) error {
	if err := g.nc.Publish(subj, b); err != nil {
		return fmt.Errorf("gradshare: publish %s (%d bytes): %w", subj, len(b), err)
	}
	g.mu.Lock()
	g.stats.SentMsgs++
	g.stats.SentBytes += int64(len(b))
	g.stats.SentWire += int64(FrameSize(subj, len(b)))
	g.mu.Unlock()
	return nil
}

// FrameSize is the number of bytes a NATS client writes to publish a
// message of size bytes without headers or reply subject:
// "PUB <subject> <size>\r\n", the message, "\r\n".
func FrameSize(subject string, size int) int {
	return len("PUB ") + len(subject) + 1 + len(strconv.Itoa(size)) + 2 + size + 2
}

func (g *Group) receive(m *nats.Msg) {
	// Size counts subject, reply, header block and payload as received.
	size := m.Size() - len(m.Subject) - len(m.Reply)
	agent := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if agent == g.cfg.Agent {
		return
	}
	u, kind, err := decode(m.Data, g.cfg.Size)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stats.RecvMsgs++
	g.stats.RecvBytes += int64(size)
	if err != nil {
		g.stats.Dropped++
		g.stats.LastError = fmt.Errorf("gradshare: message on %s: %w", m.Subject, err)
		return
	}
	u.Agent, u.Bytes, u.Received = agent, size, time.Now()
	hs := g.grads
	if kind == kindParam {
		hs = g.params
	}
	h := hs[agent]
	if h == nil {
		h = &history{}
		hs[agent] = h
	}
	h.add(u)
	close(g.changed)
	g.changed = make(chan struct{})
}

func decode(b []byte, size int) (*Update, byte, error) {
	if len(b) < 2 {
		return nil, 0, fmt.Errorf("%d-byte message", len(b))
	}
	kind := b[0]
	if kind != kindGrad && kind != kindParam {
		return nil, 0, fmt.Errorf("unknown kind %d", kind)
	}
	step, n := binary.Uvarint(b[1:])
	if n <= 0 || step > math.MaxInt32 {
		return nil, 0, errors.New("bad step")
	}
	b = b[1+n:]
	u := &Update{Step: int(step)}
	if kind == kindParam {
		if len(b) < 8 {
			return nil, 0, errors.New("truncated score")
		}
		u.Score = math.Float64frombits(binary.LittleEndian.Uint64(b))
		b = b[8:]
	}
	// gradcomp's header: codec byte, then the value count (uint32 LE).
	if size > 0 && len(b) >= 5 && int(binary.LittleEndian.Uint32(b[1:])) != size {
		return nil, 0, fmt.Errorf("%d values, want %d", binary.LittleEndian.Uint32(b[1:]), size)
	}
	v, err := gradcomp.Decode(nil, b)
	if err != nil {
		return nil, 0, err
	}
	u.Values = v
	return u, kind, nil
}

// Peers returns the latest gradient update of every other agent, sorted by
// agent name.
func (g *Group) Peers() []Update { return g.latest(kindGrad) }

// PeerParams returns the latest parameters of every other agent, sorted by
// agent name.
func (g *Group) PeerParams() []Update { return g.latest(kindParam) }

func (g *Group) latest(kind byte) []Update {
	g.mu.Lock()
	defer g.mu.Unlock()
	hs := g.grads
	if kind == kindParam {
		hs = g.params
	}
	out := make([]Update, 0, len(hs))
	for _, h := range hs {
		out = append(out, *h.last)
	}
	slices.SortFunc(out, func(a, b Update) int { return strings.Compare(a.Agent, b.Agent) })
	return out
}

// Gather waits until n other agents have published a gradient of step or
// later and returns each one's update of exactly step when it still holds
// it (else its latest), sorted by agent name. When ctx ends first it
// returns the peers' latest updates and ctx's error.
func (g *Group) Gather(ctx context.Context, step, n int) ([]Update, error) {
	return g.gather(ctx, kindGrad, step, n)
}

// GatherParams is Gather for parameter messages.
func (g *Group) GatherParams(ctx context.Context, step, n int) ([]Update, error) {
	return g.gather(ctx, kindParam, step, n)
}

func (g *Group) gather(ctx context.Context, kind byte, step, n int) ([]Update, error) {
	for {
		g.mu.Lock()
		hs := g.grads
		if kind == kindParam {
			hs = g.params
		}
		ready := 0
		for _, h := range hs {
			if h.last.Step >= step {
				ready++
			}
		}
		if ready >= n {
			out := make([]Update, 0, len(hs))
			for _, h := range hs {
				if h.last.Step >= step {
					out = append(out, *h.at(step))
				}
			}
			g.mu.Unlock()
			slices.SortFunc(out, func(a, b Update) int { return strings.Compare(a.Agent, b.Agent) })
			return out, nil
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return g.latest(kind), fmt.Errorf("gradshare: gather step %d: %d of %d peers: %w", step, ready, n, ctx.Err())
		}
	}
}

// Stats returns the traffic counted so far.
func (g *Group) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stats
}

// Compressor is the gradient compressor (its BytesIn and BytesOut count
// the gradcomp messages alone, and Residual is the error-feedback memory).
// Not to be used while Publish runs.
func (g *Group) Compressor() *gradcomp.Compressor { return g.comp }

// Epsilon is the ε of (ε, δ)-DP of the gradients published so far under
// add/remove adjacency of one message (gradcomp.Epsilon with σ =
// Settings.Noise); +Inf without noise.
func (g *Group) Epsilon(delta float64) float64 {
	g.pubMu.Lock()
	defer g.pubMu.Unlock()
	if g.cfg.Grad.Noise <= 0 {
		return math.Inf(1)
	}
	return gradcomp.Epsilon(g.cfg.Grad.Noise, g.dpMsgs, delta)
}

// Mean writes the mean of own and the peers' values into dst (grown or
// allocated to len(own)) and returns it: the all-gather average.
func Mean(dst, own []float32, peers []Update) ([]float32, error) {
	for _, p := range peers {
		if len(p.Values) != len(own) {
			return nil, fmt.Errorf("gradshare: %s sent %d values, this agent has %d", p.Agent, len(p.Values), len(own))
		}
	}
	dst = slices.Grow(dst[:0], len(own))[:len(own)]
	inv := 1 / float64(1+len(peers))
	for i, v := range own {
		s := float64(v)
		for _, p := range peers {
			s += float64(p.Values[i])
		}
		dst[i] = float32(s * inv)
	}
	return dst, nil
}

// AttentionWeights returns softmax(score/tau), computed stably. tau must be
// positive.
func AttentionWeights(scores []float64, tau float64) []float64 {
	if tau <= 0 {
		panic(fmt.Sprintf("gradshare: attention temperature %g must be positive", tau))
	}
	w := make([]float64, len(scores))
	if len(scores) == 0 {
		return w
	}
	hi := slices.Max(scores)
	var z float64
	for i, s := range scores {
		w[i] = math.Exp((s - hi) / tau)
		z += w[i]
	}
	for i := range w {
		w[i] /= z
	}
	return w
}

// Fuse writes into dst (grown or allocated) the attention-weighted mixture
// Σ_j w_j θ_j of the members' parameter vectors θ_j = members[j].Values with
// w = softmax(score/tau), and returns it with the weights. The caller
// includes its own parameters as one member; dst may be one of the
// members' Values. tau must be positive.
func Fuse(dst []float32, members []Update, tau float64) ([]float32, []float64, error) {
	if len(members) == 0 {
		return nil, nil, errors.New("gradshare: fuse of no members")
	}
	if tau <= 0 || math.IsNaN(tau) {
		return nil, nil, fmt.Errorf("gradshare: attention temperature %g must be positive", tau)
	}
	n := len(members[0].Values)
	scores := make([]float64, len(members))
	for j, m := range members {
		if len(m.Values) != n {
			return nil, nil, fmt.Errorf("gradshare: member %s has %d parameters, %s has %d", m.Agent, len(m.Values), members[0].Agent, n)
		}
		if math.IsNaN(m.Score) || math.IsInf(m.Score, 0) {
			return nil, nil, fmt.Errorf("gradshare: member %s has score %g", m.Agent, m.Score)
		}
		scores[j] = m.Score
	}
	w := AttentionWeights(scores, tau)
	dst = slices.Grow(dst[:0], n)[:n]
	for i := range n {
		var s float64
		for j, m := range members {
			s += w[j] * float64(m.Values[i])
		}
		dst[i] = float32(s)
	}
	return dst, w, nil
}
