package team

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/bus"
)

// stores runs f against a memory store and a JetStream one.
func stores(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("memory", func(t *testing.T) { f(t, NewMemory()) })
	t.Run("jetstream", func(t *testing.T) {
		b := openBus(t, "")
		s, err := Open(context.Background(), b.JetStream(), 1)
		if err != nil {
			t.Fatal(err)
		}
		f(t, s)
	})
}

func openBus(t *testing.T, listen string) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{Listen: listen, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func member(model, ep string) Member { return Member{Model: model, Episode: ep, Owner: "o1"} }

// step is one operation of a scenario and what it must give.
type step struct {
	op            string // join, end, discard
	model, ep     string
	size          int
	err           error  // join's error, errors.Is
	want, wantWhy string // the decision (and reason) after the step
}

// TestStateMachine walks the team state machine: claims, ends, aborts and
// expiries in each order, on both stores.
func TestStateMachine(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"both end", []step{
			{op: "join", model: "planner", ep: "a", size: 2},
			{op: "join", model: "executor", ep: "b", size: 2},
			{op: "end", model: "planner", ep: "a", want: Pending},
			{op: "end", model: "executor", ep: "b", want: Complete},
		}},
		{"end before the second claims", []step{
			{op: "join", model: "planner", ep: "a", size: 2},
			{op: "end", model: "planner", ep: "a", want: Pending},
			{op: "join", model: "executor", ep: "b", size: 2},
			{op: "end", model: "executor", ep: "b", want: Complete},
		}},
		{"second aborted after first ended", []step{
			{op: "join", model: "planner", ep: "a", size: 2},
			{op: "join", model: "executor", ep: "b", size: 2},
			{op: "end", model: "planner", ep: "a", want: Pending},
			{op: "discard", model: "executor", ep: "b", wantWhy: ReasonAborted, want: Discarded},
			{op: "join", model: "critic", ep: "c", size: 2, err: ErrDecided},
		}},
		{"first expires, second ends after", []step{
			{op: "join", model: "planner", ep: "a", size: 2},
			{op: "join", model: "executor", ep: "b", size: 2},
			{op: "discard", model: "planner", ep: "a", wantWhy: ReasonExpired, want: Discarded},
			{op: "end", model: "executor", ep: "b", want: Discarded, wantWhy: ReasonExpired},
		}},
		{"abort after complete changes nothing", []step{
			{op: "join", model: "planner", ep: "a", size: 2},
			{op: "join", model: "executor", ep: "b", size: 2},
			{op: "end", model: "planner", ep: "a", want: Pending},
			{op: "end", model: "executor", ep: "b", want: Complete},
			{op: "discard", model: "executor", ep: "b", wantWhy: "", want: Complete},
		}},
		{"full and mismatched", []step{
			{op: "join", model: "planner", ep: "a", size: 2},
			{op: "join", model: "executor", ep: "b", size: 3, err: ErrSizeMismatch},
			{op: "join", model: "executor", ep: "b", size: 2},
			{op: "join", model: "critic", ep: "c", size: 2, err: ErrFull},
			{op: "end", model: "critic", ep: "c", err: ErrNotMember},
		}},
		{"ending twice counts once", []step{
			{op: "join", model: "planner", ep: "a", size: 3},
			{op: "join", model: "executor", ep: "b", size: 3},
			{op: "end", model: "planner", ep: "a", want: Pending},
			{op: "end", model: "planner", ep: "a", want: Pending},
			{op: "join", model: "critic", ep: "c", size: 3},
			{op: "end", model: "executor", ep: "b", want: Pending},
			{op: "end", model: "critic", ep: "c", want: Complete},
		}},
	}
	stores(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for _, tt := range tests {
			id := "team-" + tt.name
			for i, st := range tt.steps {
				var d Doc
				var err error
				switch st.op {
				case "join":
					err = s.Join(ctx, id, st.size, member(st.model, st.ep))
				case "end":
					d, err = s.End(ctx, id, st.model, st.ep, 1)
				case "discard":
					d, err = s.Discard(ctx, id, st.model, st.ep, st.wantWhy)
				}
				if st.err != nil {
					if !errors.Is(err, st.err) {
						t.Errorf("%s: step %d (%s %s): error %v, want %v", tt.name, i, st.op, st.model, err, st.err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: step %d (%s %s): %v", tt.name, i, st.op, st.model, err)
				}
				if st.op == "join" {
					continue
				}
				if d.Decision != st.want || (st.wantWhy != "" && d.Reason != st.wantWhy) {
					t.Errorf("%s: step %d (%s %s): decision %q (%q), want %q (%q)", tt.name, i, st.op, st.model, d.Decision, d.Reason, st.want, st.wantWhy)
				}
				if got, _ := s.Get(ctx, id); got.Decision != d.Decision {
					t.Errorf("%s: step %d: stored decision %q, returned %q", tt.name, i, got.Decision, d.Decision)
				}
			}
		}
		if d, _ := s.Get(ctx, "never-claimed"); d.Decision != Discarded || d.Reason != ReasonMissing {
			t.Errorf("unknown team: %+v", d)
		}
		for _, bad := range []struct {
			id   string
			size int
		}{{"", 2}, {"x", 1}, {"x", MaxSize + 1}, {strings.Repeat("x", MaxIDLen+1), 2}} {
			if err := s.Join(ctx, bad.id, bad.size, member("m", "e")); !errors.Is(err, ErrInvalid) {
				t.Errorf("Join(%q, %d): %v, want ErrInvalid", bad.id[:min(len(bad.id), 8)], bad.size, err)
			}
		}
	})
}

// TestConcurrentMembers: members of a large team claim and end at once,
// from goroutines racing on the document; no update is lost and exactly
// the last end decides the team.
func TestConcurrentMembers(t *testing.T) {
	stores(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		const n = 16
		var wg sync.WaitGroup
		decided := make(chan string, n)
		for i := range n {
			wg.Go(func() {
				ep := fmt.Sprint(i)
				if err := s.Join(ctx, "race", n, member("m", ep)); err != nil {
					t.Error(err)
					return
				}
				d, err := s.End(ctx, "race", "m", ep, float64(i))
				if err != nil {
					t.Error(err)
					return
				}
				decided <- d.Decision
			})
		}
		wg.Wait()
		close(decided)
		completes := 0
		for d := range decided {
			if d == Complete {
				completes++
			}
		}
		d, _ := s.Get(ctx, "race")
		if completes != 1 || d.Decision != Complete || d.Ended() != n {
			t.Errorf("%d ends saw Complete (want 1); stored %q with %d of %d ended", completes, d.Decision, d.Ended(), n)
		}
	})
}

// TestOwnerKilled: a process that holds team members open is killed
// (SIGKILL) at each point of a team's life; a surviving server sweeping
// the team discards it as owner_lost once the dead owner's heartbeat has
// stood still for DeadAfter, and a team that completed before the kill
// stays complete. A live owner's team is never swept away.
func TestOwnerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	b := openBus(t, "127.0.0.1:0")
	ctx := context.Background()
	s, err := Open(ctx, b.JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	s.DeadAfter = time.Second
	for _, tt := range []struct {
		script string // the child's steps, before it is killed
		want   string
	}{
		{"join:planner,join:executor", Discarded},
		{"join:planner,end:planner", Discarded},                           // the first ended, the second never claimed: expired
		{"join:planner,join:executor,end:planner", Discarded},             // the first ended, the second open
		{"join:planner,join:executor,end:planner,end:executor", Complete}, // decided before the kill
	} {
		id := "killed-" + tt.script
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperOwner$")
		cmd.Env = append(os.Environ(), "TEAM_HELPER=1", "TEAM_NATS="+b.ClientURL(), "TEAM_ID="+id, "TEAM_SCRIPT="+tt.script)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%s: child said %q", tt.script, line)
		}
		// Alive for longer than DeadAfter, within the lease: never swept.
		for deadline := time.Now().Add(2 * s.DeadAfter); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if d, err := s.Sweep(ctx, id); err != nil || (d.Decision == Discarded) {
				t.Fatalf("%s: swept while its owner lives: %+v %v", tt.script, d, err)
			}
		}
		cmd.Process.Kill() // SIGKILL
		cmd.Wait()
		var d Doc
		for deadline := time.Now().Add(10 * s.DeadAfter); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if d, err = s.Sweep(ctx, id); err != nil {
				t.Fatal(err)
			}
			if d.Decision != Pending {
				break
			}
		}
		why := ReasonOwnerLost
		if !strings.Contains(tt.script, "join:executor") {
			why = ReasonExpired
		}
		if d.Decision != tt.want || (tt.want == Discarded && d.Reason != why) {
			t.Errorf("%s, then SIGKILL: team %q (%q), want %q", tt.script, d.Decision, d.Reason, tt.want)
		}
	}
}

// TestHelperOwner is the child of TestOwnerKilled: it runs its script as
// owner of the members and then beats until it is killed.
func TestHelperOwner(t *testing.T) {
	if os.Getenv("TEAM_HELPER") != "1" {
		t.Skip("child process of TestOwnerKilled")
	}
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{URL: os.Getenv("TEAM_NATS"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, b.JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	owner := NewOwner()
	if err := s.Beat(ctx, owner); err != nil {
		t.Fatal(err)
	}
	id := os.Getenv("TEAM_ID")
	for _, st := range strings.Split(os.Getenv("TEAM_SCRIPT"), ",") {
		op, model, _ := strings.Cut(st, ":")
		switch op {
		case "join":
			err = s.Join(ctx, id, 2, Member{Model: model, Episode: "ep-" + model, Owner: owner, Lease: 3 * time.Second})
		case "end":
			_, err = s.End(ctx, id, model, "ep-"+model, 1)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("ready")
	for {
		time.Sleep(100 * time.Millisecond)
		if err := s.Beat(ctx, owner); err != nil {
			t.Fatal(err)
		}
	}
}

var quiet = slog.New(slog.DiscardHandler)
