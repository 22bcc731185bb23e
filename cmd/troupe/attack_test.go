package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
)

// attackToken is the admin token the attacked server runs with.
const attackToken = "attack-admin-4f1d9c"

// attacker sends raw requests to the attacked server.
type attacker struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func (a *attacker) do(method, path, body string, hdr map[string]string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// claim claims a train episode for client and returns its id and key ("" when refused).
func (a *attacker) claim(client string) (code int, id, key string, hdr http.Header) {
	a.t.Helper()
	req, _ := http.NewRequest("POST", a.base+"/claim_episode", strings.NewReader(
		`{"client_uuid": "`+client+`", "episode_type": "train", "discard_episode_timeout": 600, "throttle_policy": {"current_task_id": "t"}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Success     bool   `json:"success"`
		EpisodeUUID string `json:"episode_uuid"`
		Key         string `json:"openai_api_key"`
	}
	json.NewDecoder(resp.Body).Decode(&r)
	if !r.Success {
		return resp.StatusCode, "", "", resp.Header
	}
	return resp.StatusCode, r.EpisodeUUID, r.Key, resp.Header
}

func attackEnd(client, id, reward string) string {
	return `{"client_uuid": "` + client + `", "episode_uuid": "` + id + `", "task_id": "t", "workflow_output": {"reward": ` + reward +
		`, "is_success": true, "metadata": {"task_id": "t"}, "log_metrics": {}}}`
}

// TestAttackProbes attacks `TROUPE_ADMIN_TOKEN=… troupe swarm serve
// --autostart` as a separate process, without credentials: no episode or
// client id is visible, a spoofed end is refused while the victim ends its
// own, stop_engine is refused, a client at its open-episode quota cannot
// starve another, a body trickled byte by byte is cut within 45 s (the
// default read timeout is 30 s; -short runs with 3 s), and the server is
// healthy afterwards.
func TestAttackProbes(t *testing.T) {
	port := freePort(t)
	args := []string{"swarm", "serve", "--port", fmt.Sprint(port), "--autostart", "--checkpoint-dir", t.TempDir()}
	readTimeout := 30 * time.Second
	if testing.Short() {
		readTimeout = 3 * time.Second
		args = append(args, "--read-timeout", readTimeout.String())
	}
	logs := &serverLog{t: t}
	srv := startLoggedProc(t, logs, []string{"TROUPE_ADMIN_TOKEN=" + attackToken}, args...)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitRolling(t, client.New(base))
	a := &attacker{t: t, base: base, hc: &http.Client{Timeout: 20 * time.Second}}
	admin := map[string]string{"Authorization": "Bearer " + attackToken}

	// The slow body runs beside the other probes.
	var slow sync.WaitGroup
	slow.Add(1)
	var slowCut time.Duration
	var slowErr error
	go func() {
		defer slow.Done()
		slowCut, slowErr = trickleBody(fmt.Sprintf("127.0.0.1:%d", port), 45*time.Second)
	}()

	// The victim holds an open episode (with a completion) and finished one.
	const victim = "victim-7d0e3a52"
	code, victimEp, victimKey, _ := a.claim(victim)
	if victimEp == "" {
		t.Fatalf("victim's claim: %d", code)
	}
	if code, b := a.do("POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}`,
		map[string]string{"Authorization": "Bearer " + victimKey}); code != 200 {
		t.Fatalf("victim's chat: %d %s", code, b)
	}
	_, doneEp, _, _ := a.claim(victim)
	if code, b := a.do("POST", "/end_episode", attackEnd(victim, doneEp, "0.5"), nil); code != 200 {
		t.Fatalf("victim's first end: %d %s", code, b)
	}
	secrets := []string{victimEp, doneEp, victim, victimKey}

	// 1. No episode or client id visible without admin credentials.
	views := []struct{ method, path string }{
		{"GET", "/get_current_batch_rollout_pool_information"}, {"POST", "/get_episode_buffer"},
		{"GET", "/get_verbose_logs"}, {"POST", "/get_verbose_logs"}, {"GET", "/get_engine_status"}, {"GET", "/health"},
		{"GET", "/metrics"}, {"GET", "/v1/models"}, {"GET", "/get_server_experiment_dir"}, {"GET", "/nope"},
		{"GET", "/t/wrong/get_current_batch_rollout_pool_information"}, {"GET", "/get_training_status"}, {"GET", "/dashboard/"},
		{"GET", "/dashboard/api/run/_/steps"},
	}
	for _, v := range views {
		for name, hdr := range map[string]map[string]string{"no credentials": nil, "wrong token": {"Authorization": "Bearer " + attackToken + "x"},
			"episode key": {"Authorization": "Bearer " + victimKey}, "wrong X-Admin-Token": {"X-Admin-Token": "nope"}} {
			_, b := a.do(v.method, v.path, "{}", hdr)
			for _, s := range secrets {
				if strings.Contains(b, s) {
					t.Errorf("probe 1: %s %s with %s shows %q", v.method, v.path, name, s)
				}
			}
		}
	}
	// ... while an admin sees them (so the probe looks where the ids are).
	for _, path := range []string{"/get_current_batch_rollout_pool_information", "/t/" + attackToken + "/get_current_batch_rollout_pool_information"} {
		if _, b := a.do("GET", path, "", admin); !strings.Contains(b, victimEp) || !strings.Contains(b, doneEp) || !strings.Contains(b, victim) {
			t.Errorf("probe 1: an admin's %s lacks the ids: %s", path, b)
		}
	}

	// 2. A spoofed end is refused: by a placeholder, a guessed id, the
	// victim's id under another client, and a completion with a forged key.
	for _, body := range []string{
		attackEnd(victim, "hidden-1", "1e5"), attackEnd(victim, "00000000-0000-4000-8000-000000000000", "1e5"),
		attackEnd("attacker", victimEp, "1e5"), attackEnd("", victimEp, "1e5"),
	} {
		if code, b := a.do("POST", "/end_episode", body, nil); code == 200 {
			t.Errorf("probe 2: spoofed end accepted: %s -> %s", body, b)
		}
		if code, b := a.do("POST", "/abort_episode", body, nil); code == 200 && strings.Contains(body, victimEp) && strings.Contains(body, `"attacker"`) {
			t.Errorf("probe 2: spoofed abort of the victim's episode accepted: %s", b)
		}
	}
	forged := "sk-troupe-" + victimEp + ".AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	if code, _ := a.do("POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}]}`, map[string]string{"Authorization": "Bearer " + forged}); code != http.StatusUnauthorized {
		t.Errorf("probe 2: a forged episode key got %d, want 401", code)
	}
	if _, b := a.do("POST", "/can_continue_episode", `{"client_uuid": "`+victim+`", "episode_uuid": "`+victimEp+`"}`, nil); !strings.Contains(b, `"can_continue":true`) {
		t.Errorf("probe 2: the victim's episode did not survive the spoofing: %s", b)
	}

	// 3. The victim ends its own.
	if code, b := a.do("POST", "/end_episode", attackEnd(victim, victimEp, "0.25"), nil); code != 200 || !strings.Contains(b, `"success":true`) {
		t.Errorf("probe 3: the victim's own end: %d %s", code, b)
	}

	// 4. Engine control refused without credentials, in every form.
	for _, path := range []string{"/stop_engine", "/start_engine", "/sync_train_config", "/sync_train_code"} {
		for name, hdr := range map[string]map[string]string{"no credentials": nil, "wrong bearer": {"Authorization": "Bearer nope"},
			"episode key": {"Authorization": "Bearer " + victimKey}, "wrong X-Admin-Token": {"X-Admin-Token": attackToken + "x"},
			"token as the body": {"X-Admin-Token": ""}} {
			body := `{"yaml_as_string": "ajet:\n  data:\n    train_batch_size: 1\n", "token": "` + attackToken + `"}`
			if code, _ := a.do("POST", path, body, hdr); code != http.StatusUnauthorized {
				t.Errorf("probe 4: %s with %s: %d, want 401", path, name, code)
			}
		}
		if code, _ := a.do("POST", "/t/wrong"+path, `{}`, nil); code != http.StatusUnauthorized {
			t.Errorf("probe 4: %s under a wrong token prefix: %d, want 401", path, code)
		}
	}
	if st := engineStatus(t, a); st != swarm.StatusRolling {
		t.Errorf("probe 4: engine %s after the refused calls, want %s", st, swarm.StatusRolling)
	}

	// 5. A client at its quota gets 429 with Retry-After and another client
	// is still served.
	held := 0
	for {
		code, id, _, hdr := a.claim("greedy")
		if id != "" {
			held++
			if held > 10000 {
				t.Fatal("probe 5: no quota after 10000 open episodes")
			}
			continue
		}
		if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
			t.Errorf("probe 5: claim past the quota: %d, Retry-After %q", code, hdr.Get("Retry-After"))
		}
		break
	}
	if _, id, key, _ := a.claim("modest"); id == "" {
		t.Errorf("probe 5: another client starved after greedy took %d episodes", held)
	} else if code, b := a.do("POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}`,
		map[string]string{"Authorization": "Bearer " + key}); code != 200 {
		t.Errorf("probe 5: another client's chat: %d %s", code, b)
	} else if code, b := a.do("POST", "/end_episode", attackEnd("modest", id, "1"), nil); code != 200 {
		t.Errorf("probe 5: another client's end: %d %s", code, b)
	}

	// 6. The trickled body is cut within 45 s.
	slow.Wait()
	if slowErr != nil {
		t.Errorf("probe 6: %v", slowErr)
	} else if slowCut > 45*time.Second {
		t.Errorf("probe 6: a trickled body was cut after %v, want within 45 s", slowCut)
	}

	// 7. Healthy afterwards: alive, rolling, a fresh client runs a whole
	// episode, an admin can still stop and start the engine, no handler
	// panicked.
	if code, b := a.do("GET", "/health", "", nil); code != 200 || !strings.Contains(b, `"status":"ok"`) {
		t.Errorf("probe 7: health %d %s", code, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := client.New(base)
	ep, err := c.BeginEpisode(ctx, client.BeginOptions{TaskID: "t"})
	if err == nil {
		_, err = ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "again"}}, MaxTokens: 4})
	}
	if err == nil {
		err = c.EndEpisode(ctx, ep, "t", client.WorkflowResult{Reward: 1})
	}
	if err != nil {
		t.Errorf("probe 7: a fresh episode after the attacks: %v", err)
	}
	if code, b := a.do("POST", "/stop_engine", "{}", admin); code != 200 {
		t.Errorf("probe 7: stop_engine with the token: %d %s", code, b)
	}
	if code, b := a.do("POST", "/t/"+attackToken+"/start_engine", "{}", nil); code != 200 {
		t.Errorf("probe 7: start_engine with the token prefix: %d %s", code, b)
	}
	waitRolling(t, c)
	if _, m := a.do("GET", "/metrics", "", nil); !strings.Contains(m, "swarm_handler_panics_total 0\n") {
		t.Errorf("probe 7: /metrics does not show 0 handler panics")
	}
	if srv.cmd.ProcessState != nil {
		t.Errorf("probe 7: the server exited: %v", srv.cmd.ProcessState)
	}
	stopProc(t, srv)
	if n := logs.count("DATA RACE"); n > 0 {
		t.Errorf("the server reported %d data races (run with -v to see its log)", n)
	}
	t.Logf("greedy held %d episodes at its quota; a trickled body was cut after %v (read timeout %v)", held, slowCut.Round(time.Millisecond), readTimeout)
}

// trickleBody sends a request whose body (1000 bytes announced) comes one
// byte every 100 ms and returns how long until the server cut it (closed
// the connection or answered), failing after limit.
func trickleBody(addr string, limit time.Duration) (time.Duration, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /claim_episode HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", addr)
	read := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		read <- err // an answer, EOF or a reset: the request is over
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < limit {
		select {
		case <-read:
			return time.Since(start), nil
		case <-tick.C:
			if _, err := conn.Write([]byte(" ")); err != nil {
				return time.Since(start), nil
			}
		}
	}
	return 0, fmt.Errorf("a body trickled byte by byte for %v was not cut", limit)
}

func engineStatus(t *testing.T, a *attacker) string {
	t.Helper()
	_, b := a.do("GET", "/get_engine_status", "", nil)
	var st api.EngineStatus
	if err := json.Unmarshal([]byte(b), &st); err != nil {
		t.Fatalf("get_engine_status: %q", b)
	}
	return st.Status
}
