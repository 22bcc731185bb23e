package jinja

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// exprGen builds random expressions over a fixed vocabulary of literals,
// variables, operators, filters, tests and methods, for a differential test
// against the JS engine: whatever the engines disagree on shows up, errors
// included.
type exprGen struct{ r *rand.Rand }

func (g exprGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g exprGen) atom() string {
	return g.pick("0", "1", "2", "-3", "7", "0.5", "2.0", "-1.25", "1e", "'a'", "'Ab c'", "''", "' x '", "'é中😀'", "'1'",
		"'a,b'", "none", "true", "false", "nope", "s", "n", "f", "l", "d", "m", "e", "[1, 2]", "{'k': 'v'}")
}

func (g exprGen) expr(depth int) string {
	if depth <= 0 {
		a := g.atom()
		if a == "1e" {
			a = "10"
		}
		return a
	}
	x := func() string { return g.expr(depth - 1) }
	switch g.r.IntN(9) {
	case 0, 1:
		op := g.pick("+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or")
		return "(" + x() + " " + op + " " + x() + ")"
	case 2:
		return g.pick("not ", "-") + "(" + x() + ")"
	case 3:
		f := g.pick("length", "trim", "upper", "lower", "tojson", "join", "first", "last", "reverse", "sort", "unique",
			"list", "string", "int", "float", "abs", "items", "default('z')", "join(',')", "tojson(indent=2)",
			"capitalize", "title", "default('q', true)", "int(5)", "indent(2)", "replace('a', 'X')", "dictsort", "safe",
			"tojson(separators=(',', ':'))", "tojson(ensure_ascii=true)", "indent(first=true)", "indent('> ', true, true)",
			"replace('a', 'Y', 1)", "dictsort(by='value')", "dictsort(reverse=true)", "sort(attribute='role')",
			"map(attribute='role')", "map(attribute='x', default=0)", "selectattr('role')", "rejectattr('role', 'equalto', 'user')",
			"selectattr('content', 'string')", "sort(case_sensitive=true)", "join(separator='+')", "float(1.5)", "items | list")
		return "(" + x() + " | " + f + ")"
	case 4:
		t := g.pick("defined", "undefined", "none", "string", "number", "mapping", "iterable", "integer", "odd", "true",
			"false", "sequence", "boolean", "lower", "upper", "callable")
		return "(" + x() + " is " + g.pick("", "not ") + t + ")"
	case 5:
		m := g.pick(".k", "[0]", "[-1]", "[1:]", "[::-1]", "[:1]", ".upper()", ".split()", ".split(',')", ".startswith('a')",
			".strip()", ".replace('a', 'b')", ".get('k')", ".items()", ".keys()", ".values()", ".length", ".title()",
			".endswith(('c', 'x'))", ".lstrip()", "['role']", ".content", "[0].role", ".b[1]",
			".strip('H')", ".split(' ', 1)", ".replace('l', 'L', 1)", ".get('k', 5)", ".get('zz', 5)", ".capitalize()",
			".split(none, 1)", "[1:-1]", "[::2]", "[-2::-1]", "[5:]", ".lower()", "[n]", "['k']")
		return "(" + x() + ")" + m
	case 6:
		return "(" + x() + " if " + x() + " else " + x() + ")"
	case 7:
		return "[" + x() + ", " + x() + "]"
	}
	return g.atom()
}

func (g exprGen) template() string {
	e := g.expr(1 + g.r.IntN(3))
	switch g.r.IntN(4) {
	case 0:
		return "{% for x in " + e + " %}{{ x }},{{ loop.index0 }};{% else %}none{% endfor %}"
	case 1:
		return "{% if " + e + " %}T{% else %}F{% endif %}"
	case 2:
		return "{% set ns = namespace(v=" + e + ") %}{{ ns.v }}|{{ ns.v | tojson }}"
	}
	return "{{ " + e + " }}"
}

func randomContext() map[string]any {
	return map[string]any{
		"s": "Hello World",
		"n": 3,
		"f": 1.5,
		"l": []any{1, "a", nil, 2.5},
		"d": NewMap("k", 1, "b", []any{1, 2}),
		"m": []any{NewMap("role", "user", "content", "hi"), NewMap("role", "assistant", "content", "yo")},
		"e": []any{},
	}
}

// TestRandomTemplatesMatchJS renders seeded random expressions with both
// engines and requires the same output, or an error from both.
func TestRandomTemplatesMatchJS(t *testing.T) {
	seed, n := uint64(1), 1500
	if s, err := strconv.ParseUint(os.Getenv("JINJA_RANDOM_SEED"), 10, 64); err == nil {
		seed, n = s, 5000 // a deeper search than the default run
	}
	g := exprGen{rand.New(rand.NewPCG(seed, 2))}
	cases := make([]jsCase, n)
	outs := make([]string, n)
	errs := make([]error, n)
	for i := range cases {
		src := g.template()
		cases[i] = jsCase{template: src, ctx: randomContext()}
		outs[i], errs[i] = renderString(t, src, cases[i].ctx)
	}
	res := jsRenderAll(t, testNow, cases)
	bad, rendered := 0, 0
	for i, r := range res {
		src := cases[i].template
		switch {
		case r.Error != nil && errs[i] == nil:
			t.Errorf("%s\n JS failed (%s), Go rendered %q", src, *r.Error, outs[i])
		case r.Error == nil && errs[i] != nil:
			t.Errorf("%s\n Go failed (%v), JS rendered %q", src, errs[i], *r.Output)
		case r.Error == nil && *r.Output != outs[i]:
			t.Errorf("%s\n go: %q\n js: %q", src, outs[i], *r.Output)
		default:
			if r.Error == nil {
				rendered++
			}
			continue
		}
		if bad++; bad > 30 {
			t.Fatal("too many differences")
		}
	}
	if rendered < n/3 {
		t.Errorf("only %d of %d random templates rendered; the generator makes too many errors to test much", rendered, n)
	}
	t.Logf("%d of %d random templates rendered, the rest failed in both engines", rendered, n)
}

// layout builds random template text: plain text with spaces, tabs and
// newlines around statements, expressions and comments with and without
// whitespace-control hyphens, to exercise trim_blocks, lstrip_blocks and
// the hyphens against the JS engine.
func (g exprGen) layout() string {
	var b []byte
	ws := func() {
		for k := g.r.IntN(4); k > 0; k-- {
			b = append(b, g.pick(" ", "\t", "\n", "  ", "\n  ", "x", "y ", "%}", "-}", "#}")...)
		}
	}
	open := func(kind string) string { return "{" + kind + g.pick("", "-", "") + " " }
	closeTag := func(kind string) string { return " " + g.pick("", "-", "") + kind + "}" }
	depth := 0
	for i := 4 + g.r.IntN(10); i > 0; i-- {
		ws()
		switch g.r.IntN(7) {
		case 0:
			b = append(b, open("{")+g.pick("'a'", "n", "' b '", "loop.index0 if loop is defined else 0")+closeTag("}")...)
		case 1:
			b = append(b, open("#")+"note"+closeTag("#")...)
		case 2:
			b = append(b, open("%")+"set v = "+g.pick("1", "'t'")+closeTag("%")...)
		case 3, 4:
			if depth < 3 {
				b = append(b, open("%")+g.pick("if n > 1", "for i in range(2)", "if false", "for c in ['p', 'q']")+closeTag("%")...)
				depth++
				continue
			}
			fallthrough
		default:
			b = append(b, g.pick("text", " t e x t ", "\n\n", "a\tb")...)
		}
		if depth > 0 && g.r.IntN(3) == 0 {
			depth--
			b = append(b, open("%")+"end"+closeTag("%")...)
		}
	}
	for ; depth > 0; depth-- {
		ws()
		b = append(b, open("%")+"end"+closeTag("%")...)
	}
	ws()
	return string(b)
}

// TestRandomLayoutsMatchJS renders random arrangements of text and tags and
// requires the same bytes from both engines.
func TestRandomLayoutsMatchJS(t *testing.T) {
	g := exprGen{rand.New(rand.NewPCG(3, 4))}
	const n = 800
	cases := make([]jsCase, n)
	outs := make([]string, n)
	errs := make([]error, n)
	for i := range cases {
		src := g.layout()
		// "end" closes whichever block is innermost: rewrite it to the
		// matching endif/endfor.
		src = closeBlocks(src)
		cases[i] = jsCase{template: src, ctx: randomContext()}
		outs[i], errs[i] = renderString(t, src, cases[i].ctx)
	}
	res := jsRenderAll(t, testNow, cases)
	bad, rendered := 0, 0
	for i, r := range res {
		src := cases[i].template
		if r.Error == nil && errs[i] == nil {
			rendered++
		}
		switch {
		case r.Error != nil && errs[i] == nil:
			t.Errorf("%q\n JS failed (%s), Go rendered %q", src, *r.Error, outs[i])
		case r.Error == nil && errs[i] != nil:
			t.Errorf("%q\n Go failed (%v), JS rendered %q", src, errs[i], *r.Output)
		case r.Error == nil && *r.Output != outs[i]:
			t.Errorf("%q\n go: %q\n js: %q", src, outs[i], *r.Output)
		default:
			continue
		}
		if bad++; bad > 20 {
			t.Fatal("too many differences")
		}
	}
	if rendered < n*9/10 {
		t.Errorf("only %d of %d layouts rendered; they are meant to be valid templates", rendered, n)
	}
	t.Logf("%d of %d layouts rendered; e.g. %q -> %q", rendered, n, cases[0].template, outs[0])
}

// closeBlocks replaces each "end" statement with endif or endfor to match
// the innermost open block.
func closeBlocks(src string) string {
	var stack []string
	var out []byte
	for i := 0; i < len(src); {
		if strings.HasPrefix(src[i:], "{%") {
			j := i + 2
			if j < len(src) && src[j] == '-' {
				j++
			}
			j++ // the space after the tag opener
			rest := src[j:]
			switch {
			case strings.HasPrefix(rest, "if "):
				stack = append(stack, "endif")
			case strings.HasPrefix(rest, "for "):
				stack = append(stack, "endfor")
			case strings.HasPrefix(rest, "end ") || strings.HasPrefix(rest, "end-"):
				out = append(out, src[i:j]...)
				out = append(out, stack[len(stack)-1]...)
				stack = stack[:len(stack)-1]
				i = j + len("end")
				continue
			}
		}
		out = append(out, src[i])
		i++
	}
	return string(out)
}
