package dashboard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/troupe-ml/troupe/swarm/rundir"
)

// Environment of the browser test.
const (
	// envBrowser set to 1 makes a missing Chromium a failure, not a skip
	// (make test-browser sets it).
	envBrowser = "TROUPE_BROWSER"
	// envChromium names the browser binary (default: chromium on PATH).
	envChromium = "TROUPE_CHROMIUM"
	// envScreenshots names the directory for the screenshots (default: a
	// temporary directory).
	envScreenshots = "TROUPE_SCREENSHOT_DIR"
	// envWriteScreenshot set to 1 also writes them to docs/.
	envWriteScreenshot = "TROUPE_WRITE_SCREENSHOT"
)

// chromium is the browser binary, or "" when there is none.
func chromium() string {
	if p := os.Getenv(envChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserContext starts headless Chromium for t and returns a tab's
// context, and a function that returns the console errors and uncaught
// exceptions the tab has reported so far.
func browserContext(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	bin := chromium()
	if bin == "" {
		if os.Getenv(envBrowser) == "1" {
			t.Fatalf("%s=1 but no Chromium found (chromium not on PATH, %s unset): run bash scripts/install-browser-deps.sh", envBrowser, envChromium)
		}
		t.Skipf("skipped: no Chromium (chromium not on PATH, %s unset); `make test-browser` installs it and runs this test", envChromium)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox, // the test may run as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(ctx)
	t.Cleanup(cancelTab)

	var mu sync.Mutex
	var errs []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				mu.Unlock()
			}
		}
	}()
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// TestBrowser drives headless Chromium against the dashboard of the
// two-agent fixture: the page loads without console errors, each agent's
// reward chart has one point per step, the agents' names and the step count
// are visible, a click on a point shows that step's groups and completions,
// and a row appended to a metrics file appears as a new point.
func TestBrowser(t *testing.T) {
	ctx, consoleErrors := browserContext(t)

	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(fixtureDir)); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Dir: dir, Title: "team-run", PollInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { s.Close() })

	run := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	count := func(selector string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, selector)))
		if err != nil {
			t.Fatalf("counting %s: %v", selector, err)
		}
		return n
	}
	text := func(selector string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(selector)))
		if err != nil {
			t.Fatalf("reading %s: %v", selector, err)
		}
		return s
	}

	run("load the page", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#charts`)),
		chromedp.WaitReady(chromedp.CSS(`#live[data-state="live"]`)))

	for _, agent := range []string{"planner", "executor"} {
		run("see "+agent, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`section.agent[data-agent=%q] h2`, agent))))
		if got := text(fmt.Sprintf(`section.agent[data-agent=%q] h2`, agent)); got != agent {
			t.Errorf("agent header = %q, want %q", got, agent)
		}
		sel := fmt.Sprintf(`svg[data-agent=%q][data-metric="reward"] circle[data-step]`, agent)
		if n := count(sel); n != fixtureSteps {
			t.Errorf("%s's reward chart has %d points, want one per step: %d", agent, n, fixtureSteps)
		}
		distinct, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(
			`new Set(Array.from(document.querySelectorAll(%q), c => c.dataset.step)).size`, sel)))
		if err != nil || distinct != fixtureSteps {
			t.Errorf("%s's reward chart has %d distinct steps (%v), want %d", agent, distinct, err, fixtureSteps)
		}
	}
	if got, want := text(`#stepcount`), fmt.Sprintf("step %d", fixtureSteps); got != want {
		t.Errorf("step count reads %q, want %q", got, want)
	}
	shoot(t, ctx, "dashboard.png", false)
	shoot(t, ctx, "dashboard-full.png", true)

	// Drill down: a click on the executor's step-5 point.
	run("click a point",
		chromedp.Click(chromedp.CSS(`svg[data-agent="executor"][data-metric="reward"] circle[data-step="5"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#drill .step[data-step="5"] .group details[open] .completion`)))
	if n := count(`#drill .group`); n != 2 {
		t.Errorf("step 5 shows %d groups, want 2", n)
	}
	body := text(`#drill`)
	for _, want := range []string{"executor · step 5", "task-005-0", "adapter version 4", "Answer: ", "correct", "completion"} {
		if !strings.Contains(strings.ToLower(body), strings.ToLower(want)) {
			t.Errorf("the drill-down lacks %q:\n%s", want, body)
		}
	}
	shoot(t, ctx, "dashboard-step.png", false)
	run("close the drill-down", chromedp.Click(chromedp.CSS(`#drill-close`)),
		chromedp.WaitNotVisible(chromedp.CSS(`#drill`)))

	// Live: the planner's server writes step 13.
	rng := rand.New(rand.NewPCG(13, 13))
	row := fixtureRow(rng, fixtureAgents[0], fixtureSteps+1, fixtureSamples(rng, fixtureAgents[0], fixtureSteps+1))
	appendFile(t, filepath.Join(dir, "planner-8001", rundir.MetricsFile), jsonLine(t, row))
	want := fixtureSteps + 1
	run("see the new step", chromedp.Poll[chromedp.Void](fmt.Sprintf(
		`document.querySelectorAll('svg[data-agent="planner"][data-metric="reward"] circle[data-step]').length === %d && `+
			`document.getElementById('stepcount').textContent === 'step %d'`, want, want),
		chromedp.WithPollingTimeout(15*time.Second)))
	if n := count(`svg[data-agent="executor"][data-metric="reward"] circle[data-step]`); n != fixtureSteps {
		t.Errorf("after the planner's new step the executor's reward chart has %d points, want %d", n, fixtureSteps)
	}

	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// shoot writes a screenshot of the viewport (1280 × 800), or with full of
// the whole page, to the screenshot directory; a viewport's also to docs/
// when TROUPE_WRITE_SCREENSHOT=1.
func shoot(t *testing.T, ctx context.Context, name string, full bool) {
	t.Helper()
	capture := chromedp.CaptureScreenshot()
	if full {
		capture = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(ctx, capture)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv(envScreenshots)
	if dir == "" {
		dir = t.TempDir()
	}
	paths := []string{filepath.Join(dir, name)}
	if os.Getenv(envWriteScreenshot) == "1" && !full {
		paths = append(paths, filepath.Join("..", "docs", name))
	}
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}
}
