package swarm

import (
	"cmp"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"slices"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/record"
)

// episode is an open episode.
type episode struct {
	id, client, kind, key, taskHint string
	lastActive                      time.Time
	timeout                         time.Duration
	inflight                        int
	ending                          bool   // end_episode is journaling it
	addr                            string // remote IP counted in perAddr; empty when exempt
	calls                           int
	tokens                          int // prompt + sampled tokens recorded
	reserved                        int // tokens reserved by completions in flight
	samples                         []rl.Sample
	team                            string              // the team episode it is a member of; empty when none
	teamJoined                      bool                // the team store holds it as a member
	convo                           record.Conversation // for the run directory's sample files
}

type closedInfo struct {
	reason string // ended, aborted, reclaimed, stopped
	client string
}

// episodes holds the open episodes, the per-client and per-address counts
// of their quotas, and a ring of recently closed ids (to tell a late or
// duplicate end_episode from an unknown one). Its methods are called with
// the server's mutex held.
type episodes struct {
	open       map[string]*episode
	openTrain  int
	perClient  map[string]int // open episodes by client_uuid
	perAddr    map[string]int // open episodes by remote IP (loopback and admins not counted)
	closed     map[string]closedInfo
	closedRing []string
	closedPos  int
	m          *metrics
}

func newEpisodes(memory int, m *metrics) *episodes {
	return &episodes{open: map[string]*episode{}, perClient: map[string]int{}, perAddr: map[string]int{},
		closed: map[string]closedInfo{}, closedRing: make([]string, memory), m: m}
}

// add opens an episode.
func (e *episodes) add(ep *episode) {
	e.open[ep.id] = ep
	e.perClient[ep.client]++
	if ep.addr != "" {
		e.perAddr[ep.addr]++
	}
	if ep.kind == api.EpisodeTrain {
		e.openTrain++
	}
	e.m.open.Set(float64(len(e.open)))
}

// close removes an open episode and remembers why.
func (e *episodes) close(ep *episode, reason string) {
	delete(e.open, ep.id)
	if ep.kind == api.EpisodeTrain {
		e.openTrain--
	}
	if e.perClient[ep.client]--; e.perClient[ep.client] <= 0 {
		delete(e.perClient, ep.client)
	}
	if ep.addr != "" {
		if e.perAddr[ep.addr]--; e.perAddr[ep.addr] <= 0 {
			delete(e.perAddr, ep.addr)
		}
	}
	if old := e.closedRing[e.closedPos]; old != "" {
		delete(e.closed, old)
	}
	e.closedRing[e.closedPos] = ep.id
	e.closedPos = (e.closedPos + 1) % len(e.closedRing)
	e.closed[ep.id] = closedInfo{reason: reason, client: ep.client}
	e.m.open.Set(float64(len(e.open)))
	e.m.episodes.WithLabelValues(reason).Inc()
}

// rememberClosed records the reason an already closed episode ended with
// (an episode the engine's stop closed while its end was journaled).
func (e *episodes) rememberClosed(id, client, reason string) {
	if _, ok := e.closed[id]; ok {
		e.closed[id] = closedInfo{reason: reason, client: client}
	}
}

// idle returns the episodes idle longer than their discard timeout.
func (e *episodes) idle(now time.Time) []*episode {
	var out []*episode
	for _, ep := range e.open {
		if ep.inflight == 0 && now.Sub(ep.lastActive) > ep.timeout {
			out = append(out, ep)
		}
	}
	return out
}

// sorted lists the open episodes oldest activity first, so that the
// placeholders of a redacted view do not follow map order.
func (e *episodes) sorted() []*episode {
	eps := make([]*episode, 0, len(e.open))
	for _, ep := range e.open {
		eps = append(eps, ep)
	}
	slices.SortFunc(eps, func(a, b *episode) int {
		return cmp.Or(a.lastActive.Compare(b.lastActive), strings.Compare(a.id, b.id))
	})
	return eps
}

const keyPrefix = "sk-troupe-"

// newKey returns an episode API key: the episode id (public, used to find
// the episode) and 256 random bits, which are compared in constant time.
func newKey(id string) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("swarm: crypto/rand failed: " + err.Error())
	}
	return keyPrefix + id + "." + base64.RawURLEncoding.EncodeToString(b[:])
}

// forKey returns the open episode whose key is key, or nil.
func (e *episodes) forKey(key string) *episode {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return nil
	}
	id, _, ok := strings.Cut(rest, ".")
	if !ok {
		return nil
	}
	ep := e.open[id]
	if ep == nil || subtle.ConstantTimeCompare([]byte(key), []byte(ep.key)) != 1 {
		return nil
	}
	return ep
}
