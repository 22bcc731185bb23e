package swarm

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// TestChatWorkBounds: a request cannot ask for more than MaxRequestTokens
// sampled tokens (n × max_tokens, 400 naming the field); without
// max_tokens, n choices share that budget.
func TestChatWorkBounds(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	ts := startServer(t, m, testTrainConfig(64, 1), func(c *ServerConfig) { c.MaxRequestTokens = 64 })
	ctx := ctxT(t)
	ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url, hdr := ep.BaseURL+"/chat/completions", sdkHeaders(ep.APIKey)
	cases := []struct {
		body  string
		code  int
		param string
		max   int // completion tokens at most
	}{
		{body: `"n": 4, "max_tokens": 32`, code: 400, param: "max_tokens"},
		{body: `"n": 4, "max_completion_tokens": 17`, code: 400, param: "max_completion_tokens"},
		{body: `"n": 4, "max_tokens": 16`, code: 200, max: 64},
		{body: `"n": 4`, code: 200, max: 64},     // 16 per choice by default
		{body: `"n": 1`, code: 200, max: 64},     // MaxResponseTokens (64) caps it
		{body: `"n": 16`, code: 200, max: 64},    // 4 per choice
		{body: `"n": 17`, code: 400, param: "n"}, // MaxN
		{body: `"max_tokens": 65`, code: 400, param: "max_tokens"},
		{body: `"max_tokens": 0`, code: 400, param: "max_tokens"},
	}
	for _, c := range cases {
		code, r := rawPost(t, url, `{"messages": [{"role": "user", "content": "hi"}], "temperature": 1, `+c.body+`}`, hdr)
		if code != c.code {
			t.Errorf("%s: status %d, want %d: %v", c.body, code, c.code, r)
			continue
		}
		if code != 200 {
			e := r["error"].(map[string]any)
			if e["param"] != c.param || !strings.Contains(e["message"].(string), c.param) {
				t.Errorf("%s: error %v, want param %q named in the message", c.body, e, c.param)
			}
			continue
		}
		u := r["usage"].(map[string]any)
		if n := int(u["completion_tokens"].(float64)); n > c.max || n < 1 {
			t.Errorf("%s: %d completion tokens, want 1..%d", c.body, n, c.max)
		}
	}
}

// TestEpisodeTokenBudget: an episode records at most MaxEpisodeTokens; a
// completion that could pass it gets 429 before anything is generated,
// and the episode still ends normally.
func TestEpisodeTokenBudget(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	const limit = 200
	ts := startServer(t, m, testTrainConfig(64, 1), func(c *ServerConfig) { c.MaxEpisodeTokens = limit })
	ctx := ctxT(t)
	ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url, hdr := ep.BaseURL+"/chat/completions", sdkHeaders(ep.APIKey)
	body := `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40}`
	prompt, _ := m.ChatPrompt(context.Background(), []api.Message{{Role: "user", Content: "hi"}}, nil)
	recorded, ok := 0, 0
	for i := 0; i < 10; i++ {
		code, r := rawPost(t, url, body, hdr)
		if code == 429 {
			e := r["error"].(map[string]any)
			if e["code"] != "episode_token_limit" {
				t.Fatalf("429 with %v", e)
			}
			if recorded+len(prompt)+40 <= limit {
				t.Fatalf("refused with %d tokens recorded although %d more fit in %d", recorded, len(prompt)+40, limit)
			}
			break
		}
		if code != 200 {
			t.Fatalf("completion %d: %d %v", i, code, r)
		}
		ok++
		recorded += int(r["usage"].(map[string]any)["total_tokens"].(float64))
	}
	if ok == 0 || recorded > limit {
		t.Fatalf("%d completions, %d tokens recorded (limit %d)", ok, recorded, limit)
	}
	ts.s.mu.Lock()
	got := ts.s.eps.open[ep.ID].tokens
	ts.s.mu.Unlock()
	if got != recorded {
		t.Fatalf("episode counts %d tokens, responses reported %d", got, recorded)
	}
	if code, _ := rawPost(t, url, body, hdr); code != 429 {
		t.Fatalf("after the budget: %d, want 429", code)
	}
	if err := ts.cli.EndEpisode(ctx, ep, "t", client.WorkflowResult{Reward: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestStopFunc checks the stop test on tokens of several bytes: a stop
