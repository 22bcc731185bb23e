package swarm

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/internal/httpx"
	"github.com/troupe-ml/troupe/internal/ids"
	"github.com/troupe-ml/troupe/swarm/team"
)

// readJSON reads the request body (bounded by MaxBodyBytes) and decodes it
// into dst. On failure it has already answered the request and returns false.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, dst any) bool {
	body, e := httpx.ReadBody(w, r, s.cfg.MaxBodyBytes)
	if e == nil {
		e = httpx.DecodeJSON(body, dst)
	}
	if e != nil {
		httpx.SwarmError(w, e)
		return false
	}
	return true
}

// ids returns the request's required client and episode ids; on failure it
// has already answered the request and returns ok = false.
func endIDs(req *api.EndRequest, w http.ResponseWriter) (client, id string, ok bool) {
	client, e := requireString(req.ClientUUID, "client_uuid", false)
	if e == nil {
		id, e = requireString(req.EpisodeUUID, "episode_uuid", false)
	}
	if e != nil {
		httpx.SwarmError(w, e)
		return "", "", false
	}
	return client, id, true
}

const maxIDLen = 256

func requireString(p *string, field string, allowEmpty bool) (string, *httpx.Error) {
	if p == nil {
		return "", httpx.BadRequest(field, "missing")
	}
	if !allowEmpty && *p == "" {
		return "", httpx.BadRequest(field, "must not be empty")
	}
	if len(*p) > maxIDLen {
		return "", httpx.BadRequest(field, "longer than %d bytes", maxIDLen)
	}
	return *p, nil
}

// parseReward validates workflow_output.reward (api.ParseReward).
func parseReward(wo *api.WorkflowOutput, bound float64) (float64, *httpx.Error) {
	r, err := api.ParseReward(wo, bound)
	if err != nil {
		return 0, httpx.BadRequest(err.Field, "%s", err.Msg)
	}
	return r, nil
}

// ---- swarm handlers ---------------------------------------------------------

func (s *Server) baseURL(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return strings.TrimRight(s.cfg.PublicURL, "/") + "/v1"
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/v1"
}

func notRollingCause(status string) string {
	cause := fmt.Sprintf("Engine not ready. Current Status: [%s].", status)
	advise := ""
	switch status {
	case StatusOffline:
		advise = "Please start the engine first. Please use one of the client to run `client.sync_train_config() + client.start_engine()` to start the engine."
	case StatusBooting:
		advise = "Please wait until the engine is fully booted. Try again (maybe 1 minute) later."
	case StatusWeightSyncing:
		advise = "Engine is syncing weights. Try again (maybe 1 minute) later."
	case StatusRollingPost:
		advise = "Engine is in post-rolling phase. Try again (maybe 1 minute) later."
	}
	return cause + " " + advise
}

func (s *Server) handleClaim(w http.ResponseWriter, r *http.Request) {
	var req api.ClaimRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	client, e := requireString(req.ClientUUID, "client_uuid", false)
	if e != nil {
		httpx.SwarmError(w, e)
		return
	}
	kind, e := requireString(req.EpisodeType, "episode_type", false)
	if e != nil {
		httpx.SwarmError(w, e)
		return
	}
	if kind != api.EpisodeTrain && kind != api.EpisodeEval {
		httpx.SwarmError(w, httpx.BadRequest("episode_type", "unknown episode_type %q (want train or eval)", kind))
		return
	}
	if req.DiscardEpisodeTimeout == nil {
		httpx.SwarmError(w, httpx.BadRequest("discard_episode_timeout", "missing"))
		return
	}
	to := *req.DiscardEpisodeTimeout
	if maxTo := s.cfg.MaxDiscardTimeout.Seconds(); !(to > 0) || to > maxTo {
		httpx.SwarmError(w, httpx.BadRequest("discard_episode_timeout", "must be in (0, %g] seconds on this server, got %v", maxTo, to))
		return
	}
	hint := ""
	if req.ThrottlePolicy != nil {
		hint = req.ThrottlePolicy.CurrentTaskID
	} else if req.PartitionLimit != nil {
		hint = req.PartitionLimit.CurrentTaskID
	}
	if len(hint) > maxIDLen {
		httpx.SwarmError(w, httpx.BadRequest("throttle_policy.current_task_id", "longer than %d bytes", maxIDLen))
		return
	}
	teamID, teamSize, inTeam, e := claimTeam(req.TeamID, req.TeamSize)
	if e == nil && inTeam && kind != api.EpisodeTrain {
		e = httpx.BadRequest("team_id", "team episodes are train episodes")
	}
	if e != nil {
		httpx.SwarmError(w, e)
		return
	}
	resp := api.ClaimResponse{ClientUUID: client}
	addr := s.quotaAddr(r)
	s.mu.Lock()
	if ac := s.batch.active[client]; ac != nil {
		ac.lastActivity = time.Now()
	}
	switch {
	case s.status != StatusRolling:
		resp.FailCause = notRollingCause(s.status)
	case s.eps.perClient[client] >= s.cfg.MaxOpenPerClient:
		s.refuseQuotaLocked(w, resp, fmt.Sprintf("This client holds %d open episodes, the per-client limit of this server. End or abort one, then try again.", s.eps.perClient[client]))
		return
	case addr != "" && s.eps.perAddr[addr] >= s.cfg.MaxOpenPerAddress:
		s.refuseQuotaLocked(w, resp, fmt.Sprintf("Clients at this address hold %d open episodes, the per-address limit of this server. End or abort some, then try again.", s.eps.perAddr[addr]))
		return
	case s.train.MaxOpenEpisodes > 0 && len(s.eps.open) >= s.train.MaxOpenEpisodes:
		resp.FailCause = "No available episodes to claim. Try again (maybe 1 minute) later."
	default:
		id := ids.UUID()
		ep := &episode{id: id, client: client, kind: kind, key: newKey(id), taskHint: hint, addr: addr,
			lastActive: time.Now(), timeout: time.Duration(to * float64(time.Second)), team: teamID}
		s.eps.add(ep)
		if inTeam {
			// Joined outside the lock; until then its key is nobody's.
			ep.inflight++
			s.mu.Unlock()
			e := s.joinTeam(ep, teamSize)
			s.mu.Lock()
			ep.inflight--
			if e != nil {
				s.mu.Unlock()
				s.m.episodes.WithLabelValues("refused").Inc()
				httpx.SwarmError(w, e)
				return
			}
		}
		s.acct.Claimed++
		resp.Success, resp.EpisodeUUID, resp.OpenAIAPIKey = true, id, ep.key
		resp.OpenAIBaseURL = s.baseURL(r)
	}
	s.mu.Unlock()
	if resp.Success {
		s.m.episodes.WithLabelValues("claimed").Inc()
	} else {
		s.m.episodes.WithLabelValues("refused").Inc()
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
}

// lookupForEndLocked finds the open episode for end/abort or explains why not.
func (s *Server) lookupForEndLocked(id, client string) (*episode, *httpx.Error) {
	ep := s.eps.open[id]
	if ep == nil {
		ci, known := s.eps.closed[id]
		switch {
		case !known:
			return nil, &httpx.Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("Episode %s not found.", id)}
		case ci.client != client:
			return nil, &httpx.Error{Status: http.StatusForbidden, Msg: fmt.Sprintf("Episode %s belongs to a different client.", id)}
		case ci.reason == "reclaimed":
			return nil, &httpx.Error{Status: http.StatusGone, Msg: fmt.Sprintf("Episode %s was reclaimed after being idle longer than its discard_episode_timeout; increase discard_episode_timeout when you begin an episode.", id)}
		case ci.reason == "stopped":
			return nil, &httpx.Error{Status: http.StatusGone, Msg: fmt.Sprintf("Episode %s was discarded because the engine was stopped.", id)}
		default:
			return nil, &httpx.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("Episode %s was already %s.", id, ci.reason)}
		}
	}
	if ep.client != client {
		return nil, &httpx.Error{Status: http.StatusForbidden, Msg: fmt.Sprintf("Episode %s is claimed by a different client.", id)}
	}
	return ep, nil
}

func (s *Server) handleEnd(w http.ResponseWriter, r *http.Request) {
	var req api.EndRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	client, id, ok := endIDs(&req, w)
	if !ok {
		return
	}
	task, e := requireString(req.TaskID, "task_id", false)
	if e != nil {
		httpx.SwarmError(w, e)
		return
	}
	reward, e := parseReward(req.WorkflowOutput, s.cfg.MaxAbsReward)
	if e != nil {
		httpx.SwarmError(w, e)
		return
	}
	if raw, ok := req.WorkflowOutput.Metadata["task_id"]; ok {
		var mt string
		if json.Unmarshal(raw, &mt) != nil || mt != task {
			httpx.SwarmError(w, httpx.BadRequest("workflow_output.metadata.task_id", "must equal task_id %q", task))
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.status {
	case StatusRolling, StatusRollingPost, StatusWeightSyncing:
	default:
		httpx.SwarmError(w, &httpx.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("Engine is not in rolling state. Current Status: [%s]. Cannot end episode.", s.status)})
		return
	}
	ep, e := s.lookupForEndLocked(id, client)
	if e != nil {
		httpx.SwarmError(w, e)
		return
	}
	if ep.ending {
		httpx.SwarmError(w, &httpx.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("Episode %s is being ended by another request.", id)})
		return
	}
	var fe *finishedEpisode
	if ep.kind == api.EpisodeTrain {
		fe = &finishedEpisode{id: id, taskID: task, client: client, reward: reward, samples: ep.samples, minVersion: -1, convo: ep.convo.Records(),
			team: ep.team, components: req.WorkflowOutput.RewardComponents}
		for i := range fe.samples {
			fe.samples[i].TaskID = task
			fe.samples[i].Reward = reward
			if fe.minVersion < 0 || fe.samples[i].Version < fe.minVersion {
				fe.minVersion = fe.samples[i].Version
			}
		}
		if s.jr != nil {
			// Journal before answering, without holding s.mu: the
			// episode is marked so that a concurrent end gets 409, and
			// in flight so that the reaper leaves it.
			ep.ending = true
			ep.inflight++
			s.jr.publishing[id] = true
			s.mu.Unlock()
			seq, err := s.jr.publish(fe)
			s.mu.Lock()
			ep.ending = false
			ep.inflight--
			delete(s.jr.publishing, id)
			if m := s.jr.early[id]; m != nil && err != nil {
				// The acknowledgement was lost but the consumer saw the
				// episode stored: it is journaled.
				if md, merr := m.Metadata(); merr == nil {
					seq, err = md.Sequence.Stream, nil
				}
			}
			if err != nil {
				ep.lastActive = time.Now()
				s.m.journalErrors.Inc()
				s.log.Error("episode journal: publish failed; the episode stays open for a retry", "episode", id, "err", err)
				httpx.SwarmError(w, &httpx.Error{Status: http.StatusServiceUnavailable, Msg: fmt.Sprintf("Episode %s could not be journaled (%v); it is still open: retry end_episode.", id, err)})
				return
			}
			fe.seq = seq
		}
	}
	decision := team.Pending
	if fe != nil && ep.teamJoined {
		// The team learns of the end once the journal holds the episode:
		// a crash between the two leaves a journaled member its team
		// never saw end, and the team is discarded.
		ep.ending = true
		ep.inflight++
		s.mu.Unlock()
		d, err := s.teams.End(s.ctx, ep.team, id, reward)
		s.mu.Lock()
		ep.ending = false
		ep.inflight--
		if err != nil && !errors.Is(err, team.ErrNotMember) {
			ep.lastActive = time.Now()
			s.log.Error("team store: end failed; the episode stays open for a retry", "episode", id, "err", err)
			httpx.SwarmError(w, &httpx.Error{Status: http.StatusServiceUnavailable, Msg: fmt.Sprintf("Episode %s could not be recorded in its team (%v); it is still open: retry end_episode.", id, err)})
			return
		}
		decision = d
		if err != nil { // not a member any more: its team is gone
			decision = team.Discarded
		}
	}
	// A journaled episode is acknowledged even if the engine stopped
	// meanwhile (its open episodes closed): the journal holds it.
	if s.eps.open[id] == ep {
		s.eps.close(ep, "ended")
	} else {
		s.eps.rememberClosed(id, client, "ended")
	}
	s.m.rewardSum.WithLabelValues(ep.kind).Add(reward)
	s.m.rewardCount.WithLabelValues(ep.kind).Inc()
	if fe != nil {
		s.acceptFinishedLocked(fe, decision)
		if req.DeclareClientActive == nil || *req.DeclareClientActive {
			if ac := s.batch.active[client]; ac != nil {
				ac.lastActivity = time.Now()
			} else {
				s.batch.active[client] = &activeClient{lastActivity: time.Now()}
			}
		}
		s.maybeTriggerLocked()
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]bool{"success": true})
}

// handleAgreeSyncWeight registers a client's vote for the next weight
// sync (AgentJet's /agree_sync_weight): accepted from a client on the
// active list while the engine rolls, answered {success, failure_reason}.
func (s *Server) handleAgreeSyncWeight(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ClientUUID *string `json:"client_uuid"`
	}
	if !s.readJSON(w, r, &req) {
		return
	}
	client, e := requireString(req.ClientUUID, "client_uuid", false)
	if e != nil {
		httpx.SwarmError(w, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := map[string]any{"success": false, "failure_reason": ""}
	switch ac := s.batch.active[client]; {
	case s.status != StatusRolling && s.status != StatusRollingPost:
		resp["failure_reason"] = fmt.Sprintf("Engine is not rolling (current Status: [%s]); the agreement would be reset.", s.status)
	case s.train.CollectionMethod != CollectAnyAgree && s.train.CollectionMethod != CollectAllAgree:
		resp["failure_reason"] = fmt.Sprintf("agree_sync_weight only applies to %s and %s; the collection method is %s.", CollectAnyAgree, CollectAllAgree, s.train.CollectionMethod)
	case ac == nil:
		resp["failure_reason"] = "Client is not in the active list: end at least one rewarded train episode since the last weight sync first."
	default:
		ac.agreed, ac.lastActivity = true, time.Now()
		resp["success"] = true
		s.maybeTriggerLocked()
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
}

func (s *Server) handleAbort(w http.ResponseWriter, r *http.Request) {
	var req api.EndRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	client, id, ok := endIDs(&req, w)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.eps.open[id]
	if ep == nil {
		// idempotent, as in AgentJet: aborting a closed or unknown episode succeeds
		httpx.WriteJSON(w, http.StatusOK, map[string]bool{"success": true})
		return
	}
	if ep.client != client {
		httpx.SwarmError(w, &httpx.Error{Status: http.StatusForbidden, Msg: fmt.Sprintf("Episode %s is claimed by a different client.", id)})
		return
	}
	if ep.ending {
		httpx.SwarmError(w, &httpx.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("Episode %s is being ended.", id)})
		return
	}
	s.eps.close(ep, "aborted")
	s.loseMemberLocked(ep, "aborted")
	s.acct.Aborted++
	httpx.WriteJSON(w, http.StatusOK, map[string]bool{"success": true})
}

func (s *Server) decodeRef(w http.ResponseWriter, r *http.Request) (string, string, bool) {
	var req api.EpisodeRef
	if !s.readJSON(w, r, &req) {
		return "", "", false
	}
	id, e := requireString(req.EpisodeUUID, "episode_uuid", true)
	if e != nil {
		httpx.SwarmError(w, e)
		return "", "", false
	}
	client := ""
	if req.ClientUUID != nil {
		client = *req.ClientUUID
	}
	return id, client, true
}

func (s *Server) handleCanContinue(w http.ResponseWriter, r *http.Request) {
	id, _, ok := s.decodeRef(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	can := false
	if s.status == StatusRolling || s.status == StatusRollingPost || s.status == StatusWeightSyncing {
		_, can = s.eps.open[id]
	}
	s.mu.Unlock()
	httpx.WriteJSON(w, http.StatusOK, map[string]bool{"can_continue": can})
}

func (s *Server) handleIsClaimed(w http.ResponseWriter, r *http.Request) {
	id, _, ok := s.decodeRef(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	_, claimed := s.eps.open[id]
	s.mu.Unlock()
	resp := map[string]any{"success": claimed, "failure_reason": ""}
	if !claimed {
		resp["failure_reason"] = "episode is not claimed"
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
}

func (s *Server) handleEngineStatus(w http.ResponseWriter, r *http.Request) {
	st, detail, step := s.Status()
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"engine_status": st, "engine_status_detail": detail, "global_step": step})
}

// handleTrainingStatus answers GET /get_training_status: where the
// server's episodes went, the staleness policy and the latest drops (their
// ids shown to admins only).
func (s *Server) handleTrainingStatus(w http.ResponseWriter, r *http.Request) {
	admin := s.isAdmin(r)
	s.mu.Lock()
	st := api.TrainingStatus{Model: s.model.Name(), Role: cmp.Or(s.cfg.Role, "both"), EngineStatus: s.status, GlobalStep: s.globalStep(),
		BufferedEpisodes: len(s.batch.finished), MaxStaleness: s.train.MaxStaleness, GroupTimeoutS: s.train.GroupTimeout.Seconds(),
		Episodes: s.episodeStatesLocked(), DroppedSamples: s.droppedSamples, RecentDrops: s.drops.Recent()}
	s.mu.Unlock()
	for i := range st.RecentDrops {
		if !admin {
			st.RecentDrops[i].EpisodeID = fmt.Sprintf("%s-dropped-%d", hiddenID, i+1)
		}
	}
	httpx.WriteJSON(w, http.StatusOK, st)
}

func (s *Server) handleSyncConfig(w http.ResponseWriter, r *http.Request) {
	var req struct {
		YAML *string `json:"yaml_as_string"`
	}
	if !s.readJSON(w, r, &req) {
		return
	}
	if req.YAML == nil {
		httpx.SwarmError(w, httpx.BadRequest("yaml_as_string", "missing"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != StatusOffline {
		httpx.SwarmError(w, &httpx.Error{Status: http.StatusBadRequest, Msg: "Engine is already started. Call `stop_engine` first before syncing new training configuration."})
		return
	}
	tc := s.train
	if err := tc.ApplyYAML(*req.YAML); err != nil {
		httpx.SwarmError(w, httpx.BadRequest("yaml_as_string", "%v", err))
		return
	}
	if err := s.saveTrainConfig(*req.YAML); err != nil {
		s.log.Error("training config not persisted", "err", err)
		httpx.SwarmError(w, &httpx.Error{Status: http.StatusInternalServerError, Msg: err.Error()})
		return
	}
	s.train, s.syncedYAML = tc, *req.YAML
	httpx.WriteJSON(w, http.StatusOK, map[string]bool{"success": true})
}

func (s *Server) handleStartEngine(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.status != StatusOffline {
		st := s.status
		s.mu.Unlock()
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"success": false, "error": "engine is " + st + "; stop it first"})
		return
	}
	s.status, s.detail, s.bootStart = StatusBooting, "loading checkpoint", time.Now()
	s.m.setStatus(s.status)
	s.mu.Unlock()
	go s.boot() // like AgentJet, booting continues after the reply; clients poll get_engine_status
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"success": true})
}

func (s *Server) handleStopEngine(w http.ResponseWriter, r *http.Request) {
	s.Stop()
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"success": true, "failure_reason": ""})
}

// Episode and client ids are the claimants' secrets (an end_episode must
// name both), so the pool views show them to admins only; others get
// placeholders that keep the shapes and counts AgentJet's client reads.
const hiddenID = "hidden"

func (s *Server) handleEpisodeBuffer(w http.ResponseWriter, r *http.Request) {
	admin := s.isAdmin(r)
	s.mu.Lock()
	buf := make([]map[string]any, 0, len(s.eps.open))
	now := time.Now()
	for _, ep := range s.eps.sorted() {
		id, client := ep.id, ep.client
		if !admin {
			id, client = fmt.Sprintf("%s-%d", hiddenID, len(buf)+1), ""
		}
		buf = append(buf, map[string]any{
			"episode_uuid": id, "episode_status": "claimed", "episode_type": ep.kind,
			"client_uuid": client, "discard_episode_timeout": ep.timeout.Seconds(),
			"latest_activity_timestamp": float64(ep.lastActive.UnixNano()) / 1e9,
			"llm_call_count":            ep.calls, "optional_task_id": ep.taskHint,
			"idle_seconds": now.Sub(ep.lastActive).Seconds(),
		})
	}
	s.mu.Unlock()
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"buffer": buf})
}

func (s *Server) handlePoolInfo(w http.ResponseWriter, r *http.Request) {
	admin := s.isAdmin(r)
	s.mu.Lock()
	running := map[string]map[string]string{}
	now := time.Now()
	for i, ep := range s.eps.sorted() {
		id, client := ep.id, ep.client
		if !admin {
			id, client = fmt.Sprintf("%s-%d", hiddenID, i+1), ""
		}
		running[id] = map[string]string{
			"episode_status": "claimed", "client_uuid": client, "optional_task_id": ep.taskHint,
			"time_since_last_activity": fmt.Sprintf("%.1fs", now.Sub(ep.lastActive).Seconds()),
			"discard_episode_timeout":  fmt.Sprintf("%.1fs", ep.timeout.Seconds()),
			"llm_call_count":           strconv.Itoa(ep.calls),
		}
	}
	completed := map[string][]string{} // task → client uuids (newer AgentJet)
	details := map[string][]string{}   // task → episode uuids (older AgentJet)
	rewards := map[string][]float64{}  // task → rewards, one per episode
	for i, fe := range s.batch.finished {
		id, client := fe.id, fe.client
		if !admin {
			id, client = fmt.Sprintf("%s-finished-%d", hiddenID, i+1), ""
		}
		completed[fe.taskID] = append(completed[fe.taskID], client)
		details[fe.taskID] = append(details[fe.taskID], id)
		rewards[fe.taskID] = append(rewards[fe.taskID], fe.reward)
	}
	full, nonDummy := 0, 0
	for _, rs := range rewards {
		if len(rs) < s.train.NumRepeat {
			continue
		}
		full++
		for _, r := range rs[1:] {
			if r != rs[0] {
				nonDummy++
				break
			}
		}
	}
	resp := map[string]any{
		"sample_collection_method": s.train.CollectionMethod,
		"engine_status":            s.status, "global_step": s.globalStep(),
		"completed_episodes": len(s.batch.finished), "completed_episode_target": s.train.BatchSize * s.train.NumRepeat,
		"completed_tasks": full, "completed_task_target": s.train.BatchSize,
		"completed_non_dummy_tasks": nonDummy, "completed_non_dummy_task_target": s.train.BatchSize,
		"task_expected_num_repeat":     s.train.NumRepeat,
		"completed_tasks_details":      details,
		"completed_tasks_rewards":      rewards,
		"completed_tasks_client_uuids": completed, "running_episode_details": nil,
	}
	if len(running) > 0 {
		resp["running_episode_details"] = running
	}
	if s.status == StatusBooting {
		resp["booting_start_time"] = float64(s.bootStart.UnixNano()) / 1e9
	}
	s.mu.Unlock()
	httpx.WriteJSON(w, http.StatusOK, resp)
}

// handleExperimentDir reports the run directory (AgentJet's
// /get_server_experiment_dir): the absolute CheckpointDir, or null when
// the server has none.
func (s *Server) handleExperimentDir(w http.ResponseWriter, r *http.Request) {
	var dir any
	if s.cfg.CheckpointDir != "" {
		abs, err := filepath.Abs(s.cfg.CheckpointDir)
		if err != nil {
			abs = s.cfg.CheckpointDir
		}
		dir = abs
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"server_experiment_dir": dir})
}

// handleVerboseLogs returns recent engine events (AgentJet's
// /get_verbose_logs, {"entries": [{timestamp, tag, message}]}).
func (s *Server) handleVerboseLogs(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.ContentLength != 0 {
		if _, e := httpx.ReadBody(w, r, s.cfg.MaxBodyBytes); e != nil {
			httpx.SwarmError(w, e)
			return
		}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"entries": s.verboseLogs()})
}

// handleSyncCode answers AgentJet's /sync_train_code, which uploads a zip
// of AgentJet's Python trainer for its server to run. troupe trains with
// its own Go code, so the upload is refused the way AgentJet's server
// answers a failed operation: 200 with {"success": false, "message": ...},
// which its client raises as an error carrying the message.
func (s *Server) handleSyncCode(w http.ResponseWriter, r *http.Request) {
	if _, e := httpx.ReadBody(w, r, s.cfg.MaxBodyBytes); e != nil && e.Status == http.StatusBadRequest {
		httpx.SwarmError(w, e)
		return
	}
	msg := "troupe swarm servers train with their own code and cannot run an uploaded AgentJet trainer; configure training with sync_train_config instead"
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"success": false, "message": msg, "error": msg})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	st, _, step := s.Status()
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "engine_status": st, "global_step": step, "model": s.model.Name()})
}

// refuseQuotaLocked answers a claim beyond a quota with 429 and
// Retry-After, unlocking s.mu first.
func (s *Server) refuseQuotaLocked(w http.ResponseWriter, resp api.ClaimResponse, cause string) {
	s.mu.Unlock()
	s.m.episodes.WithLabelValues("quota").Inc()
	resp.FailCause = cause
	w.Header().Set("Retry-After", "2")
	httpx.WriteJSON(w, http.StatusTooManyRequests, resp)
}

// quotaAddr is the remote IP a claim counts against MaxOpenPerAddress, or
// "" for loopback and admin requests.
func (s *Server) quotaAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || s.cfg.AdminToken != "" && s.isAdmin(r) {
		return ""
	}
	return host
}
