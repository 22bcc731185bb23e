// Package team keeps the state of team episodes: episodes of several
// agents (each on its own swarm server, in one process or on several
// machines) that are trained all together or not at all.
//
// A team is one document, keyed by a hash of its client-chosen id, in a
// key-value store: a JetStream bucket (TROUPE_TEAMS) when the servers
// share a NATS bus, so that the state survives any process, or a map
// shared by the servers of one process. Every change is a
// compare-and-set on the document's revision, so concurrent members on
// different servers never lose each other's updates, and a team is
// decided once: Complete when all Size members have ended, Discarded when
// any member is aborted, expires, or dies with its server.
//
// A server's open members name it as their owner; a live owner renews its
// heartbeat key every few seconds. A server that waits on a team (it holds
// an ended member until the decision) sweeps it: an open member whose
// owner's heartbeat has not changed for DeadAfter, as this process's own
// clock measures it (no two machines' clocks are compared), died with its
// server, and the team is discarded.
package team

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Decisions of a team.
const (
	Pending   = ""          // members are still open
	Complete  = "complete"  // every member ended: train them all
	Discarded = "discarded" // a member was lost: train none
)

// Reasons a team was discarded.
const (
	ReasonAborted   = "aborted"    // a member's episode was aborted (or its server stopped it)
	ReasonExpired   = "expired"    // a member's lease (discard_episode_timeout) ran out
	ReasonOwnerLost = "owner_lost" // a member's server died with it open
	ReasonMissing   = "missing"    // the team's document is gone (expired from the store)
)

// Member states.
const (
	MemberOpen  = "open"
	MemberEnded = "ended"
	MemberLost  = "lost"
)

// MaxIDLen bounds a team id (a client-chosen string).
const MaxIDLen = 256

// MaxSize bounds a team's size.
const MaxSize = 64

// Member is one agent's episode in a team.
type Member struct {
	Model   string   `json:"model"`
	Episode string   `json:"episode"`
	Owner   string   `json:"owner"`            // the server instance that holds it open
	State   string   `json:"state"`            // MemberOpen, MemberEnded or MemberLost
	Reward  *float64 `json:"reward,omitempty"` // the reward it ended with
	// Lease is the member's discard_episode_timeout: a team that still
	// waits for members to claim is discarded (ReasonExpired) once it has
	// not changed for its members' longest lease.
	Lease time.Duration `json:"lease"`
}

// Doc is a team's state.
type Doc struct {
	ID       string    `json:"id"`
	Size     int       `json:"size"`
	Members  []Member  `json:"members"`
	Decision string    `json:"decision,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Created  time.Time `json:"created"`
}

// Ended counts the members that ended.
func (d *Doc) Ended() int {
	n := 0
	for _, m := range d.Members {
		if m.State == MemberEnded {
			n++
		}
	}
	return n
}

func (d *Doc) member(model, episode string) int {
	return slices.IndexFunc(d.Members, func(m Member) bool { return m.Model == model && m.Episode == episode })
}

// Errors of Join; servers answer them with 409 (ErrInvalid with 400).
var (
	ErrInvalid      = errors.New("team: invalid team")
	ErrSizeMismatch = errors.New("team: team_size differs from the team's")
	ErrFull         = errors.New("team: every member of the team has claimed already")
	ErrDecided      = errors.New("team: the team has ended or been discarded")
	ErrNotMember    = errors.New("team: no such member")
)

// Validate checks a claim's team_id and team_size.
func Validate(id string, size int) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: team_size without team_id", ErrInvalid)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: team_id longer than %d bytes", ErrInvalid, MaxIDLen)
	case size < 2 || size > MaxSize:
		return fmt.Errorf("%w: team_size %d, want 2 to %d", ErrInvalid, size, MaxSize)
	}
	return nil
}

// Key is the store key of a team id: ids are client-chosen strings, keys
// are restricted to a few characters.
func Key(id string) string {
	h := sha256.Sum256([]byte(id))
	return "t." + hex.EncodeToString(h[:16])
}

func ownerKey(owner string) string { return "o." + owner }

// NewOwner returns a fresh server instance id.
func NewOwner() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("team: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// Store is the team documents and the owners' heartbeats.
type Store struct {
	kv kv
	// DeadAfter is how long an owner's heartbeat may stay unchanged
	// before its open members count as lost (DefaultDeadAfter when zero).
	DeadAfter time.Duration
	// Heartbeat is how often Beat should be called (DefaultHeartbeat).
	Heartbeat time.Duration
	now       func() time.Time

	mu   sync.Mutex
	seen map[string]heartbeat // owners' heartbeats as this process saw them
}

type heartbeat struct {
	rev   uint64
	since time.Time // when this process first saw rev
}

// Defaults of Store.
const (
	DefaultHeartbeat = 2 * time.Second
	DefaultDeadAfter = 10 * time.Second
)

// NewMemory returns a store in this process's memory: the servers that
// share it form teams together; nothing survives the process (and every
// owner is alive while it lasts).
func NewMemory() *Store { return newStore(&memKV{m: map[string]memEntry{}}) }

func newStore(k kv) *Store {
	return &Store{kv: k, now: time.Now, seen: map[string]heartbeat{}}
}

// attempts bounds the compare-and-set retries of one change.
const attempts = 64

// update applies f to the team's document under compare-and-set; f
// returns false to leave the document as it is.
func (s *Store) update(ctx context.Context, id string, f func(d *Doc, exists bool) (bool, error)) (Doc, error) {
	key := Key(id)
	for range attempts {
		raw, rev, err := s.kv.get(ctx, key)
		var d Doc
		exists := err == nil
		switch {
		case errors.Is(err, errNotFound):
		case err != nil:
			return d, fmt.Errorf("team %q: %w", id, err)
		default:
			if err := json.Unmarshal(raw, &d); err != nil {
				return d, fmt.Errorf("team %q: corrupt document: %w", id, err)
			}
		}
		write, err := f(&d, exists)
		if err != nil || !write {
			return d, err
		}
		b, err := json.Marshal(&d)
		if err != nil {
			return d, err
		}
		if exists {
			_, err = s.kv.update(ctx, key, b, rev)
		} else {
			_, err = s.kv.create(ctx, key, b)
		}
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return d, fmt.Errorf("team %q: %w", id, err)
		}
		return d, nil
	}
	return Doc{}, fmt.Errorf("team %q: %d concurrent updates conflicted", id, attempts)
}

// Join adds an open member to the team, creating it with size. It fails
// with ErrSizeMismatch, ErrFull or ErrDecided (wrapped) when the member
// cannot join.
func (s *Store) Join(ctx context.Context, id string, size int, m Member) error {
	if err := Validate(id, size); err != nil {
		return err
	}
	m.State, m.Reward = MemberOpen, nil
	_, err := s.update(ctx, id, func(d *Doc, exists bool) (bool, error) {
		if !exists {
			*d = Doc{ID: id, Size: size, Created: s.now().UTC()}
		}
		switch {
		case d.Size != size:
			return false, fmt.Errorf("%w (%d, the team's is %d)", ErrSizeMismatch, size, d.Size)
		case d.Decision != Pending:
			return false, fmt.Errorf("%w (%s)", ErrDecided, d.Decision)
		case len(d.Members) >= d.Size:
			return false, fmt.Errorf("%w (%d of %d)", ErrFull, len(d.Members), d.Size)
		case d.member(m.Model, m.Episode) >= 0:
			return false, nil
		}
		d.Members = append(d.Members, m)
		return true, nil
	})
	return err
}

// End marks a member ended with its reward and returns the team: Complete
// when it was the last, Discarded when the team was lost before it ended
// (its episode must not be trained), Pending otherwise.
func (s *Store) End(ctx context.Context, id, model, episode string, reward float64) (Doc, error) {
	return s.update(ctx, id, func(d *Doc, exists bool) (bool, error) {
		if !exists {
			d.ID, d.Decision, d.Reason = id, Discarded, ReasonMissing
			return false, nil
		}
		i := d.member(model, episode)
		if i < 0 {
			return false, fmt.Errorf("%w: %s/%s", ErrNotMember, model, episode)
		}
		if d.Decision != Pending || d.Members[i].State == MemberEnded {
			return false, nil
		}
		d.Members[i].State, d.Members[i].Reward = MemberEnded, &reward
		if d.Ended() == d.Size {
			d.Decision = Complete
		}
		return true, nil
	})
}

// Discard decides a pending team Discarded for reason, marking the member
// (when given) lost; a complete team stays complete.
func (s *Store) Discard(ctx context.Context, id, model, episode, reason string) (Doc, error) {
	return s.update(ctx, id, func(d *Doc, exists bool) (bool, error) {
		if !exists {
			d.ID, d.Decision, d.Reason = id, Discarded, ReasonMissing
			return false, nil
		}
		if d.Decision != Pending {
			return false, nil
		}
		if i := d.member(model, episode); i >= 0 && d.Members[i].State == MemberOpen {
			d.Members[i].State = MemberLost
		}
		d.Decision, d.Reason = Discarded, reason
		return true, nil
	})
}

// Get returns the team; a team the store does not hold is Discarded with
// ReasonMissing.
func (s *Store) Get(ctx context.Context, id string) (Doc, error) {
	d, _, err := s.get(ctx, id)
	return d, err
}

func (s *Store) get(ctx context.Context, id string) (Doc, uint64, error) {
	raw, rev, err := s.kv.get(ctx, Key(id))
	if errors.Is(err, errNotFound) {
		return Doc{ID: id, Decision: Discarded, Reason: ReasonMissing}, 0, nil
	}
	if err != nil {
		return Doc{}, 0, fmt.Errorf("team %q: %w", id, err)
	}
	var d Doc
	if err := json.Unmarshal(raw, &d); err != nil {
		return Doc{}, 0, fmt.Errorf("team %q: corrupt document: %w", id, err)
	}
	return d, rev, nil
}

// Beat renews owner's heartbeat; a server calls it every Heartbeat while
// it holds team members open.
func (s *Store) Beat(ctx context.Context, owner string) error {
	if err := s.kv.put(ctx, ownerKey(owner), []byte(s.now().UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("team heartbeat: %w", err)
	}
	return nil
}

// unchanged returns how long, by this process's clock, the revision of
// key has been rev (zero the first time it is seen at rev).
func (s *Store) unchanged(key string, rev uint64) time.Duration {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.seen[key]
	if !ok || h.rev != rev {
		h = heartbeat{rev: rev, since: now}
		s.seen[key] = h
	}
	return now.Sub(h.since)
}

func (s *Store) forget(key string) {
	s.mu.Lock()
	delete(s.seen, key)
	s.mu.Unlock()
}

// alive says whether owner's heartbeat changed within DeadAfter.
func (s *Store) alive(ctx context.Context, owner string) (bool, error) {
	if _, mem := s.kv.(*memKV); mem {
		return true, nil // one process: its owners live as long as it does
	}
	_, rev, err := s.kv.get(ctx, ownerKey(owner))
	if err != nil && !errors.Is(err, errNotFound) {
		return false, err
	}
	return s.unchanged(ownerKey(owner), rev) < cmp.Or(s.DeadAfter, DefaultDeadAfter), nil
}

// Sweep returns the team's state, first discarding it when it is pending
// and lost: an open member's owner is dead (ReasonOwnerLost), or members
// that have not claimed yet let the team stand unchanged for its members'
// longest lease (ReasonExpired).
func (s *Store) Sweep(ctx context.Context, id string) (Doc, error) {
	d, rev, err := s.get(ctx, id)
	if err != nil {
		return d, err
	}
	if d.Decision != Pending {
		s.forget(Key(id))
		return d, nil
	}
	for _, m := range d.Members {
		if m.State != MemberOpen {
			continue
		}
		ok, err := s.alive(ctx, m.Owner)
		if err != nil {
			return d, fmt.Errorf("team %q: heartbeat of %s: %w", id, m.Owner, err)
		}
		if !ok {
			return s.Discard(ctx, id, m.Model, m.Episode, ReasonOwnerLost)
		}
	}
	if len(d.Members) < d.Size {
		var lease time.Duration
		for _, m := range d.Members {
			lease = max(lease, m.Lease)
		}
		if lease > 0 && s.unchanged(Key(id), rev) > lease {
			return s.Discard(ctx, id, "", "", ReasonExpired)
		}
	}
	return d, nil
}
