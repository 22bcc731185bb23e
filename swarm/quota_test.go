package swarm

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/swarm/tabular"
)

// TestPerAddressQuota: clients at one remote address cannot hold more
// than MaxOpenPerAddress episodes however many client ids they use;
// another address still claims, and loopback is exempt.
func TestPerAddressQuota(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	ts := startServer(t, m, testTrainConfig(4, 2), func(c *ServerConfig) { c.MaxOpenPerAddress, c.MaxOpenPerClient = 3, 2 })
	claim := func(addr, client string) (int, map[string]any) {
		req := httptest.NewRequest(http.MethodPost, "/claim_episode", strings.NewReader(`{"client_uuid":"`+client+`","episode_type":"train","discard_episode_timeout":60}`))
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		ts.s.Handler().ServeHTTP(rec, req)
		var out map[string]any
		json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	for _, c := range []string{"a", "a", "b"} {
		if code, out := claim("198.51.100.7:4000", c); code != 200 || out["success"] != true {
			t.Fatalf("claim %s: %d %v", c, code, out)
		}
	}
	code, out := claim("198.51.100.7:4001", "c")
	if code != http.StatusTooManyRequests {
		t.Fatalf("a fourth episode from one address under a new id: %d %v, want 429", code, out)
	}
	if code, out := claim("198.51.100.8:4000", "d"); code != 200 || out["success"] != true {
		t.Fatalf("another address: %d %v", code, out)
	}
	for i := range 4 {
		if code, out := claim("127.0.0.1:5000", string(rune('e'+i))); code != 200 || out["success"] != true {
			t.Fatalf("loopback claim %d: %d %v", i, code, out)
		}
	}
}
