package main

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/swarm"
	"github.com/troupe-ml/troupe/swarm/client"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// TestSwarmStatus: `troupe swarm status` lists a server's episodes by
// state and the episodes it dropped, by reason and by id.
func TestSwarmStatus(t *testing.T) {
	m, _ := tabular.NewPreset("tiny")
	tc := swarm.DefaultTrainConfig()
	tc.BatchSize, tc.NumRepeat, tc.CollectionMethod = 1, 2, swarm.CollectNonDummyTasks
	_, url, stop, err := swarm.Serve("127.0.0.1:0", swarm.ServerConfig{Model: m, Train: tc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := client.New(url)
	finishEpisode(t, c, "same", 1)
	finishEpisode(t, c, "same", 1) // equal rewards: dropped as dummy
	finishEpisode(t, c, "apart", 0)
	finishEpisode(t, c, "apart", 1)
	waitFor(t, 30*time.Second, "a step", func() bool { st, err := c.EngineStatus(t.Context()); return err == nil && st.GlobalStep == 1 })
	for _, asJSON := range []bool{false, true} {
		fs := flag.NewFlagSet("status", flag.ContinueOnError)
		run := swarmStatusCmd(fs)
		args := []string{"--url", url}
		if asJSON {
			args = append(args, "--json")
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := run(cmdIO{nil, &out, io.Discard}, nil); err != nil {
			t.Fatal(err)
		}
		want := []string{"never trained: 2 (dummy 2)", "4 ended", "global step 1", `task "same"`}
		if asJSON {
			want = []string{`"dummy": 2`, `"reason": "dummy"`, `"task_id": "same"`, `"global_step": 1`}
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("json=%v: the status lacks %q:\n%s", asJSON, w, out.String())
			}
		}
	}
}
