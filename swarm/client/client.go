package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/internal/ids"
)

// Backoff is an exponential back-off schedule.
type Backoff struct {
	Initial, Max time.Duration // 50 ms and 2 s when zero
}

func (b Backoff) delay(attempt int) time.Duration {
	ini, mx := b.Initial, b.Max
	if ini <= 0 {
		ini = 50 * time.Millisecond
	}
	if mx <= 0 {
		mx = 2 * time.Second
	}
	d := ini << min(attempt, 20)
	if d > mx || d <= 0 {
		d = mx
	}
	return d
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// HTTPError is a non-2xx answer of a swarm or OpenAI endpoint.
type HTTPError struct {
	Status int
	Body   string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

// Client speaks the swarm protocol to one server. Its zero value is not
// usable; create it with NewClient.
type Client struct {
	// BaseURL is the server's root, e.g. "http://127.0.0.1:10086".
	BaseURL string
	// ClientUUID identifies this client to the server.
	ClientUUID string
	// AdminToken is sent to engine-control endpoints when set.
	AdminToken string
	// HTTP is the HTTP client.
	HTTP *http.Client
	// Backoff paces retries while the engine is busy.
	Backoff Backoff
}

// New returns a client with a fresh client UUID.
func New(baseURL string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), ClientUUID: ids.UUID(), HTTP: &http.Client{Timeout: 60 * time.Second}}
}

func (c *Client) post(ctx context.Context, path string, in, out any, admin bool) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if admin && c.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.AdminToken)
	}
	return c.do(req, out)
}

func (c *Client) do(req *http.Request, out any) error {
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &HTTPError{Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("client: decoding %s response: %w", req.URL.Path, err)
		}
	}
	return nil
}

// EngineStatus fetches the engine status.
func (c *Client) EngineStatus(ctx context.Context) (api.EngineStatus, error) {
	var st api.EngineStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/get_engine_status", nil)
	if err != nil {
		return st, err
	}
	err = c.do(req, &st)
	return st, err
}

// TrainingStatus fetches where the server's episodes went (GET
// /get_training_status): counts by state, dropped episodes by reason, the
// latest of them (their ids only with the admin token).
func (c *Client) TrainingStatus(ctx context.Context) (api.TrainingStatus, error) {
	var st api.TrainingStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/get_training_status", nil)
	if err != nil {
		return st, err
	}
	if c.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.AdminToken)
	}
	err = c.do(req, &st)
	return st, err
}

// SyncTrainConfig sends an AgentJet training YAML (engine must be OFFLINE).
func (c *Client) SyncTrainConfig(ctx context.Context, yaml string) error {
	return c.post(ctx, "/sync_train_config", map[string]string{"yaml_as_string": yaml}, nil, true)
}

// StartEngine starts the engine and waits until it is ROLLING.
func (c *Client) StartEngine(ctx context.Context) error {
	var out struct {
		Success bool   `json:"success"`
		Error   string `json:"error"`
	}
	if err := c.post(ctx, "/start_engine", struct{}{}, &out, true); err != nil {
		return err
	}
	if !out.Success {
		return fmt.Errorf("client: start_engine: %s", out.Error)
	}
	return c.WaitForStatus(ctx, api.StatusRolling)
}

// StopEngine stops the engine.
func (c *Client) StopEngine(ctx context.Context) error {
	return c.post(ctx, "/stop_engine", struct{}{}, nil, true)
}

// WaitForStatus polls until the engine reaches status.
func (c *Client) WaitForStatus(ctx context.Context, status string) error {
	for attempt := 0; ; attempt++ {
		st, err := c.EngineStatus(ctx)
		if err == nil && st.Status == status {
			return nil
		}
		if err := sleepCtx(ctx, c.Backoff.delay(attempt)); err != nil {
			return fmt.Errorf("client: waiting for %s: %w", status, err)
		}
	}
}

// WaitForStep waits until the server has trained step steps (its global
// step) and rolls again, polling with the client's back-off.
func (c *Client) WaitForStep(ctx context.Context, step int64) error {
	for attempt := 0; ; attempt++ {
		st, err := c.EngineStatus(ctx)
		if err != nil {
			return fmt.Errorf("client: waiting for step %d: %w", step, err)
		}
		if st.GlobalStep >= step && st.Status == api.StatusRolling {
			return nil
		}
		if err := sleepCtx(ctx, c.Backoff.delay(attempt)); err != nil {
			return fmt.Errorf("client: waiting for step %d: %w", step, err)
		}
	}
}

// BeginOptions configures BeginEpisode.
type BeginOptions struct {
	// Type is api.EpisodeTrain (default) or api.EpisodeEval.
	Type string
	// DiscardTimeout is the idle time after which the server reclaims the
	// episode (240 s when zero, AgentJet's default).
	DiscardTimeout time.Duration
	// TaskID is sent as throttle_policy.current_task_id.
	TaskID string
	// TeamID and TeamSize make the episode a member of a team episode
	// (api.ClaimRequest.TeamID); RunTeam sets them.
	TeamID   string
	TeamSize int
}

// Episode is a claimed episode.
type Episode struct {
	ID      string
	BaseURL string
	APIKey  string
	client  *Client
}

// Chat returns an OpenAI-compatible chat client bound to the episode.
func (e *Episode) Chat() *ChatClient {
	return &ChatClient{BaseURL: e.BaseURL, APIKey: e.APIKey, HTTP: e.client.HTTP}
}

// Client returns the swarm client that claimed the episode.
func (e *Episode) Client() *Client { return e.client }

// BeginEpisode claims an episode, retrying with back-off while the engine is
// not rolling, has no free slot or this client is at its open-episode
// quota (429), until ctx ends.
func (c *Client) BeginEpisode(ctx context.Context, o BeginOptions) (*Episode, error) {
	if o.Type == "" {
		o.Type = api.EpisodeTrain
	}
	if o.DiscardTimeout <= 0 {
		o.DiscardTimeout = 240 * time.Second
	}
	req := map[string]any{"client_uuid": c.ClientUUID, "episode_type": o.Type, "discard_episode_timeout": o.DiscardTimeout.Seconds()}
	if o.TaskID != "" {
		req["throttle_policy"] = map[string]any{"current_task_id": o.TaskID}
	}
	if o.TeamID != "" {
		req["team_id"], req["team_size"] = o.TeamID, o.TeamSize
	}
	var last string
	for attempt := 0; ; attempt++ {
		var resp api.ClaimResponse
		err := c.post(ctx, "/claim_episode", req, &resp, false)
		var he *HTTPError
		switch {
		case err == nil && resp.Success:
			return &Episode{ID: resp.EpisodeUUID, BaseURL: resp.OpenAIBaseURL, APIKey: resp.OpenAIAPIKey, client: c}, nil
		case err == nil:
			last = resp.FailCause
		case errors.As(err, &he) && he.Status == http.StatusTooManyRequests:
			last = he.Body // this client's open-episode quota: wait for one of its episodes to end
		case errors.As(err, &he) && he.Status/100 == 4:
			return nil, fmt.Errorf("client: claim_episode refused: %w", err)
		default:
			last = err.Error()
		}
		if err := sleepCtx(ctx, c.Backoff.delay(attempt)); err != nil {
			return nil, fmt.Errorf("client: begin episode (last cause: %s): %w", last, err)
		}
	}
}

// EndEpisode reports the episode's reward. Network errors and 5xx answers
// are retried; a 409 "already ended" after a retry counts as success (the
// first attempt reached the server).
func (c *Client) EndEpisode(ctx context.Context, ep *Episode, taskID string, out WorkflowResult) error {
	if math.IsNaN(out.Reward) || math.IsInf(out.Reward, 0) {
		return fmt.Errorf("client: end episode %s: reward %v is not finite", ep.ID, out.Reward)
	}
	meta := map[string]any{}
	for k, v := range out.Metadata {
		meta[k] = v
	}
	meta["task_id"] = taskID
	wo := map[string]any{"reward": out.Reward, "is_success": out.IsSuccess, "metadata": meta, "log_metrics": map[string]float64{}}
	if len(out.Components) > 0 {
		wo["reward_components"] = out.Components
	}
	req := map[string]any{"client_uuid": c.ClientUUID, "episode_uuid": ep.ID, "task_id": taskID, "workflow_output": wo}
	for attempt := 0; ; attempt++ {
		err := c.post(ctx, "/end_episode", req, nil, false)
		var he *HTTPError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &he) && he.Status == http.StatusConflict && attempt > 0 && strings.Contains(he.Body, "already ended"):
			return nil
		case errors.As(err, &he) && he.Status/100 == 4:
			return fmt.Errorf("client: end episode %s: %w", ep.ID, err)
		}
		if attempt >= 8 {
			return fmt.Errorf("client: end episode %s: %w", ep.ID, err)
		}
		if err := sleepCtx(ctx, c.Backoff.delay(attempt)); err != nil {
			return fmt.Errorf("client: end episode %s: %w", ep.ID, err)
		}
	}
}

// AbortEpisode discards the episode's samples (idempotent).
func (c *Client) AbortEpisode(ctx context.Context, ep *Episode) error {
	req := map[string]any{"client_uuid": c.ClientUUID, "episode_uuid": ep.ID, "task_id": "",
		"workflow_output": map[string]any{"reward": 0.0, "metadata": map[string]any{}}}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = c.post(ctx, "/abort_episode", req, nil, false)
		var he *HTTPError
		if err == nil || (errors.As(err, &he) && he.Status/100 == 4) {
			break
		}
		if sleepCtx(ctx, c.Backoff.delay(attempt)) != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("client: abort episode %s: %w", ep.ID, err)
	}
	return nil
}

// CanContinue asks whether the episode is still open.
func (c *Client) CanContinue(ctx context.Context, ep *Episode) (bool, error) {
	var out struct {
		CanContinue bool `json:"can_continue"`
	}
	err := c.post(ctx, "/can_continue_episode", map[string]string{"client_uuid": c.ClientUUID, "episode_uuid": ep.ID}, &out, false)
	return out.CanContinue, err
}

// WorkflowResult is what a workflow returns for one episode.
type WorkflowResult struct {
	Reward    float64
	IsSuccess bool
	Metadata  map[string]any
	// Components split Reward into named parts (a team's "shared" reward
	// and the agent's "own", say), sent as reward_components: recorded
	// per sample, and normalized one by one by a server that normalizes
	// components.
	Components map[string]float64
}

// ChatClient is a minimal OpenAI chat-completions client.
type ChatClient struct {
	BaseURL string // ends in /v1
	APIKey  string
	HTTP    *http.Client
}

func (cc *ChatClient) newRequest(ctx context.Context, req api.ChatRequest) (*http.Request, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(cc.BaseURL, "/")+"/chat/completions", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+cc.APIKey)
	return hr, nil
}

// Create sends a non-streaming request.
func (cc *ChatClient) Create(ctx context.Context, req api.ChatRequest) (*api.ChatResponse, error) {
	req.Stream, req.StreamOptions = false, nil
	hr, err := cc.newRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	var out api.ChatResponse
	if err := (&Client{HTTP: cc.HTTP}).do(hr, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Stream sends a streaming request and calls f for every chunk as it
// arrives. An error event in the stream (the server could not finish or
// record the completion) is returned as an *HTTPError with status 0 and the
// event as Body.
func (cc *ChatClient) Stream(ctx context.Context, req api.ChatRequest, f func(api.ChatChunk) error) error {
	req.Stream = true
	hr, err := cc.newRequest(ctx, req)
	if err != nil {
		return err
	}
	resp, err := cc.HTTP.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return &HTTPError{Status: resp.StatusCode, Body: string(b)}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return nil
		}
		var ev struct {
			api.ChatChunk
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("client: bad stream chunk: %w", err)
		}
		if len(ev.Error) > 0 && string(ev.Error) != "null" {
			return &HTTPError{Body: data}
		}
		if err := f(ev.ChatChunk); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("client: stream ended without [DONE]")
}

// Workflow runs one logical rollout across several servers: eps[i] is the
// episode on clients[i]. It returns one result per episode, or an error.
type Workflow func(ctx context.Context, eps []*Episode) ([]WorkflowResult, error)

// RunWorkflow begins one episode on every client (with opts[i], or opts[0]
// for all when there is one, or BeginOptions{} when opts is empty), runs
// wf, and then either ends all episodes with their own rewards or, when
// anything fails (a claim, the workflow, a panic, a non-finite reward),
// aborts all of them, so that no model receives
// a partial multi-model rollout. Episodes end under taskID (their GRPO
// group), except that with one option per client an option's own TaskID,
// when set, names that episode's group: so one client may appear twice (two
// agents on one model), each agent with its own group. Results are
// validated before the first end_episode; should an end_episode itself fail
// midway, the remaining episodes are aborted and the error is returned (the
// ones already ended cannot be recalled).
func RunWorkflow(ctx context.Context, clients []*Client, opts []BeginOptions, taskID string, wf Workflow) (results []WorkflowResult, err error) {
	if len(opts) == 0 {
		opts = []BeginOptions{{}}
	}
	if len(opts) != 1 && len(opts) != len(clients) {
		return nil, fmt.Errorf("client: RunWorkflow: %d begin options for %d clients", len(opts), len(clients))
	}
	eps := make([]*Episode, 0, len(clients))
	abortAll := func(from int) {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, ep := range eps[from:] {
			ep.client.AbortEpisode(actx, ep)
		}
	}
	for i, c := range clients {
		o := opts[0]
		if len(opts) > 1 {
			o = opts[i]
		}
		ep, err := c.BeginEpisode(ctx, o)
		if err != nil {
			abortAll(0)
			return nil, err
		}
		eps = append(eps, ep)
	}
	defer func() {
		if v := recover(); v != nil {
			abortAll(0)
			err = fmt.Errorf("client: workflow panicked: %v", v)
		}
	}()
	results, err = wf(ctx, eps)
	if err == nil && len(results) != len(eps) {
		err = fmt.Errorf("client: workflow returned %d results for %d episodes", len(results), len(eps))
	}
	if err == nil {
		for i, r := range results {
			if math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0) {
				err = fmt.Errorf("client: workflow result %d has non-finite reward %v", i, r.Reward)
				break
			}
		}
	}
	if err != nil {
		abortAll(0)
		return nil, err
	}
	for i, ep := range eps {
		id := taskID
		if len(opts) > 1 && opts[i].TaskID != "" {
			id = opts[i].TaskID
		}
		if e := ep.client.EndEpisode(ctx, ep, id, results[i]); e != nil {
			abortAll(i + 1)
			return nil, e
		}
	}
	return results, nil
}

// RunTeam runs wf as RunWorkflow does, its episodes the members of one
// team episode (a fresh random team_id, team_size the number of clients):
// the servers train the members all together or none of them, even when
// this process dies between two end_episode calls. A client may appear
// more than once (two agents on one server).
func RunTeam(ctx context.Context, clients []*Client, opts []BeginOptions, taskID string, wf Workflow) ([]WorkflowResult, error) {
	if len(clients) < 2 {
		return nil, fmt.Errorf("client: RunTeam: a team has at least 2 members, got %d", len(clients))
	}
	if len(opts) == 0 {
		opts = []BeginOptions{{}}
	}
	team := ids.UUID()
	o := make([]BeginOptions, len(opts))
	for i := range opts {
		o[i] = opts[i]
		o[i].TeamID, o[i].TeamSize = team, len(clients)
	}
	return RunWorkflow(ctx, clients, o, taskID, wf)
}
