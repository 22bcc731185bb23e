package swarm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl/policies"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
	"github.com/troupe-ml/troupe/textgen"
)

// slowModel streams through a tabular.Model but stops after its first token
// until release is closed (or the context ends, or 10 s pass), so a test can
// look at the wire while generation is provably unfinished.
type slowModel struct {
	*tabular.Model
	release  chan struct{}
	emitted  atomic.Int64 // tokens emitted so far
	finished atomic.Bool  // Generate returned
	ctxErr   atomic.Bool  // it returned because the context ended
}

func (m *slowModel) Generate(ctx context.Context, prompts [][]int, opts textgen.GenerateOptions, emit func(textgen.TokenEvent)) ([]textgen.Generation, error) {
	defer m.finished.Store(true)
	var stalled error
	gens, err := m.Model.Generate(ctx, prompts, opts, func(ev textgen.TokenEvent) {
		// Count before emitting: the client may read the chunk before
		// emit returns.
		n := m.emitted.Add(1)
		if emit != nil {
			emit(ev)
		}
		if n == 1 {
			select {
			case <-m.release:
			case <-ctx.Done():
				stalled = ctx.Err()
			case <-time.After(10 * time.Second):
			}
		}
	})
	if stalled != nil {
		m.ctxErr.Store(true)
		return nil, stalled
	}
	return gens, err
}

// plainModel hides GenerateStream: the server streams it after Generate.
type plainModel struct{ Model }

// collected is what a stream delivered.
type collected struct {
	content  []string        // per choice
	finish   []string        // per choice
	logprobs [][]api.LogProb // per choice
	usage    *api.Usage
	chunks   int
}

// collect gathers a stream's chunks; strict rejects any U+FFFD in a chunk
// (for outputs that are valid UTF-8, where one would mean a split rune).
func collect(n int, strict bool) (*collected, func(api.ChatChunk) error) {
	c := &collected{content: make([]string, n), finish: make([]string, n), logprobs: make([][]api.LogProb, n)}
	return c, func(ch api.ChatChunk) error {
		c.chunks++
		if ch.Usage != nil {
			c.usage = ch.Usage
		}
		for _, x := range ch.Choices {
			if x.Index < 0 || x.Index >= n {
				return fmt.Errorf("choice index %d", x.Index)
			}
			if x.Delta.Content != nil {
				if !utf8.ValidString(*x.Delta.Content) || (strict && strings.ContainsRune(*x.Delta.Content, utf8.RuneError)) {
					return fmt.Errorf("chunk content %q is not whole UTF-8 characters", *x.Delta.Content)
				}
				c.content[x.Index] += *x.Delta.Content
			}
			if x.LogProbs != nil {
				c.logprobs[x.Index] = append(c.logprobs[x.Index], x.LogProbs.Content...)
			}
			if x.FinishReason != nil {
				if c.finish[x.Index] != "" {
					return fmt.Errorf("choice %d finished twice", x.Index)
				}
				c.finish[x.Index] = *x.FinishReason
			}
		}
		return nil
	}
}

// TestStreamFirstChunkBeforeGenerationEnds: with a model that stalls after
// its first token, the first content chunk reaches the client while the
// model is still generating; once released, the rest follows and the text
// equals the non-streamed completion for the same seed.
func TestStreamFirstChunkBeforeGenerationEnds(t *testing.T) {
	tab, _ := tabular.NewPreset("tiny")
	m := &slowModel{Model: tab, release: make(chan struct{})}
	ts := startServer(t, m, testTrainConfig(64, 1), nil)
	ctx := ctxT(t)
	ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seed := int64(11)
	req := api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "hello"}}, MaxTokens: 24, Seed: &seed}
	var sb strings.Builder
	sawFirst := false
	err = ep.Chat().Stream(ctx, req, func(c api.ChatChunk) error {
		for _, ch := range c.Choices {
			if ch.Delta.Content == nil || *ch.Delta.Content == "" {
				continue
			}
			if !sawFirst {
				sawFirst = true
				if m.finished.Load() || m.emitted.Load() != 1 {
					return fmt.Errorf("first chunk arrived after %d tokens, generation finished %v", m.emitted.Load(), m.finished.Load())
				}
				close(m.release)
			}
			sb.WriteString(*ch.Delta.Content)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sawFirst {
		t.Fatal("no content chunk")
	}
	resp, err := ep.Chat().Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sb.String(), resp.Choices[0].Message.Content; got != want {
		t.Fatalf("streamed %q, non-streamed %q", got, want)
	}
}

// programmedModel is an order-1 tabular model that greedily writes "é€x"
// byte by byte (one byte per token) and then ends.
func programmedModel() *tabular.Model {
	m := tabular.New(policies.TabularConfig{Name: "prog", Order: 1, Optimizer: "sgd", LR: 1, InitScale: 0, Seed: 1})
	chain := []int{'>', 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 'x', policies.ByteEOS}
	for i := 0; i+1 < len(chain); i++ {
		m.Policy.W[chain[i]*policies.ByteVocab+chain[i+1]] = 10
	}
	return m
}

// TestStreamMatchesNonStreamed streams the same requests with and without
// "stream": true and compares content, finish reasons, logprobs entries
// and usage per choice; every chunk must hold whole UTF-8 characters.
func TestStreamMatchesNonStreamed(t *testing.T) {
	tiny, _ := tabular.NewPreset("tiny")
	temp0, temp1 := 0.0, 1.0
	cases := []struct {
		name  string
		model Model
		req   api.ChatRequest
		// stopFrom picks stop sequences from the non-stopped content
		stopFrom func(content string) []string
		want     string // expected content of choice 0 (when not empty)
		finish   string
		lax      bool // the output is not valid UTF-8 (random bytes, cut runes)
	}{
		{name: "tiny n=3 logprobs", model: tiny, req: api.ChatRequest{N: 3, MaxTokens: 40, Temperature: &temp1, Logprobs: true, TopLogprobs: 2}, lax: true},
		{name: "tiny stop spanning tokens", model: tiny, req: api.ChatRequest{N: 1, MaxTokens: 40, Temperature: &temp1, Logprobs: true},
			stopFrom: func(c string) []string { return []string{c[10:13], "\x00never"} }, lax: true},
		{name: "tiny replayed (no StreamGenerator)", model: plainModel{tiny}, req: api.ChatRequest{N: 2, MaxTokens: 30, Temperature: &temp1, Logprobs: true}, lax: true},
		{name: "utf8", model: programmedModel(), req: api.ChatRequest{MaxTokens: 16, Temperature: &temp0, Logprobs: true}, want: "é€x", finish: "stop"},
		{name: "utf8 stop inside rune run", model: programmedModel(), req: api.ChatRequest{MaxTokens: 16, Temperature: &temp0, Stop: []string{"€"}}, want: "é", finish: "stop"},
		{name: "utf8 stop prefix ruled out", model: programmedModel(), req: api.ChatRequest{MaxTokens: 16, Temperature: &temp0, Stop: []string{"€y"}}, want: "é€x", finish: "stop"},
		{name: "utf8 stop last", model: programmedModel(), req: api.ChatRequest{MaxTokens: 16, Temperature: &temp0, Stop: []string{"x", "€x"}}, want: "é", finish: "stop"},
		{name: "utf8 length mid-rune", model: programmedModel(), req: api.ChatRequest{MaxTokens: 4, Temperature: &temp0}, want: "é\uFFFD\uFFFD", finish: "length", lax: true},
		{name: "utf8 replayed", model: plainModel{programmedModel()}, req: api.ChatRequest{MaxTokens: 16, Temperature: &temp0, Stop: []string{"€y"}}, want: "é€x", finish: "stop"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, tc.model, testTrainConfig(64, 1), nil)
			ctx := ctxT(t)
			ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			seed := int64(7)
			req := tc.req
			req.Seed = &seed
			req.Messages = []api.Message{{Role: "user", Content: "stream me"}}
			if tc.stopFrom != nil {
				resp, err := ep.Chat().Create(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				req.Stop = tc.stopFrom(resp.Choices[0].Message.Content)
			}
			resp, err := ep.Chat().Create(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			n := max(req.N, 1)
			got, f := collect(n, !tc.lax)
			req.StreamOptions = &api.StreamOptions{IncludeUsage: true}
			if err := ep.Chat().Stream(ctx, req, f); err != nil {
				t.Fatal(err)
			}
			if tc.want != "" && resp.Choices[0].Message.Content != tc.want {
				t.Fatalf("non-streamed content %q, want %q", resp.Choices[0].Message.Content, tc.want)
			}
			for i, ch := range resp.Choices {
				if got.content[i] != ch.Message.Content {
					t.Errorf("choice %d: streamed %q, non-streamed %q", i, got.content[i], ch.Message.Content)
				}
				if got.finish[i] != ch.FinishReason || (tc.finish != "" && got.finish[i] != tc.finish) {
					t.Errorf("choice %d: finish streamed %q, non-streamed %q, want %q", i, got.finish[i], ch.FinishReason, tc.finish)
				}
				if req.Logprobs {
					a, _ := json.Marshal(got.logprobs[i])
					b, _ := json.Marshal(ch.LogProbs.Content)
					if string(a) != string(b) {
						t.Errorf("choice %d: streamed logprobs\n%s\nnon-streamed\n%s", i, a, b)
					}
				}
			}
			if got.usage == nil || *got.usage != *resp.Usage {
				t.Errorf("usage chunk %+v, non-streamed usage %+v", got.usage, resp.Usage)
			}
			if tc.stopFrom != nil && resp.Choices[0].FinishReason != "stop" {
				t.Errorf("stop %q did not stop: %+v", req.Stop, resp.Choices[0])
			}
		})
	}
}

// TestStreamDisconnect: a client that goes away mid-stream stops the
// generation, and nothing of the unfinished completion is recorded in its
// episode, which stays usable.
func TestStreamDisconnect(t *testing.T) {
	tab, _ := tabular.NewPreset("tiny")
	m := &slowModel{Model: tab, release: make(chan struct{})}
	ts := startServer(t, m, testTrainConfig(64, 1), nil)
	ctx := ctxT(t)
	ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":32,"stream":true}`
	hr, _ := http.NewRequestWithContext(rctx, http.MethodPost, ep.BaseURL+"/chat/completions", strings.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+ep.APIKey)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), `"role":"assistant"`) {
	}
	cancel() // the client disconnects after the first chunk
	resp.Body.Close()
	waitFor(t, "generation to stop", func() bool { return m.finished.Load() })
	if !m.ctxErr.Load() {
		t.Fatal("generation did not end through the cancelled context")
	}
	waitFor(t, "the completion to be released", func() bool {
		ts.s.mu.Lock()
		defer ts.s.mu.Unlock()
		e := ts.s.eps.open[ep.ID]
		return e != nil && e.inflight == 0 && e.reserved == 0
	})
	ts.s.mu.Lock()
	e := ts.s.eps.open[ep.ID]
	ns, toks := len(e.samples), e.tokens
	ts.s.mu.Unlock()
	if ns != 0 || toks != 0 {
		t.Fatalf("disconnected stream recorded %d samples, %d tokens", ns, toks)
	}
	close(m.release)
	if _, err := ep.Chat().Create(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "hi"}}, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
	ts.s.mu.Lock()
	ns = len(ts.s.eps.open[ep.ID].samples)
	ts.s.mu.Unlock()
	if ns != 1 {
		t.Fatalf("episode has %d samples after one finished completion", ns)
	}
}

// TestStreamEpisodeClosedMidStream: when the episode is aborted while a
// stream is being generated, the stream ends with an error event (no
// [DONE]) and nothing is recorded.
func TestStreamEpisodeClosedMidStream(t *testing.T) {
	tab, _ := tabular.NewPreset("tiny")
	m := &slowModel{Model: tab, release: make(chan struct{})}
	ts := startServer(t, m, testTrainConfig(64, 1), nil)
	ctx := ctxT(t)
	ep, err := ts.cli.BeginEpisode(ctx, client.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = ep.Chat().Stream(ctx, api.ChatRequest{Messages: []api.Message{{Role: "user", Content: "hi"}}, MaxTokens: 16}, func(c api.ChatChunk) error {
		if m.emitted.Load() == 1 && !m.finished.Load() {
			select {
			case <-m.release:
			default:
				if err := ts.cli.AbortEpisode(ctx, ep); err != nil {
					return err
				}
				close(m.release)
			}
		}
		return nil
	})
	var he *client.HTTPError
	if !errors.As(err, &he) || !strings.Contains(he.Body, "episode_closed") {
		t.Fatalf("stream over an aborted episode: %v, want an episode_closed error event", err)
	}
}
