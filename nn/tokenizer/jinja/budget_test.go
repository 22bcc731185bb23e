package jinja

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

// budgetVars are the variables of the budget tests: strings of 1 MiB
// (words, lines, non-ASCII text; an equal copy; white space; digits), a
// list of 1,000 strings of 1 KiB that differ in their last bytes, one more
// such string and a mapping.
func budgetVars() map[string]any {
	s := strings.Repeat("Ab c\nd é ", 1<<20/10)
	l := make([]any, 1000)
	for i := range l {
		l[i] = strings.Repeat("w", 1<<10-4) + strconv.Itoa(1000+i)
	}
	return map[string]any{
		"s":      s,
		"t":      strings.Clone(s),
		"sp":     strings.Repeat(" ", 1<<20),
		"digits": strings.Repeat("7", 1<<20),
		"l":      l,
		"q":      strings.Repeat("w", 1<<10-4) + "9999",
		"d":      map[string]any{"k": 1},
	}
}

// loop repeats a statement a million times: with s of 1 MiB, a terabyte of
// string work unless the budget stops it.
func loop(body string) string {
	return "{% for i in range(1000000) %}" + body + "{% endfor %}"
}

// TestBudgetPerOperation checks that every string operation counts its
// work: a thousand of them on 1 MiB strings (a gigabyte of string work or
// of new strings; a hostile template does a million) fail with a
// *BudgetError within a budget of 64 MiB, while one of them renders
// within it. The loop alone costs a few hundred KiB, so without the
// operation's count the thousand would render.
func TestBudgetPerOperation(t *testing.T) {
	vars := budgetVars()
	lim := Limits{MaxWorkBytes: 64 << 20, MaxAllocBytes: 64 << 20}
	thousand := func(body string) string { return "{% for i in range(1000) %}" + body + "{% endfor %}" }
	control, err := Parse(thousand("{% if 'zz' in 'abc' ~ i %}{% endif %}"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := control.RenderContext(context.Background(), vars, Limits{MaxWorkBytes: 1 << 20}); err != nil {
		t.Fatalf("a thousand operations on short strings do not fit in 1 MiB: %v", err)
	}
	cases := []struct {
		name, expr string
		stmt       bool // expr is a statement, not an expression
	}{
		{name: "in", expr: "'zz' in s"},
		{name: "not in", expr: "'zz' not in s"},
		{name: "in list", expr: "q in l"},
		{name: "startswith", expr: "s.startswith(t)"},
		{name: "startswith tuple", expr: "s.startswith(('x', t))"},
		{name: "endswith", expr: "s.endswith(t)"},
		{name: "==", expr: "s == t"},
		{name: "!=", expr: "s != t"},
		{name: "== number", expr: "sp == 1"},
		{name: "is lower", expr: "s is lower"},
		{name: "is upper", expr: "s is upper"},
		{name: "~", expr: "s ~ 'x'"},
		{name: "+", expr: "s + 'x'"},
		{name: "list ~", expr: "l ~ ''"},
		{name: "upper", expr: "s | upper"},
		{name: "lower", expr: "s | lower"},
		{name: "title", expr: "s | title"},
		{name: "capitalize", expr: "s | capitalize"},
		{name: "upper method", expr: "s.upper()"},
		{name: "lower method", expr: "s.lower()"},
		{name: "title method", expr: "s.title()"},
		{name: "capitalize method", expr: "s.capitalize()"},
		{name: "indent", expr: "s | indent"},
		{name: "indent args", expr: "s | indent('> ', true, true)"},
		{name: "replace", expr: "s | replace('b', 'BB')"},
		{name: "replace method", expr: "s.replace('é', 'e')"},
		{name: "replace empty", expr: "s.replace('', '-', 100)"},
		{name: "trim", expr: "sp | trim"},
		{name: "strip", expr: "sp.strip()"},
		{name: "lstrip", expr: "sp.lstrip()"},
		{name: "rstrip", expr: "sp.rstrip()"},
		{name: "split", expr: "s.split('\n')"},
		{name: "split whitespace", expr: "s.split()"},
		{name: "split maxsplit", expr: "s.split(' ', 2)"},
		{name: "join list", expr: "l | join(',')"},
		{name: "join plain", expr: "l | join"},
		{name: "join string", expr: "s | join('')"},
		{name: "length", expr: "s | length"},
		{name: "length property", expr: "s.length"},
		{name: "tojson", expr: "s | tojson"},
		{name: "tojson options", expr: "l | tojson(indent=2, ensure_ascii=true, sort_keys=true)"},
		{name: "string of list", expr: "l | string"},
		{name: "print list", stmt: true, expr: "{% set x %}{{ l }}{% endset %}"},
		{name: "slice", expr: "s[1:]"},
		{name: "slice step", expr: "s[::-3]"},
		{name: "index", expr: "s[100000]"},
		{name: "negative index", expr: "s[-1]"},
		{name: "int", expr: "digits | int"},
		{name: "float", expr: "digits | float"},
		{name: "sort", expr: "[s, t] | sort"},
		{name: "sort case-insensitive", expr: "[s, t] | sort(case_sensitive=false)"},
		{name: "unique", expr: "[s, t] | unique"},
		{name: "mapping key", expr: "d[s]"},
		{name: "get", expr: "d.get(s)"},
		{name: "in mapping", expr: "s in d"},
		{name: "map attribute", expr: "[d] | map(attribute=s)"},
		{name: "strftime_now", expr: "strftime_now(s)"},
		{name: "macro output", stmt: true, expr: "{% macro m() %}{{ s }}{% endmacro %}{% set x = m() %}"},
		{name: "set block", stmt: true, expr: "{% set x %}{{ s }}{% endset %}"},
		{name: "filter block", stmt: true, expr: "{% filter upper %}{% endfilter %}{% set x %}{% filter upper %}{{ s }}{% endfilter %}{% endset %}"},
		{name: "loop over strings", stmt: true, expr: "{% for w in l %}{% endfor %}"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := c.expr
			if !c.stmt {
				body = "{% if " + c.expr + " %}{% endif %}"
			}
			once, err := Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := once.RenderContext(context.Background(), vars, lim); err != nil {
				t.Fatalf("one operation: %v", err)
			}
			many, err := Parse(thousand(body))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = many.RenderContext(context.Background(), vars, lim)
			var be *BudgetError
			if !errors.As(err, &be) || !errors.Is(err, ErrBudget) {
				t.Fatalf("a thousand operations: got %v, want a *BudgetError", err)
			}
			if be.Limit != "MaxWorkBytes" && be.Limit != "MaxAllocBytes" {
				t.Errorf("limit %q, want MaxWorkBytes or MaxAllocBytes", be.Limit)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("took %v to fail", d)
			}
		})
	}
}

// TestUnsupportedStringOperations: the operations chat templates might
// try that the package (as the JS port) does not have are errors, not
// unbounded work.
func TestUnsupportedStringOperations(t *testing.T) {
	vars := budgetVars()
	for _, expr := range []string{"s < t", "s * 1000000", "s | center(80)", "s | wordcount", "s | list"} {
		tpl, err := Parse("{{ " + expr + " }}")
		if err != nil {
			t.Fatal(err)
		}
		_, err = tpl.Render(vars)
		var re *RenderError
		if !errors.As(err, &re) {
			t.Errorf("%s: got %v, want a *RenderError", expr, err)
		}
	}
	tpl, err := Parse("{% for c in s %}{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tpl.Render(vars); err == nil {
		t.Error("a loop over a string rendered, want an error")
	}
}

// TestBudgetBoundsMemory renders, with the default limits, templates that
// would allocate gigabytes (and, for most, kill the process): each fails
// with a *BudgetError, and the render allocates less than 256 MiB in all.
func TestBudgetBoundsMemory(t *testing.T) {
	vars := map[string]any{
		"s":     strings.Repeat("x", 4<<20),
		"lines": strings.Repeat("a\n", 1<<19),
		"xs":    strings.Repeat("x", 16<<20),
	}
	for _, src := range []string{
		// 400 GB of upper-case copies, kept.
		"{% set ns = namespace(l=[]) %}" + loop("{% set ns.l = ns.l + [s | upper] %}"),
		"{% set ns = namespace(l=[]) %}" + loop("{% set ns.l = ns.l + [s | indent(first=true)] %}"),
		"{% set ns = namespace(l=[]) %}" + loop("{% set ns.l = ns.l + [s ~ i] %}"),
		"{% set ns = namespace(l=[]) %}" + loop("{% set ns.l = ns.l + [s | tojson] %}"),
		// One string of a terabyte.
		"{{ lines | indent(lines) }}",
		"{{ s | join(s) }}",
		"{{ s.replace('', s) }}",
		"{{ s.replace('x', s) }}",
		// 16 million parts of a split.
		"{{ xs.split('x') | length }}",
		"{{ (xs | join(' ')).split() | length }}",
		// Strings doubled forty times.
		"{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
		// A million references to a 4 MiB string, printed.
		"{% set ns = namespace(l=[s]) %}{% for i in range(20) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l ~ '' }}",
		"{% set ns = namespace(l=[s]) %}{% for i in range(20) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | join }}",
		"{% set ns = namespace(l=[s]) %}{% for i in range(20) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | tojson }}",
		// Lists of a million items, kept.
		"{% set ns = namespace(l=[]) %}" + loop("{% set ns.l = ns.l + [range(1000000)] %}"),
		// Every character indexed, each once a 6-fold copy of the string.
		loop("{{ xs[-1] }}"),
		loop("{{ xs[::-1] | length }}"),
		// Output.
		loop("{{ s }}"),
	} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatalf("%.80s: %v", src, err)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = tpl.Render(vars)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrBudget) {
			t.Errorf("%.80s: got %v, want a budget error", src, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
			t.Errorf("%.80s: allocated %d MiB", src, grew>>20)
		}
	}
}

// TestDefaultBudgetStopsHostileTemplates: with the default limits,
// templates that would run for hours fail, each within a generous bound
// (a sanity check of the calibration, not a speed claim).
func TestDefaultBudgetStopsHostileTemplates(t *testing.T) {
	vars := budgetVars()
	for _, src := range []string{
		loop("{% if 'y' in s %}{% endif %}"),
		loop("{% if s | length %}{% endif %}"),
		loop("{% if s | upper %}{% endif %}"),
		loop("{% for j in range(1000000) %}{% endfor %}"),
		"{% set ns = namespace(n=0) %}" + loop("{% for j in range(1000000) %}{% set ns.n = ns.n + 1 %}{% endfor %}"),
		"{% macro f(n) %}{% for i in range(1000) %}{{ f(n + 1) if n < 5 }}{% endfor %}{% endmacro %}{{ f(0) }}",
	} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = tpl.Render(vars)
		if !errors.Is(err, ErrBudget) {
			t.Errorf("%.80s: got %v, want a budget error", src, err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%.80s: took %v to fail", src, d)
		}
	}
}

// TestBudgetError checks the error of each limit: its type, errors.Is with
// ErrBudget, the limit's name and value in it, and that a render exactly
// at a limit passes.
func TestBudgetError(t *testing.T) {
	tpl, err := Parse("{% for i in range(100) %}0123456789{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		lim   Limits
		limit string
		value int64
	}{
		{Limits{MaxOutputBytes: 999}, "MaxOutputBytes", 999},
		{Limits{MaxWorkBytes: 5000}, "MaxWorkBytes", 5000},
		{Limits{MaxAllocBytes: 1000}, "MaxAllocBytes", 1000}, // range(100) is 1,600 bytes
	} {
		_, err := tpl.RenderContext(context.Background(), nil, c.lim)
		var be *BudgetError
		if !errors.As(err, &be) || !errors.Is(err, ErrBudget) {
			t.Errorf("%+v: got %v, want a *BudgetError", c.lim, err)
			continue
		}
		if be.Limit != c.limit || be.Value != c.value || be.Line != 1 {
			t.Errorf("%+v: got %+v, want limit %s = %d on line 1", c.lim, *be, c.limit, c.value)
		}
		if msg := err.Error(); !strings.Contains(msg, c.limit) || !strings.Contains(msg, strconv.FormatInt(c.value, 10)) {
			t.Errorf("%q names neither %s nor %d", msg, c.limit, c.value)
		}
	}
	out, err := tpl.RenderContext(context.Background(), nil, Limits{MaxOutputBytes: 1000})
	if err != nil || len(out) != 1000 {
		t.Errorf("1,000 bytes within MaxOutputBytes 1000: %d bytes, %v", len(out), err)
	}
	if _, err := tpl.Render(nil); err != nil {
		t.Errorf("default limits: %v", err)
	}
}

// TestRenderContextStops: a render stops when its context is cancelled or
// its deadline passes, with an error that says so and wraps the context's.
func TestRenderContextStops(t *testing.T) {
	// With no work budget to speak of, this runs for hours.
	tpl, err := Parse(loop(loop("")))
	if err != nil {
		t.Fatal(err)
	}
	huge := Limits{MaxWorkBytes: 1 << 62, MaxAllocBytes: 1 << 62}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tpl.RenderContext(ctx, nil, huge); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("cancelled context: got %v", err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = tpl.RenderContext(ctx, nil, huge)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "deadline passed") {
		t.Errorf("deadline: got %v", err)
	}
	if errors.Is(err, ErrBudget) {
		t.Errorf("deadline error %v matches ErrBudget", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stopped %v after the start, for a deadline of 100ms", d)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := tpl.RenderChatContext(ctx, ChatInput{}, huge); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while rendering: got %v", err)
	}
}

// TestDefaultLimitsFitLongChats renders real chat templates under the
// default limits with 128 tools and 1 MiB conversations, of long messages
// and of 52,000 messages of 20 bytes (the most evaluation steps per byte).
func TestDefaultLimitsFitLongChats(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "llama3.2-instruct.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tpls := []chatTemplate{{"llama3.2", string(src), "<|begin_of_text|>", "<|eot_id|>"}}
	t.Run("reference templates", func(t *testing.T) { tpls = loadTemplates(t) }) // Qwen3 and Llama 3 too, where fetched
	var tools []map[string]any
	for len(tools) < 128 {
		for _, tool := range mustJSON(t, toolsJSON).([]any) {
			tools = append(tools, shallowGo(tool.(*Map)))
		}
	}
	for _, msgLen := range []int{20, 20000} {
		var msgs []map[string]any
		for i := 0; i < 1<<20/msgLen; i++ {
			m := map[string]any{"role": "user", "content": strings.Repeat("word ", msgLen/5)}
			if i%2 == 1 {
				m = map[string]any{"role": "assistant", "content": "<think>\nhm\n</think>\n\n" + strings.Repeat("word ", msgLen/5)}
			}
			msgs = append(msgs, m)
		}
		for _, tp := range tpls {
			tpl, err := Parse(tp.src)
			if err != nil {
				t.Fatal(err)
			}
			in := ChatInput{Messages: msgs, Tools: tools, AddGenerationPrompt: true, BOSToken: tp.bos, EOSToken: tp.eos}
			// Three quarters of the defaults must do, so that they leave
			// room.
			lim := Limits{MaxOutputBytes: DefaultMaxOutputBytes / 4 * 3, MaxWorkBytes: DefaultMaxWorkBytes / 4 * 3, MaxAllocBytes: DefaultMaxAllocBytes / 4 * 3}
			if _, err := tpl.RenderChatContext(context.Background(), in, lim); err != nil {
				t.Errorf("%s, %d messages: %v", tp.name, len(msgs), err)
			}
		}
	}
}

// TestStringHelpersMatchRunes checks the string helpers that walk a string
// instead of converting it against the conversions they replace, on random
// strings with non-ASCII, supplementary and invalid bytes.
func TestStringHelpersMatchRunes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "Z", " ", "_", "é", "中", "😀", "\uffff", "\ue000", "\xff", "\xe2\x82", "\xf0\x9f"}
	randString := func() string {
		var b strings.Builder
		for n := r.IntN(12); n > 0; n-- {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	ip := &interp{lim: Limits{}.withDefaults()}
	for range 3000 {
		a, b := randString(), randString()
		runes := []rune(a)
		// Slicing.
		n := len(runes)
		start, stop, step := r.IntN(2*n+3)-n-1, r.IntN(2*n+3)-n-1, r.IntN(7)-3
		if step == 0 {
			step = 1
		}
		first, count := sliceIndices(n, start, r.IntN(2) == 0, stop, r.IntN(2) == 0, step)
		want := make([]rune, count)
		for k := range want {
			want[k] = runes[first+k*step]
		}
		if got := ip.sliceString(a, first, step, count); got != string(want) {
			t.Fatalf("sliceString(%q, %d, %d, %d) = %q, want %q", a, first, step, count, got, string(want))
		}
		// Indexing by UTF-16 unit.
		units := utf16.Encode(runes)
		for i := -len(units) - 1; i <= len(units); i++ {
			got, ok := utf16At(a, i)
			j := i
			if j < 0 {
				j += len(units)
			}
			wantOK := j >= 0 && j < len(units)
			wantS := ""
			if wantOK {
				u := rune(units[j])
				if utf16.IsSurrogate(u) {
					u = 0xfffd
				}
				wantS = string(u)
			}
			if got != wantS || ok != wantOK {
				t.Fatalf("utf16At(%q, %d) = %q, %v, want %q, %v", a, i, got, ok, wantS, wantOK)
			}
		}
		// Ordering by UTF-16 unit.
		ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
		wantCmp := 0
		for i := 0; i < len(ua) && i < len(ub) && wantCmp == 0; i++ {
			wantCmp = cmpInt(int(ua[i]), int(ub[i]))
		}
		if wantCmp == 0 {
			wantCmp = cmpInt(len(ua), len(ub))
		}
		if got := compareUTF16(a, b); got != wantCmp {
			t.Fatalf("compareUTF16(%q, %q) = %d, want %d", a, b, got, wantCmp)
		}
		// Title case and capitalisation.
		tr := []rune(a)
		for i, c := range tr {
			if isWord(c) && (i == 0 || !isWord(tr[i-1])) && c >= 'a' && c <= 'z' {
				tr[i] = c - 'a' + 'A'
			}
		}
		if got := jsTitle(a); got != string(tr) {
			t.Fatalf("jsTitle(%q) = %q, want %q", a, got, string(tr))
		}
		wantCap := a
		if len(runes) > 0 && runes[0] < 0x10000 {
			wantCap = jsUpper(string(runes[0])) + string(runes[1:])
		}
		if got := jsCapitalize(a); got != wantCap {
			t.Fatalf("jsCapitalize(%q) = %q, want %q", a, got, wantCap)
		}
	}
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
