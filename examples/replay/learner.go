package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"examples/finance-risk/finrisk"

	"github.com/nats-io/nats.go"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/rl/replay"
	G "gorgonia.org/gorgonia"
)

// Actions: the Q-network's two outputs.
const (
	reject  = 0
	approve = 1
)

// Config is one training run: the learner's settings and the replay.
type Config struct {
	Seed        uint64
	Prioritized bool    // α = Alpha; otherwise α = 0 (uniform replay)
	Alpha       float64 // priority exponent of prioritized replay
	Beta0       float64 // initial IS exponent, annealed to 1
	Actors      int     // producer goroutines, each with its own NATS connection
	PerActor    int     // arrivals each actor handles per round
	Epochs      int     // passes of the arrivals over the training applicants
	Batch       int     // transitions per gradient step
	Steps       int     // gradient steps per round
	Capacity    int     // replay capacity
	Hidden      int     // Q-network hidden width
	LR          float64 // Adam learning rate
	EpsFloor    float64 // ε-greedy exploration decays from 1 to EpsFloor
	Checkpoints int     // test evaluations over training
}

// result is what one run measured.
type result struct {
	Cost, AUC  float64   // final greedy policy on the test applicants
	Curve      []float64 // test cost at each checkpoint
	Online     float64   // cost per arrival of the actors' decisions while training
	ReplayTime time.Duration
	Sampled    int    // transitions the learner sampled
	Mix        [3]int // of which rejections, good approvals (reward > 0), bad approvals
	Wall       time.Duration
}

// MeanCurve is the test cost averaged over the checkpoints: the area under
// the learning curve, which rewards learning early.
func (r result) MeanCurve() float64 {
	var s float64
	for _, c := range r.Curve {
		s += c
	}
	return s / float64(len(r.Curve))
}

// qnet is the Q-network: an nn.MLP from an observation to the values of
// rejecting and approving.
type qnet struct {
	store *nn.Store
	tr    *nn.Trainer
}

func newQNet(seed uint64, width, hidden int, lr float64) (*qnet, error) {
	store := nn.NewStore(seed)
	model := func(s *nn.Scope, x *G.Node) *G.Node { return nn.MLP(s.Sub("q"), x, hidden, 2) }
	q := &qnet{store: store, tr: nn.NewTrainer(store, model, nn.NewAdam(nn.Constant(lr)), nn.TrainConfig{ClipNorm: 10})}
	// The parameters exist once a graph is built.
	if _, err := q.tr.Predict([][]float32{make([]float32, width)}); err != nil {
		return nil, err
	}
	return q, nil
}

// copyFrom loads src's parameters (the learner publishing its weights to
// an actor).
func (q *qnet) copyFrom(src *qnet) {
	for _, p := range src.store.Params() {
		copy(q.store.Param(p.Name).Data(), p.Data())
	}
}

// transition is what an actor sends to the replay: observation, action,
// reward. Encoded as width float32s, one action byte and a float32.
type transition struct {
	obs    []float32
	action int
	reward float32
}

func (tr transition) encode() []byte {
	b := make([]byte, 0, 4*len(tr.obs)+5)
	for _, v := range tr.obs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	b = append(b, byte(tr.action))
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(tr.reward))
}

func decodeTransition(b []byte, width int) (transition, error) {
	if len(b) != 4*width+5 {
		return transition{}, fmt.Errorf("transition of %d bytes, want %d", len(b), 4*width+5)
	}
	tr := transition{obs: make([]float32, width), action: int(b[4*width])}
	for k := range tr.obs {
		tr.obs[k] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*k:]))
	}
	tr.reward = math.Float32frombits(binary.LittleEndian.Uint32(b[4*width+1:]))
	if tr.action != reject && tr.action != approve {
		return transition{}, fmt.Errorf("transition with action %d", tr.action)
	}
	return tr, nil
}

// replayer is the learner's side of a replay (the service's Client, or a
// local Buffer for the overhead comparison).
type replayer interface {
	Sample(ctx context.Context, n int, beta float64) ([]replay.Item[[]byte], error)
	Update(ctx context.Context, ids []uint64, priorities []float64) error
}

// adder is a producer's side.
type adder func(ctx context.Context, values [][]byte) error

// localReplay is a Buffer used in-process, drawing from the generator the
// service would use, so that a run through it reproduces a run through
// the service exactly.
type localReplay struct {
	buf *replay.Buffer[[]byte]
	rng *rand.Rand
}

func (l *localReplay) Sample(_ context.Context, n int, beta float64) ([]replay.Item[[]byte], error) {
	return l.buf.Sample(n, beta, l.rng), nil
}

func (l *localReplay) Update(_ context.Context, ids []uint64, ps []float64) error {
	l.buf.Update(ids, ps)
	return nil
}

// backend makes the replay of one run: the learner's end, one adder per
// actor, and a function releasing them.
type backend func(cfg Config, name string) (replayer, []adder, func(), error)

// serviceBackend serves each run's buffer on b; every actor connects to
// the server with its own connection, as a separate process would.
func serviceBackend(b *bus.Bus) backend {
	return func(cfg Config, name string) (replayer, []adder, func(), error) {
		buf := replay.New[[]byte](cfg.Capacity, alpha(cfg))
		svc, err := replay.NewService(b.Conn(), name, buf, replay.ServiceConfig{Seed: cfg.Seed, MaxSample: cfg.Batch})
		if err != nil {
			return nil, nil, nil, err
		}
		var conns []*nats.Conn
		release := func() {
			for _, nc := range conns {
				nc.Close()
			}
			svc.Stop()
		}
		adders := make([]adder, cfg.Actors)
		for a := range adders {
			nc, err := nats.Connect("", nats.InProcessServer(b.Server()), nats.Name(fmt.Sprintf("%s-actor%d", name, a)))
			if err != nil {
				release()
				return nil, nil, nil, fmt.Errorf("actor %d: %w", a, err)
			}
			conns = append(conns, nc)
			c := replay.NewClient(nc, name)
			adders[a] = func(ctx context.Context, vs [][]byte) error {
				_, err := c.Add(ctx, vs, nil)
				return err
			}
		}
		return replay.NewClient(b.Conn(), name), adders, release, nil
	}
}

// localBackend keeps the buffer in the process, without NATS.
func localBackend(cfg Config, _ string) (replayer, []adder, func(), error) {
	l := &localReplay{buf: replay.New[[]byte](cfg.Capacity, alpha(cfg)), rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed))}
	adders := make([]adder, cfg.Actors)
	for a := range adders {
		adders[a] = func(_ context.Context, vs [][]byte) error {
			l.buf.AddBatch(vs, make([]float64, len(vs)))
			return nil
		}
	}
	return l, adders, func() {}, nil
}

func alpha(cfg Config) float64 {
	if cfg.Prioritized {
		return cfg.Alpha
	}
	return 0
}

// arrival is one applicant applying in one market regime.
type arrival struct {
	applicant int
	regime    finrisk.Regime
}

// train runs one seed: actors decide on arriving applicants ε-greedily
// with the learner's latest weights and send their transitions to the
// replay; the learner samples, fits Q(s,a) to the rewards by
// importance-weighted squared error and sends back |TD error| + 0.01 as
// the new priorities.
func train(ctx context.Context, t *task, s *split, cfg Config, mk backend, name string) (result, error) {
	start := time.Now()
	var res result
	rp, adders, release, err := mk(cfg, name)
	if err != nil {
		return res, err
	}
	defer release()

	learner, err := newQNet(cfg.Seed, s.width, cfg.Hidden, cfg.LR)
	if err != nil {
		return res, err
	}
	actors := make([]*qnet, cfg.Actors)
	for a := range actors {
		if actors[a], err = newQNet(cfg.Seed, s.width, cfg.Hidden, cfg.LR); err != nil {
			return res, err
		}
	}

	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	var arrivals []arrival
	for range cfg.Epochs {
		order := append([]int(nil), s.train...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			arrivals = append(arrivals, arrival{i, t.randomRegime(rng)})
		}
	}
	perRound := cfg.Actors * cfg.PerActor
	rounds := len(arrivals) / perRound
	totalSteps := rounds * cfg.Steps
	actorRng := make([]*rand.Rand, cfg.Actors)
	for a := range actorRng {
		actorRng[a] = rand.New(rand.NewPCG(cfg.Seed, uint64(100+a)))
	}
	onlineCost := make([]float64, cfg.Actors)

	step := 0
	for r := range rounds {
		for _, q := range actors {
			q.copyFrom(learner)
		}
		// The actors decide in parallel and add in actor order, so that a
		// seed fixes the buffer's contents and the run is reproducible.
		turn := make([]chan struct{}, cfg.Actors+1)
		for a := range turn {
			turn[a] = make(chan struct{})
		}
		close(turn[0])
		errs := make([]error, cfg.Actors)
		var wg sync.WaitGroup
		for a := range cfg.Actors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(turn[a+1])
				base := r*perRound + a*cfg.PerActor
				batch := arrivals[base : base+cfg.PerActor]
				eps := math.Max(cfg.EpsFloor, 1-float64(base)/(0.5*float64(len(arrivals))))
				vals, cost, err := act(t, s, actors[a], actorRng[a], batch, eps)
				<-turn[a]
				if err == nil {
					err = adders[a](ctx, vals)
				}
				errs[a] = err
				onlineCost[a] += cost
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return res, fmt.Errorf("round %d: %w", r, err)
		}
		for range cfg.Steps {
			if err := learn(ctx, rp, learner, s.width, cfg, replay.Anneal(cfg.Beta0, step, totalSteps), &res); err != nil {
				return res, fmt.Errorf("round %d, step %d: %w", r, step, err)
			}
			step++
		}
		if (r+1)*cfg.Checkpoints/rounds > r*cfg.Checkpoints/rounds { // Checkpoints evenly spaced, the last at the end
			cost, auc, err := evaluate(t, s, learner)
			if err != nil {
				return res, err
			}
			res.Curve = append(res.Curve, cost)
			res.Cost, res.AUC = cost, auc
		}
	}
	for _, c := range onlineCost {
		res.Online += c
	}
	res.Online /= float64(rounds * perRound)
	res.Wall = time.Since(start)
	return res, nil
}

// act decides on a batch of arrivals ε-greedily and returns the encoded
// transitions and their summed cost under the cost matrix.
func act(t *task, s *split, q *qnet, rng *rand.Rand, batch []arrival, eps float64) ([][]byte, float64, error) {
	obs := make([][]float32, len(batch))
	for k, ar := range batch {
		obs[k] = t.observe(nil, s, ar.applicant, ar.regime)
	}
	out, err := q.tr.Predict(obs)
	if err != nil {
		return nil, 0, err
	}
	vals := make([][]byte, len(batch))
	var cost float64
	for k, ar := range batch {
		a := reject
		if out[k][approve] > out[k][reject] {
			a = approve
		}
		if rng.Float64() < eps {
			a = rng.IntN(2)
		}
		rw := t.reward(ar.applicant, a == approve, ar.regime)
		// cost = (1 if the applicant is good) − reward, the cost matrix.
		cost += float64(1-t.credit.Bad[ar.applicant]) - rw
		vals[k] = transition{obs[k], a, float32(rw)}.encode()
	}
	return vals, cost, nil
}

// learn is one gradient step on a sampled batch.
func learn(ctx context.Context, rp replayer, q *qnet, width int, cfg Config, beta float64, res *result) error {
	t0 := time.Now()
	items, err := rp.Sample(ctx, cfg.Batch, beta)
	res.ReplayTime += time.Since(t0)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		return errors.New("replay is empty")
	}
	res.Sampled += len(items)
	x := make([][]float32, len(items))
	trs := make([]transition, len(items))
	for k, it := range items {
		if trs[k], err = decodeTransition(it.Value, width); err != nil {
			return fmt.Errorf("item %d: %w", it.ID, err)
		}
		x[k] = trs[k].obs
		switch {
		case trs[k].action == reject:
			res.Mix[0]++
		case trs[k].reward > 0:
			res.Mix[1]++
		default:
			res.Mix[2]++
		}
	}
	td := make([]float64, len(items))
	n := float64(len(items))
	loss := func(out [][]float32) (float64, [][]float32) {
		var l float64
		grad := make([][]float32, len(out))
		for k, row := range out {
			grad[k] = make([]float32, len(row))
			a := trs[k].action
			d := float64(row[a] - trs[k].reward)
			td[k] = d
			w := items[k].Weight
			l += w * d * d / n
			grad[k][a] = float32(2 * w * d / n)
		}
		return l, grad
	}
	if _, err := q.tr.ForwardBackward(x, loss); err != nil {
		return err
	}
	if _, _, err := q.tr.Step(); err != nil {
		return err
	}
	ids := make([]uint64, len(items))
	ps := make([]float64, len(items))
	for k, it := range items {
		ids[k], ps[k] = it.ID, math.Abs(td[k])+0.01
	}
	t0 = time.Now()
	err = rp.Update(ctx, ids, ps)
	res.ReplayTime += time.Since(t0)
	return err
}

// evaluate runs the greedy policy on the test applicants.
func evaluate(t *task, s *split, q *qnet) (cost, auc float64, err error) {
	obs := make([][]float32, len(s.test))
	for k, i := range s.test {
		obs[k] = t.observe(nil, s, i, s.testRegime[k])
	}
	out, err := q.tr.Predict(obs)
	if err != nil {
		return 0, 0, err
	}
	dec := make([]bool, len(out))
	risk := make([]float64, len(out))
	for k, o := range out {
		dec[k] = o[approve] > o[reject]
		risk[k] = float64(o[reject] - o[approve])
	}
	cost, auc = t.testCost(s, dec, risk)
	return cost, auc, nil
}
