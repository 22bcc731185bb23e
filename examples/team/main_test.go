package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTeam runs the example for two steps: both agents train on team
// episodes, each writes its adapter in PEFT's layout, and every metrics
// row names the teams its episodes belonged to.
func TestTeam(t *testing.T) {
	out := t.TempDir()
	var buf bytes.Buffer
	if err := run(config{Out: out, Steps: 2, Tasks: 2, Repeat: 2, Seed: 1}, &buf); err != nil {
		if strings.Contains(err.Error(), "fetch-hf-refs") {
			t.Skipf("Qwen3's tokenizer unavailable: %v", err)
		}
		t.Fatal(err)
	}
	teams := map[string][]string{}
	for _, name := range []string{"planner", "executor"} {
		dirs, _ := filepath.Glob(filepath.Join(out, name+"-*"))
		if len(dirs) != 1 {
			t.Fatalf("%s: run directories %q, want one <name>-<port>", name, dirs)
		}
		for _, f := range []string{"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} {
			if _, err := os.Stat(filepath.Join(dirs[0], f)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		raw, err := os.ReadFile(filepath.Join(dirs[0], "train_metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != 2 {
			t.Fatalf("%s: %d rows, want 2", name, len(lines))
		}
		for _, l := range lines {
			var row struct {
				TeamIDs    []string           `json:"team_ids"`
				Components map[string]float64 `json:"reward_components"`
			}
			json.Unmarshal([]byte(l), &row)
			if len(row.TeamIDs) != 4 || row.TeamIDs[0] == "" || len(row.Components) != 2 {
				t.Errorf("%s: row %s", name, l)
			}
			ids := slices.Clone(row.TeamIDs)
			slices.Sort(ids)
			teams[name] = append(teams[name], ids...)
		}
	}
	if !slices.Equal(teams["planner"], teams["executor"]) {
		t.Errorf("the agents trained on different teams: %q and %q", teams["planner"], teams["executor"])
	}
	if !strings.Contains(buf.String(), "adapter (PEFT)") {
		t.Errorf("output:\n%s", buf.String())
	}
}
