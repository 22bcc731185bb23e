package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/tokenizer"
)

// selector keeps, for each model, the RL checkpoint with the best own
// reward on validation sentences: early stopping by model selection on
// held-out data (the test split is never looked at). The small model is
// scored by the mean of its two turns' quality rewards (agent 1's rough
// translation and agent 3's final one), the larger model by its detection
// reward, both from one greedy run of the workflow. Step 0 is the warm
// start, so a model that RL did not improve on validation keeps its warm
// start, and the report says so.
type selector struct {
	e      *env
	models [2]*nn.LM
	tasks  []task
	best   [2]selPoint
	snap   [2][][]float32
	trace  []selTrace
}

type selPoint struct {
	step  int
	score float64
}

// selTrace is one evaluation of the selection.
type selTrace struct {
	Step                       int
	Agent1, Agent3, Small, Det float64
}

func newSelector(e *env, small, large *nn.LM, tasks []task) *selector {
	return &selector{e: e, models: [2]*nn.LM{small, large}, tasks: tasks,
		best: [2]selPoint{{-1, 0}, {-1, 0}}}
}

// check evaluates both models at RL step and snapshots each that improved.
func (s *selector) check(step int) error {
	alone, flow, err := s.e.evaluate(s.models[0], s.models[1], s.tasks)
	if err != nil {
		return err
	}
	tr := selTrace{Step: step, Agent1: alone.Quality, Agent3: flow.Quality, Small: (alone.Quality + flow.Quality) / 2, Det: flow.Detection}
	s.trace = append(s.trace, tr)
	logf("selection, step %d on %d validation sentences: small model %.4f (agent 1 %.4f, agent 3 %.4f), larger model %.4f", step, len(s.tasks), tr.Small, tr.Agent1, tr.Agent3, tr.Det)
	for i, score := range []float64{tr.Small, tr.Det} {
		if s.best[i].step < 0 || score > s.best[i].score {
			s.best[i] = selPoint{step, score}
			s.snap[i] = snapshot(s.models[i], s.snap[i])
		}
	}
	return nil
}

// restore puts each model back to its best checkpoint.
func (s *selector) restore() {
	for i, m := range s.models {
		if s.snap[i] == nil {
			continue
		}
		for j, p := range m.Store.Params() {
			copy(p.Data(), s.snap[i][j])
		}
	}
}

// snapshot copies lm's parameters into dst (reused when it fits).
func snapshot(lm *nn.LM, dst [][]float32) [][]float32 {
	ps := lm.Store.Params()
	if len(dst) != len(ps) {
		dst = make([][]float32, len(ps))
	}
	for i, p := range ps {
		dst[i] = append(dst[i][:0], p.Data()...)
	}
	return dst
}

// selfAnchor returns a drawer of agent-3 examples whose targets are the
// small model's own greedy outputs now (at the warm start): n prompts made
// from agent 1's train-set rough translations rx, each with its true
// corrections ("[]" when it has none). Supervised steps on them
// (-anchor-self) hold agent 3's behaviour where it is while RL on agent
// 1's turns moves the weights the two turns share: self-distillation from
// the warm start on the other role's prompts.
func selfAnchor(e *env, small *nn.LM, rx []roughEx, n int, r *rand.Rand) (func() (nn.SeqExample, error), error) {
	if len(rx) == 0 || n <= 0 {
		return nil, nil
	}
	msgs := make([][]tokenizer.Message, n)
	for i := range msgs {
		x := rx[r.IntN(len(rx))]
		rough := clip(x.Rough, e.maxRough)
		msgs[i] = msgsFinal(x.T.En, rough, errorsJSON(truthErrors(x.T, rough)))
	}
	outs, err := generate(small, e.tok, msgs, e.maxTok+16)
	if err != nil {
		return nil, fmt.Errorf("self anchor: %w", err)
	}
	pool := make([]nn.SeqExample, n)
	for i := range pool {
		if pool[i], err = roleExample(e.tok, msgs[i], outs[i]); err != nil {
			return nil, err
		}
	}
	return func() (nn.SeqExample, error) { return pool[r.IntN(len(pool))], nil }, nil
}
