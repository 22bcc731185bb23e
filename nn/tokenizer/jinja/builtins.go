package jinja

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

func setupGlobals(e *env) {
	for k, v := range map[string]any{
		"false": false, "true": true, "none": nil,
		"False": false, "True": true, "None": nil,
	} {
		e.vars[k] = v
	}
	e.vars["namespace"] = &function{name: "namespace", call: callNamespace}
	e.vars["raise_exception"] = &function{name: "raise_exception", call: func(ip *interp, args []any, kw *Map) any {
		msg := ""
		if len(args) > 0 {
			switch args[0].(type) {
			case nil, undefined:
			default:
				msg = jsString(args[0])
			}
		}
		panic(&Exception{Message: msg})
	}}
	e.vars["range"] = &function{name: "range", call: callRange}
	e.vars["strftime_now"] = &function{name: "strftime_now", call: func(ip *interp, args []any, kw *Map) any {
		if len(args) == 0 {
			ip.fail("strftime_now() needs a format string")
		}
		f, ok := args[0].(string)
		if !ok {
			ip.fail("strftime_now() format must be a string, got %s", typeName(args[0]))
		}
		return strftime(ip.now(), f)
	}}
}

func callNamespace(ip *interp, args []any, kw *Map) any {
	if len(args) > 1 {
		ip.fail("namespace expected at most 1 argument, got %d", len(args))
	}
	m := &Map{}
	if len(args) == 1 {
		switch src := args[0].(type) {
		case *Map:
			for _, k := range src.Keys() {
				m.Set(k, src.vals[k])
			}
		case []any:
			for _, pair := range src {
				var kv []any
				switch p := pair.(type) {
				case []any:
					kv = p
				case string:
					for _, r := range p {
						kv = append(kv, string(r))
					}
				}
				if len(kv) != 2 {
					ip.fail("namespace expected an object or an iterable of [key, value] pairs")
				}
				k, ok := kv[0].(string)
				if !ok {
					ip.fail("namespace keys must be strings")
				}
				m.Set(k, kv[1])
			}
		default:
			ip.fail("'%s' object is not iterable", typeName(src))
		}
	}
	for _, k := range kw.Keys() {
		m.Set(k, kw.vals[k])
	}
	return &namespace{m}
}

func callRange(ip *interp, args []any, kw *Map) any {
	ints := make([]int64, len(args))
	for i, a := range args {
		v, ok := a.(int64)
		if !ok {
			ip.fail("range() arguments must be integers, got %s", typeName(a))
		}
		ints[i] = v
	}
	var start, stop, step int64 = 0, 0, 1
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		ip.fail("range() takes 1 to 3 arguments, got %d", len(ints))
	}
	if step == 0 {
		ip.fail("range() step must not be zero")
	}
	n := int64(0)
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && stop < start {
		n = (start - stop - step - 1) / -step
	}
	if n > maxListLen {
		ip.fail("range() of %d items is longer than %d", n, maxListLen)
	}
	ip.charge(int(n))
	out := make([]any, n)
	for i := range out {
		out[i] = start + int64(i)*step
	}
	return out
}

var monthNames = [...]string{"January", "February", "March", "April", "May", "June", "July", "August",
	"September", "October", "November", "December"}

// strftime implements the directives the JS port knows (%Y %m %d %b %B %H
// %M %%, English month names) and leaves any other directive as it is.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		switch f[i+1] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'm':
			b.WriteString(pad2(int(t.Month())))
		case 'd':
			b.WriteString(pad2(t.Day()))
		case 'b':
			b.WriteString(monthNames[t.Month()-1][:3])
		case 'B':
			b.WriteString(monthNames[t.Month()-1])
		case 'H':
			b.WriteString(pad2(t.Hour()))
		case 'M':
			b.WriteString(pad2(t.Minute()))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			continue
		}
		i++
	}
	return b.String()
}

func pad2(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

// testFunc is a Jinja test (`x is name`); arg is the second operand that
// selectattr passes to equalto.
type testFunc func(ip *interp, v, arg any) bool

var tests map[string]testFunc

func init() {
	tests = map[string]testFunc{
		"boolean":  func(_ *interp, v, _ any) bool { _, ok := v.(bool); return ok },
		"callable": func(_ *interp, v, _ any) bool { _, ok := v.(*function); return ok },
		"odd": func(ip *interp, v, _ any) bool {
			i, ok := v.(int64)
			if !ok {
				ip.fail("cannot odd on %s", typeName(v))
			}
			return i%2 != 0
		},
		"even": func(ip *interp, v, _ any) bool {
			i, ok := v.(int64)
			if !ok {
				ip.fail("cannot even on %s", typeName(v))
			}
			return i%2 == 0
		},
		"false":   func(_ *interp, v, _ any) bool { b, ok := v.(bool); return ok && !b },
		"true":    func(_ *interp, v, _ any) bool { b, ok := v.(bool); return ok && b },
		"none":    func(_ *interp, v, _ any) bool { return v == nil },
		"string":  func(_ *interp, v, _ any) bool { _, ok := v.(string); return ok },
		"number":  func(_ *interp, v, _ any) bool { return isNumber(v) },
		"integer": func(_ *interp, v, _ any) bool { _, ok := v.(int64); return ok },
		"iterable": func(_ *interp, v, _ any) bool {
			switch v.(type) {
			case []any, string:
				return true
			}
			return false
		},
		"mapping": func(_ *interp, v, _ any) bool { _, ok := v.(*Map); return ok },
		"sequence": func(_ *interp, v, _ any) bool {
			switch v.(type) {
			case []any, *Map, string:
				return true
			}
			return false
		},
		"lower": func(_ *interp, v, _ any) bool { s, ok := v.(string); return ok && s == jsLower(s) },
		"upper": func(_ *interp, v, _ any) bool { s, ok := v.(string); return ok && s == jsUpper(s) },
		"defined": func(_ *interp, v, _ any) bool {
			_, ok := v.(undefined)
			return !ok
		},
		"undefined": func(_ *interp, v, _ any) bool { _, ok := v.(undefined); return ok },
		"equalto":   func(_ *interp, v, arg any) bool { return strictEqual(v, arg) },
		"eq":        func(_ *interp, v, arg any) bool { return strictEqual(v, arg) },
	}
}

var (
	upperCaser = cases.Upper(language.Und)
	lowerCaser = cases.Lower(language.Und)
)

// jsUpper and jsLower are String.prototype.toUpperCase and toLowerCase:
// full Unicode case mapping, language-neutral (ß becomes SS).
func jsUpper(s string) string { return upperCaser.String(s) }
func jsLower(s string) string { return lowerCaser.String(s) }

// jsTitle upper-cases every ASCII word character that starts a word, the
// JS port's /\b\w/g replacement (other characters are unchanged).
func jsTitle(s string) string {
	r := []rune(s)
	for i, c := range r {
		if isWord(c) && (i == 0 || !isWord(r[i-1])) && c >= 'a' && c <= 'z' {
			r[i] = c - 'a' + 'A'
		}
	}
	return string(r)
}

// jsCapitalize upper-cases the first UTF-16 unit and leaves the rest as it
// is (unlike Python, which also lower-cases the rest).
func jsCapitalize(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	if r[0] >= 0x10000 {
		return s
	}
	return jsUpper(string(r[0])) + string(r[1:])
}

func method(name string, f func(ip *interp, args []any) any) *function {
	return &function{name: name, call: func(ip *interp, args []any, kw *Map) any {
		if kw.Len() > 0 {
			args = append(args, kw) // the JS port passes keyword arguments as a trailing mapping
		}
		return f(ip, args)
	}}
}

// stringMethod returns the value of attribute name of string s: one of the
// Python str methods the JS port implements, or length.
func stringMethod(s string, name string) any {
	switch name {
	case "length":
		return int64(utf16Len(s))
	case "upper":
		return method(name, func(*interp, []any) any { return jsUpper(s) })
	case "lower":
		return method(name, func(*interp, []any) any { return jsLower(s) })
	case "strip":
		// The JS port ignores strip's argument and trims whitespace.
		return method(name, func(*interp, []any) any { return strings.TrimFunc(s, isSpace) })
	case "lstrip":
		return method(name, func(*interp, []any) any { return strings.TrimLeftFunc(s, isSpace) })
	case "rstrip":
		return method(name, func(*interp, []any) any { return strings.TrimRightFunc(s, isSpace) })
	case "title":
		return method(name, func(*interp, []any) any { return jsTitle(s) })
	case "capitalize":
		return method(name, func(*interp, []any) any { return jsCapitalize(s) })
	case "startswith", "endswith":
		has := strings.HasPrefix
		if name == "endswith" {
			has = strings.HasSuffix
		}
		return method(name, func(ip *interp, args []any) any {
			if len(args) == 0 {
				ip.fail("%s() requires at least one argument", name)
			}
			switch p := args[0].(type) {
			case string:
				return has(s, p)
			case []any:
				for _, x := range p {
					xs, ok := x.(string)
					if !ok {
						ip.fail("%s() tuple elements must be strings", name)
					}
					if has(s, xs) {
						return true
					}
				}
				return false
			}
			ip.fail("%s() argument must be a string or tuple of strings", name)
			return nil
		})
	case "split":
		return method(name, func(ip *interp, args []any) any { return split(ip, s, args) })
	case "replace":
		return method(name, func(ip *interp, args []any) any { return replaceMethod(ip, s, args) })
	}
	return nil
}

func split(ip *interp, s string, args []any) any {
	var sep any
	if len(args) > 0 {
		sep = args[0]
	}
	maxsplit := int64(-1)
	if len(args) > 1 {
		m, ok := args[1].(int64)
		if !ok {
			ip.fail("maxsplit argument must be a number")
		}
		maxsplit = m
	}
	var parts []string
	switch sp := sep.(type) {
	case nil:
		text := strings.TrimLeftFunc(s, isSpace)
		for text != "" {
			end := strings.IndexFunc(text, isSpace)
			if end < 0 {
				end = len(text)
			}
			if maxsplit >= 0 && int64(len(parts)) >= maxsplit {
				parts = append(parts, text)
				break
			}
			parts = append(parts, text[:end])
			text = strings.TrimLeftFunc(text[end:], isSpace)
		}
	case string:
		if sp == "" {
			ip.fail("empty separator")
		}
		parts = strings.Split(s, sp)
		if maxsplit >= 0 && int64(len(parts)) > maxsplit {
			parts = append(parts[:maxsplit:maxsplit], strings.Join(parts[maxsplit:], sp))
		}
	default:
		ip.fail("sep argument must be a string or null")
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

func replaceMethod(ip *interp, s string, args []any) any {
	if len(args) < 2 {
		ip.fail("replace() requires at least two arguments")
	}
	old, ok1 := args[0].(string)
	repl, ok2 := args[1].(string)
	if !ok1 || !ok2 {
		ip.fail("replace() arguments must be strings")
	}
	var count any
	if len(args) > 2 {
		count = args[2]
		if kw, ok := count.(*Map); ok { // keyword arguments, appended by method()
			count, _ = kw.Get("count")
		}
	}
	n := -1
	switch c := count.(type) {
	case nil, undefined:
	case int64:
		if c >= 0 {
			n = int(min(c, math.MaxInt32))
		}
	default:
		ip.fail("replace() count argument must be a number or null")
	}
	if n == 0 {
		return s
	}
	if old == "" {
		// Python inserts the replacement around every character.
		var b strings.Builder
		rs := []rune(s)
		for i := 0; i <= len(rs); i++ {
			if n < 0 || i < n {
				b.WriteString(repl)
			}
			if i < len(rs) {
				b.WriteRune(rs[i])
			}
		}
		return ip.concat(b.String(), "")
	}
	if strings.Count(s, old) > 0 && len(repl) > len(old) && len(s)+strings.Count(s, old)*(len(repl)-len(old)) > maxStringLen {
		ip.fail("string longer than %d bytes", maxStringLen)
	}
	return strings.Replace(s, old, repl, n)
}

// mapMethod returns the bound method name of mapping m, or nil.
func mapMethod(m *Map, name string) *function {
	switch name {
	case "get":
		return method(name, func(ip *interp, args []any) any {
			if len(args) == 0 {
				ip.fail("object key must be a string: got UndefinedValue")
			}
			k, ok := args[0].(string)
			if !ok {
				ip.fail("object key must be a string: got %s", typeName(args[0]))
			}
			if v, ok := m.Get(k); ok {
				return v
			}
			if len(args) > 1 {
				return args[1]
			}
			return nil
		})
	case "items":
		return method(name, func(*interp, []any) any { return mapItems(m) })
	case "keys":
		return method(name, func(*interp, []any) any { return mapKeys(m) })
	case "values":
		return method(name, func(*interp, []any) any {
			out := make([]any, m.Len())
			for i, k := range m.Keys() {
				out[i] = m.vals[k]
			}
			return out
		})
	case "dictsort":
		return &function{name: name, call: func(ip *interp, args []any, kw *Map) any {
			get := func(i int, key string, def any) any {
				if i < len(args) {
					return args[i]
				}
				if v, ok := kw.Get(key); ok {
					return v
				}
				return def
			}
			cs, ok := get(0, "case_sensitive", false).(bool)
			if !ok {
				ip.fail("case_sensitive must be a boolean")
			}
			by, ok := get(1, "by", "key").(string)
			if !ok {
				ip.fail("by must be a string")
			}
			if by != "key" && by != "value" {
				ip.fail("by must be either 'key' or 'value'")
			}
			rev, ok := get(2, "reverse", false).(bool)
			if !ok {
				ip.fail("reverse must be a boolean")
			}
			idx := 0
			if by == "value" {
				idx = 1
			}
			return ip.sortValues(mapItems(m), func(x any) any { return x.([]any)[idx] }, cs, rev)
		}}
	}
	return nil
}

func mapItems(m *Map) []any {
	out := make([]any, m.Len())
	for i, k := range m.Keys() {
		out[i] = []any{k, m.vals[k]}
	}
	return out
}

// joinValue is how Array.prototype.join prints an element: none and
// undefined as empty strings.
func joinValue(v any) string {
	switch v.(type) {
	case nil, undefined:
		return ""
	}
	return jsString(v)
}

// unique keeps the first of equal items (JavaScript's ===: 1 and 1.0 are
// equal, lists and mappings only to themselves).
func unique(items []any) []any {
	out := []any{}
	seen := map[any]bool{}
	var objects []any
	for _, x := range items {
		var key any
		switch v := x.(type) {
		case int64:
			key = float64(v)
		case float64:
			key = v
			if v != v { // NaN is never === to anything
				out = append(out, x)
				continue
			}
		case nil, undefined, bool, string:
			key = v
		default:
			dup := false
			for _, y := range objects {
				if identical(x, y) {
					dup = true
					break
				}
			}
			if !dup {
				objects = append(objects, x)
				out = append(out, x)
			}
			continue
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, x)
		}
	}
	return out
}

func (ip *interp) toJSONOrFail(v any, o jsonOptions, undefNull bool) string {
	s, err := toJSON(v, o, 0, undefNull)
	if err != nil {
		ip.fail("%v", err)
	}
	if len(s) > maxStringLen {
		ip.fail("string longer than %d bytes", maxStringLen)
	}
	ip.charge(len(s) / 16)
	return s
}

func (ip *interp) applyFilter(v any, f node, e *env) any {
	switch f := f.(type) {
	case *identExpr:
		return ip.filterPlain(v, f.name)
	case *callExpr:
		id, ok := f.callee.(*identExpr)
		if !ok {
			ip.fail("unknown filter")
		}
		return ip.filterCall(v, id.name, f.args, e)
	}
	ip.fail("unknown filter")
	return nil
}

func (ip *interp) filterPlain(v any, name string) any {
	switch name {
	case "safe":
		return v
	case "tojson":
		return ip.toJSONOrFail(v, jsonOptions{}, true)
	}
	switch o := v.(type) {
	case []any:
		switch name {
		case "list":
			return o
		case "first", "last":
			if len(o) == 0 {
				// Jinja2's undefined; the JS port yields a bare JavaScript
				// undefined that most later uses of it trip over.
				return undefined{}
			}
			if name == "first" {
				return o[0]
			}
			return o[len(o)-1]
		case "length":
			return int64(len(o))
		case "reverse":
			out := make([]any, len(o))
			for i, x := range o {
				out[len(o)-1-i] = x
			}
			return out
		case "sort":
			return ip.sortValues(o, func(x any) any { return x }, false, false)
		case "join":
			var b strings.Builder
			for _, x := range o {
				b.WriteString(joinValue(x))
			}
			return ip.concat(b.String(), "")
		case "string":
			return ip.toJSONOrFail(o, jsonOptions{}, false)
		case "unique":
			ip.charge(len(o))
			return unique(o)
		}
		ip.fail("unknown ArrayValue filter: %s", name)
	case string:
		switch name {
		case "length":
			return int64(utf16Len(o))
		case "upper":
			return jsUpper(o)
		case "lower":
			return jsLower(o)
		case "title":
			return jsTitle(o)
		case "capitalize":
			return jsCapitalize(o)
		case "trim":
			return strings.TrimFunc(o, isSpace)
		case "indent":
			return indent(o, "    ", false, false)
		case "join", "string":
			return o
		case "int":
			if f, ok := jsParseInt(o); ok {
				return intResult(f)
			}
			return int64(0)
		case "float":
			if f, ok := jsParseFloat(o); ok {
				return f
			}
			return 0.0
		}
		ip.fail("unknown StringValue filter: %s", name)
	case int64, float64:
		switch name {
		case "abs":
			if i, ok := o.(int64); ok {
				if i < 0 {
					return -i
				}
				return i
			}
			return math.Abs(o.(float64))
		case "int":
			return intResult(math.Trunc(toFloat(o)))
		case "float":
			return toFloat(o)
		case "string":
			return display(o)
		}
		ip.fail("unknown NumericValue filter: %s", name)
	case *Map:
		switch name {
		case "items":
			return mapItems(o)
		case "length":
			return int64(o.Len())
		}
		if m := mapMethod(o, name); m != nil {
			return m.call(ip, nil, nil)
		}
		ip.fail("unknown ObjectValue filter: %s", name)
	case bool:
		switch name {
		case "bool":
			return o
		case "int":
			if o {
				return int64(1)
			}
			return int64(0)
		case "float":
			if o {
				return 1.0
			}
			return 0.0
		case "string":
			return display(o)
		}
		ip.fail("unknown BooleanValue filter: %s", name)
	}
	ip.fail("cannot apply filter %q to type: %s", name, typeName(v))
	return nil
}

func indent(s, pad string, first, blank bool) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if (!first && i == 0) || (!blank && l == "") {
			continue
		}
		lines[i] = pad + l
	}
	return strings.Join(lines, "\n")
}

func (ip *interp) filterCall(v any, name string, argNodes []node, e *env) any {
	args, kw := ip.evalArgs(argNodes, e)
	arg := func(i int, key string, def any) any {
		if i >= 0 && i < len(args) {
			return args[i]
		}
		if x, ok := kw.Get(key); ok {
			return x
		}
		return def
	}
	switch name {
	case "tojson":
		var o jsonOptions
		switch ind := arg(-1, "indent", nil).(type) {
		case nil:
		case int64:
			o.indent = int(min(max(ind, 0), 100))
		default:
			ip.fail("if set, indent must be a number")
		}
		var ok bool
		if o.ensureASCII, ok = arg(-1, "ensure_ascii", false).(bool); !ok {
			ip.fail("if set, ensure_ascii must be a boolean")
		}
		if o.sortKeys, ok = arg(-1, "sort_keys", false).(bool); !ok {
			ip.fail("if set, sort_keys must be a boolean")
		}
		switch sep := arg(-1, "separators", nil).(type) {
		case nil:
		case []any:
			if len(sep) != 2 {
				ip.fail("separators must be a tuple of two strings")
			}
			a, ok1 := sep[0].(string)
			b, ok2 := sep[1].(string)
			if !ok1 || !ok2 {
				ip.fail("separators must be a tuple of two strings")
			}
			o.itemSep, o.keySep, o.custom = a, b, true
		default:
			ip.fail("if set, separators must be a tuple of two strings")
		}
		return ip.toJSONOrFail(v, o, true)
	case "join":
		var parts []string
		switch o := v.(type) {
		case string:
			for _, r := range o {
				parts = append(parts, string(r))
			}
		case []any:
			for _, x := range o {
				parts = append(parts, joinValue(x))
			}
		default:
			ip.fail("cannot apply filter %q to type: %s", name, typeName(v))
		}
		sep, ok := arg(0, "separator", "").(string)
		if !ok {
			ip.fail("separator must be a string")
		}
		ip.charge(len(parts))
		total := 0
		for _, p := range parts {
			total += len(p) + len(sep)
		}
		if total > maxStringLen {
			ip.fail("string longer than %d bytes", maxStringLen)
		}
		return strings.Join(parts, sep)
	case "int", "float":
		var def any = int64(0)
		if name == "float" {
			def = 0.0
		}
		def = arg(0, "default", def)
		switch o := v.(type) {
		case string:
			if name == "int" {
				if f, ok := jsParseInt(o); ok {
					return intResult(f)
				}
				return def
			}
			if f, ok := jsParseFloat(o); ok {
				return f
			}
			return def
		case int64, float64:
			if name == "int" {
				return intResult(math.Trunc(toFloat(o)))
			}
			return toFloat(o)
		case bool:
			if name == "int" {
				return int64(toFloat(o))
			}
			return toFloat(o)
		}
		ip.fail("cannot apply filter %q to type: %s", name, typeName(v))
	case "default":
		var def any = ""
		if len(args) > 0 {
			def = args[0]
		}
		boolean, ok := arg(1, "boolean", false).(bool)
		if !ok {
			ip.fail("`default` filter flag must be a boolean")
		}
		if _, undef := v.(undefined); undef || (boolean && !truthy(v)) {
			return def
		}
		return v
	}
	switch o := v.(type) {
	case []any:
		switch name {
		case "sort":
			rev, ok := arg(0, "reverse", false).(bool)
			if !ok {
				ip.fail("reverse must be a boolean")
			}
			cs, ok := arg(1, "case_sensitive", false).(bool)
			if !ok {
				ip.fail("case_sensitive must be a boolean")
			}
			var path string
			switch a := arg(2, "attribute", nil).(type) {
			case nil:
			case string:
				path = a
			case int64:
				path = strconv.FormatInt(a, 10)
			default:
				ip.fail("attribute must be a string, integer, or null")
			}
			key := func(x any) any { return x }
			if path != "" {
				key = func(x any) any { return attributeValue(x, path) }
			}
			return ip.sortValues(o, key, cs, rev)
		case "selectattr", "rejectattr":
			for _, x := range o {
				switch x.(type) {
				case *Map, *namespace:
				default:
					ip.fail("`%s` can only be applied to array of objects", name)
				}
			}
			for _, a := range argNodes {
				if _, ok := a.(*strLit); !ok {
					ip.fail("arguments of `%s` must be strings", name)
				}
			}
			if len(args) == 0 {
				ip.fail("`%s` needs an attribute name", name)
			}
			attr := args[0].(string)
			test := func(ip *interp, v, _ any) bool { return truthy(v) }
			var val any = undefined{}
			if len(args) > 1 {
				t, ok := tests[args[1].(string)]
				if !ok {
					ip.fail("unknown test: %s", args[1])
				}
				test = t
			}
			if len(args) > 2 {
				val = args[2]
			}
			out := []any{}
			for _, x := range o {
				var a any
				var has bool
				switch m := x.(type) {
				case *Map:
					a, has = m.Get(attr)
				case *namespace:
					a, has = m.m.Get(attr)
				}
				r := has && test(ip, a, val)
				if r == (name == "selectattr") {
					out = append(out, x)
				}
			}
			return out
		case "map":
			attr, has := kw.Get("attribute")
			if !has {
				ip.fail("`map` expressions without `attribute` set are not currently supported")
			}
			path, ok := attr.(string)
			if !ok {
				ip.fail("attribute must be a string")
			}
			def, hasDef := kw.Get("default")
			out := make([]any, len(o))
			for i, x := range o {
				switch x.(type) {
				case *Map, *namespace:
				default:
					ip.fail("items in map must be an object")
				}
				a := attributeValue(x, path)
				if _, u := a.(undefined); u && hasDef {
					a = def
				}
				out[i] = a
			}
			return out
		}
		ip.fail("unknown ArrayValue filter: %s", name)
	case string:
		switch name {
		case "indent":
			pad := "    "
			switch w := arg(0, "width", int64(4)).(type) {
			case int64:
				pad = strings.Repeat(" ", int(min(max(w, 0), 100)))
			case string:
				pad = w
			default:
				ip.fail("width must be an integer or a string")
			}
			first := truthy(arg(1, "first", false))
			blank := truthy(arg(2, "blank", false))
			out := indent(o, pad, first, blank)
			if len(out) > maxStringLen {
				ip.fail("string longer than %d bytes", maxStringLen)
			}
			return out
		case "replace":
			if kw.Len() > 0 {
				args = append(args, kw)
			} else {
				args = append(args, &Map{})
			}
			return replaceMethod(ip, o, args)
		}
		ip.fail("unknown StringValue filter: %s", name)
	case *Map:
		if m := mapMethod(o, name); m != nil {
			return m.call(ip, args, kw)
		}
		ip.fail("unknown ObjectValue filter: %s", name)
	}
	ip.fail("cannot apply filter %q to type: %s", name, typeName(v))
	return nil
}

// attributeValue follows a dotted path ("a.b", "items.0") through mappings,
// namespaces and lists, undefined where it breaks off.
func attributeValue(v any, path string) any {
	for _, part := range strings.Split(path, ".") {
		switch o := v.(type) {
		case *Map:
			x, ok := o.Get(part)
			if !ok {
				return undefined{}
			}
			v = x
		case *namespace:
			x, ok := o.m.Get(part)
			if !ok {
				return undefined{}
			}
			v = x
		case []any:
			f, ok := jsParseInt(part)
			if !ok || f < 0 || f >= float64(len(o)) {
				return undefined{}
			}
			v = o[int(f)]
		default:
			return undefined{}
		}
	}
	return v
}

var (
	parseIntRe   = regexp.MustCompile(`^[+-]?[0-9]+`)
	parseFloatRe = regexp.MustCompile(`^[+-]?(Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)`)
)

// jsParseInt is parseInt(s, 10): leading whitespace, then the longest
// signed decimal-digit prefix.
func jsParseInt(s string) (float64, bool) {
	m := parseIntRe.FindString(strings.TrimLeftFunc(s, isSpace))
	if m == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(m, 64)
	if err != nil && !isRangeErr(err) {
		return 0, false
	}
	return f, true
}

// jsParseFloat is parseFloat(s): leading whitespace, then the longest
// prefix that is a decimal literal or Infinity.
func jsParseFloat(s string) (float64, bool) {
	m := parseFloatRe.FindString(strings.TrimLeftFunc(s, isSpace))
	if m == "" {
		return 0, false
	}
	switch strings.TrimLeft(m, "+-") {
	case "Infinity":
		if m[0] == '-' {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	}
	f, err := parseFloatStrict(m)
	return f, err == nil
}

func parseFloatStrict(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !isRangeErr(err) {
		return 0, err
	}
	return f, nil
}
