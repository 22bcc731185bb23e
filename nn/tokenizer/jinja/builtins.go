package jinja

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

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
				msg = ip.jsString(args[0])
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
		// A directive of two bytes writes at most nine (%B, September).
		ip.spendScan(len(f))
		ip.produce(len(f) / 2 * 9)
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
			ip.produceItems(src.Len())
			for _, k := range src.Keys() {
				m.Set(k, src.val(k))
			}
		case []any:
			ip.produceItems(len(src))
			for _, pair := range src {
				var kv []any
				switch p := pair.(type) {
				case []any:
					kv = p
				case string:
					// A string of two characters is a pair; only the first
					// three are looked at, so a long one costs nothing.
					for _, r := range p {
						if len(kv) == 3 {
							break
						}
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
				ip.spend(int64(len(k)))
				m.Set(k, kv[1])
			}
		default:
			ip.fail("'%s' object is not iterable", typeName(src))
		}
	}
	ip.produceItems(kw.Len())
	for _, k := range kw.Keys() {
		m.Set(k, kw.val(k))
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
	ip.checkListLen(int(min(n, maxListLen+1)))
	ip.allocate(n * (itemCost + 8)) // the list and its boxed integers
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
		"lower": func(ip *interp, v, _ any) bool { s, ok := v.(string); return ok && s == ip.lower(s) },
		"upper": func(ip *interp, v, _ any) bool { s, ok := v.(string); return ok && s == ip.upper(s) },
		"defined": func(_ *interp, v, _ any) bool {
			_, ok := v.(undefined)
			return !ok
		},
		"undefined": func(_ *interp, v, _ any) bool { _, ok := v.(undefined); return ok },
		"equalto":   func(ip *interp, v, arg any) bool { return ip.strictEqual(v, arg) },
		"eq":        func(ip *interp, v, arg any) bool { return ip.strictEqual(v, arg) },
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

// upper, lower, title and capitalize are the case mappings with their
// work: each character is mapped, and the result is a new string.
func (ip *interp) upper(s string) string { return ip.mapped(s, jsUpper) }
func (ip *interp) lower(s string) string { return ip.mapped(s, jsLower) }
func (ip *interp) title(s string) string { return ip.mapped(s, jsTitle) }
func (ip *interp) capitalize(s string) string {
	// Only the first character is mapped; the rest is copied, or checked
	// when it is already UTF-8.
	ip.spendScan(len(s))
	return ip.mapped(s, jsCapitalize)
}

// mapped counts the work and memory of f(s), a string of about s's length
// (case mapping can lengthen a string, "ß" to "SS"; the excess is counted
// once the result is there).
func (ip *interp) mapped(s string, f func(string) string) string {
	if s == "" {
		return f(s)
	}
	ip.spendMap(len(s))
	ip.produce(len(s))
	out := f(s)
	if len(out) > len(s) {
		ip.produce(len(out) - len(s))
	}
	return out
}

// jsTitle upper-cases every ASCII word character that starts a word, the
// JS port's /\b\w/g replacement (other characters are unchanged; bytes that
// are not UTF-8 become U+FFFD).
func jsTitle(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	prev := rune(-1)
	for _, c := range s {
		if isWord(c) && !isWord(prev) && c >= 'a' && c <= 'z' {
			b.WriteByte(byte(c - 'a' + 'A'))
		} else {
			b.WriteRune(c)
		}
		prev = c
	}
	return b.String()
}

// jsCapitalize upper-cases the first UTF-16 unit and leaves the rest as it
// is (unlike Python, which also lower-cases the rest; bytes that are not
// UTF-8 become U+FFFD).
func jsCapitalize(s string) string {
	if s == "" {
		return s
	}
	r, w := utf8.DecodeRuneInString(s)
	if r >= 0x10000 {
		return s
	}
	rest := s[w:]
	if !utf8.ValidString(rest) {
		rest = runesString(rest)
	}
	return jsUpper(string(r)) + rest
}

// runesSize returns the number of characters of s and the length of
// string([]rune(s)), in which each byte that is not UTF-8 is U+FFFD.
func (ip *interp) runesSize(s string) (chars, size int) {
	ip.spendScan(len(s))
	for _, r := range s {
		chars++
		size += utf8.RuneLen(r)
	}
	return chars, size
}

// runesString is string([]rune(s)): s with every byte that is not UTF-8
// replaced by U+FFFD.
func runesString(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
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
func stringMethod(ip *interp, s string, name string) any {
	switch name {
	case "length":
		ip.spendScan(len(s))
		return int64(utf16Len(s))
	case "upper":
		return method(name, func(ip *interp, _ []any) any { return ip.upper(s) })
	case "lower":
		return method(name, func(ip *interp, _ []any) any { return ip.lower(s) })
	case "strip":
		// The JS port ignores strip's argument and trims whitespace.
		return method(name, func(ip *interp, _ []any) any { return ip.trim(s, strings.TrimFunc) })
	case "lstrip":
		return method(name, func(ip *interp, _ []any) any { return ip.trim(s, strings.TrimLeftFunc) })
	case "rstrip":
		return method(name, func(ip *interp, _ []any) any { return ip.trim(s, strings.TrimRightFunc) })
	case "title":
		return method(name, func(ip *interp, _ []any) any { return ip.title(s) })
	case "capitalize":
		return method(name, func(ip *interp, _ []any) any { return ip.capitalize(s) })
	case "startswith", "endswith":
		has := strings.HasPrefix
		if name == "endswith" {
			has = strings.HasSuffix
		}
		return method(name, func(ip *interp, args []any) any {
			if len(args) == 0 {
				ip.fail("%s() requires at least one argument", name)
			}
			// has compares len(p) bytes, when s is that long.
			cost := func(p string) int64 {
				if len(p) <= len(s) {
					return itemCost + int64(len(p))
				}
				return itemCost
			}
			switch p := args[0].(type) {
			case string:
				ip.spend(cost(p))
				return has(s, p)
			case []any:
				for _, x := range p {
					xs, ok := x.(string)
					if !ok {
						ip.fail("%s() tuple elements must be strings", name)
					}
					ip.spend(cost(xs))
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

// trim is a trim function applied to s, with the work of reading the white
// space it removes (and the character that stops it).
func (ip *interp) trim(s string, f func(string, func(rune) bool) string) string {
	out := f(s, isSpace)
	ip.spendScan(len(s) - len(out) + 8)
	return out
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
		// Count the parts, then make them.
		fields := func(emit func(string)) {
			text := strings.TrimLeftFunc(s, isSpace)
			for n := int64(0); text != ""; n++ {
				end := strings.IndexFunc(text, isSpace)
				if end < 0 {
					end = len(text)
				}
				if maxsplit >= 0 && n >= maxsplit {
					emit(text)
					break
				}
				emit(text[:end])
				text = strings.TrimLeftFunc(text[end:], isSpace)
			}
		}
		ip.spendScan(2 * len(s))
		n := 0
		fields(func(string) { n++ })
		ip.checkListLen(n)
		ip.allocate(2 * int64(n) * itemCost) // parts, then the list
		parts = make([]string, 0, n)
		fields(func(p string) { parts = append(parts, p) })
	case string:
		if sp == "" {
			ip.fail("empty separator")
		}
		// Count the parts before making them: a 64 MiB string of
		// separators would otherwise be 64 million of them.
		ip.spend(2 * int64(len(s)))
		n := int64(strings.Count(s, sp)) + 1
		if maxsplit >= 0 && maxsplit < n-1 {
			n = maxsplit + 1
		}
		ip.checkListLen(int(min(n, maxListLen+1)))
		ip.allocate(2 * n * itemCost) // parts, then the list
		if maxsplit >= 0 {
			parts = strings.SplitN(s, sp, int(n))
		} else {
			parts = strings.Split(s, sp)
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
		// Python inserts the replacement around every character (and
		// reads s as characters, each invalid byte becoming U+FFFD).
		chars, size := ip.runesSize(s)
		k := chars + 1
		if n >= 0 {
			k = min(k, n)
		}
		ip.produce(size + k*len(repl))
		var b strings.Builder
		b.Grow(size + k*len(repl))
		i := 0
		for _, r := range s {
			if n < 0 || i < n {
				b.WriteString(repl)
			}
			b.WriteRune(r)
			i++
		}
		if n < 0 || i < n {
			b.WriteString(repl)
		}
		return b.String()
	}
	ip.spend(int64(len(s)))
	k := strings.Count(s, old)
	if n >= 0 {
		k = min(k, n)
	}
	if k == 0 {
		return s
	}
	ip.produce(len(s) + k*(len(repl)-len(old)))
	ip.spendMap(k) // per replacement
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
			ip.spend(int64(len(k)))
			if v, ok := m.Get(k); ok {
				return v
			}
			if len(args) > 1 {
				return args[1]
			}
			return nil
		})
	case "items":
		return method(name, func(ip *interp, _ []any) any { return ip.mapItems(m) })
	case "keys":
		return method(name, func(ip *interp, _ []any) any { return ip.mapKeys(m) })
	case "values":
		return method(name, func(ip *interp, _ []any) any {
			ip.produceItems(m.Len())
			out := make([]any, m.Len())
			for i, k := range m.Keys() {
				out[i] = m.val(k)
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
			return ip.sortValues(ip.mapItems(m), func(x any) any { return x.([]any)[idx] }, cs, rev)
		}}
	}
	return nil
}

func (ip *interp) mapItems(m *Map) []any {
	ip.produceItems(3 * m.Len()) // the list and a pair per key
	out := make([]any, m.Len())
	for i, k := range m.Keys() {
		out[i] = []any{k, m.val(k)}
	}
	return out
}

// joinValue is how Array.prototype.join prints an element: none and
// undefined as empty strings.
func (ip *interp) joinValue(v any) string {
	switch v.(type) {
	case nil, undefined:
		return ""
	}
	return ip.jsString(v)
}

// unique keeps the first of equal items (JavaScript's ===: 1 and 1.0 are
// equal, lists and mappings only to themselves). It hashes every item, the
// containers by identity, so it takes linear time.
func (ip *interp) unique(items []any) []any {
	type sliceKey struct {
		data *any
		n    int
	}
	out := []any{}
	seen := map[any]bool{}
	for _, x := range items {
		ip.spend(itemCost)
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
		case string:
			ip.spend(int64(len(v)))
			key = v
		case nil, undefined, bool:
			key = v
		case []any:
			key = sliceKey{unsafe.SliceData(v), len(v)}
		default: // *Map, *namespace, *function: pointers
			key = v
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, x)
		}
	}
	ip.produceItems(2 * len(out))
	return out
}

// writeJSONOrFail writes v as JSON into b, failing the render when it
// cannot be serialised.
func (ip *interp) writeJSONOrFail(b *strings.Builder, v any, o jsonOptions, undefNull bool) {
	if err := ip.writeJSON(b, v, o, 0, undefNull); err != nil {
		ip.fail("%v", err)
	}
}

// toJSONOrFail returns v as JSON, failing the render when it cannot be
// serialised.
func (ip *interp) toJSONOrFail(v any, o jsonOptions, undefNull bool) string {
	var b strings.Builder
	if s, ok := v.(string); ok {
		b.Grow(len(s) + 2)
	}
	ip.writeJSONOrFail(&b, v, o, undefNull)
	return b.String()
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
			ip.produceItems(len(o))
			out := make([]any, len(o))
			for i, x := range o {
				out[len(o)-1-i] = x
			}
			return out
		case "sort":
			return ip.sortValues(o, func(x any) any { return x }, false, false)
		case "join":
			return ip.join(o, "")
		case "string":
			return ip.toJSONOrFail(o, jsonOptions{}, false)
		case "unique":
			return ip.unique(o)
		}
		ip.fail("unknown ArrayValue filter: %s", name)
	case string:
		switch name {
		case "length":
			ip.spendScan(len(o))
			return int64(utf16Len(o))
		case "upper":
			return ip.upper(o)
		case "lower":
			return ip.lower(o)
		case "title":
			return ip.title(o)
		case "capitalize":
			return ip.capitalize(o)
		case "trim":
			return ip.trim(o, strings.TrimFunc)
		case "indent":
			return ip.indent(o, "    ", false, false)
		case "join", "string":
			return o
		case "int":
			if f, ok := ip.parseInt(o); ok {
				return intResult(f)
			}
			return int64(0)
		case "float":
			if f, ok := ip.parseFloat(o); ok {
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
			return scalarText(o)
		}
		ip.fail("unknown NumericValue filter: %s", name)
	case *Map:
		switch name {
		case "items":
			return ip.mapItems(o)
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
			return scalarText(o)
		}
		ip.fail("unknown BooleanValue filter: %s", name)
	}
	ip.fail("cannot apply filter %q to type: %s", name, typeName(v))
	return nil
}

// indent puts pad before every line of s but the first (unless first)
// and the empty ones (unless blank). It measures the result before it
// makes it: a long pad on many lines is a large string.
func (ip *interp) indent(s, pad string, first, blank bool) string {
	padded := func(i int, line string) bool { return (first || i > 0) && (blank || line != "") }
	ip.spend(2 * int64(len(s)))
	n := 0
	eachLine(s, func(i int, line string) {
		if padded(i, line) {
			n++
		}
	})
	ip.produce(len(s) + n*len(pad))
	ip.spendMap(n) // per line
	var b strings.Builder
	b.Grow(len(s) + n*len(pad))
	eachLine(s, func(i int, line string) {
		if i > 0 {
			b.WriteByte('\n')
		}
		if padded(i, line) {
			b.WriteString(pad)
		}
		b.WriteString(line)
	})
	return b.String()
}

// eachLine calls f with each line of s split at "\n" and its index.
func eachLine(s string, f func(int, string)) {
	for i := 0; ; i++ {
		line, rest, more := strings.Cut(s, "\n")
		f(i, line)
		if !more {
			return
		}
		s = rest
	}
}

// join joins the text of the items with sep, measuring the result before
// it makes it.
func (ip *interp) join(items []any, sep string) string {
	ip.charge(len(items))
	parts := make([]string, len(items))
	ip.produceItems(len(items))
	total := 0
	for i, x := range items {
		parts[i] = ip.joinValue(x)
		total += len(parts[i])
		if i > 0 {
			total += len(sep)
		}
		if total > maxStringLen {
			ip.tooLong()
		}
	}
	ip.produce(total)
	return strings.Join(parts, sep)
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
		switch v.(type) {
		case string, []any:
		default:
			ip.fail("cannot apply filter %q to type: %s", name, typeName(v))
		}
		sep, ok := arg(0, "separator", "").(string)
		if !ok {
			ip.fail("separator must be a string")
		}
		if o, ok := v.([]any); ok {
			return ip.join(o, sep)
		}
		// The characters of a string, joined with sep.
		o := v.(string)
		chars, size := ip.runesSize(o)
		if chars == 0 {
			return ""
		}
		ip.produce(size + (chars-1)*len(sep))
		ip.spendMap(chars)
		var b strings.Builder
		b.Grow(size + (chars-1)*len(sep))
		k := 0
		for _, r := range o {
			if k > 0 {
				b.WriteString(sep)
			}
			b.WriteRune(r)
			k++
		}
		return b.String()
	case "int", "float":
		var def any = int64(0)
		if name == "float" {
			def = 0.0
		}
		def = arg(0, "default", def)
		switch o := v.(type) {
		case string:
			if name == "int" {
				if f, ok := ip.parseInt(o); ok {
					return intResult(f)
				}
				return def
			}
			if f, ok := ip.parseFloat(o); ok {
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
				key = func(x any) any { return ip.attributeValue(x, path) }
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
			ip.produceItems(len(o))
			for _, x := range o {
				ip.spend(itemCost + int64(len(attr)))
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
			ip.produceItems(len(o))
			out := make([]any, len(o))
			for i, x := range o {
				switch x.(type) {
				case *Map, *namespace:
				default:
					ip.fail("items in map must be an object")
				}
				a := ip.attributeValue(x, path)
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
			return ip.indent(o, pad, first, blank)
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
func (ip *interp) attributeValue(v any, path string) any {
	ip.spend(itemCost + int64(len(path)))
	for more := true; more; {
		var part string
		part, path, more = strings.Cut(path, ".")
		ip.spend(itemCost)
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

// parseInt and parseFloat are jsParseInt and jsParseFloat with their work.
func (ip *interp) parseInt(s string) (float64, bool) {
	ip.spendScan(len(s))
	return jsParseInt(s)
}

func (ip *interp) parseFloat(s string) (float64, bool) {
	ip.spendScan(len(s))
	return jsParseFloat(s)
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
