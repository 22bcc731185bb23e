package httpx

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serveGuarded serves a handler that answers 200 "ok" behind Guard and
// the smuggling check, as NewServer and WrapListener put them together,
// on a loopback port, with RequireJSON on every path but /upload; it
// returns the address.
func serveGuarded(t *testing.T, cfg GuardConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	mux := http.NewServeMux()
	mux.Handle("/", RequireJSON(ok))
	mux.Handle("/upload", ok)
	hs := NewServer(Guard(mux, cfg), Timeouts{}, nil)
	go hs.Serve(WrapListener(ln))
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// TestGuard: on a loopback address, the Host, Origin and Content-Type
// rules refuse what another web page could send and pass what clients
// send.
func TestGuard(t *testing.T) {
	addr := serveGuarded(t, GuardConfig{Hosts: URLHosts("http://swarm.example.org:9000", "::bad")})
	_, port, _ := net.SplitHostPort(addr)
	for _, c := range []struct {
		name, method, path, host, origin, ctype string
		want                                    int
	}{
		{"client JSON post", "POST", "/stop_engine", addr, "", "application/json", 200},
		{"JSON with charset", "POST", "/stop_engine", addr, "", "application/json; charset=utf-8", 200},
		{"get without type", "GET", "/status", addr, "", "", 200},
		{"localhost, other port", "POST", "/x", "localhost:8080", "", "application/json", 200},
		{"IPv6 literal", "GET", "/x", "[::1]:" + port, "", "", 200},
		{"public URL name", "POST", "/x", "swarm.example.org:9000", "", "application/json", 200},
		{"public URL name, upper case", "GET", "/x", "SWARM.example.org", "", "", 200},
		{"same-origin page", "POST", "/x", addr, "http://" + addr, "application/json", 200},
		{"public URL origin", "POST", "/x", addr, "https://swarm.example.org", "application/json", 200},
		{"upload of any type", "POST", "/upload", addr, "", "application/zip", 200},
		{"text/plain form post", "POST", "/stop_engine", addr, "", "text/plain", 415},
		{"urlencoded form post", "POST", "/stop_engine", addr, "", "application/x-www-form-urlencoded", 415},
		{"post without type", "POST", "/stop_engine", addr, "", "", 415},
		{"delete without type", "DELETE", "/x", addr, "", "", 415},
		{"json-ish type", "POST", "/x", addr, "", "application/jsonx", 415},
		{"cross-site origin", "POST", "/stop_engine", addr, "http://evil.example", "text/plain", 403},
		{"cross-site origin, JSON", "POST", "/stop_engine", addr, "http://evil.example", "application/json", 403},
		{"other local page", "POST", "/x", addr, "http://localhost:3000", "application/json", 403},
		{"null origin", "POST", "/x", addr, "null", "application/json", 403},
		{"cross-site origin on a get", "GET", "/x", addr, "http://evil.example", "", 403},
		{"rebound name", "POST", "/stop_engine", "rebind.evil.example:" + port, "", "application/json", 421},
		{"rebound name on a get", "GET", "/get_current_batch_rollout_pool_information", "rebind.evil.example", "", "", 421},
		{"rebound name, own origin", "POST", "/x", "rebind.evil.example:" + port, "http://rebind.evil.example:" + port, "application/json", 421},
		{"localhost suffix", "GET", "/x", "localhost.evil.example", "", "", 421},
	} {
		req, _ := http.NewRequest(c.method, "http://"+addr+c.path, strings.NewReader("{}"))
		req.Host = c.host
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode, b, c.want)
		}
	}
}

// TestGuardBeyondLoopback: a request that arrived on a non-loopback
// address may name the server however its clients do; Origin and
// Content-Type still apply.
func TestGuardBeyondLoopback(t *testing.T) {
	h := Guard(RequireJSON(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})), GuardConfig{})
	for _, c := range []struct {
		origin, ctype string
		want          int
	}{{"", "application/json", 200}, {"http://evil.example", "application/json", 403}, {"", "text/plain", 415}} {
		req, _ := http.NewRequest("POST", "http://gpu-node-3:10086/x", nil)
		req.Header.Set("Content-Type", c.ctype)
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		local := &net.TCPAddr{IP: net.ParseIP("10.0.0.7"), Port: 10086}
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, local))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("origin %q type %q: %d, want %d", c.origin, c.ctype, rec.Code, c.want)
		}
	}
}

// TestSmuggledRequestClosed: a request with both Content-Length and
// Transfer-Encoding gets 400 and its connection is closed, whatever it
// carries; requests before it on the same connection, with bodies of
// either framing, are answered normally.
func TestSmuggledRequestClosed(t *testing.T) {
	addr := serveGuarded(t, GuardConfig{})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	send := func(req string) (int, string) {
		t.Helper()
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer to %q: %v", req, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Connection") + " " + string(b)
	}
	hdr := "Host: " + addr + "\r\nContent-Type: application/json\r\n"
	// A body that looks like headers must not confuse the framing.
	body := "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	if code, b := send(fmt.Sprintf("POST /a HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s", hdr, len(body), body)); code != 200 {
		t.Fatalf("a Content-Length request: %d %s", code, b)
	}
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\nX-Trailer: 1\r\n\r\n", len(body), body)
	if code, b := send("POST /b HTTP/1.1\r\n" + hdr + "Transfer-Encoding: chunked\r\n\r\n" + chunk); code != 200 {
		t.Fatalf("a chunked request: %d %s", code, b)
	}
	if code, b := send("GET /c HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"); code != 200 {
		t.Fatalf("a request without a body: %d %s", code, b)
	}
	code, b := send("POST /stop_engine HTTP/1.1\r\n" + hdr + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
	if code != http.StatusBadRequest || !strings.Contains(b, "close") || !strings.Contains(b, "ambiguous_length") {
		t.Fatalf("a request with both lengths: %d %s, want 400 with Connection: close", code, b)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the connection stayed open (%d bytes, %v)", n, err)
	}
}

// TestFramerFollowsPipelines feeds the framer byte by byte and in one
// piece: it must find the smuggling request after pipelined requests of
// every framing, and never in a body.
func TestFramerFollowsPipelines(t *testing.T) {
	ok := "POST /a HTTP/1.1\r\ncontent-length: 10\r\n\r\nTransfer-E" +
		"\r\nPOST /b HTTP/1.1\r\nTRANSFER-ENCODING: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\n\r\n" +
		"GET /c HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
	bad := "POST /d HTTP/1.1\r\nContent-Length : 3\r\nTransfer-Encoding:  chunked\r\n\r\n"
	for _, whole := range []bool{true, false} {
		var f framer
		feed := func(s string) bool {
			if whole {
				return f.feed([]byte(s))
			}
			hit := false
			for i := range len(s) {
				hit = f.feed([]byte{s[i]}) || hit
			}
			return hit
		}
		if feed(ok) {
			t.Fatalf("whole=%v: a smuggling attempt found in well-framed requests", whole)
		}
		if !feed(bad) {
			t.Fatalf("whole=%v: the request with both lengths was not found (state %d)", whole, f.state)
		}
	}
}
