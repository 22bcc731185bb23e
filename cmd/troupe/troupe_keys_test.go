package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/swarm/trainconfig"
)

// TestTroupeKeysDocumented: every troupe.* key of a training config is a
// flag of `troupe swarm serve -h` (the key's name with dashes) and is
// named in docs/design/swarm.md.
func TestTroupeKeysDocumented(t *testing.T) {
	var out bytes.Buffer
	if code := runCLI([]string{"swarm", "serve", "-h"}, cmdIO{nil, &out, &out}); code != 0 {
		t.Fatalf("swarm serve -h: exit %d", code)
	}
	doc, err := os.ReadFile("../../docs/design/swarm.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range trainconfig.Keys() {
		name, ok := strings.CutPrefix(k, "troupe.")
		if !ok {
			continue
		}
		if flag := "-" + strings.ReplaceAll(name, "_", "-"); !strings.Contains(out.String(), flag+" ") && !strings.Contains(out.String(), flag+"\n") {
			t.Errorf("%s: no flag %s in swarm serve -h", k, flag)
		}
		if !strings.Contains(string(doc), k) {
			t.Errorf("%s: not in docs/design/swarm.md", k)
		}
	}
}
