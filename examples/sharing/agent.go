package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/troupe-ml/troupe/rl/gradshare"
)

// agentEnv carries an agent process's spec (JSON): the coordinator runs its
// own binary with it set.
const agentEnv = "TROUPE_SHARING_AGENT"

// Exchange kinds of a condition.
const (
	shareNone   = "none"
	shareGrad   = "grad"
	shareParams = "params"
)

// condition is one row of the table.
type condition struct {
	Name  string
	Share string             // shareNone, shareGrad or shareParams
	Grad  gradshare.Settings // shareGrad: compression and privacy
	Round int                // shareParams: fuse every Round steps
	Tau   float64            // shareParams: attention temperature
}

// agentSpec is what one agent process runs.
type agentSpec struct {
	URL, Group string
	Index      int
	Agents     int
	Seed       uint64
	Steps      int
	Hidden     int
	DataDir    string
	Cond       condition
}

// agentResult is what an agent process reports (one JSON line on stdout).
type agentResult struct {
	Index     int
	TestAUC   float64
	WireOut   int64   // bytes its socket wrote during training
	WireIn    int64   // bytes its socket read during training
	MsgOut    int64   // message bytes published (payload and headers)
	FrameOut  int64   // PUB frames of those messages
	Msgs      int64   // messages published
	CompIn    int64   // float32 bytes handed to the compressor
	CompOut   int64   // gradcomp message bytes
	Epsilon   float64 // ε(δ) of the published gradients; 0 without DP
	Params    int
	Inputs    int
	TrainRows int
}

// Training constants shared by every condition: Adam with decoupled weight
// decay, minibatches drawn with replacement from the agent's own shard.
const (
	batchSize   = 32
	learnRate   = 0.003
	weightDecay = 1e-3
	delta       = 1e-5
	gatherWait  = 60 * time.Second
)

// runAgent trains one agent. With an exchange it connects to spec.URL,
// joins the group, writes "ready" and waits for a line on in before the
// first step, so that every peer is subscribed before anyone publishes.
func runAgent(spec agentSpec, in io.Reader, out io.Writer) (*agentResult, error) {
	s, err := loadSplit(spec.DataDir, spec.Agents, spec.Seed)
	if err != nil {
		return nil, err
	}
	// The same initial parameters for every agent (parameter averaging
	// needs them; gradient sharing then keeps the agents close).
	m := newMLP(s.d, spec.Hidden, rand.New(rand.NewPCG(spec.Seed, 1)))
	opt := newAdam(m.size(), learnRate, weightDecay)
	rng := rand.New(rand.NewPCG(spec.Seed, uint64(1000+spec.Index)))
	res := &agentResult{Index: spec.Index, Params: m.size(), Inputs: s.d, TrainRows: len(s.train[spec.Index])}

	var (
		grp   *gradshare.Group
		meter = &gradshare.Meter{}
		nc    *nats.Conn
	)
	if spec.Cond.Share != shareNone {
		nc, err = nats.Connect(spec.URL, nats.SetCustomDialer(meter), nats.NoEcho(), nats.Name("sharing-agent-"+strconv.Itoa(spec.Index)))
		if err != nil {
			return nil, fmt.Errorf("agent %d: connect %s: %w", spec.Index, spec.URL, err)
		}
		defer nc.Close()
		grp, err = gradshare.Join(nc, gradshare.Config{Group: spec.Group, Agent: "a" + strconv.Itoa(spec.Index), Grad: spec.Cond.Grad, Size: m.size()})
		if err != nil {
			return nil, fmt.Errorf("agent %d: %w", spec.Index, err)
		}
		defer grp.Close()
	}
	fmt.Fprintln(out, "ready")
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return nil, fmt.Errorf("agent %d: waiting for the start: %w", spec.Index, err)
	}
	w0, r0 := meter.Written(), meter.Read()

	n := m.size()
	g := make([]float64, n)
	g32 := make([]float32, n)
	p32 := make([]float32, n)
	var mean []float32
	idx := make([]int, batchSize)
	train := s.train[spec.Index]
	ctx := context.Background()
	peers := spec.Agents - 1
	for step := range spec.Steps {
		for k := range idx {
			idx[k] = train[rng.IntN(len(train))]
		}
		clear(g)
		m.grad(g, s.x, s.y, idx)
		if spec.Cond.Share == shareGrad {
			for i, v := range g {
				g32[i] = float32(v)
			}
			if err := grp.Publish(step, g32); err != nil {
				return nil, err
			}
			gctx, cancel := context.WithTimeout(ctx, gatherWait)
			got, err := grp.Gather(gctx, step, peers)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("agent %d: %w", spec.Index, err)
			}
			// The agent's own gradient enters exactly; the peers' as
			// they arrived (compressed, noised).
			if mean, err = gradshare.Mean(mean, g32, got); err != nil {
				return nil, err
			}
			for i, v := range mean {
				g[i] = float64(v)
			}
		}
		opt.step(m.theta, g)
		if spec.Cond.Share == shareParams && (step+1)%spec.Cond.Round == 0 {
			for i, v := range m.theta {
				p32[i] = float32(v)
			}
			score := s.auc(m, s.val[spec.Index])
			if math.IsNaN(score) {
				score = 0.5
			}
			if err := grp.PublishParams(step, p32, score); err != nil {
				return nil, err
			}
			gctx, cancel := context.WithTimeout(ctx, gatherWait)
			got, err := grp.GatherParams(gctx, step, peers)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("agent %d: %w", spec.Index, err)
			}
			members := append(got, gradshare.Update{Agent: "self", Values: p32, Score: score})
			if _, _, err := gradshare.Fuse(p32, members, spec.Cond.Tau); err != nil {
				return nil, err
			}
			for i, v := range p32 {
				m.theta[i] = float64(v)
			}
		}
	}
	if grp != nil {
		// Everything published is on the socket once the server answers
		// the flush's PING (those 6 bytes are counted too).
		if err := nc.Flush(); err != nil {
			return nil, fmt.Errorf("agent %d: flush: %w", spec.Index, err)
		}
		st := grp.Stats()
		res.WireOut, res.WireIn = meter.Written()-w0, meter.Read()-r0
		res.MsgOut, res.FrameOut, res.Msgs = st.SentBytes, st.SentWire, st.SentMsgs
		c := grp.Compressor()
		res.CompIn, res.CompOut = c.BytesIn, c.BytesOut
		if spec.Cond.Grad.Noise > 0 {
			res.Epsilon = grp.Epsilon(delta)
		}
	}
	res.TestAUC = s.auc(m, s.test)
	return res, nil
}

// agentMain runs the agent whose spec is in the environment and writes its
// result as JSON on stdout.
func agentMain(specJSON string, in io.Reader, out io.Writer) error {
	var spec agentSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("agent spec in $%s: %w", agentEnv, err)
	}
	res, err := runAgent(spec, in, out)
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(res)
}
