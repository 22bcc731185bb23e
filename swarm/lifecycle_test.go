package swarm

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/internal/ids"
	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/rl"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
	"github.com/troupe-ml/troupe/textgen"
)

func chatOnce(t *testing.T, ep *client.Episode) {
	t.Helper()
	if _, err := ep.Chat().Create(context.Background(), api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "x"}}, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
}

func endRaw(t *testing.T, u, client, ep, task, reward string) (int, map[string]any) {
	return rawPost(t, u+"/end_episode", fmt.Sprintf(`{"client_uuid": %q, "episode_uuid": %q, "task_id": %q, "workflow_output": {"reward": %s, "metadata": {}}}`, client, ep, task, reward), nil)
}

func httpStatus(err error) int {
	var he *client.HTTPError
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

func TestEpisodeFaults(t *testing.T) {
	m, _ := tabular.NewPreset("small")
	ts := startServer(t, m, testTrainConfig(4, 4), nil)
	ctx := ctxT(t)
	c := ts.cli
	u := ts.ts.URL

	ep, err := c.BeginEpisode(ctx, client.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chatOnce(t, ep)

	// bad rewards: refused with 400 naming the field, nothing changes
	for _, bad := range []string{"NaN", "Infinity", "-Infinity", "null", `"1.0"`, "1e999", "[]", "[1, NaN]", "{}"} {
		code, r := endRaw(t, u, c.ClientUUID, ep.ID, "t", bad)
		if code != 400 || !strings.Contains(fmt.Sprint(r["detail"]), "reward") && !strings.Contains(fmt.Sprint(r["detail"]), "NaN") {
			t.Errorf("reward %s: %d %v", bad, code, r)
		}
	}
	code, r := rawPost(t, u+"/end_episode", fmt.Sprintf(`{"client_uuid": %q, "episode_uuid": %q, "task_id": "t", "workflow_output": {"metadata": {}}}`, c.ClientUUID, ep.ID), nil)
	if code != 400 || !strings.Contains(fmt.Sprint(r["detail"]), "workflow_output.reward: missing") {
		t.Errorf("missing reward: %d %v", code, r)
	}
	if code, r := endRaw(t, u, c.ClientUUID, ep.ID, "", "1"); code != 400 || !strings.Contains(fmt.Sprint(r["detail"]), "task_id") {
		t.Errorf("empty task_id: %d %v", code, r)
	}
	if ts.s.OpenEpisodes() != 1 || ts.s.Accounting().Ended != 0 {
		t.Fatal("a refused end_episode changed the state")
	}
	// foreign client
	if code, _ := endRaw(t, u, "someone-else", ep.ID, "t", "1"); code != http.StatusForbidden {
		t.Errorf("foreign end: %d, want 403", code)
	}
	if code, _ := rawPost(t, u+"/abort_episode", fmt.Sprintf(`{"client_uuid": "someone-else", "episode_uuid": %q}`, ep.ID), nil); code != http.StatusForbidden {
		t.Errorf("foreign abort: %d, want 403", code)
	}
	// unknown episode
	if code, _ := endRaw(t, u, c.ClientUUID, ids.UUID(), "t", "1"); code != http.StatusNotFound {
		t.Errorf("unknown end: %d, want 404", code)
	}
	// the real end, then a duplicate
	if err := c.EndEpisode(ctx, ep, "t", client.WorkflowResult{Reward: 0.5}); err != nil {
		t.Fatal(err)
	}
	before := ts.s.Accounting()
	if code, r := endRaw(t, u, c.ClientUUID, ep.ID, "t", "1"); code != http.StatusConflict || !strings.Contains(fmt.Sprint(r["detail"]), "already ended") {
		t.Errorf("duplicate end: %d %v", code, r)
	}
	if after := ts.s.Accounting(); after != before || after.Ended != 1 || after.EndedRewardSum != 0.5 {
		t.Errorf("duplicate end changed accounting: %+v -> %+v", before, after)
	}

	// abort discards the samples
	ep2, _ := c.BeginEpisode(ctx, client.BeginOptions{})
	chatOnce(t, ep2)
	if err := c.AbortEpisode(ctx, ep2); err != nil {
		t.Fatal(err)
	}
	if err := c.AbortEpisode(ctx, ep2); err != nil {
		t.Fatalf("abort is idempotent: %v", err)
	}
	if a := ts.s.Accounting(); a.Buffered != 1 || a.Aborted != 1 {
		t.Errorf("after abort: %+v", a)
	}
	if code, _ := endRaw(t, u, c.ClientUUID, ep2.ID, "t", "1"); code != http.StatusConflict {
		t.Errorf("end after abort: %d, want 409", code)
	}

	// idle episodes are reclaimed; a late end gets 410 and its key is dead
	ep3, _ := c.BeginEpisode(ctx, client.BeginOptions{DiscardTimeout: 1500 * time.Millisecond})
	chatOnce(t, ep3)
	waitFor(t, "reclaim", func() bool { return ts.s.OpenEpisodes() == 0 })
	if err := c.EndEpisode(ctx, ep3, "t", client.WorkflowResult{Reward: 1}); httpStatus(err) != http.StatusGone {
		t.Errorf("late end: %v, want 410", err)
	}
	if _, err := ep3.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "x"}}, MaxTokens: 2}); httpStatus(err) != http.StatusUnauthorized {
		t.Errorf("chat after reclaim: %v, want 401", err)
	}
	if a := ts.s.Accounting(); a.Reclaimed != 1 || a.Buffered != 1 {
		t.Errorf("after reclaim: %+v", a)
	}
}

func TestKeySecurity(t *testing.T) {
	m, _ := tabular.NewPreset("small")
	ts := startServer(t, m, testTrainConfig(4, 4), nil)
	ctx := ctxT(t)
	a, _ := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
	b, _ := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
	_, secret, _ := strings.Cut(strings.TrimPrefix(a.APIKey, keyPrefix), ".")
	raw, err := base64.RawURLEncoding.DecodeString(secret)
	if err != nil || len(raw)*8 < 128 {
		t.Fatalf("key secret has %d bits (%v), want >= 128", len(raw)*8, err)
	}
	if a.APIKey == b.APIKey {
		t.Fatal("two episodes share a key")
	}
	_, secretB, _ := strings.Cut(strings.TrimPrefix(b.APIKey, keyPrefix), ".")
	for _, key := range []string{"", "sk-nothing", keyPrefix + a.ID, keyPrefix + a.ID + ".", keyPrefix + a.ID + "." + secretB, a.APIKey + "x", strings.ToUpper(a.APIKey)} {
		cc := &client.ChatClient{BaseURL: a.BaseURL, APIKey: key, HTTP: http.DefaultClient}
		if _, err := cc.Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "x"}}, MaxTokens: 2}); httpStatus(err) != http.StatusUnauthorized {
			t.Errorf("key %q: %v, want 401", key, err)
		}
	}
	chatOnce(t, a)
}

func TestAdminTokenAndLimits(t *testing.T) {
	m, _ := tabular.NewPreset("small")
	ts := startServer(t, m, testTrainConfig(4, 4), func(c *ServerConfig) { c.AdminToken = "s3cret"; c.MaxBodyBytes = 4096 })
	u := ts.ts.URL
	for _, p := range []string{"/stop_engine", "/start_engine", "/sync_train_config"} {
		if code, _ := rawPost(t, u+p, `{}`, nil); code != http.StatusUnauthorized {
			t.Errorf("%s without token: %d", p, code)
		}
		if code, _ := rawPost(t, u+p, `{}`, map[string]string{"Authorization": "Bearer wrong"}); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d", p, code)
		}
	}
	if st, _, _ := ts.s.Status(); st != StatusRolling {
		t.Fatalf("unauthorised calls changed the status to %s", st)
	}
	ts.cli.AdminToken = "s3cret"
	if err := ts.cli.StopEngine(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := ts.cli.StartEngine(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// 413
	big := `{"client_uuid": "` + strings.Repeat("x", 5000) + `", "episode_type": "train", "discard_episode_timeout": 1}`
	if code, _ := rawPost(t, u+"/claim_episode", big, nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("big body: %d, want 413", code)
	}
	// malformed JSON names the field
	for body, field := range map[string]string{
		`{"client_uuid": 5, "episode_type": "train", "discard_episode_timeout": 1}`:     "client_uuid",
		`{"client_uuid": "c", "episode_type": "train", "discard_episode_timeout": "x"}`: "discard_episode_timeout",
		`{"client_uuid": "c", "episode_type": "play", "discard_episode_timeout": 1}`:    "episode_type",
		`{"client_uuid": "c", "episode_type": "train"}`:                                 "discard_episode_timeout",
		`{"client_uuid": "c", "episode_type": "train", "discard_episode_timeout": -1}`:  "discard_episode_timeout",
		`{"client_uuid": "c",`: "invalid JSON",
		`[1,2]`:                "JSON object",
		``:                     "empty",
	} {
		code, r := rawPost(t, u+"/claim_episode", body, nil)
		if code != 400 || !strings.Contains(fmt.Sprint(r["detail"]), field) {
			t.Errorf("claim %s: %d %v, want 400 naming %s", body, code, r, field)
		}
	}
	ep, _ := ts.cli.BeginEpisode(ctxT(t), client.BeginOptions{})
	for body, field := range map[string]string{
		`{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}`:    "max_tokens",
		`{"messages": [{"role": "user", "content": "x"}], "temperature": 3}`:   "temperature",
		`{"messages": [{"role": "user", "content": "x"}], "top_p": 0}`:         "top_p",
		`{"messages": [{"role": "user", "content": "x"}], "n": 99}`:            "n",
		`{"messages": [{"role": "user", "content": "x"}], "stop": [1]}`:        "stop",
		`{"messages": [{"role": "wizard", "content": "x"}]}`:                   "messages[0].role",
		`{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`: "messages[0].content[0].type",
		`{"messages": []}`:   "messages",
		`{"model": "small"}`: "messages",
		`{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}`:                          "top_logprobs",
		`{"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}`:                       "max_tokens",
		`{"messages": [{"role": "user", "content": "` + strings.Repeat("y", 100) + `"}], "seed": 1.5}`: "seed",
	} {
		code, r := rawPost(t, ep.BaseURL+"/chat/completions", body, map[string]string{"Authorization": "Bearer " + ep.APIKey})
		e, _ := r["error"].(map[string]any)
		if code != 400 || e == nil || !strings.Contains(fmt.Sprint(e["message"]), field) {
			t.Errorf("chat %s: %d %v, want 400 naming %s", body, code, r, field)
		}
	}
}

func TestEvalNeverTrainsAndRules(t *testing.T) {
	m, _ := tabular.NewPreset("small")
	tc := testTrainConfig(2, 2)
	tc.CollectionMethod = CollectNonDummyTasks
	ts := startServer(t, m, tc, nil)
	ctx := ctxT(t)
	sum0 := m.Checksum()
	run := func(kind, task string, reward float64) {
		ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{Type: kind})
		if err != nil {
			t.Fatal(err)
		}
		chatOnce(t, ep)
		if err := ts.cli.EndEpisode(ctx, ep, task, client.WorkflowResult{Reward: reward}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		run(api.EpisodeEval, fmt.Sprint("e", i%2), float64(i%3))
	}
	// dummy tasks (equal rewards) do not complete a batch
	run(api.EpisodeTrain, "d1", 1)
	run(api.EpisodeTrain, "d1", 1)
	run(api.EpisodeTrain, "d2", 0)
	run(api.EpisodeTrain, "d2", 0)
	time.Sleep(20 * time.Millisecond)
	if _, _, g := ts.s.Status(); g != 0 || m.Checksum() != sum0 {
		t.Fatalf("eval or dummy episodes trained the model (step %d)", g)
	}
	if a := ts.s.Accounting(); a.Ended != 4 || a.Buffered != 4 {
		t.Fatalf("accounting %+v", a)
	}
	run(api.EpisodeTrain, "n1", 1)
	run(api.EpisodeTrain, "n1", 0)
	run(api.EpisodeTrain, "n2", 0.5)
	run(api.EpisodeTrain, "n2", 0)
	waitFor(t, "step 1", func() bool { _, _, g := ts.s.Status(); return g == 1 })
	waitFor(t, "rolling", func() bool { st, _, _ := ts.s.Status(); return st == StatusRolling })
	a := ts.s.Accounting()
	if a.TrainedEpisodes != 4 || a.Dropped != 4 || a.Buffered != 0 {
		t.Fatalf("non-dummy batch: %+v", a)
	}
	var changed bool
	ts.s.WithModel(func(Model) { changed = m.Checksum() != sum0 })
	if !changed {
		t.Fatal("training step did not change the parameters")
	}
}

func TestStalenessDropsOldEpisodes(t *testing.T) {
	m, _ := tabular.NewPreset("small")
	tc := testTrainConfig(1, 2)
	tc.MaxStaleness = 0
	tc.DrainTimeout = 20 * time.Millisecond
	ts := startServer(t, m, tc, nil)
	ctx := ctxT(t)
	old, _ := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
	chatOnce(t, old) // sampled at version 0
	for i := 0; i < 2; i++ {
		ep, _ := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
		chatOnce(t, ep)
		ts.cli.EndEpisode(ctx, ep, "a", client.WorkflowResult{Reward: float64(i)})
	}
	waitFor(t, "step 1", func() bool { _, _, g := ts.s.Status(); return g == 1 })
	waitFor(t, "rolling", func() bool { st, _, _ := ts.s.Status(); return st == StatusRolling })
	if err := ts.cli.EndEpisode(ctx, old, "b", client.WorkflowResult{Reward: 1}); err != nil {
		t.Fatal(err)
	}
	fresh, _ := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
	chatOnce(t, fresh)
	ts.cli.EndEpisode(ctx, fresh, "b", client.WorkflowResult{Reward: 0})
	// task b now has 2 episodes, but one is stale: after dropping it the
	// rule is no longer met and the model is not trained.
	waitFor(t, "stale drop", func() bool { return ts.s.Accounting().Dropped == 1 })
	waitFor(t, "rolling", func() bool { st, _, _ := ts.s.Status(); return st == StatusRolling })
	if _, _, g := ts.s.Status(); g != 1 {
		t.Fatalf("trained on a stale batch: step %d", g)
	}
}

func TestCheckpointResume(t *testing.T) {
	dir := t.TempDir()
	tc := testTrainConfig(1, 2)
	tc.CheckpointEvery = 1
	m1, _ := tabular.NewPreset("small")
	s1, err := NewServer(ServerConfig{Model: m1, Train: tc, CheckpointDir: dir, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	s1.Start()
	hs := newHTTPTestServer(s1.Handler())
	c := client.New(hs.URL)
	ctx := ctxT(t)
	for step := 1; step <= 3; step++ {
		for i := 0; i < 2; i++ {
			ep, _ := c.BeginEpisode(ctx, client.BeginOptions{})
			chatOnce(t, ep)
			c.EndEpisode(ctx, ep, "t", client.WorkflowResult{Reward: float64(i)})
		}
		waitFor(t, "step", func() bool { _, _, g := s1.Status(); return g == int64(step) })
		waitFor(t, "rolling", func() bool { st, _, _ := s1.Status(); return st == StatusRolling })
	}
	if _, err := os.Stat(filepath.Join(dir, CheckpointFile)); err != nil {
		t.Fatalf("no periodic checkpoint: %v", err)
	}
	hs.Close()
	if err := s1.Close(); err != nil { // what SIGTERM does
		t.Fatal(err)
	}
	m2, _ := tabular.NewPreset("small")
	if m2.Checksum() == m1.Checksum() {
		t.Fatal("fresh model equals trained one")
	}
	s2, _ := NewServer(ServerConfig{Model: m2, Train: tc, CheckpointDir: dir, Logger: quietLog})
	defer s2.Close()
	if err := s2.Start(); err != nil {
		t.Fatal(err)
	}
	if _, _, g := s2.Status(); g != 3 || m2.Checksum() != m1.Checksum() {
		t.Fatalf("resumed at step %d (want 3), checksum equal %v", g, m2.Checksum() == m1.Checksum())
	}
	// a corrupt checkpoint makes boot fail cleanly
	os.WriteFile(filepath.Join(dir, CheckpointFile), []byte("garbage"), 0o644)
	m3, _ := tabular.NewPreset("small")
	s3, _ := NewServer(ServerConfig{Model: m3, Train: tc, CheckpointDir: dir, Logger: quietLog})
	if err := s3.Start(); err == nil {
		t.Fatal("booting from a corrupt checkpoint should fail")
	}
	if st, _, _ := s3.Status(); st != StatusOffline {
		t.Fatalf("status after failed boot: %s", st)
	}
	s3.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, CheckpointFile)); string(b) != "garbage" {
		t.Fatal("closing a server that never booted overwrote the checkpoint")
	}
}

// Rewards may be negative (difference rewards, penalties): ending such
// episodes must succeed and train. The reward-sum metric was once a
// Prometheus counter, whose Add panics on a negative value, so every
// negative reward was lost to a recovered handler panic.
func TestNegativeRewardsTrain(t *testing.T) {
	m, _ := tabular.NewPreset("small")
	ts := startServer(t, m, testTrainConfig(1, 2), nil)
	ctx := ctxT(t)
	for i := 0; i < 2; i++ {
		ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		chatOnce(t, ep)
		if err := ts.cli.EndEpisode(ctx, ep, "neg", client.WorkflowResult{Reward: -0.5 - float64(i)}); err != nil {
			t.Fatalf("ending an episode with reward %v: %v", -0.5-float64(i), err)
		}
	}
	waitFor(t, "step 1", func() bool { _, _, g := ts.s.Status(); return g == 1 })
	if a := ts.s.Accounting(); a.EndedRewardSum != -2 || a.TrainedRewardSum != -2 {
		t.Fatalf("reward sums ended %v trained %v, want -2 and -2", a.EndedRewardSum, a.TrainedRewardSum)
	}
	_, b := rawGet(t, ts.ts.URL+"/metrics")
	for _, want := range []string{"swarm_handler_panics_total 0", `swarm_reward_sum{type="train"} -2`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// recordingModel records the batches its server trains on.
type recordingModel struct {
	Model
	mu      sync.Mutex
	batches [][]rl.Sample
}

func (m *recordingModel) Train(batch []rl.Sample) (rl.Stats, error) {
	m.mu.Lock()
	m.batches = append(m.batches, append([]rl.Sample(nil), batch...))
	m.mu.Unlock()
	return m.Model.Train(batch)
}

// TestSamplesRecordTemperature: each trained sample carries the
// temperature its completion was sampled at (the request's, 1 when the
// request names none), so that a model can score it under that tempered
// distribution (rl/policies.LM.Tempered).
func TestSamplesRecordTemperature(t *testing.T) {
	inner, _ := tabular.NewPreset("small")
	m := &recordingModel{Model: inner}
	ts := startServer(t, m, testTrainConfig(1, 3), nil)
	ctx := ctxT(t)
	half, zero := 0.5, 0.0
	for i, temp := range []*float64{&half, nil, &zero} {
		ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "x"}}, MaxTokens: 4, Temperature: temp}); err != nil {
			t.Fatal(err)
		}
		if err := ts.cli.EndEpisode(ctx, ep, "t", client.WorkflowResult{Reward: float64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "step 1", func() bool { _, _, g := ts.s.Status(); return g == 1 })
	m.mu.Lock()
	defer m.mu.Unlock()
	var got []float64
	for _, b := range m.batches {
		for _, s := range b {
			got = append(got, s.Temperature)
		}
	}
	slices.Sort(got)
	if want := []float64{0, 0.5, 1}; !slices.Equal(got, want) {
		t.Errorf("trained samples' temperatures %v, want %v", got, want)
	}
}

// EncodeText forwards to the recorded model, when it encodes text.
func (m *recordingModel) EncodeText(s string) ([]int, error) {
	if e, ok := m.Model.(openai.TextEncoder); ok {
		return e.EncodeText(s)
	}
	return nil, errors.New("no text encoder")
}

// TestAssistantPrefix: a forced prefix is recorded as the sample's actions
// alone (no behaviour log-probs, so the trainer computes them), the answer
// is the continuation after it, and bad uses are 400s naming the field.
func TestAssistantPrefix(t *testing.T) {
	inner, m, ts, req := prefixServer(t)
	ctx := ctxT(t)
	// Bad uses first: each is refused before anything is recorded.
	bad, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{Type: api.EpisodeEval})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mod  func(*api.ChatRequest)
		want string
	}{
		{func(r *api.ChatRequest) { r.AssistantPrefix, r.N = "ab", 2 }, "needs n = 1"},
		{func(r *api.ChatRequest) { r.AssistantPrefix, r.MaxTokens = "abcdef", 6 }, "leaves no room"},
		{func(r *api.ChatRequest) { r.AssistantContext = "cd" }, "assistant_context: needs assistant_prefix"},
	} {
		r := req
		tc.mod(&r)
		_, err := bad.Chat().Create(ctx, r)
		if httpStatus(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "assistant_prefix") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want a 400 on assistant_prefix saying %q", r, err, tc.want)
		}
	}
	if st, body := rawPost(t, ts.ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"assistant_prefix":"a","assistant_context":"","max_tokens":4}`, map[string]string{"Authorization": "Bearer " + bad.APIKey}); st != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body), "must not be empty") {
		t.Errorf("empty context: %d %v", st, body)
	}
	if st, body := rawPost(t, ts.ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"assistant_prefix":"","max_tokens":4}`, map[string]string{"Authorization": "Bearer " + bad.APIKey}); st != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body), "must not be empty") {
		t.Errorf("empty prefix: %d %v", st, body)
	}
	if st, body := rawPost(t, ts.ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"assistant_prefix":"a","stream":true,"max_tokens":4}`, map[string]string{"Authorization": "Bearer " + bad.APIKey}); st != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body), "cannot be streamed") {
		t.Errorf("streamed prefix: %d %v", st, body)
	}
	plain := startServer(t, plainModel{inner}, testTrainConfig(1, 2), nil)
	pe, err := plain.cli.BeginEpisode(ctx, client.BeginOptions{Type: api.EpisodeEval})
	if err != nil {
		t.Fatal(err)
	}
	r := req
	r.AssistantPrefix = "ab"
	if _, err := pe.Chat().Create(ctx, r); httpStatus(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "openai.TextEncoder") {
		t.Errorf("a model without openai.TextEncoder: %v, want a 400", err)
	}

	// The forced episode and a sampled one, in one group.
	forcedAnswer, forced, n := forcedGroup(t, ts, m, req, func(r *api.ChatRequest) { r.AssistantPrefix = "ab" })
	if n != 2 || len(forced) != 1 {
		t.Fatalf("trained %d samples, %d of them forced; want 2 and 1", n, len(forced))
	}
	if f := forced[0]; !slices.Equal(f.Actions, []int{'a', 'b'}) || f.LogProbs != nil {
		t.Errorf("forced sample: actions %v log-probs %v, want [97 98] and none", f.Actions, f.LogProbs)
	}
	// The answer is the model's greedy continuation of prompt + prefix.
	prompt, err := inner.ChatPrompt(context.Background(), []api.Message{{Role: "user", Content: "x"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(forced[0].Prompt, prompt) {
		t.Errorf("forced sample's prompt %v, want the chat prompt %v", forced[0].Prompt, prompt)
	}
	g, err := inner.Generate(ctx, [][]int{append(slices.Clip(prompt), 'a', 'b')}, textgen.GenerateOptions{MaxTokens: 4, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := string([]rune(string(tokenText(inner, g[0].Tokens)))); forcedAnswer != want { // JSON writes one U+FFFD per invalid byte
		t.Errorf("forced answer %q, want the greedy continuation %q", forcedAnswer, want)
	}
}

// TestAssistantContext checks assistant_context: the context extends the
// recorded sample's prompt, the prefix alone is its action, and the answer
// is the greedy continuation of prompt + context + prefix.
func TestAssistantContext(t *testing.T) {
	inner, m, ts, req := prefixServer(t)
	ctx := ctxT(t)
	answer, forced, _ := forcedGroup(t, ts, m, req, func(r *api.ChatRequest) { r.AssistantContext, r.AssistantPrefix = "cd", "ab" })
	if len(forced) != 1 {
		t.Fatalf("%d samples with the branch's reward, want 1", len(forced))
	}
	prompt, err := inner.ChatPrompt(context.Background(), []api.Message{{Role: "user", Content: "x"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	full := append(slices.Clip(prompt), 'c', 'd')
	if f := forced[0]; !slices.Equal(f.Prompt, full) || !slices.Equal(f.Actions, []int{'a', 'b'}) || f.LogProbs != nil {
		t.Errorf("sample: prompt %v actions %v log-probs %v, want prompt %v, actions [97 98], no log-probs", f.Prompt, f.Actions, f.LogProbs, full)
	}
	g, err := inner.Generate(ctx, [][]int{append(slices.Clip(full), 'a', 'b')}, textgen.GenerateOptions{MaxTokens: 4, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := string([]rune(string(tokenText(inner, g[0].Tokens)))); answer != want {
		t.Errorf("answer %q, want the greedy continuation %q", answer, want)
	}
}

// forcedGroup runs one GRPO group of two episodes on ts: the first asks req
// changed by branch and ends with reward 0, the second asks req as it is
// and ends with reward 1. The first answer may use at most max_tokens − 2
// tokens (a two-token prefix counts in max_tokens, a context does not).
// After the training step it returns the first answer's content, the
// trained samples with reward 0 and the number of samples trained on.
func forcedGroup(t *testing.T, ts *testServer, m *recordingModel, req api.ChatRequest, branch func(*api.ChatRequest)) (string, []rl.Sample, int) {
	t.Helper()
	ctx := ctxT(t)
	var answer string
	for i := range 2 {
		ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := req
		if i == 0 {
			branch(&r)
		}
		resp, err := ep.Chat().Create(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			answer = resp.Choices[0].Message.Content
			if u := resp.Usage; u == nil || u.CompletionTokens > req.MaxTokens-2 {
				t.Errorf("usage %+v of %+v: the prefix counts in max_tokens %d, a context does not", u, r, req.MaxTokens)
			}
		}
		if err := ts.cli.EndEpisode(ctx, ep, "g", client.WorkflowResult{Reward: float64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "step 1", func() bool { _, _, g := ts.s.Status(); return g == 1 })
	m.mu.Lock()
	defer m.mu.Unlock()
	var forced []rl.Sample
	n := 0
	for _, b := range m.batches {
		for _, s := range b {
			n++
			if s.Reward == 0 {
				forced = append(forced, s)
			}
		}
	}
	return answer, forced, n
}

// prefixServer starts a server whose model records its training batches,
// with groups of two episodes, and returns a greedy request of 6 tokens.
func prefixServer(t *testing.T) (Model, *recordingModel, *testServer, api.ChatRequest) {
	inner, _ := tabular.NewPreset("small")
	m := &recordingModel{Model: inner}
	zero := 0.0
	return inner, m, startServer(t, m, testTrainConfig(1, 2), nil), api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "x"}}, MaxTokens: 6, Temperature: &zero}
}
