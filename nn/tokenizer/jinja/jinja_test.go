package jinja

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type engineCase struct {
	name     string
	template string
	ctx      map[string]any
	want     string // checked when not empty (and always against the JS engine)
	wantErr  bool
}

func mustJSON(t testing.TB, s string) any {
	t.Helper()
	v, err := ParseJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func engineCases(t testing.TB) []engineCase {
	msgs := mustJSON(t, `[{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]`)
	obj := mustJSON(t, `{"zeta": 1, "alpha": [1, 2.5, "x"], "mid": {"b": null, "a": true}, "uni": "é中😀"}`)
	return []engineCase{
		{name: "text", template: "hello", want: "hello"},
		{name: "trailing newline dropped", template: "hello\n", want: "hello"},
		{name: "only the last newline dropped", template: "a\n\n", want: "a\n"},
		{name: "variable", template: "{{ x }}", ctx: map[string]any{"x": "v"}, want: "v"},
		{name: "undefined prints nothing", template: "[{{ nope }}]", want: "[]"},
		{name: "none prints nothing", template: "[{{ none }}]", want: "[]"},
		{name: "booleans", template: "{{ true }} {{ false }} {{ True }}", want: "true false true"},
		{name: "numbers", template: "{{ 1 }} {{ 1.0 }} {{ 2.50 }} {{ -3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
			want: "1 1.0 2.5 -3 3.5 3 -4 1 1024 0.5"},
		{name: "float arithmetic", template: "{{ 0.1 + 0.2 }} {{ 1.5 * 2 }} {{ 10 / 4 }} {{ 1 / 3 }}"},
		{name: "int float mix", template: "{{ 1 + 1.0 }} {{ 3 - 0.5 }} {{ 4 / 2 }}", want: "2.0 2.5 2.0"},
		{name: "string concat", template: "{{ 'a' + 'b' ~ 1 ~ 1.0 ~ true }}", want: "ab11true"},
		{name: "tilde with undefined", template: "{{ nope ~ 'x' ~ nope }}", want: "x"},
		{name: "string plus number", template: "{{ 'n=' + 3 }} {{ 2.0 + 'x' }}", want: "n=3 2x"},
		{name: "list display", template: "{{ [1, 'a', 2.0, none, true, [3]] }}", want: `[1, "a", 2, null, true, [3]]`},
		{name: "list concat", template: "{{ [1] + [2, 3] }}", want: "[1, 2, 3]"},
		{name: "list tilde", template: "{{ [1, 'a'] ~ '' }}", want: "1,a"},
		{name: "dict display", template: "{{ {'b': 1, 'a': [none]} }}", want: `{"b": 1, "a": [null]}`},
		{name: "comparison", template: "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 1 == 1.0 }} {{ '1' == 1 }} {{ 'a' != 'b' }} {{ none == nope }}", want: "true false true true true true"},
		{name: "list equality is identity", template: "{{ [1] == [1] }} {% set l = [1] %}{{ l == l }}", want: "false true"},
		{name: "logic", template: "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ [] or 'z' }} {{ not '' }} {{ not not 1 }}", want: "x y z true true"},
		{name: "in", template: "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' not in ['y'] }} {{ 1 in nope }}", want: "true true true true false"},
		{name: "in float int", template: "{{ 1.0 in [1] }}", want: "true"},
		{name: "inline if", template: "{{ 'y' if x else 'n' }}{{ 'only' if x }}", ctx: map[string]any{"x": false}, want: "n"},
		{name: "chained ternary", template: "{% for i in [1, 2, 3] %}{{ 'a' if i == 1 else 'b' if i == 2 else 'c' }}{% endfor %}", want: "abc"},
		{name: "if elif else", template: "{% for i in range(4) %}{% if i == 0 %}z{% elif i == 1 %}o{% elif i == 2 %}t{% else %}m{% endif %}{% endfor %}", want: "zotm"},
		{name: "for loop vars", template: "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"},
		{name: "previtem nextitem", template: "{% for x in [1, 2, 3] %}({{ loop.previtem }},{{ loop.nextitem }}){% endfor %}", want: "(,2)(1,3)(2,)"},
		{name: "previtem defined", template: "{% for x in [1, 2] %}{{ loop.previtem is defined }}{% endfor %}", want: "falsetrue"},
		{name: "for else", template: "{% for x in [] %}x{% else %}empty{% endfor %}", want: "empty"},
		{name: "for filter", template: "{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}", want: "2242"},
		{name: "for over dict", template: "{% for k in d %}{{ k }};{% endfor %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx: map[string]any{"d": mustJSON(t, `{"z": 1, "a": 2}`)}, want: "z;a;z=1;a=2;"},
		{name: "for items filter", template: "{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}", ctx: map[string]any{"d": mustJSON(t, `{"z": 1, "a": 2}`)}, want: "z1a2"},
		{name: "break continue", template: "{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", want: "023"},
		{name: "reverse slice", template: "{% for m in messages[::-1] %}{{ m.role }},{% endfor %}", ctx: map[string]any{"messages": msgs}, want: "assistant,user,system,"},
		{name: "slices", template: "{{ [0,1,2,3,4][1:3] }} {{ [0,1,2,3,4][-2:] }} {{ [0,1,2,3,4][::2] }} {{ [0,1,2,3,4][3:0:-1] }} {{ [0,1,2,3,4][:-1] }} {{ [0,1,2,3,4][::-2] }}",
			want: "[1, 2] [3, 4] [0, 2, 4] [3, 2, 1] [0, 1, 2, 3] [4, 2, 0]"},
		{name: "string slice", template: "{{ 'héllo😀'[1:4] }}|{{ 'abc'[::-1] }}|{{ 'a😀b'[::-1] }}", want: "éll|cba|b😀a"},
		{name: "index", template: "{{ messages[0].role }} {{ messages[-1]['content'] }} {{ messages[5] is defined }} {{ 'abc'[1] }} {{ 'abc'[-1] }}", ctx: map[string]any{"messages": msgs}, want: "system Yo false b c"},
		{name: "dot integer", template: "{{ l.1 }}", ctx: map[string]any{"l": []any{"a", "b"}}, want: "b"},
		{name: "namespace", template: "{% set ns = namespace(n=0, found=false) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }} {{ ns.found }}", want: "3 false"},
		{name: "namespace from dict", template: "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", want: "12"},
		{name: "set scope in loop", template: "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", want: "1"},
		{name: "set persists across iterations", template: "{% for i in [1, 2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}", want: "1"},
		{name: "set tuple", template: "{% set a, b = 1, 2 %}{{ a }}{{ b }}", want: "12"},
		{name: "set block", template: "{% set x %}in {{ 'block' }}{% endset %}[{{ x }}]", want: "[in block]"},
		{name: "whitespace control", template: "a  {%- if true -%}  b  {%- endif -%}  c", want: "abc"},
		{name: "expression whitespace control", template: "a \n {{- 'b' -}} \n c", want: "abc"},
		{name: "trim and lstrip blocks", template: "<ul>\n    {% for i in [1, 2] %}\n    <li>{{ i }}</li>\n    {% endfor %}\n</ul>"},
		{name: "trim blocks after comment", template: "a\n{# c #}\nb\n  {#- d -#}  \ne"},
		{name: "comment", template: "x{# hidden {{ y }} #}z", want: "xz"},
		{name: "string escapes", template: `{{ 'a\nb\t\'"' }}|{{ "\u00e9\x41" }}`, want: "a\nb\t'\"|éA"},
		{name: "surrogate pair escape", template: `{{ "\ud83d\ude00" }}|{{ "\ud83d\ude00" | length }}`, want: "😀|2"},
		{name: "list in list", template: "{{ [1] in [[1]] }}", wantErr: true},
		{name: "adjacent string literals", template: `{{ 'a' "b" 'c' }}`, want: "abc"},
		{name: "string methods", template: "{{ ' Ab c '.strip() }}|{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}|{{ 'aB'.upper() }}{{ 'aB'.lower() }}|{{ 'hello world'.title() }}|{{ 'hello World'.capitalize() }}",
			want: "Ab c|x | x|ABab|Hello World|Hello World"},
		{name: "strip ignores its argument as the JS port does", template: "[{{ '\\n x \\n'.strip('\\n') }}]"},
		{name: "startswith endswith", template: "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('x') }}", want: "true true true false"},
		{name: "split", template: "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a b c'.split(none, 1) }}",
			want: `["a", "b", "", "c"] ["a", "b"] ["a", "b,c"] ["a", "b c"]`},
		{name: "think split", template: "{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
			ctx: map[string]any{"c": "<think>\nreason\n</think>\n\nanswer"}, want: "answer|reason"},
		{name: "replace", template: "{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }} {{ 'aXa' | replace('a', 'y') }}", want: "bbb bba -a-b- yXy"},
		{name: "length", template: "{{ 'abc' | length }} {{ [1, 2] | length }} {{ {'a': 1} | length }} {{ 'é😀' | length }} {{ 'ab'.length }}", want: "3 2 1 3 2"},
		{name: "trim filter", template: "[{{ '  \n x y \t' | trim }}]", want: "[x y]"},
		{name: "upper lower filters", template: "{{ 'straße' | upper }} {{ 'ΣΑΣ' | lower }} {{ 'İ' | lower | length }}"},
		{name: "tojson", template: "{{ obj | tojson }}", ctx: map[string]any{"obj": obj},
			want: `{"zeta": 1, "alpha": [1, 2.5, "x"], "mid": {"b": null, "a": true}, "uni": "é中😀"}`},
		{name: "tojson indent", template: "{{ obj | tojson(indent=2) }}", ctx: map[string]any{"obj": obj}},
		{name: "tojson indent empty", template: "{{ {'a': [], 'b': {}} | tojson(indent=4) }}", want: "{\n    \"a\": [],\n    \"b\": {}\n}"},
		{name: "tojson ensure_ascii", template: "{{ obj | tojson(ensure_ascii=true) }}", ctx: map[string]any{"obj": obj}},
		{name: "tojson sort_keys separators", template: "{{ obj | tojson(sort_keys=true, separators=(',', ':')) }}", ctx: map[string]any{"obj": obj}},
		{name: "tojson escapes", template: "{{ s | tojson }}", ctx: map[string]any{"s": "<a href=\"x\">&\u2028\x01\\</a>"}},
		{name: "tojson scalars", template: "{{ 1 | tojson }} {{ 1.5 | tojson }} {{ none | tojson }} {{ nope | tojson }} {{ true | tojson }} {{ 'x' | tojson }}", want: `1 1.5 null null true "x"`},
		{name: "tojson namespace", template: "{% set ns = namespace(a=1) %}{{ ns | tojson }}", want: `{"a": 1}`},
		{name: "items keys values", template: "{{ obj.items() | list | length }} {{ obj.keys() }} {{ obj.mid.values() }}", ctx: map[string]any{"obj": obj}, want: `4 ["zeta", "alpha", "mid", "uni"] [null, true]`},
		{name: "get", template: "{{ obj.get('zeta') }} {{ obj.get('nope', 'd') }} {{ obj.get('nope') }}", ctx: map[string]any{"obj": obj}, want: "1 d "},
		{name: "default", template: "{{ nope | default('d') }} {{ '' | default('e') }} {{ '' | default('f', true) }} {{ none | default('g') }}", want: "d  f "},
		{name: "join", template: "{{ ['a', 'b'] | join(', ') }} {{ [1, none, 2.0] | join('-') }} {{ 'abc' | join('.') }} {{ ['x', 'y'] | join }}", want: "a, b 1--2 a.b.c xy"},
		{name: "first last reverse", template: "{{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }}{{ [1, 2, 3] | reverse }}", want: "13[3, 2, 1]"},
		{name: "sort unique", template: "{{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 1.0, 2, 'a', 'a'] | unique }}", want: `["A", "b", "c"] [3, 2, 1] [1, 2, "a"]`},
		{name: "sort attribute", template: "{{ messages | sort(attribute='role') | map(attribute='content') | join(',') }}", ctx: map[string]any{"messages": msgs}, want: "Yo,Sys,Hi"},
		{name: "selectattr rejectattr", template: "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ messages | rejectattr('role', 'equalto', 'user') | length }}", ctx: map[string]any{"messages": msgs}, want: `["Hi"] 2`},
		{name: "dictsort", template: "{{ obj | dictsort }}", ctx: map[string]any{"obj": mustJSON(t, `{"b": 1, "A": 2, "c": 0}`)}, want: `[["A", 2], ["b", 1], ["c", 0]]`},
		{name: "int float abs string", template: "{{ '42x' | int }} {{ 'x' | int }} {{ '3.5e1' | float }} {{ -3 | abs }} {{ 3.7 | int }} {{ 2 | float }} {{ 1.0 | string }} {{ true | int }}", want: "42 0 35.0 3 3 2.0 1.0 1"},
		{name: "indent", template: "{{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}", want: "a\n    b\n\n    c|  a\n  b"},
		{name: "tests", template: "{{ 'x' is string }} {{ 1 is number }} {{ 1.5 is integer }} {{ {} is mapping }} {{ [] is mapping }} {{ none is none }} {{ nope is defined }} {{ nope is undefined }} {{ 3 is odd }} {{ [] is iterable }} {{ 'A' is upper }} {{ true is boolean }} {{ range is callable }} {{ x is not none }}",
			want: "true true false true false true false true true true true true true true"},
		{name: "is false", template: "{{ false is false }} {{ 0 is false }} {{ nope is false }}", want: "true false false"},
		{name: "macro", template: "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', punct='?') }}", want: "Hi Ann! Hi Bo?"},
		{name: "macro kwargs varargs", template: "{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, k='v') }}", want: `1[2, 3]{"k": "v"}`},
		{name: "macro recursion", template: "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}{% endmacro %}{{ fact(4) }}", want: "4*3*2*1"},
		{name: "call block", template: "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}", want: "<b>bold</b>"},
		{name: "macro default uses earlier param", template: "{% macro f(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ f('x') }}|{{ f('x', b='y') }}", want: "xx!|xy"},
		{name: "macro sees later global", template: "{% macro f() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ f() }}", want: "late"},
		{name: "macro called before defined", template: "{{ f() }}{% macro f() %}x{% endmacro %}", wantErr: true},
		{name: "macro unknown kwarg", template: "{% macro f(a) %}{% endmacro %}{{ f(b=1) }}", wantErr: true},
		{name: "macro missing arg is undefined", template: "{% macro f(a, b) %}[{{ b }}]{{ b is defined }}{% endmacro %}{{ f(1) }}", want: "[]false"},
		{name: "macro in loop", template: "{% macro item(m) %}<{{ m.role }}:{{ m.content | trim }}>{% endmacro %}{% for m in messages %}{{ item(m) }}{% endfor %}", ctx: map[string]any{"messages": mustJSON(t, `[{"role": "user", "content": " a "}, {"role": "assistant", "content": "b"}]`)}, want: "<user:a><assistant:b>"},
		{name: "call block with args", template: "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}", want: "<1><2>"},
		{name: "caller undefined outside call", template: "{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}", want: "false"},
		{name: "nested loops", template: "{% for a in [1, 2] %}{% set outer = loop.index %}{% for b in ['x', 'y'] %}{{ outer }}{{ b }}{{ loop.index }} {% endfor %}{% endfor %}", want: "1x1 1y2 2x1 2y2 "},
		{name: "loop over filtered items", template: "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role[0] }}{% endfor %}", ctx: map[string]any{"messages": msgs}, want: "1u2a"},
		{name: "set block with whitespace control", template: "{%- set x -%}\n  a  \n{%- endset -%}\n[{{ x }}]", want: "[a]"},
		{name: "filter block with args", template: "{% filter replace('a', 'o') %}banana{% endfilter %}", want: "bonono"},
		{name: "loop in namespace outlives loop", template: "{% set ns = namespace(l=none) %}{% for x in [1, 2] %}{% set ns.l = loop %}{% endfor %}{{ ns.l.index }}", want: "2"},
		{name: "kwargs spread", template: "{% macro f(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ f(*[1], **{'b': 2}) }}", want: "12"},
		{name: "filter block", template: "{% filter upper %}shout {{ 'it' }}{% endfilter %}", want: "SHOUT IT"},
		{name: "range", template: "{{ range(3) }} {{ range(1, 4) }} {{ range(5, 0, -2) }}", want: "[0, 1, 2] [1, 2, 3] [5, 3, 1]"},
		{name: "raise_exception output", template: "{% if false %}{{ raise_exception('no') }}{% endif %}ok", want: "ok"},
		{name: "unicode text", template: "中文 {{ s }} 😀\u200b", ctx: map[string]any{"s": "עברית العربية"}, want: "中文 עברית العربية 😀\u200b"},
		{name: "generation tags", template: "a {% generation %}b{% endgeneration %} c {%- generation -%} d", want: "a b cd"},
		{name: "minus sign", template: "{{ -1 + 2 }} {{ 3 - -1 }} {{ (1) - 1 }} {{ -x }}", ctx: map[string]any{"x": 2.5}, want: "1 4 0 -2.5"},
		{name: "filter precedence", template: "{{ 'a' + ' b ' | trim + 'c' }} {{ l | length - 1 }}", ctx: map[string]any{"l": []any{1, 2}}, want: "abc 1"},
		{name: "object literal in expression", template: "{{ {'a': {'b': 1}} }}", want: `{"a": {"b": 1}}`},
		{name: "go map sorted keys", template: "{{ m | tojson }}", ctx: map[string]any{"m": map[string]any{"b": 1, "a": []string{"x"}}}, want: `{"a": ["x"], "b": 1}`},
		{name: "go numbers", template: "{{ a }} {{ b }} {{ c }} {{ d }}", ctx: map[string]any{"a": 3, "b": float32(0.5), "c": 2.0, "d": uint8(7)}, want: "3 0.5 2 7"},

		{name: "unclosed if", template: "{% if true %}x", wantErr: true},
		{name: "unclosed for", template: "{% for x in [1] %}{{ x }}", wantErr: true},
		{name: "unclosed expression", template: "a {{ x", wantErr: true},
		{name: "unknown statement", template: "{% frobnicate %}", wantErr: true},
		{name: "stray endif", template: "{% endif %}", wantErr: true},
		{name: "raise_exception", template: "a{{ raise_exception('Only user and assistant roles are supported!') }}", wantErr: true},
		{name: "unknown filter", template: "{{ 'x' | frobnicate }}", wantErr: true},
		{name: "unknown filter on list", template: "{{ [1] | frobnicate(2) }}", wantErr: true},
		{name: "unknown test", template: "{{ 1 is frob }}", wantErr: true},
		{name: "filter on undefined", template: "{{ nope | length }}", wantErr: true},
		{name: "call non-function", template: "{{ x() }}", ctx: map[string]any{"x": 1}, wantErr: true},
		{name: "none arithmetic", template: "{{ none + 1 }}", wantErr: true},
		{name: "string comparison", template: "{{ 'a' < 'b' }}", wantErr: true},
		{name: "set attribute of dict", template: "{% set d = {} %}{% set d.x = 1 %}", wantErr: true},
		{name: "global redeclared", template: "{{ range }}", ctx: map[string]any{"range": 1}, wantErr: true},
		{name: "macro too many args", template: "{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", wantErr: true},
		{name: "unpack mismatch", template: "{% for a, b in [[1, 2, 3]] %}{% endfor %}", wantErr: true},
		{name: "iterate a string", template: "{% for c in 'abc' %}{{ c }}{% endfor %}", wantErr: true},
		{name: "slice of dict", template: "{{ {}[1:] }}", wantErr: true},
	}
}

func renderString(t *testing.T, src string, ctx map[string]any) (string, error) {
	t.Helper()
	tpl, err := Parse(src)
	if err != nil {
		return "", err
	}
	return tpl.Render(ctx)
}

// TestEngine checks small templates against hand-written results where
// given and, when node and the reference are available, against
// @huggingface/jinja byte for byte (errors included: both must fail).
func TestEngine(t *testing.T) {
	pinClock(t, testNow)
	cases := engineCases(t)
	got := make([]string, len(cases))
	gotErr := make([]error, len(cases))
	for i, c := range cases {
		got[i], gotErr[i] = renderString(t, c.template, c.ctx)
		if c.wantErr {
			if gotErr[i] == nil {
				t.Errorf("%s: rendered %q, want an error", c.name, got[i])
			}
			continue
		}
		if gotErr[i] != nil {
			t.Errorf("%s: %v", c.name, gotErr[i])
			continue
		}
		if c.want != "" && got[i] != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got[i], c.want)
		}
	}
	t.Run("js", func(t *testing.T) {
		js := make([]jsCase, len(cases))
		for i, c := range cases {
			js[i] = jsCase{template: c.template, ctx: c.ctx}
		}
		res := jsRenderAll(t, testNow, js)
		for i, c := range cases {
			r := res[i]
			switch {
			case r.Error != nil && gotErr[i] == nil:
				t.Errorf("%s: JS failed (%s), Go rendered %q", c.name, *r.Error, got[i])
			case r.Error == nil && gotErr[i] != nil:
				t.Errorf("%s: Go failed (%v), JS rendered %q", c.name, gotErr[i], *r.Output)
			case r.Error == nil && *r.Output != got[i]:
				t.Errorf("%s: Go and JS differ\n go: %q\n js: %q", c.name, got[i], *r.Output)
			}
		}
	})
}

func TestRaiseException(t *testing.T) {
	_, err := renderString(t, "{{ raise_exception('bad role: ' + r) }}", map[string]any{"r": "robot"})
	var ex *Exception
	if !errors.As(err, &ex) {
		t.Fatalf("got %v, want an *Exception", err)
	}
	if ex.Message != "bad role: robot" {
		t.Errorf("message %q, want %q", ex.Message, "bad role: robot")
	}
	if !strings.Contains(err.Error(), "bad role: robot") {
		t.Errorf("error %q does not contain the message", err)
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, c := range []struct {
		src       string
		line, col int
	}{
		{"a\n{% if x %}\nb", 2, 1},
		{"{% for x in y %}", 1, 1},
		{"{{ x ", 1, 6},
		{"x\n  {{ x | }}", 2, 10},
		{"{% endfor %}", 1, 4},
		{"{% frob %}", 1, 4},
		{"{{ 'abc }}", 1, 11},
		{"{# never closed", 1, 1},
		{"{% set x %}abc", 1, 1},
		{"{{ (1 }}", 1, 7},
		{"{{ x $ y }}", 1, 6},
		{"{% macro m( %}{% endmacro %}", 1, 13},
	} {
		_, err := Parse(c.src)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q) = %v, want a *SyntaxError", c.src, err)
			continue
		}
		if se.Line != c.line || se.Column != c.col {
			t.Errorf("Parse(%q): error at %d:%d (%v), want %d:%d", c.src, se.Line, se.Column, err, c.line, c.col)
		}
	}
}

func TestRenderErrorsNamePosition(t *testing.T) {
	_, err := renderString(t, "line one\n{{ 'x' | nofilter }}", nil)
	var re *RenderError
	if !errors.As(err, &re) {
		t.Fatalf("got %v, want a *RenderError", err)
	}
	if re.Line != 2 || !strings.Contains(re.Msg, "nofilter") {
		t.Errorf("got %v, want line 2 naming the filter", err)
	}
}

func TestUnsupportedContextValue(t *testing.T) {
	_, err := renderString(t, "{{ x }}", map[string]any{"x": map[string]any{"ch": make(chan int)}})
	if err == nil || !strings.Contains(err.Error(), "x.ch") {
		t.Errorf("got %v, want an error naming x.ch", err)
	}
}

func TestLimits(t *testing.T) {
	for _, src := range []string{
		"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
		"{% for i in range(100000000) %}{% endfor %}",
		"{% set s = 'xxxxxxxxxxxxxxxx' %}{% for i in range(40) %}{% set s = s ~ s %}{% endfor %}",
		"{{ " + strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000) + " }}",
		"{% set l = [] %}{% for i in range(20000) %}{% set l = [l] %}{% if loop.last %}{{ l }}{% endif %}{% endfor %}",
	} {
		if _, err := renderString(t, src, nil); err == nil {
			t.Errorf("%.60q: rendered, want an error", src)
		}
	}
}

func TestParseJSONKeepsOrder(t *testing.T) {
	v, err := ParseJSON([]byte(`{"b": 1, "a": {"y": [1.0, 2.5, -0, 1e300], "x": "s"}, "b": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(*Map)
	if got := strings.Join(m.Keys(), ","); got != "b,a" {
		t.Errorf("keys %s, want b,a", got)
	}
	b, _ := m.Get("b")
	if b != int64(3) {
		t.Errorf("b = %v (%T), want the last value 3", b, b)
	}
	out, err := m.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"b":3,"a":{"y":[1,2.5,0,1e+300],"x":"s"}}`; string(out) != want {
		t.Errorf("MarshalJSON = %s, want %s", out, want)
	}
	for _, bad := range []string{`{"a": }`, `[1, 2`, `{} {}`, ``} {
		if _, err := ParseJSON([]byte(bad)); err == nil {
			t.Errorf("ParseJSON(%q) succeeded, want an error", bad)
		}
	}
}

// TestConcurrentRender renders one parsed template from several goroutines
// (run with -race): a Template is read-only once parsed.
func TestConcurrentRender(t *testing.T) {
	tpl, err := Parse("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content | upper }}{% endfor %}{{ ns.n }}")
	if err != nil {
		t.Fatal(err)
	}
	in := ChatInput{Messages: []map[string]any{{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}}}
	want, err := tpl.RenderChat(in)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			for range 50 {
				got, err := tpl.RenderChat(in)
				if err == nil && got != want {
					err = errors.New("got " + got + ", want " + want)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestMapUnmarshalJSON(t *testing.T) {
	var req struct {
		Name      string
		Arguments *Map
	}
	if err := json.Unmarshal([]byte(`{"Name": "f", "Arguments": {"z": 1, "a": {"y": 2, "b": 3}}}`), &req); err != nil {
		t.Fatal(err)
	}
	out, err := renderString(t, "{{ args | tojson }}", map[string]any{"args": req.Arguments})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"z": 1, "a": {"y": 2, "b": 3}}`; out != want {
		t.Errorf("got %s, want %s", out, want)
	}
	var m Map
	if err := json.Unmarshal([]byte(`[1]`), &m); err == nil {
		t.Error("decoding a JSON array into a Map succeeded, want an error")
	}
}
