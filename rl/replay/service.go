package replay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/troupe-ml/troupe/bus"
)

// DefaultMaxSample bounds the items of one sample request when
// ServiceConfig.MaxSample is zero.
const DefaultMaxSample = 4096

// ServiceConfig configures NewService.
type ServiceConfig struct {
	// Seed seeds the sampler: its draws come from
	// rand.New(rand.NewPCG(Seed, Seed)), so a learner that is the only
	// sampler gets the same items as Buffer.Sample with that generator.
	Seed uint64
	// MaxSample bounds the items of one sample request (DefaultMaxSample
	// when zero); a larger request is refused, not truncated.
	MaxSample int
}

// Service hosts one Buffer[[]byte] behind NATS request/reply subjects, as a
// NATS micro service ("troupe-replay", visible to `nats micro ls`), so that
// producers in other goroutines, processes or machines add to it and one
// learner samples from it and updates priorities. Its subjects are
// troupe.replay.<name>.{add,sample,update,stats} (see Client). Run one
// service per name: two would split the requests between their buffers.
type Service struct {
	buf       *Buffer[[]byte]
	svc       micro.Service
	maxSample int
	// maxPayload is the server's limit on one message, asked at each
	// sample because a reconnection may land on another server.
	maxPayload func() int64

	mu  sync.Mutex // guards rng
	rng *rand.Rand
}

// requestError is a refused request: a micro error code ("400": the
// request is malformed; "413": the reply would exceed the server's max
// payload) and a description for the client.
type requestError struct {
	code, desc string
}

func badRequest(format string, a ...any) *requestError {
	return &requestError{"400", fmt.Sprintf(format, a...)}
}

// subjectPrefix is the subject of a buffer's endpoints, without the verb.
func subjectPrefix(name string) string { return "troupe.replay." + bus.Subject(name) }

// NewService serves buf on nc under name until Stop.
func NewService(nc *nats.Conn, name string, buf *Buffer[[]byte], cfg ServiceConfig) (*Service, error) {
	s := &Service{
		buf: buf, maxPayload: nc.MaxPayload,
		maxSample: cmp.Or(cfg.MaxSample, DefaultMaxSample),
		rng:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed)),
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        "troupe-replay",
		Version:     "1.0.0",
		Description: "prioritized experience replay (rl/replay)",
		Metadata:    map[string]string{"buffer": name},
		StatsHandler: func(*micro.Endpoint) any {
			return buf.Stats()
		},
	})
	if err != nil {
		return nil, fmt.Errorf("replay: service %q: %w", name, err)
	}
	g := svc.AddGroup(subjectPrefix(name))
	for _, ep := range []struct {
		verb string
		h    func([]byte) ([]byte, *requestError)
	}{{"add", s.add}, {"sample", s.sample}, {"update", s.update}, {"stats", s.stats}} {
		h := ep.h
		err := g.AddEndpoint(ep.verb, micro.HandlerFunc(func(req micro.Request) {
			resp, rerr := h(req.Data())
			if rerr != nil {
				req.Error(rerr.code, rerr.desc, nil)
				return
			}
			req.Respond(resp)
		}))
		if err != nil {
			svc.Stop()
			return nil, fmt.Errorf("replay: service %q endpoint %s: %w", name, ep.verb, err)
		}
	}
	// The subscriptions reach the server asynchronously: a round trip makes
	// sure it has them, so that a client on another connection is answered
	// as soon as NewService returns instead of finding no responders.
	if err := nc.Flush(); err != nil {
		svc.Stop()
		return nil, fmt.Errorf("replay: service %q: %w", name, err)
	}
	s.svc = svc
	return s, nil
}

// Stop drains the service's subscriptions; the buffer is left as it is.
func (s *Service) Stop() error { return s.svc.Stop() }

// Buffer is the served buffer.
func (s *Service) Buffer() *Buffer[[]byte] { return s.buf }

// The service's range of priorities. With p^α between these bounds the
// sum-tree's total and the importance weights' normaliser (N·min P)^−β stay
// finite for any buffer that fits in memory; beyond them a single item could
// overflow the sum or underflow the weights to NaN.
const (
	MinPriority = 1e-12 // smaller positive priorities are raised to it
	MaxPriority = 1e12  // larger ones are refused
)

// checkPriorities refuses what would corrupt the sum-tree (a NaN, an
// infinite, a negative or an overlarge priority) and raises positive
// priorities below MinPriority to it; 0 keeps its meaning (see Buffer.Add
// and Buffer.Update).
func checkPriorities(ps []float64) *requestError {
	for k, p := range ps {
		if math.IsNaN(p) || p < 0 || p > MaxPriority {
			return badRequest("priority %d is %g: want 0 to %g", k, p, MaxPriority)
		}
		if p > 0 && p < MinPriority {
			ps[k] = MinPriority
		}
	}
	return nil
}

func (s *Service) add(msg []byte) ([]byte, *requestError) {
	values, ps, err := decodeAdd(msg)
	if err != nil {
		return nil, badRequest("add: %v", err)
	}
	if rerr := checkPriorities(ps); rerr != nil {
		return nil, rerr
	}
	// Each value gets its own copy: a sub-slice would keep the whole
	// request alive until the last of its items is evicted.
	for k, v := range values {
		values[k] = bytes.Clone(v)
	}
	first := s.buf.AddBatch(values, ps)
	return encodeAddResponse(first, len(values)), nil
}

func (s *Service) sample(msg []byte) ([]byte, *requestError) {
	n, beta, err := decodeSample(msg)
	if err != nil {
		return nil, badRequest("sample: %v", err)
	}
	if n == 0 || n > uint64(s.maxSample) {
		return nil, badRequest("sample: %d items requested, want 1 to %d", n, s.maxSample)
	}
	if !(beta >= 0 && beta <= 1) {
		return nil, badRequest("sample: beta %g, want 0 to 1", beta)
	}
	s.mu.Lock()
	items := s.buf.Sample(int(n), beta, s.rng)
	s.mu.Unlock()
	resp := encodeSampleResponse(items)
	if lim := s.maxPayload(); int64(len(resp)) > lim {
		return nil, &requestError{"413", fmt.Sprintf("sample: %d items are %d bytes, over the server's max payload %d; ask for fewer", n, len(resp), lim)}
	}
	return resp, nil
}

func (s *Service) update(msg []byte) ([]byte, *requestError) {
	ids, ps, err := decodeUpdate(msg)
	if err != nil {
		return nil, badRequest("update: %v", err)
	}
	if rerr := checkPriorities(ps); rerr != nil {
		return nil, rerr
	}
	s.buf.Update(ids, ps)
	return []byte{wireVersion}, nil
}

func (s *Service) stats(msg []byte) ([]byte, *requestError) {
	if len(msg) != 0 {
		return nil, badRequest("stats: the request must be empty, got %d bytes", len(msg))
	}
	b, err := json.Marshal(s.buf.Stats())
	if err != nil {
		return nil, &requestError{"500", err.Error()}
	}
	return b, nil
}

// RemoteError is a request the service refused.
type RemoteError struct {
	Subject     string // the endpoint's subject
	Code        string // "400": malformed request; "413": reply too large
	Description string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("replay: %s refused the request (%s): %s", e.Subject, e.Code, e.Description)
}

// DefaultTimeout bounds a Client request whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Client talks to the Service of one buffer name. It is safe for
// concurrent use (nats.Conn is).
type Client struct {
	nc     *nats.Conn
	prefix string
	// Timeout bounds each request whose context has no deadline
	// (DefaultTimeout when zero).
	Timeout time.Duration
}

// NewClient returns a client of the service called name on nc.
func NewClient(nc *nats.Conn, name string) *Client {
	return &Client{nc: nc, prefix: subjectPrefix(name)}
}

func (c *Client) request(ctx context.Context, verb string, data []byte) ([]byte, error) {
	subj := c.prefix + "." + verb
	if lim := c.nc.MaxPayload(); int64(len(data)) > lim {
		return nil, fmt.Errorf("replay: %s request of %d bytes exceeds the server's max payload %d; send smaller batches", subj, len(data), lim)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(c.Timeout, DefaultTimeout))
		defer cancel()
	}
	msg, err := c.nc.RequestWithContext(ctx, subj, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("replay: no service answers on %s: %w", subj, err)
	}
	if err != nil {
		return nil, fmt.Errorf("replay: %s: %w", subj, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, &RemoteError{Subject: subj, Code: code, Description: msg.Header.Get(micro.ErrorHeader)}
	}
	return msg.Data, nil
}

// Add appends values with their priorities (nil: every one 0, which gives
// the largest priority seen so far, see Buffer.Add) and returns the first
// ID of the batch: the items get first, first+1, … in order.
func (c *Client) Add(ctx context.Context, values [][]byte, priorities []float64) (first uint64, err error) {
	if priorities == nil {
		priorities = make([]float64, len(values))
	}
	if len(priorities) != len(values) {
		return 0, fmt.Errorf("replay: Add: %d values, %d priorities", len(values), len(priorities))
	}
	resp, err := c.request(ctx, "add", encodeAdd(values, priorities))
	if err != nil {
		return 0, err
	}
	first, n, err := decodeAddResponse(resp)
	if err != nil {
		return 0, fmt.Errorf("replay: add reply: %w", err)
	}
	if n != len(values) {
		return 0, fmt.Errorf("replay: add reply counts %d items, %d sent", n, len(values))
	}
	return first, nil
}

// Sample draws n items with IS-weight exponent beta (see Buffer.Sample):
// each Item has its ID for Update, its Value, Priority, Prob and Weight.
// It returns no items while the buffer is empty.
func (c *Client) Sample(ctx context.Context, n int, beta float64) ([]Item[[]byte], error) {
	if n <= 0 {
		return nil, fmt.Errorf("replay: Sample: n = %d", n)
	}
	resp, err := c.request(ctx, "sample", encodeSample(n, beta))
	if err != nil {
		return nil, err
	}
	items, err := decodeSampleResponse(resp)
	if err != nil {
		return nil, fmt.Errorf("replay: sample reply: %w", err)
	}
	return items, nil
}

// Update sets the priorities of the items with the given IDs (see
// Buffer.Update).
func (c *Client) Update(ctx context.Context, ids []uint64, priorities []float64) error {
	if len(ids) != len(priorities) {
		return fmt.Errorf("replay: Update: %d ids, %d priorities", len(ids), len(priorities))
	}
	_, err := c.request(ctx, "update", encodeUpdate(ids, priorities))
	return err
}

// Stats returns the served buffer's Stats.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	resp, err := c.request(ctx, "stats", nil)
	if err != nil {
		return Stats{}, err
	}
	var st Stats
	if err := json.Unmarshal(resp, &st); err != nil {
		return Stats{}, fmt.Errorf("replay: stats reply: %w", err)
	}
	return st, nil
}
