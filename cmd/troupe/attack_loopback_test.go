package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/record"
)

// TestAttackProbesLoopback attacks a token-less `troupe swarm serve` on
// loopback whose journal is on an external NATS that anyone may publish
// on: (8) engine control from another web page (a text/plain form post,
// a cross-site Origin, a DNS-rebound Host, a body-less post) is refused
// and changes nothing; (9) a request with both Content-Length and
// Transfer-Encoding gets 400 and its connection is closed; (10) episodes
// published straight to NATS without the episode key (unsigned, or
// signed with another key) are refused, counted by reason and never
// trained; (11) the server is healthy afterwards.
func TestAttackProbesLoopback(t *testing.T) {
	natsURL, _ := startNATS(t)
	port := freePort(t)
	srv := startProc(t, "swarm", "serve", "--port", fmt.Sprint(port), "--autostart", "--nats", natsURL,
		"--checkpoint-dir", t.TempDir(), "--batch-size", "1", "--num-repeat", "1")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	base := "http://" + addr
	c := client.New(base)
	waitRolling(t, c)
	a := &attacker{t: t, base: base, hc: &http.Client{Timeout: 20 * time.Second}}

	// 8. Engine control from another web page.
	for _, p := range []struct {
		name                string
		hdr                 map[string]string
		host, ctype         string
		want                int
		withoutBody, rawReq bool
	}{
		{name: "text/plain form post", ctype: "text/plain", want: http.StatusUnsupportedMediaType},
		{name: "urlencoded form post", ctype: "application/x-www-form-urlencoded", want: http.StatusUnsupportedMediaType},
		{name: "cross-site Origin", ctype: "text/plain", hdr: map[string]string{"Origin": "http://evil.example"}, want: http.StatusForbidden},
		{name: "cross-site Origin with JSON", ctype: "application/json", hdr: map[string]string{"Origin": "http://evil.example"}, want: http.StatusForbidden},
		{name: "DNS-rebound Host", ctype: "application/json", host: fmt.Sprintf("rebind.evil.example:%d", port), want: http.StatusMisdirectedRequest},
		{name: "body-less post", want: http.StatusUnsupportedMediaType, withoutBody: true},
	} {
		for _, path := range []string{"/stop_engine", "/sync_train_config", "/claim_episode", "/end_episode"} {
			var body io.Reader = strings.NewReader(`{"yaml_as_string": "ajet:\n  data:\n    train_batch_size: 3\n"}`)
			if p.withoutBody {
				body = nil
			}
			req, _ := http.NewRequest("POST", base+path, body)
			if p.ctype != "" {
				req.Header.Set("Content-Type", p.ctype)
			}
			if p.host != "" {
				req.Host = p.host
			}
			for k, v := range p.hdr {
				req.Header.Set(k, v)
			}
			resp, err := a.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != p.want {
				t.Errorf("probe 8: %s to %s: %d, want %d", p.name, path, resp.StatusCode, p.want)
			}
		}
	}
	if st := engineStatus(t, a); st != swarm.StatusRolling {
		t.Errorf("probe 8: engine %s after the cross-site requests, want %s", st, swarm.StatusRolling)
	}

	// 9. Both lengths: 400, and the connection closed.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /stop_engine HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", addr)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("probe 9: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); resp.StatusCode != http.StatusBadRequest || err != io.EOF {
		t.Errorf("probe 9: a request with both lengths got %d and the connection stayed open (%v)", resp.StatusCode, err)
	}
	conn.Close()
	if st := engineStatus(t, a); st != swarm.StatusRolling {
		t.Errorf("probe 9: engine %s after the ambiguous request, want %s", st, swarm.StatusRolling)
	}

	// 10. Episodes published straight to NATS, without the key.
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subject := swarm.EpisodeSubject("small")
	forged := `{"id": "forged-1", "task_id": "t", "reward": 1000, "samples": [{"Prompt": [104], "Actions": [105], "LogProbs": [-1]}]}`
	for _, m := range []*nats.Msg{
		{Subject: subject, Data: []byte(forged)},
		{Subject: subject, Data: []byte(strings.Replace(forged, "forged-1", "forged-2", 1)), Header: nats.Header{record.Header: []string{
			record.Sign([]byte("a leaked NATS password is not the key"), subject, []byte(strings.Replace(forged, "forged-1", "forged-2", 1)))}}},
	} {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	var st api.TrainingStatus
	waitFor(t, 30*time.Second, "the forged episodes refused", func() bool {
		st, err = c.TrainingStatus(ctx)
		return err == nil && st.Episodes.Dropped[record.Unsigned] == 1 && st.Episodes.Dropped[record.Forged] == 1
	})
	if st.GlobalStep != 0 {
		t.Errorf("probe 10: the forged episodes trained the model to step %d", st.GlobalStep)
	}

	// 11. Healthy afterwards: a real episode trains.
	finishEpisode(t, c, "t", 1)
	waitFor(t, 30*time.Second, "a real episode trained", func() bool {
		st, err := c.EngineStatus(ctx)
		return err == nil && st.GlobalStep == 1
	})
	if srv.cmd.ProcessState != nil {
		t.Errorf("probe 11: the server exited: %v", srv.cmd.ProcessState)
	}
}
