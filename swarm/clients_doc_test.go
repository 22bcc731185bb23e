package swarm

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// TestClientDocs runs docs/clients' rollouts (curl, Python, JavaScript)
// against two agents' servers: each plays one episode of the planner and
// one team episode of both, and both agents train on them.
func TestClientDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs curl, python3 and node")
	}
	doc, err := os.ReadFile("../docs/clients.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cmd  []string
		need string // a Python module the script imports
	}{
		{"curl", []string{"bash", "../docs/clients/rollout.sh"}, ""},
		{"python", []string{"python3", "../docs/clients/rollout.py"}, "requests"},
		{"javascript", []string{"node", "../docs/clients/rollout.mjs"}, ""},
	} {
		script, err := os.ReadFile(tt.cmd[1])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(doc, script) {
			t.Errorf("docs/clients.md does not show %s as it is", tt.cmd[1])
		}
		t.Run(tt.name, func(t *testing.T) {
			if _, err := exec.LookPath(tt.cmd[0]); err != nil {
				t.Skipf("%s not installed", tt.cmd[0])
			}
			if tt.name == "curl" {
				if _, err := exec.LookPath("jq"); err != nil {
					t.Skip("jq not installed")
				}
			}
			if tt.need != "" && exec.Command("python3", "-c", "import "+tt.need).Run() != nil {
				t.Skipf("python3 has no %s", tt.need)
			}
			p, e := teamPair(t, nil)
			cmd := exec.Command(tt.cmd[0], tt.cmd[1:]...)
			cmd.Env = append(cmd.Environ(), "PLANNER="+p.ts.URL, "EXECUTOR="+e.ts.URL)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", tt.cmd, err, out)
			}
			waitFor(t, "the planner's two steps", func() bool { _, _, s := p.s.Status(); return s == 2 })
			waitFor(t, "the executor's step", func() bool { _, _, s := e.s.Status(); return s == 1 })
			for _, ts := range []*testServer{p, e} {
				if a := ts.s.Accounting(); a.Dropped != 0 {
					t.Errorf("%s dropped %d episodes", ts.s.cfg.JournalName, a.Dropped)
				}
			}
		})
	}
}
