package swarm

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// claimEnd claims a train episode for client, makes one completion and
// ends it with reward.
func claimEnd(t *testing.T, u, client, task, reward string) {
	t.Helper()
	code, cl := claimRaw(t, u, client)
	if code != 200 || cl["success"] != true {
		t.Fatalf("claim for %s: %d %v", client, code, cl)
	}
	chat := `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}`
	if code, r := rawPost(t, u+"/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer " + cl["openai_api_key"].(string)}); code != 200 {
		t.Fatalf("chat for %s: %d %v", client, code, r)
	}
	if code, r := rawPost(t, u+"/end_episode", endBody(client, cl["episode_uuid"].(string), task, reward), nil); code != 200 {
		t.Fatalf("end for %s: %d %v", client, code, r)
	}
}

func agree(t *testing.T, u, client string) map[string]any {
	t.Helper()
	code, r := rawPost(t, u+"/agree_sync_weight", `{"client_uuid": "`+client+`"}`, nil)
	if code != 200 {
		t.Fatalf("agree_sync_weight: %d %v", code, r)
	}
	return r
}

// TestAgreeSyncWeight follows AgentJet's voting: a client joins the active
// list by ending a rewarded train episode; under "any" one vote trains on
// every finished episode, under "all" every active client must vote; the
// votes are reset by the weight sync.
func TestAgreeSyncWeight(t *testing.T) {
	for _, method := range []string{CollectAnyAgree, CollectAllAgree} {
		t.Run(method, func(t *testing.T) {
			m, _ := tabular.NewPreset("tiny")
			tc := testTrainConfig(100, 1) // batch size must not matter
			tc.CollectionMethod = method
			const minSync = 300 * time.Millisecond
			ts := startServer(t, m, tc, func(c *ServerConfig) { c.MinAgreeSync = minSync })
			u := ts.ts.URL

			if r := agree(t, u, "a"); r["success"] != false || !strings.Contains(r["failure_reason"].(string), "active list") {
				t.Fatalf("vote of a client that ended nothing: %v", r)
			}
			claimEnd(t, u, "a", "t1", "1")
			claimEnd(t, u, "a", "t2", "0")
			claimEnd(t, u, "b", "t1", "0.5")
			// an end with declare_client_active false does not make c a voter
			_, cl := claimRaw(t, u, "c")
			body := endBody("c", cl["episode_uuid"].(string), "t3", "0.2")
			body = strings.TrimSuffix(body, "}") + `, "declare_client_active": false}`
			if code, r := rawPost(t, u+"/end_episode", body, nil); code != 200 {
				t.Fatalf("end: %d %v", code, r)
			}
			if r := agree(t, u, "c"); r["success"] != false {
				t.Fatalf("vote of an undeclared client accepted: %v", r)
			}
			if r := agree(t, u, "a"); r["success"] != true {
				t.Fatalf("vote of an active client: %v", r)
			}
			if method == CollectAllAgree {
				if _, _, step := ts.s.Status(); step != 0 || ts.s.BufferedEpisodes() != 4 {
					t.Fatalf("trained with one vote of two: step %d", step)
				}
				if r := agree(t, u, "b"); r["success"] != true {
					t.Fatalf("vote of b: %v", r)
				}
			}
			// The sync lasts at least MinAgreeSync, so that a client
			// polling the status sees it.
			var syncing time.Time
			waitFor(t, "a training step", func() bool {
				st, _, g := ts.s.Status()
				if st == StatusWeightSyncing && syncing.IsZero() {
					syncing = time.Now()
				}
				return g == 1 && st == StatusRolling
			})
			if syncing.IsZero() || time.Since(syncing) < minSync-50*time.Millisecond {
				t.Fatalf("WEIGHT_SYNCING seen for %v, want at least %v", time.Since(syncing), minSync)
			}
			if a := ts.s.Accounting(); a.TrainedEpisodes != 4 || a.Buffered != 0 || a.Dropped != 0 {
				t.Fatalf("accounting %+v, want all 4 finished episodes trained", a)
			}
			// votes and the active list are spent by the sync
			if r := agree(t, u, "a"); r["success"] != false {
				t.Fatalf("a vote survived the weight sync: %v", r)
			}
		})
	}
	// the vote is refused under a batch-size collection method
	m, _ := tabular.NewPreset("tiny")
	ts := startServer(t, m, testTrainConfig(4, 4), nil)
	claimEnd(t, ts.ts.URL, "a", "t", "1")
	if r := agree(t, ts.ts.URL, "a"); r["success"] != false || !strings.Contains(r["failure_reason"].(string), CollectAnyAgree) {
		t.Fatalf("vote under %s: %v", CollectTasks, r)
	}
}

// TestStopKeepsBufferedEpisodes: stop_engine closes open episodes but keeps
// the finished ones for the next start; Close counts and reports the ones
// it cannot keep.
func TestStopKeepsBufferedEpisodes(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	ts := startServer(t, m, testTrainConfig(4, 4), nil)
	u := ts.ts.URL
	claimEnd(t, u, "a", "t1", "1")
	claimEnd(t, u, "a", "t1", "0")
	claimRaw(t, u, "a") // left open
	ts.s.Stop()
	if ts.s.BufferedEpisodes() != 2 || ts.s.OpenEpisodes() != 0 {
		t.Fatalf("after stop: buffered %d open %d, want 2 and 0", ts.s.BufferedEpisodes(), ts.s.OpenEpisodes())
	}
	if err := ts.s.Start(); err != nil {
		t.Fatal(err)
	}
	if a := ts.s.Accounting(); a.Buffered != 2 || a.Dropped != 0 || a.BufferedRewardSum != 1 {
		t.Fatalf("after restart: %+v", a)
	}
	ts.s.Close()
	if a := ts.s.Accounting(); a.Buffered != 0 || a.Dropped != 2 || a.DroppedRewardSum != 1 {
		t.Fatalf("after Close: %+v, want the 2 buffered episodes counted as dropped", a)
	}
	_, b := rawGet(t, u+"/metrics")
	if !strings.Contains(string(b), `swarm_dropped_episodes_total{reason="shutdown"} 2`) {
		t.Fatalf("/metrics does not count the shutdown drop:\n%s", b)
	}
}

// TestTrainStepObservability: OnTrainStep sees every step with the batch's
// statistics, the run directory gets one JSON line per step and the PNG
// curves, and /get_server_experiment_dir names the directory.
func TestTrainStepObservability(t *testing.T) {
	dir := t.TempDir()
	m, _ := tabular.NewPreset("tiny")
	var mu sync.Mutex
	var steps []TrainStep
	ts := startServer(t, m, testTrainConfig(1, 2), func(c *ServerConfig) {
		c.CheckpointDir = dir
		c.OnTrainStep = func(s TrainStep) { mu.Lock(); steps = append(steps, s); mu.Unlock() }
	})
	u := ts.ts.URL
	rewards := [][2]string{{"1", "0"}, {"0.5", "0.25"}}
	for i, rs := range rewards {
		for _, r := range rs {
			ep, err := ts.cli.BeginEpisode(ctxT(t), client.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			chatOnce(t, ep)
			if code, resp := rawPost(t, u+"/end_episode", endBody(ts.cli.ClientUUID, ep.ID, "task", r), nil); code != 200 {
				t.Fatalf("end: %d %v", code, resp)
			}
		}
		waitFor(t, "step", func() bool { _, _, g := ts.s.Status(); return g == int64(i+1) })
	}
	waitFor(t, "hook calls", func() bool { mu.Lock(); defer mu.Unlock(); return len(steps) == 2 })
	want := [][2]float64{{0.5, 0.5}, {0.375, 0.125}}
	for i, s := range steps {
		if s.Step != int64(i+1) || s.Episodes != 2 || s.Tasks != 1 || s.Samples != 2 || s.Duration <= 0 {
			t.Errorf("step %d: %+v", i, s)
		}
		if s.RewardMean != want[i][0] || s.RewardStd != want[i][1] {
			t.Errorf("step %d: reward mean %v std %v, want %v", i, s.RewardMean, s.RewardStd, want[i])
		}
	}
	f, err := os.Open(filepath.Join(dir, TrainMetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if rec["step"] != float64(n+1) || rec["reward_mean"] != want[n][0] || rec["episodes"] != float64(2) {
			t.Errorf("line %d: %v", n, rec)
		}
		if _, ok := rec["stats.Loss"]; !ok {
			t.Errorf("line %d lacks the model's stats: %v", n, rec)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d lines in %s, want 2", n, TrainMetricsFile)
	}
	_, d := rawGetJSON(t, u+"/get_server_experiment_dir")
	if d["server_experiment_dir"] != dir {
		t.Fatalf("server_experiment_dir %v, want %s", d["server_experiment_dir"], dir)
	}
	ts.s.Close()
	if st, err := os.Stat(filepath.Join(dir, TrainCurvesFile)); err != nil || st.Size() == 0 {
		t.Fatalf("curves: %v", err)
	}
	_, logs := rawGetJSON(t, u+"/get_verbose_logs")
	if !strings.Contains(jsonString(fmtAny(logs)), "step 2") {
		t.Fatalf("verbose logs lack the training steps: %v", logs)
	}
}

func fmtAny(v any) string { b, _ := json.Marshal(v); return string(b) }
