package swarm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/troupe-ml/troupe/swarm/tabular"
	"github.com/troupe-ml/troupe/swarm/team"
)

// teamPair is two agents' servers sharing one team store, each training
// on every finished episode (one task of one episode per batch).
func teamPair(t *testing.T, mod func(*ServerConfig)) (planner, executor *testServer) {
	t.Helper()
	store := team.NewMemory()
	var out [2]*testServer
	for i, name := range []string{"planner", "executor"} {
		m, _ := tabular.NewPreset("tiny")
		out[i] = startServer(t, m, testTrainConfig(1, 1), func(c *ServerConfig) {
			c.Teams, c.JournalName, c.CheckpointDir = store, name, t.TempDir()
			if mod != nil {
				mod(c)
			}
		})
	}
	return out[0], out[1]
}

func claimMember(t *testing.T, u, client, team string, size int, timeout float64) (int, map[string]any) {
	t.Helper()
	return rawPost(t, u+"/claim_episode", fmt.Sprintf(`{"client_uuid": %q, "episode_type": "train", "discard_episode_timeout": %g, "team_id": %q, "team_size": %d}`,
		client, timeout, team, size), nil)
}

// chatRaw makes one completion in an episode, so that it has a sample.
func chatRaw(t *testing.T, u string, cl map[string]any) {
	t.Helper()
	chat := `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}`
	if code, r := rawPost(t, u+"/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer " + cl["openai_api_key"].(string)}); code != 200 {
		t.Fatalf("chat: %d %v", code, r)
	}
}

func endTeamMember(t *testing.T, u string, cl map[string]any, reward string) {
	t.Helper()
	if code, r := rawPost(t, u+"/end_episode", endBody("c", cl["episode_uuid"].(string), "task", reward), nil); code != 200 {
		t.Fatalf("end: %d %v", code, r)
	}
}

func teamDrops(ts *testServer) float64 {
	return testutil.ToFloat64(ts.s.m.dropped.WithLabelValues(DropTeamIncomplete))
}

// TestTeamTrainsTogether: the first member's end trains nothing, though
// its batch is complete; the second's trains both agents, and each row of
// train_metrics.jsonl names the team.
func TestTeamTrainsTogether(t *testing.T) {
	p, e := teamPair(t, nil)
	_, a := claimMember(t, p.ts.URL, "c", "team-1", 2, 60)
	_, b := claimMember(t, e.ts.URL, "c", "team-1", 2, 60)
	chatRaw(t, p.ts.URL, a)
	chatRaw(t, e.ts.URL, b)
	endTeamMember(t, p.ts.URL, a, "1")
	time.Sleep(3 * team.SweepInterval)
	if _, _, step := p.s.Status(); step != 0 {
		t.Fatalf("the planner trained on half a team: step %d", step)
	}
	if n := testutil.ToFloat64(p.s.m.teamHeld); n != 1 {
		t.Fatalf("the planner holds %v members, want 1", n)
	}
	endTeamMember(t, e.ts.URL, b, "0.5")
	for _, ts := range []*testServer{p, e} {
		waitFor(t, "both agents to train", func() bool { _, _, step := ts.s.Status(); return step == 1 })
		raw := lastRow(t, ts)
		var row struct {
			TeamIDs    []string `json:"team_ids"`
			EpisodeIDs []string `json:"episode_ids"`
		}
		if err := json.Unmarshal(raw, &row); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		if len(row.TeamIDs) != 1 || row.TeamIDs[0] != "team-1" || len(row.EpisodeIDs) != 1 {
			t.Errorf("%s: train_metrics row names teams %q for episodes %q", ts.s.cfg.JournalName, row.TeamIDs, row.EpisodeIDs)
		}
	}
	if n := teamDrops(p) + teamDrops(e); n != 0 {
		t.Errorf("%v members dropped from a complete team", n)
	}
}

// TestTeamDiscarded: a member aborted, expired or stopped discards its
// team; the members that ended are never trained, and every member is
// counted as team_incomplete by its own server.
func TestTeamDiscarded(t *testing.T) {
	for _, how := range []string{"abort", "expire", "stop"} {
		t.Run(how, func(t *testing.T) {
			p, e := teamPair(t, nil)
			timeout := 60.0
			if how == "expire" {
				timeout = 0.2
			}
			_, a := claimMember(t, p.ts.URL, "c", "team-"+how, 2, 60)
			_, b := claimMember(t, e.ts.URL, "c", "team-"+how, 2, timeout)
			chatRaw(t, p.ts.URL, a)
			endTeamMember(t, p.ts.URL, a, "1")
			switch how {
			case "abort":
				if code, r := rawPost(t, e.ts.URL+"/abort_episode", endBody("c", b["episode_uuid"].(string), "task", "0"), nil); code != 200 {
					t.Fatalf("abort: %d %v", code, r)
				}
			case "stop":
				e.s.Stop()
			}
			waitFor(t, "the ended member dropped", func() bool { return teamDrops(p) == 1 })
			waitFor(t, "the lost member counted", func() bool { return teamDrops(e) == 1 })
			if _, _, step := p.s.Status(); step != 0 {
				t.Errorf("the planner trained on a discarded team: step %d", step)
			}
			if acct := p.s.Accounting(); acct.TrainedEpisodes != 0 || acct.Dropped != 1 {
				t.Errorf("planner accounting %+v", acct)
			}
			if !strings.Contains(metricsText(t, p.ts.URL), `swarm_dropped_episodes_total{reason="team_incomplete"} 1`) {
				t.Errorf("/metrics does not count the dropped member")
			}
		})
	}
}

func metricsText(t *testing.T, u string) string {
	t.Helper()
	code, body := rawGet(t, u+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	return string(body)
}

// TestTeamEndAfterDiscard: a member whose team was discarded while it
// was open ends as usual (200) and is dropped, never trained.
func TestTeamEndAfterDiscard(t *testing.T) {
	p, e := teamPair(t, nil)
	_, a := claimMember(t, p.ts.URL, "c", "team-late", 2, 60)
	_, b := claimMember(t, e.ts.URL, "c", "team-late", 2, 60)
	rawPost(t, p.ts.URL+"/abort_episode", endBody("c", a["episode_uuid"].(string), "task", "0"), nil)
	waitFor(t, "the abort to discard the team", func() bool {
		d, _ := p.s.teams.Store().Get(t.Context(), "team-late")
		return d.Decision == team.Discarded
	})
	chatRaw(t, e.ts.URL, b)
	endTeamMember(t, e.ts.URL, b, "1")
	waitFor(t, "the late member dropped", func() bool { return teamDrops(e) == 1 })
	time.Sleep(3 * team.SweepInterval)
	if _, _, step := e.s.Status(); step != 0 {
		t.Errorf("trained a member of a discarded team: step %d", step)
	}
}

// TestTeamClaimErrors: malformed team fields are 400, a team that is
// full, decided or of another size 409; nothing stays claimed.
func TestTeamClaimErrors(t *testing.T) {
	p, e := teamPair(t, nil)
	u := p.ts.URL
	for _, tt := range []struct {
		body string
		code int
		msg  string
	}{
		{`{"client_uuid": "c", "episode_type": "train", "discard_episode_timeout": 60, "team_size": 2}`, 400, "team_id and team_size"},
		{`{"client_uuid": "c", "episode_type": "train", "discard_episode_timeout": 60, "team_id": "x", "team_size": 1}`, 400, "team_size 1"},
		{`{"client_uuid": "c", "episode_type": "train", "discard_episode_timeout": 60, "team_id": "x", "team_size": "2"}`, 400, ""},
		{`{"client_uuid": "c", "episode_type": "eval", "discard_episode_timeout": 60, "team_id": "x", "team_size": 2}`, 400, "train episodes"},
	} {
		code, r := rawPost(t, u+"/claim_episode", tt.body, nil)
		if code != tt.code || !strings.Contains(fmt.Sprint(r), tt.msg) {
			t.Errorf("%s: %d %v, want %d naming %q", tt.body, code, r, tt.code, tt.msg)
		}
	}
	claimMember(t, u, "c", "full", 2, 60)
	claimMember(t, e.ts.URL, "c", "full", 2, 60)
	if code, r := claimMember(t, u, "c", "full", 2, 60); code != 409 || !strings.Contains(fmt.Sprint(r), "claimed already") {
		t.Errorf("a third member of a team of two: %d %v", code, r)
	}
	if code, r := claimMember(t, u, "c", "full", 3, 60); code != 409 || !strings.Contains(fmt.Sprint(r), "team_size") {
		t.Errorf("another size: %d %v", code, r)
	}
	if n := p.s.OpenEpisodes(); n != 1 {
		t.Errorf("%d episodes open on the planner, want the one member", n)
	}
}

// TestComponentNormalization: a server that normalizes reward components
// trains on their decoupled group normalization, computed here by hand;
// the row records each component's mean and the credit split.
func TestComponentNormalization(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	rec := &recordingModel{Model: m}
	tc := testTrainConfig(1, 2)
	tc.NormalizeRewardComponents, tc.RewardComponentWeights = true, map[string]float64{"own": 0.5}
	ts := startServer(t, rec, tc, func(c *ServerConfig) { c.CheckpointDir = t.TempDir() })
	u := ts.ts.URL
	for _, comps := range []string{`{"shared": 1, "own": 0}`, `{"shared": 1, "own": 4}`} {
		code, cl := claimRaw(t, u, "c")
		if code != 200 {
			t.Fatal(cl)
		}
		chatRaw(t, u, cl)
		body := `{"client_uuid": "c", "episode_uuid": "` + cl["episode_uuid"].(string) + `", "task_id": "g", "workflow_output": {"reward_components": ` + comps + `}}`
		if code, r := rawPost(t, u+"/end_episode", body, nil); code != 200 {
			t.Fatalf("end: %d %v", code, r)
		}
	}
	waitFor(t, "a step", func() bool { _, _, s := ts.s.Status(); return s == 1 })
	// "shared" is constant (no signal); "own" is 0 and 4: mean 2, std 2,
	// so ∓1 (with ε = 1e-4 in the std), weighted 0.5.
	const want = 0.5 * 2 / (2 + componentEps)
	rec.mu.Lock()
	got := rec.batches[0]
	rec.mu.Unlock()
	var rs []float64
	for _, s := range got {
		rs = append(rs, s.Reward)
	}
	slices.Sort(rs)
	if !cmp.Equal(rs, []float64{-want, want}, cmpopts.EquateApprox(0, 1e-12)) {
		t.Errorf("trained rewards %v, want ∓%v", rs, want)
	}
	raw := lastRow(t, ts)
	var row struct {
		RewardMean float64            `json:"reward_mean"`
		Components map[string]float64 `json:"reward_components"`
		Credit     map[string]float64 `json:"credit"`
	}
	if err := json.Unmarshal(raw, &row); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if row.RewardMean != 3 || row.Components["shared"] != 1 || row.Components["own"] != 2 || row.Credit["shared"] != 2.0/6 {
		t.Errorf("row: reward mean %v (the sum of the components, 3), components %v, credit %v", row.RewardMean, row.Components, row.Credit)
	}
}

// lastRow waits for the server's first train_metrics.jsonl row and
// returns its last.
func lastRow(t *testing.T, ts *testServer) []byte {
	t.Helper()
	var raw []byte
	waitFor(t, "a train_metrics.jsonl row", func() bool {
		raw, _ = os.ReadFile(filepath.Join(ts.s.cfg.CheckpointDir, TrainMetricsFile))
		return bytes.HasSuffix(raw, []byte("\n"))
	})
	lines := bytes.Split(bytes.TrimSpace(raw), []byte("\n"))
	return lines[len(lines)-1]
}
