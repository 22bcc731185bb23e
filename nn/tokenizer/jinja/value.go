package jinja

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Map is a string-keyed mapping that keeps its keys in insertion order, as
// JavaScript objects and Python dicts do. Chat templates serialise mappings
// with tojson and iterate them with items(), so the order in which a tool's
// JSON schema or a tool call's arguments were written is part of the
// rendered prompt; a Go map cannot carry it. ParseJSON produces Maps.
//
// The zero Map is empty and ready to use.
type Map struct {
	keys []string
	vals map[string]any
	// small, when not nil, holds the values of keys in order in place of
	// vals: the loop mapping each iteration of a for loop makes, for which
	// a Go map of nine entries would cost more than the rest of the
	// iteration. A Set turns it into vals.
	small []any
}

// NewMap returns a Map holding the given key/value pairs in order; a key
// given twice keeps its first position and its last value. It panics if
// pairs has an odd length or a key is not a string (a programming error).
func NewMap(pairs ...any) *Map {
	if len(pairs)%2 != 0 {
		panic(fmt.Sprintf("jinja: NewMap needs key/value pairs, got %d values", len(pairs)))
	}
	m := &Map{}
	for i := 0; i < len(pairs); i += 2 {
		k, ok := pairs[i].(string)
		if !ok {
			panic(fmt.Sprintf("jinja: NewMap key %d is %T, not a string", i/2, pairs[i]))
		}
		m.Set(k, pairs[i+1])
	}
	return m
}

// Set sets key k to v, appending k if it is new.
func (m *Map) Set(k string, v any) {
	if m.small != nil {
		m.vals = make(map[string]any, len(m.keys)+1)
		for i, key := range m.keys {
			m.vals[key] = m.small[i]
		}
		m.keys = m.keys[:len(m.keys):len(m.keys)] // an append copies
		m.small = nil
	}
	if m.vals == nil {
		m.vals = make(map[string]any)
	}
	if _, ok := m.vals[k]; !ok {
		m.keys = append(m.keys, k)
	}
	m.vals[k] = v
}

// Get returns the value of key k and whether it is present.
func (m *Map) Get(k string) (any, bool) {
	if m == nil {
		return nil, false
	}
	if m.small != nil {
		for i, key := range m.keys {
			if key == k {
				return m.small[i], true
			}
		}
		return nil, false
	}
	v, ok := m.vals[k]
	return v, ok
}

// val returns the value of key k, which the caller knows is present.
func (m *Map) val(k string) any {
	v, _ := m.Get(k)
	return v
}

// Keys returns the keys in insertion order. The caller must not modify it.
func (m *Map) Keys() []string {
	if m == nil {
		return nil
	}
	return m.keys
}

// Len returns the number of keys.
func (m *Map) Len() int {
	if m == nil {
		return 0
	}
	return len(m.keys)
}

// MarshalJSON writes the mapping as a JSON object with its keys in order.
func (m *Map) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := marshalOrdered(&b, m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// UnmarshalJSON decodes a JSON object into m, replacing its contents, with
// nested objects as *Map as ParseJSON makes them; it lets a *Map field of
// a struct decoded with encoding/json (a tool call's arguments in a
// request) keep its key order.
func (m *Map) UnmarshalJSON(data []byte) error {
	v, err := ParseJSON(data)
	if err != nil {
		return err
	}
	obj, ok := v.(*Map)
	if !ok {
		return fmt.Errorf("jinja: JSON value is %s, not an object", typeName(v))
	}
	*m = *obj
	return nil
}

func marshalOrdered(b *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case *Map:
		b.WriteByte('{')
		for i, k := range v.Keys() {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			if err := marshalOrdered(b, v.val(k)); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := marshalOrdered(b, x); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	default:
		enc, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.Write(enc)
	}
	return nil
}

// ParseJSON decodes a JSON document into the values Render accepts, with
// every object as a *Map in the key order of the text (a repeated key keeps
// its first position and its last value, as JSON.parse does), arrays as
// []any, strings, bools, nil, and numbers as int64 when they are integers
// that float64 holds exactly, float64 otherwise — JSON.parse makes 1.0 the
// integer 1 too.
func ParseJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("jinja: parse JSON: %w", err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("jinja: parse JSON: data after the top-level value at offset %d", dec.InputOffset())
	}
	return v, nil
}

const maxJSONDepth = 10000

// maxPrintDepth bounds the nesting tojson and printing follow (Python's
// json.dumps gives up near the same depth, at its recursion limit).
const maxPrintDepth = 1000

func decodeJSONValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nesting deeper than %d at offset %d", maxJSONDepth, dec.InputOffset())
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := &Map{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is %v at offset %d", kt, dec.InputOffset())
				}
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				m.Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return m, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected %v at offset %d", t, dec.InputOffset())
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil && !isRangeErr(err) {
			return nil, fmt.Errorf("number %s: %w", t, err)
		}
		return numberValue(f), nil
	default:
		return t, nil // string, bool, nil
	}
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// maxSafeInt is the largest integer below which every integer is exactly a
// float64 (Number.MAX_SAFE_INTEGER + 1).
const maxSafeInt = 1 << 53

// numberValue classifies a JavaScript number as the JS port does: integral
// finite values are integers (int64), everything else floats.
func numberValue(f float64) any {
	if f == math.Trunc(f) && math.Abs(f) <= maxSafeInt {
		return int64(f)
	}
	return f
}

// undefined is the value of a missing variable or attribute. It is distinct
// from none (nil): `x is defined` tells them apart, and the output of an
// undefined expression is empty.
type undefined struct{}

// namespace is the mutable object namespace() returns; {% set ns.x = v %}
// assigns its attributes.
type namespace struct{ m *Map }

// function is a callable value: a global (range, raise_exception, …), a
// method bound to its receiver, or a macro. kw holds keyword arguments in
// call order (nil when there are none).
type function struct {
	name string
	call func(ip *interp, args []any, kw *Map) any
}

// keyOrder gives the keys of a plain Go map in a deterministic order:
// sorted, except that the keys in first (when present) come first in that
// order.
func keyOrder(m map[string]any, first []string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(first) == 0 {
		return keys
	}
	out := make([]string, 0, len(keys))
	for _, f := range first {
		if _, ok := m[f]; ok {
			out = append(out, f)
		}
	}
	for _, k := range keys {
		if !contains(first, k) {
			out = append(out, k)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// convert turns a caller's value into the engine's representation (nil,
// bool, int64, float64, string, []any, *Map). Plain Go maps become Maps with
// sorted keys; order names the keys that come first at each depth (used for
// tool schemas, see RenderChat). path names the value in errors.
func convert(v any, path string, order [][]string) (any, error) {
	var first []string
	var rest [][]string
	if len(order) > 0 {
		first, rest = order[0], order[1:]
	}
	switch v := v.(type) {
	case nil, bool, string:
		return v, nil
	case undefined:
		return v, nil
	case int:
		return int64(v), nil
	case int8:
		return int64(v), nil
	case int16:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case int64:
		return v, nil
	case uint:
		return numberValue(float64(v)), nil
	case uint8:
		return int64(v), nil
	case uint16:
		return int64(v), nil
	case uint32:
		return int64(v), nil
	case uint64:
		return numberValue(float64(v)), nil
	case float32:
		return numberValue(float64(v)), nil
	case float64:
		return numberValue(v), nil
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil && !isRangeErr(err) {
			return nil, fmt.Errorf("%s: number %q: %w", path, string(v), err)
		}
		return numberValue(f), nil
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			c, err := convert(x, fmt.Sprintf("%s[%d]", path, i), nil)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case []string:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = x
		}
		return out, nil
	case []map[string]any:
		out := make([]any, len(v))
		for i, x := range v {
			c, err := convert(x, fmt.Sprintf("%s[%d]", path, i), order)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case []*Map:
		out := make([]any, len(v))
		for i, x := range v {
			c, err := convert(x, fmt.Sprintf("%s[%d]", path, i), nil)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case map[string]any:
		m := &Map{}
		for _, k := range keyOrder(v, first) {
			c, err := convert(v[k], path+"."+k, rest)
			if err != nil {
				return nil, err
			}
			m.Set(k, c)
		}
		return m, nil
	case map[string]string:
		m := &Map{}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			m.Set(k, v[k])
		}
		return m, nil
	case *Map:
		if v == nil {
			return nil, nil
		}
		m := &Map{}
		for _, k := range v.keys {
			c, err := convert(v.val(k), path+"."+k, nil)
			if err != nil {
				return nil, err
			}
			m.Set(k, c)
		}
		return m, nil
	}
	return nil, fmt.Errorf("%s: unsupported value type %T (want nil, bool, a number, string, []any, map[string]any or *jinja.Map)", path, v)
}

// typeName names a value's type in error messages with the JS port's names.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NullValue"
	case undefined:
		return "UndefinedValue"
	case bool:
		return "BooleanValue"
	case int64:
		return "IntegerValue"
	case float64:
		return "FloatValue"
	case string:
		return "StringValue"
	case []any:
		return "ArrayValue"
	case *Map:
		return "ObjectValue"
	case *namespace:
		return "NamespaceValue"
	case *function:
		return "FunctionValue"
	}
	return fmt.Sprintf("%T", v)
}

// truthy is Python's truthiness as the JS port implements it: empty
// strings, zero, none, undefined and empty arrays and mappings are false;
// namespaces and functions are true.
func truthy(v any) bool {
	switch v := v.(type) {
	case nil, undefined:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0 && !math.IsNaN(v)
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case *Map:
		return v.Len() > 0
	}
	return true
}

// jsNumber formats f as JavaScript's Number.prototype.toString does:
// the shortest decimal that round-trips, in plain notation from 1e-7 up to
// 1e21 and in exponent notation outside it.
func jsNumber(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		return "0"
	}
	a := math.Abs(f)
	if a >= 1e-7 && a < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, exp, _ := strings.Cut(s, "e")
	sign := exp[0]
	exp = strings.TrimLeft(exp[1:], "0")
	if exp == "" {
		exp = "0"
	}
	return mant + "e" + string(sign) + exp
}

// floatString is how the JS port prints a float: integral values keep a
// ".0" (Python's repr), others as JavaScript prints them.
func floatString(f float64) string {
	if f == 0 && math.Signbit(f) {
		return "-0.0"
	}
	if !math.IsInf(f, 0) && !math.IsNaN(f) && f == math.Trunc(f) {
		if math.Abs(f) >= 1e21 {
			return jsNumber(f) // toFixed falls back to exponent notation
		}
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	return jsNumber(f)
}

// scalarText is the text of a value that is not a list, mapping or
// namespace, in the output and where the JS port calls
// RuntimeValue.toString().
func scalarText(v any) string {
	switch v := v.(type) {
	case nil:
		// The JS port's none wraps JavaScript's undefined, so it prints as
		// "undefined" where a list is turned into text ([none] ~ "").
		return "undefined"
	case undefined:
		return "undefined"
	case bool:
		if v {
			return "true"
		}
		return "false"
	case int64:
		return jsNumber(float64(v))
	case float64:
		return floatString(v)
	case string:
		return v
	case *function:
		return "function " + v.name + "() { [native code] }"
	}
	return fmt.Sprint(v)
}

// writeDisplay writes a value's text where the JS port calls
// RuntimeValue.toString(): lists and mappings as JSON, or nothing when
// they cannot be (a function inside, nesting too deep).
func (ip *interp) writeDisplay(b *strings.Builder, v any) {
	switch v.(type) {
	case []any, *Map, *namespace:
		var tmp strings.Builder
		if ip.writeJSON(&tmp, v, jsonOptions{}, 0, false) == nil {
			ip.write(b, tmp.String())
		}
		return
	}
	ip.write(b, scalarText(v))
}

// jsString is JavaScript's String(x) of the value a runtime value wraps,
// which the JS port uses for `~`, `+` with a string and join: numbers print
// without ".0", arrays join their elements with commas, mappings print as
// "[object Map]".
func (ip *interp) jsString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return jsNumber(float64(v))
	case float64:
		return jsNumber(v)
	case []any:
		ip.spend(int64(len(v)) * itemCost)
		var b strings.Builder
		for i, x := range v {
			if i > 0 {
				ip.writeByte(&b, ',')
			}
			ip.writeDisplay(&b, x)
		}
		return b.String()
	case *Map, *namespace:
		return "[object Map]"
	}
	return scalarText(v)
}

// utf16Len is a string's length in UTF-16 code units, JavaScript's
// String.prototype.length.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// utf16At returns the code unit at index i (negative counts from the end)
// as a string, as String.prototype.at does; a lone surrogate becomes U+FFFD,
// which is what it turns into when the JS result is written out as UTF-8.
func utf16At(s string, i int) (string, bool) {
	if i < 0 {
		i += utf16Len(s)
		if i < 0 {
			return "", false
		}
	}
	k := 0
	for _, r := range s {
		n := 1
		if r >= 0x10000 {
			n = 2
		}
		if i < k+n {
			if n == 2 {
				return string(utf8.RuneError), true
			}
			return string(r), true
		}
		k += n
	}
	return "", false
}

// compareUTF16 orders strings by UTF-16 code units, as JavaScript's < does.
// That is code point order except that U+E000..U+FFFF sort after the
// supplementary planes, whose first units are surrogates (U+D800..U+DBFF).
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, wa := utf8.DecodeRuneInString(a)
		rb, wb := utf8.DecodeRuneInString(b)
		a, b = a[wa:], b[wb:]
		if ra == rb {
			continue
		}
		ua, ub := firstUnit(ra), firstUnit(rb)
		if ua == ub {
			// Two supplementary characters with the same high surrogate:
			// their low surrogates are in code point order.
			ua, ub = ra, rb
		}
		if ua < ub {
			return -1
		}
		return 1
	}
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	}
	return 1
}

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r >= 0x10000 {
		hi, _ := utf16.EncodeRune(r)
		return hi
	}
	return r
}

type jsonOptions struct {
	indent      int
	ensureASCII bool
	sortKeys    bool
	itemSep     string
	keySep      string
	custom      bool // itemSep and keySep were given
}

// writeJSON serialises a value into b as the JS port's tojson does, which
// follows Python's json.dumps: ", " and ": " separators (",", ": " when
// indenting), non-ASCII kept unless ensureASCII, mappings in insertion
// order. undefNull decides whether undefined becomes null (tojson) or
// "undefined" (printing an array). A value that cannot be serialised is
// an error, and b then holds part of it.
func (ip *interp) writeJSON(b *strings.Builder, v any, o jsonOptions, depth int, undefNull bool) error {
	itemSep, keySep := ", ", ": "
	switch {
	case o.custom:
		itemSep, keySep = o.itemSep, o.keySep
	case o.indent > 0:
		itemSep = ","
	}
	if depth > maxPrintDepth {
		return fmt.Errorf("value nests deeper than %d levels", maxPrintDepth)
	}
	switch v := v.(type) {
	case nil:
		ip.write(b, "null")
	case undefined:
		if undefNull {
			ip.write(b, "null")
		} else {
			ip.write(b, "undefined")
		}
	case bool:
		ip.write(b, scalarText(v))
	case int64:
		ip.write(b, jsNumber(float64(v)))
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			ip.write(b, "null")
		} else {
			ip.write(b, jsNumber(v))
		}
	case string:
		ip.writeJSONString(b, v, o.ensureASCII)
	case []any:
		ip.spend(int64(len(v)) * itemCost)
		ip.writeByte(b, '[')
		for i, x := range v {
			if i > 0 {
				ip.write(b, itemSep)
			}
			if o.indent > 0 {
				ip.newline(b, o.indent, depth+1)
			}
			if err := ip.writeJSON(b, x, o, depth+1, undefNull); err != nil {
				return err
			}
		}
		if o.indent > 0 && len(v) > 0 {
			ip.newline(b, o.indent, depth)
		}
		ip.writeByte(b, ']')
	case *Map, *namespace:
		m, _ := v.(*Map)
		if ns, ok := v.(*namespace); ok {
			m = ns.m
		}
		keys := m.Keys()
		ip.spend(int64(len(keys)) * itemCost)
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			ip.produceItems(len(keys))
			sort.SliceStable(keys, func(i, j int) bool { return ip.compareStrings(keys[i], keys[j]) < 0 })
		}
		ip.writeByte(b, '{')
		for i, k := range keys {
			if i > 0 {
				ip.write(b, itemSep)
			}
			if o.indent > 0 {
				ip.newline(b, o.indent, depth+1)
			}
			ip.writeJSONString(b, k, o.ensureASCII)
			ip.write(b, keySep)
			if err := ip.writeJSON(b, m.val(k), o, depth+1, undefNull); err != nil {
				return err
			}
		}
		if o.indent > 0 && len(keys) > 0 {
			ip.newline(b, o.indent, depth)
		}
		ip.writeByte(b, '}')
	default:
		return fmt.Errorf("cannot convert to JSON: %s", typeName(v))
	}
	return nil
}

// spaces is what newline writes indentation from.
const spaces = "                                                                                                    "

// newline writes a line break and depth levels of indent spaces.
func (ip *interp) newline(b *strings.Builder, indent, depth int) {
	ip.writeByte(b, '\n')
	for n := indent * depth; n > 0; {
		k := min(n, len(spaces))
		ip.write(b, spaces[:k])
		n -= k
	}
}

const hexDigits = "0123456789abcdef"

// writeJSONString quotes s into b as JSON.stringify does: only '"', '\\'
// and control characters are escaped (not '<', '>', '&' or U+2028 as Go's
// encoder would); with ensureASCII every UTF-16 unit from U+007F up is
// \uXXXX. Bytes that are not UTF-8 become U+FFFD, as they do when a Go
// string is read character by character. Runs of bytes that need no
// escape are copied whole.
func (ip *interp) writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	ip.spendScan(len(s))
	ip.writeByte(b, '"')
	run := 0 // s[run:i] is pending, to be copied as it is
	escape := func(i, w int, esc string) {
		if i > run {
			ip.write(b, s[run:i])
		}
		ip.write(b, esc)
		run = i + w
	}
	unit := func(u rune) string {
		return string([]byte{'\\', 'u', hexDigits[u>>12&15], hexDigits[u>>8&15], hexDigits[u>>4&15], hexDigits[u&15]})
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c >= 0x20 && c < 0x7f && c != '"' && c != '\\':
			i++
		case c == '"':
			escape(i, 1, `\"`)
			i++
		case c == '\\':
			escape(i, 1, `\\`)
			i++
		case c < 0x20:
			esc := ""
			switch c {
			case '\b':
				esc = `\b`
			case '\f':
				esc = `\f`
			case '\n':
				esc = `\n`
			case '\r':
				esc = `\r`
			case '\t':
				esc = `\t`
			default:
				esc = unit(rune(c))
			}
			escape(i, 1, esc)
			i++
		default: // 0x7f and above
			r, w := utf8.DecodeRuneInString(s[i:])
			switch {
			case ensureASCII:
				esc := unit(r)
				if r >= 0x10000 {
					hi, lo := utf16.EncodeRune(r)
					esc = unit(hi) + unit(lo)
				}
				escape(i, w, esc)
			case r == utf8.RuneError && w == 1:
				escape(i, w, string(utf8.RuneError))
			}
			i += w
		}
	}
	if run < len(s) {
		ip.write(b, s[run:])
	}
	ip.writeByte(b, '"')
}
