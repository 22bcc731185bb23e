package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
)

// TestTeamAcrossKill drives team episodes through the HTTP contract on two
// agents of one base (--agents): a team whose first member ended while
// the second was open, then a SIGKILL and a restart, is never trained; a
// complete team trains both agents, and their train_metrics.jsonl rows
// name it; an aborted member discards its team, and /metrics counts it.
func TestTeamAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the server as a process and waits out a dead server's heartbeat")
	}
	dir := tinyModel(t)
	run := t.TempDir()
	ports := []int{freePort(t), freePort(t)}
	args := []string{"swarm", "serve", "--model-dir", dir, "--agents", fmt.Sprintf("planner:%d,executor:%d", ports[0], ports[1]),
		"--checkpoint-dir", run, "--batch-size", "1", "--num-repeat", "1", "--autostart"}
	p := startProc(t, args...)
	planner, executor := teamClient(ports[0]), teamClient(ports[1])
	waitRolling(t, planner)
	waitRolling(t, executor)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// 1. The planner ends, the executor is open: SIGKILL, restart.
	a := claimMember(ctx, t, planner, "team-killed")
	claimMember(ctx, t, executor, "team-killed")
	chat(ctx, t, a)
	if err := planner.EndEpisode(ctx, a, "task", client.WorkflowResult{Reward: 1}); err != nil {
		t.Fatal(err)
	}
	p.kill()
	startProc(t, args...)
	waitRolling(t, planner)
	waitRolling(t, executor)
	waitFor(t, 60*time.Second, "the half-ended team dropped after restart", func() bool {
		return dropped(t, ports[0]) >= 1
	})
	if st := waitRolling(t, planner); st.GlobalStep != 0 {
		t.Fatalf("the planner trained on half a team: step %d", st.GlobalStep)
	}

	// 2. A complete team trains both.
	m := []*client.Episode{claimMember(ctx, t, planner, "team-complete"), claimMember(ctx, t, executor, "team-complete")}
	for i, c := range []*client.Client{planner, executor} {
		chat(ctx, t, m[i])
		if err := c.EndEpisode(ctx, m[i], "task", client.WorkflowResult{Reward: float64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range []*client.Client{planner, executor} {
		waitFor(t, 60*time.Second, "both agents to train", func() bool {
			st, err := c.EngineStatus(ctx)
			return err == nil && st.GlobalStep == 1 && st.Status == swarm.StatusRolling
		})
		name := []string{"planner", "executor"}[i]
		rows := metricsRows(t, filepath.Join(run, fmt.Sprintf("%s-%d", name, ports[i]), swarm.TrainMetricsFile))
		if len(rows) != 1 || len(rows[0].TeamIDs) != 1 || rows[0].TeamIDs[0] != "team-complete" {
			t.Errorf("%s: train_metrics.jsonl rows %+v, want one naming team-complete", name, rows)
		}
	}

	// 3. An aborted member discards its team.
	a = claimMember(ctx, t, planner, "team-aborted")
	b := claimMember(ctx, t, executor, "team-aborted")
	chat(ctx, t, a)
	before := dropped(t, ports[0])
	if err := planner.EndEpisode(ctx, a, "task", client.WorkflowResult{Reward: 1}); err != nil {
		t.Fatal(err)
	}
	if err := executor.AbortEpisode(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the aborted team counted", func() bool {
		return dropped(t, ports[0]) == before+1 && dropped(t, ports[1]) >= 1
	})
	time.Sleep(time.Second)
	if st, _ := planner.EngineStatus(ctx); st.GlobalStep != 1 {
		t.Errorf("the planner trained on an aborted team: step %d", st.GlobalStep)
	}
}

func teamClient(port int) *client.Client {
	c := client.New(fmt.Sprintf("http://127.0.0.1:%d", port))
	c.Backoff = client.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}
	return c
}

func claimMember(ctx context.Context, t *testing.T, c *client.Client, team string) *client.Episode {
	t.Helper()
	ep, err := c.BeginEpisode(ctx, client.BeginOptions{TaskID: "task", TeamID: team, TeamSize: 2, DiscardTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func chat(ctx context.Context, t *testing.T, ep *client.Episode) {
	t.Helper()
	if _, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "plan"}}, MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
}

// dropped reads swarm_dropped_episodes_total{reason="team_incomplete"}
// from a server's /metrics (0 when absent).
func dropped(t *testing.T, port int) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, `swarm_dropped_episodes_total{reason="team_incomplete"} `); ok {
			var x float64
			fmt.Sscan(v, &x)
			return x
		}
	}
	return 0
}

type metricsRow struct {
	Step    int64    `json:"step"`
	TeamIDs []string `json:"team_ids"`
}

func metricsRows(t *testing.T, path string) []metricsRow {
	t.Helper()
	var rows []metricsRow
	waitFor(t, 30*time.Second, "a metrics row in "+path, func() bool {
		f, err := os.Open(path)
		if err != nil {
			return false
		}
		defer f.Close()
		rows = nil
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r metricsRow
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				rows = append(rows, r)
			}
		}
		return len(rows) > 0
	})
	return rows
}
