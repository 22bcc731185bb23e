package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/swarm/client"
)

// swarmStatusCmd is `troupe swarm status`: a swarm server's training
// status (GET /get_training_status): its episodes by state, the episodes
// it will never train by reason, and the latest of them by id.
func swarmStatusCmd(fs *flag.FlagSet) func(cmdIO, []string) error {
	url := fs.String("url", "http://127.0.0.1:10086", "the swarm server's base URL")
	tokenFile := fs.String("admin-token-file", "", "file holding the admin token, which shows the dropped episodes' ids (default: the TROUPE_ADMIN_TOKEN environment variable)")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	return func(cio cmdIO, _ []string) error {
		tok, err := adminToken(*tokenFile)
		if err != nil {
			return err
		}
		c := client.New(*url)
		c.AdminToken = tok
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := c.TrainingStatus(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", *url, err)
		}
		if *asJSON {
			enc := json.NewEncoder(cio.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		return printStatus(cio.stdout, st)
	}
}

// printStatus writes st for a person.
func printStatus(w io.Writer, st api.TrainingStatus) error {
	e := st.Episodes
	var dropped []string
	var total int64
	for _, r := range slices.Sorted(maps.Keys(e.Dropped)) {
		dropped = append(dropped, fmt.Sprintf("%s %d", r, e.Dropped[r]))
		total += e.Dropped[r]
	}
	if len(dropped) == 0 {
		dropped = []string{"none"}
	}
	fmt.Fprintf(w, "model %s (role %s): %s, global step %d, %d episodes buffered\n", st.Model, st.Role, st.EngineStatus, st.GlobalStep, st.BufferedEpisodes)
	fmt.Fprintf(w, "staleness policy: trains episodes up to %d versions old; a task short of its group waits %gs\n", st.MaxStaleness, st.GroupTimeoutS)
	fmt.Fprintf(w, "episodes: %d claimed, %d open, %d ended, %d aborted, %d expired\n", e.Claimed, e.Open, e.Ended, e.Aborted, e.Expired)
	fmt.Fprintf(w, "never trained: %d (%s); %d malformed samples dropped\n", total, strings.Join(dropped, ", "), st.DroppedSamples)
	if len(st.RecentDrops) > 0 {
		fmt.Fprintln(w, "latest dropped episodes:")
	}
	for _, d := range st.RecentDrops {
		fmt.Fprintf(w, "  %s  %-36s  task %-20q  %s\n", d.Time.Format(time.RFC3339), d.EpisodeID, d.TaskID, d.Reason)
	}
	return nil
}
