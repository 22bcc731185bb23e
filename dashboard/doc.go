// Package dashboard serves a live dashboard of a troupe run directory: the
// per-step training metrics of each agent of a team, side by side, drawn as
// SVG on the server, with a drill-down from any step to the groups it
// trained on and each completion's messages, reward components and adapter
// version.
//
// It reads what `troupe swarm serve --checkpoint-dir D` writes, and nothing
// else: D/train_metrics.jsonl (one Step per line) or, with several agents in
// one process, D/<agent>-<port>/train_metrics.jsonl; beside each, an
// optional dropped.jsonl (Dropped) and samples/step-<%08d>.jsonl (Sample).
// docs/design/dashboard.md is the format's contract. Every field but "step"
// is optional: a panel without data says so in one line. Unreadable lines
// are skipped and counted, and after a crash the last row of a step holds.
//
// The files are tailed, not locked: each poll reopens a file read-only,
// reads what was appended since the last offset (starting over when the
// file shrank or was replaced), and leaves an unfinished last line for the
// next poll. New rows reach the browser as server-sent events; the page then
// fetches its redrawn charts. A finished or crashed run shows what its files
// hold.
//
// The page loads nothing from elsewhere: its script, stylesheet and icon are
// embedded, and a Content-Security-Policy admits only them. The server
// answers GET and HEAD only, and URL parameters only select among the runs,
// agents and steps found: no path is built from a URL.
package dashboard
