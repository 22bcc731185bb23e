package swarm

import (
	"errors"
	"net/http"

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
// (the one ending the last member at once, the others through their
// team.Tracker's sweeps). A member aborted, reclaimed or stopped discards
// its team; a member whose server dies with it open stops being renewed
// by that server's heartbeat, and the first sweep after
// team.Store.DeadAfter discards its team. Every member of a discarded
// team is counted once, as team_incomplete, by its own server.

// DropTeamIncomplete is the drop reason of a member of a discarded team.
const DropTeamIncomplete = "team_incomplete"

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
	err := s.teams.Join(s.ctx, ep.team, size, ep.id, ep.timeout)
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

// loseMemberLocked notes a team member closed without ending (aborted,
// reclaimed, stopped): its team is discarded by the tracker, and the
// member counted.
func (s *Server) loseMemberLocked(ep *episode, reason string) {
	if !ep.teamJoined {
		return
	}
	why := team.ReasonAborted
	if reason == "reclaimed" {
		why = team.ReasonExpired
	}
	s.teams.Lose(ep.team, ep.id, why)
	s.noteDropLocked(ep.id, ep.taskHint, DropTeamIncomplete)
}

// takeLocked takes a finished episode the trainer will train: a team's
// member waits for its team's decision (team.Pending when unknown).
func (s *Server) takeLocked(fe *finishedEpisode, decision string) {
	if fe.team == "" {
		s.bufferLocked(fe)
		return
	}
	s.held[fe.team] = append(s.held[fe.team], fe)
	s.teams.Watch(fe.team)
	s.m.teamHeld.Set(float64(s.heldMembersLocked()))
	if decision != team.Pending {
		s.decideLocked(fe.team, decision)
	}
}

// teamDecided receives the tracker's decisions.
func (s *Server) teamDecided(id, decision string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decideLocked(id, decision)
}

// decideLocked applies a team's decision to the members this trainer holds.
func (s *Server) decideLocked(id, decision string) {
	held := s.held[id]
	if decision == team.Pending || len(held) == 0 {
		return
	}
	delete(s.held, id)
	s.teams.Forget(id)
	s.m.teamHeld.Set(float64(s.heldMembersLocked()))
	for _, fe := range held {
		if decision == team.Complete {
			s.bufferLocked(fe)
		} else {
			s.dropLocked(fe, DropTeamIncomplete)
		}
	}
	s.m.teams.WithLabelValues(decision).Inc()
	if decision == team.Complete {
		s.maybeTriggerLocked()
	}
}

func (s *Server) heldMembersLocked() int {
	n := 0
	for _, h := range s.held {
		n += len(h)
	}
	return n
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
	s.teams.Flush(s.ctx)
}
