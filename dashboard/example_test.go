package dashboard_test

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"

	"github.com/troupe-ml/troupe/dashboard"
)

// Serve the dashboard of a two-agent run directory and read its run list.
// `troupe dashboard D` serves the same handler on a loopback address.
func Example() {
	s, err := dashboard.New(dashboard.Config{Dir: "testdata/team-run"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()

	resp, err := srv.Client().Get(srv.URL + "/api/runs")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Runs []dashboard.RunInfo }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		log.Fatal(err)
	}
	for _, r := range list.Runs {
		fmt.Printf("run %s: step %d\n", r.ID, r.Step)
		for _, a := range r.Agents {
			fmt.Printf("  %s (%s): %d steps, %d unreadable lines\n", a.Name, a.Dir, a.Rows, a.BadLines)
		}
	}
	// Output:
	// run _: step 12
	//   planner (planner-8001): 12 steps, 0 unreadable lines
	//   executor (executor-8002): 12 steps, 1 unreadable lines
}

// Draw a chart on its own: the SVG helper the dashboard's panels use.
func ExampleChart() {
	c := &dashboard.Chart{
		Title: "Reward", XLabel: "global step", YLabel: "reward",
		Series: []dashboard.Series{{
			Name: "mean", X: []float64{1, 2, 3}, Y: []float64{0.2, 0.35, 0.5},
			Lo: []float64{0.1, 0.2, 0.4}, Hi: []float64{0.3, 0.5, 0.6},
		}},
		Agent: "planner", Metric: "reward",
	}
	svg := c.String()
	fmt.Println(strings.Count(svg, `<circle class="pt"`), "markers,", strings.Contains(svg, `data-metric="reward"`))
	// Output: 3 markers, true
}
