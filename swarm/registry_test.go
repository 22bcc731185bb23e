package swarm

import (
	"context"
	"testing"

	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/swarm/registry"
	"github.com/troupe-ml/troupe/swarm/tabular"
)

// TestRegistry: two models' servers announce themselves in the registry
// and registry.List finds them, all or by model.
func TestRegistry(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, name := range []string{"planner", "executor"} {
		m, _ := tabular.NewPreset("tiny")
		ts := startServer(t, m, testTrainConfig(2, 2), func(c *ServerConfig) {
			c.JetStream, c.JournalName, c.EpisodeKey = b.JetStream(), name, testEpisodeKey
			c.RegistryURL = "http://10.0.0.1:" + string(rune('1'+i)) + "000"
			if name == "executor" {
				c.PublicURL = "https://executor.example.org" // what clients use wins over the listen address
			}
		})
		ts.s.register()
	}
	fs, err := registry.List(ctx, b.JetStream(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Model != "executor" || fs[0].URL != "https://executor.example.org" || fs[1].Model != "planner" || fs[1].URL != "http://10.0.0.1:1000" {
		t.Fatalf("registry: %+v", fs)
	}
	if only, _ := registry.List(ctx, b.JetStream(), "planner"); len(only) != 1 {
		t.Fatalf("registry of planner: %+v", only)
	}

}
