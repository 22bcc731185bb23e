package swarm

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/swarm/team"
)

// Team episodes (api.ClaimRequest's team_id and team_size): every member
// claims on its own agent's server; the team's state lives in a
// team.Store (TROUPE_TEAMS on JetStream, or one process's memory), never
// in a server. A member that ends is journaled as any episode, with its
// team named, and then held out of the batch: a trainer buffers a team's
// members only once the team is Complete, and drops them as
// "team_incomplete" once it is Discarded, whichever process learns it
// (the one ending the last member at once, the others by sweeping the
// teams they hold every TeamSweepInterval). A member aborted, reclaimed
// or stopped discards its team; a member whose server dies with it open
// stops being renewed by that server's heartbeat, and the first sweep
// after team.Store.DeadAfter discards its team. Every member of a
// discarded team is counted once, as team_incomplete, by its own server.

// DropTeamIncomplete is the drop reason of a member of a discarded team.
const DropTeamIncomplete = "team_incomplete"

// TeamSweepInterval is how often a server checks the teams whose ended
// members it holds, and renews its heartbeat.
const TeamSweepInterval = 250 * time.Millisecond

// teamState is a server's part in team episodes; guarded by the server's
// mutex except store and owner, which never change.
type teamState struct {
	store *team.Store
	owner string
	held  map[string][]*finishedEpisode // ended members this trainer holds, by team id
	lost  []lostMember                  // members closed unended, to discard their teams
	kick  chan struct{}
}

type lostMember struct{ team, episode, reason string }

func newTeamState(store *team.Store) *teamState {
	return &teamState{store: store, owner: team.NewOwner(), held: map[string][]*finishedEpisode{}, kick: make(chan struct{}, 1)}
}

// teamModel names this server in team documents: the journal's name,
// unique among the servers of one NATS.
func (s *Server) teamModel() string { return s.journalName() }

// claimTeam validates a claim's team fields: ok false when there are none.
func claimTeam(id *string, size *int) (string, int, bool, *httpx.Error) {
	if id == nil && size == nil {
		return "", 0, false, nil
	}
	if id == nil || size == nil {
		return "", 0, false, httpx.BadRequest("team_id", "team_id and team_size go together")
	}
	if err := team.Validate(*id, *size); err != nil {
		return "", 0, false, httpx.BadRequest("team_id", "%v", err)
	}
	return *id, *size, true, nil
}

// joinTeam makes a claimed episode a member of its team, outside s.mu:
// on failure the episode is closed unjoined and the error is the answer.
func (s *Server) joinTeam(ep *episode, size int) *httpx.Error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.JournalTimeout)
	defer cancel()
	err := s.teams.store.Join(ctx, ep.team, size, team.Member{Model: s.teamModel(), Episode: ep.id, Owner: s.teams.owner, Lease: ep.timeout})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		ep.teamJoined = true
		return nil
	}
	if s.eps.open[ep.id] == ep {
		s.eps.close(ep, "refused")
	}
	switch {
	case errors.Is(err, team.ErrSizeMismatch), errors.Is(err, team.ErrFull), errors.Is(err, team.ErrDecided):
		return &httpx.Error{Status: http.StatusConflict, Msg: "Cannot join team: " + err.Error() + "."}
	case errors.Is(err, team.ErrInvalid):
		return httpx.BadRequest("team_id", "%v", err)
	}
	s.log.Error("team store: join failed", "err", err)
	return &httpx.Error{Status: http.StatusServiceUnavailable, Msg: "The team store is unavailable (" + err.Error() + "); try again."}
}

// discardOpenTeams discards, on the way down, the teams of this server's
// open members: they can never end. (Killed instead, the server's
// heartbeat stops, and the teams are discarded by whoever sweeps them.)
func (s *Server) discardOpenTeams() {
	s.mu.Lock()
	for _, ep := range s.eps.open {
		if ep.teamJoined && !ep.ending {
			s.loseMemberLocked(ep, "stopped")
		}
	}
	s.mu.Unlock()
	s.discardLost()
}

// endTeam records a member's end in its team, outside s.mu, and returns
// the team's decision.
func (s *Server) endTeam(ep *episode, reward float64) (string, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.JournalTimeout)
	defer cancel()
	d, err := s.teams.store.End(ctx, ep.team, s.teamModel(), ep.id, reward)
	return d.Decision, err
}

// loseMemberLocked notes a team member closed without ending (aborted,
// reclaimed, stopped): its team is discarded by the team loop, and the
// member counted.
func (s *Server) loseMemberLocked(ep *episode, reason string) {
	if !ep.teamJoined {
		return
	}
	s.teams.lost = append(s.teams.lost, lostMember{team: ep.team, episode: ep.id, reason: reason})
	s.noteDropLocked(ep.id, ep.taskHint, DropTeamIncomplete)
	select {
	case s.teams.kick <- struct{}{}:
	default:
	}
}

// takeLocked takes a finished episode the trainer will train: a team's
// member waits for its team's decision (team.Pending when unknown).
func (s *Server) takeLocked(fe *finishedEpisode, decision string) {
	if fe.team == "" {
		s.bufferLocked(fe)
		return
	}
	s.teams.held[fe.team] = append(s.teams.held[fe.team], fe)
	s.m.teamHeld.Set(float64(s.heldMembersLocked()))
	if decision != team.Pending {
		s.decideLocked(fe.team, decision)
	}
}

// decideLocked applies a team's decision to the members this trainer holds.
func (s *Server) decideLocked(id, decision string) {
	held := s.teams.held[id]
	if decision == team.Pending || len(held) == 0 {
		return
	}
	delete(s.teams.held, id)
	s.m.teamHeld.Set(float64(s.heldMembersLocked()))
	for _, fe := range held {
		if decision == team.Complete {
			s.bufferLocked(fe)
		} else {
			s.dropLocked(fe, DropTeamIncomplete)
		}
	}
	if decision == team.Complete {
		s.m.teams.WithLabelValues("complete").Inc()
		s.maybeTriggerLocked()
	} else {
		s.m.teams.WithLabelValues("discarded").Inc()
	}
}

func (s *Server) heldMembersLocked() int {
	n := 0
	for _, h := range s.teams.held {
		n += len(h)
	}
	return n
}

// teamLoop discards the teams of lost members, sweeps the teams whose
// members this server holds, and renews the server's heartbeat.
func (s *Server) teamLoop() {
	defer s.wg.Done()
	t := time.NewTicker(TeamSweepInterval)
	defer t.Stop()
	var beat time.Time
	for {
		select {
		case <-s.stopCh:
			return
		case <-t.C:
		case <-s.teams.kick:
		}
		if now := time.Now(); now.Sub(beat) >= team.DefaultHeartbeat {
			ctx, cancel := context.WithTimeout(s.ctx, s.cfg.JournalTimeout)
			if err := s.teams.store.Beat(ctx, s.teams.owner); err != nil {
				s.log.Warn("team heartbeat failed", "err", err)
			} else {
				beat = now
			}
			cancel()
		}
		s.discardLost()
		s.sweepHeld()
	}
}

// discardLost discards the teams of the members closed unended; a store
// error keeps them for the next round.
func (s *Server) discardLost() {
	s.mu.Lock()
	lost := s.teams.lost
	s.teams.lost = nil
	s.mu.Unlock()
	var retry []lostMember
	for _, l := range lost {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.JournalTimeout)
		d, err := s.teams.store.Discard(ctx, l.team, s.teamModel(), l.episode, teamReason(l.reason))
		cancel()
		if err != nil {
			s.log.Warn("team store: discarding a team failed; retrying", "err", err)
			retry = append(retry, l)
			continue
		}
		s.mu.Lock()
		s.decideLocked(l.team, d.Decision)
		s.mu.Unlock()
	}
	if len(retry) > 0 {
		s.mu.Lock()
		s.teams.lost = append(retry, s.teams.lost...)
		s.mu.Unlock()
	}
}

// teamReason maps an episode's closing reason to a team's.
func teamReason(reason string) string {
	if reason == "reclaimed" {
		return team.ReasonExpired
	}
	return team.ReasonAborted
}

// sweepHeld asks the store about every team whose members this trainer
// holds.
func (s *Server) sweepHeld() {
	s.mu.Lock()
	ids := make([]string, 0, len(s.teams.held))
	for id := range s.teams.held {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.JournalTimeout)
		d, err := s.teams.store.Sweep(ctx, id)
		cancel()
		if err != nil {
			s.log.Warn("team store: sweeping a team failed", "err", err)
			continue
		}
		s.mu.Lock()
		s.decideLocked(id, d.Decision)
		s.mu.Unlock()
	}
}
