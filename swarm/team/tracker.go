package team

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Tracker is one server's side of team episodes: its members join, end
// and are lost through it; Run discards the teams of lost members, sweeps
// the teams the server waits on (Watch) and renews the server's heartbeat,
// and reports every decision it learns to Decided.
type Tracker struct {
	store   *Store
	owner   string
	model   string
	timeout time.Duration
	log     *slog.Logger
	decided func(id, decision string)

	mu    sync.Mutex
	lost  []lostMember
	watch map[string]bool
	kick  chan struct{}
}

type lostMember struct{ team, episode, reason string }

// SweepInterval is how often Run checks the teams it watches, and
// retries the discards the store refused.
const SweepInterval = 250 * time.Millisecond

// NewTracker returns the tracker of a server that names itself model in
// team documents (unique among the servers of one store), bounding each
// store call by timeout; decided receives each decision Run learns, from
// Run's goroutine.
func NewTracker(store *Store, model string, timeout time.Duration, log *slog.Logger, decided func(id, decision string)) *Tracker {
	return &Tracker{store: store, owner: NewOwner(), model: model, timeout: timeout, log: log, decided: decided,
		watch: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// Store is the tracker's store.
func (t *Tracker) Store() *Store { return t.store }

func (t *Tracker) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, t.timeout)
}

// Join makes episode, open on this server with lease (its discard
// timeout), a member of team id of size.
func (t *Tracker) Join(ctx context.Context, id string, size int, episode string, lease time.Duration) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.store.Join(ctx, id, size, Member{Model: t.model, Episode: episode, Owner: t.owner, Lease: lease})
}

// End records that a member ended with reward and returns its team's
// decision.
func (t *Tracker) End(ctx context.Context, id, episode string, reward float64) (string, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	d, err := t.store.End(ctx, id, t.model, episode, reward)
	return d.Decision, err
}

// Lose notes a member closed without ending (reason: ReasonAborted or
// ReasonExpired): Run discards its team.
func (t *Tracker) Lose(id, episode, reason string) {
	t.mu.Lock()
	t.lost = append(t.lost, lostMember{team: id, episode: episode, reason: reason})
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Watch makes Run sweep team id until Forget.
func (t *Tracker) Watch(id string) {
	t.mu.Lock()
	t.watch[id] = true
	t.mu.Unlock()
}

// Forget stops sweeping team id.
func (t *Tracker) Forget(id string) {
	t.mu.Lock()
	delete(t.watch, id)
	t.mu.Unlock()
}

// Run beats, discards and sweeps every SweepInterval (and at once after
// Lose) until stop is closed.
func (t *Tracker) Run(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(SweepInterval)
	defer tick.Stop()
	var beat time.Time
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		case <-t.kick:
		}
		if now := time.Now(); now.Sub(beat) >= DefaultHeartbeat {
			c, cancel := t.ctx(ctx)
			if err := t.store.Beat(c, t.owner); err != nil {
				t.log.Warn("team heartbeat failed", "err", err)
			} else {
				beat = now
			}
			cancel()
		}
		t.Flush(ctx)
		t.sweep(ctx)
	}
}

// Flush discards the teams of the members lost so far; a store error
// keeps them for Run's next round.
func (t *Tracker) Flush(ctx context.Context) {
	t.mu.Lock()
	lost := t.lost
	t.lost = nil
	t.mu.Unlock()
	var retry []lostMember
	for _, l := range lost {
		c, cancel := t.ctx(ctx)
		d, err := t.store.Discard(c, l.team, t.model, l.episode, l.reason)
		cancel()
		if err != nil {
			t.log.Warn("team store: discarding a team failed; retrying", "err", err)
			retry = append(retry, l)
			continue
		}
		t.decided(l.team, d.Decision)
	}
	if len(retry) > 0 {
		t.mu.Lock()
		t.lost = append(retry, t.lost...)
		t.mu.Unlock()
	}
}

// sweep asks the store about every watched team.
func (t *Tracker) sweep(ctx context.Context) {
	t.mu.Lock()
	ids := make([]string, 0, len(t.watch))
	for id := range t.watch {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		c, cancel := t.ctx(ctx)
		d, err := t.store.Sweep(c, id)
		cancel()
		if err != nil {
			t.log.Warn("team store: sweeping a team failed", "err", err)
			continue
		}
		if d.Decision != Pending {
			t.decided(id, d.Decision)
		}
	}
}
