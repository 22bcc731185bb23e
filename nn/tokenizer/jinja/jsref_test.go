package jinja

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"
)

// The reference is Hugging Face's own JavaScript engine, fetched (pinned,
// sha256-verified) by scripts/fetch-hf-refs.sh and driven by
// testdata/render.mjs.

var refs struct {
	once  sync.Once
	root  string // data/hf
	skip  string // why the reference is unavailable
	fatal string // a checksum mismatch or a broken script
}

func hfRefs(t *testing.T) string {
	t.Helper()
	refs.once.Do(func() {
		repo, err := filepath.Abs("../../..")
		if err != nil {
			refs.fatal = err.Error()
			return
		}
		script := filepath.Join(repo, "scripts", "fetch-hf-refs.sh")
		if _, err := os.Stat(script); err != nil {
			refs.skip = "scripts/fetch-hf-refs.sh not found: " + err.Error()
			return
		}
		if _, err := exec.LookPath("node"); err != nil {
			refs.skip = "node is not installed (the reference engine is JavaScript)"
			return
		}
		if _, err := exec.LookPath("bash"); err != nil {
			refs.skip = "bash is not installed"
			return
		}
		var stderr bytes.Buffer
		cmd := exec.Command("bash", script)
		cmd.Stderr = &stderr
		err = cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			refs.root = filepath.Join(repo, "data", "hf")
			if d := os.Getenv("TROUPE_HF_DATA"); d != "" {
				refs.root = d
			}
		case errors.As(err, &ee) && ee.ExitCode() == 2:
			refs.skip = "fetch-hf-refs.sh: a required tool is missing: " + stderr.String()
		case errors.As(err, &ee) && ee.ExitCode() == 3:
			refs.skip = "fetch-hf-refs.sh: download failed (no network?): " + stderr.String()
		default:
			refs.fatal = fmt.Sprintf("fetch-hf-refs.sh: %v: %s", err, stderr.String())
		}
	})
	if refs.fatal != "" {
		t.Fatal(refs.fatal)
	}
	if refs.skip != "" {
		t.Skip(refs.skip)
	}
	return refs.root
}

type jsCase struct {
	template string
	ctx      map[string]any
	order    map[string][][]string
}

type jsResult struct {
	Output *string `json:"output"`
	Error  *string `json:"error"`
}

// contextJSON converts a context exactly as Render does and writes it as
// JSON with every mapping's keys in the order the Go engine sees them.
func contextJSON(ctx map[string]any, order map[string][][]string) (*Map, error) {
	m := &Map{}
	keys := make([]string, 0, len(ctx))
	for k := range ctx {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := convert(ctx[k], k, order[k])
		if err != nil {
			return nil, err
		}
		m.Set(k, v)
	}
	return m, nil
}

// jsRenderAll renders every case with @huggingface/jinja in one node
// process, its clock pinned to now (UTC).
func jsRenderAll(t *testing.T, now time.Time, cases []jsCase) []jsResult {
	t.Helper()
	root := hfRefs(t)
	var list []any
	for i, c := range cases {
		ctx, err := contextJSON(c.ctx, c.order)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		list = append(list, NewMap("template", c.template, "context", ctx))
	}
	in, err := NewMap("now", now.UnixMilli(), "cases", list).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join("testdata", "render.mjs"), filepath.Join(root, "hf-jinja", "dist", "index.js"))
	cmd.Env = append(os.Environ(), "TZ=UTC", "LANG=en_US.UTF-8", "LC_ALL=en_US.UTF-8")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node testdata/render.mjs: %v: %s", err, stderr.String())
	}
	var res []jsResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("node testdata/render.mjs output: %v", err)
	}
	if len(res) != len(cases) {
		t.Fatalf("node testdata/render.mjs answered %d cases, want %d", len(res), len(cases))
	}
	return res
}

// pinClock makes strftime_now read tm for the rest of the test.
func pinClock(t *testing.T, tm time.Time) {
	saved := timeNow
	timeNow = func() time.Time { return tm }
	t.Cleanup(func() { timeNow = saved })
}

var testNow = time.Date(2025, time.September, 7, 14, 5, 0, 0, time.UTC)

func TestRenderScriptSingleCase(t *testing.T) {
	root := hfRefs(t)
	cmd := exec.Command("node", filepath.Join("testdata", "render.mjs"), filepath.Join(root, "hf-jinja", "dist", "index.js"))
	cmd.Stdin = bytes.NewReader([]byte(`{"template": "{% for m in messages %}{{ m.role }};{% endfor %}", "context": {"messages": [{"role": "user"}, {"role": "assistant"}]}}`))
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "user;assistant;"; got != want {
		t.Errorf("render.mjs printed %q, want %q", got, want)
	}
}
