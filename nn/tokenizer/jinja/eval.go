package jinja

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// RenderError is returned by Render when evaluation fails: a type error, an
// unknown filter or test, a missing argument. Line and Column locate the
// expression or statement that failed.
type RenderError struct {
	Line, Column int
	Msg          string
}

func (e *RenderError) Error() string {
	return fmt.Sprintf("jinja: render error at line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Exception is the error Render returns when the template calls
// raise_exception(message), as chat templates do to reject a conversation
// they cannot format (an unsupported role, a tool call where none may be).
type Exception struct {
	Message string
}

func (e *Exception) Error() string { return "jinja: template raised an exception: " + e.Message }

// Fixed bounds that, with Limits, keep a hostile or mistaken template from
// exhausting the machine; they fail the render with a *BudgetError.
const (
	maxCallDepth = 200      // nested macro calls
	maxStringLen = 64 << 20 // bytes in one string
	maxListLen   = 1 << 20  // items in one list, range() included
)

// timeNow is the clock strftime_now reads; tests pin it.
var timeNow = time.Now

type env struct {
	vars      map[string]any
	parent    *env
	callBlock bool // the scope a {% call %} block passes to the macro it calls
}

func newEnv(parent *env) *env { return &env{vars: make(map[string]any), parent: parent} }

func (e *env) lookup(name string) any {
	for s := e; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v
		}
	}
	return undefined{}
}

type interp struct {
	at       pos // the node being evaluated, for errors raised by helpers
	depth    int
	now      func() time.Time
	callSite *env // set while a {% call %} block calls its macro

	// The budget: work and alloc count up to lim's bounds (budget.go);
	// the context is looked at when work reaches nextCheck.
	lim         Limits
	work, alloc int64
	nextCheck   int64
	ctx         context.Context
	out         *strings.Builder // the render's output
}

func (ip *interp) fail(format string, args ...any) {
	panic(&RenderError{Line: ip.at.line, Column: ip.at.col, Msg: fmt.Sprintf(format, args...)})
}

// charge counts the work a builtin does on n items, so that a filter
// applied to a long list in a loop is bounded too.
func (ip *interp) charge(n int) { ip.spend(int64(n) * itemCost) }

func (ip *interp) step(n node) {
	ip.at = n.at()
	ip.spend(stepCost)
}

// Render evaluates the template with the given variables. Values may be
// nil, bool, any Go integer or float, json.Number, string, []any, []string,
// []map[string]any, map[string]any (iterated in sorted key order) or *Map
// (iterated in insertion order; ParseJSON makes them). A variable named like
// one of the globals (true, none, range, namespace, raise_exception,
// strftime_now, …) is an error, as in the JS port. It renders within the
// default Limits; RenderContext takes a context and limits.
func (t *Template) Render(vars map[string]any) (string, error) {
	return t.render(context.Background(), vars, nil, Limits{})
}

// RenderContext is Render within the given limits (zero fields take the
// defaults), stopping when ctx is done. A render that runs past a limit
// fails with a *BudgetError (errors.Is(err, ErrBudget)); one stopped by
// ctx fails with an error that says so and wraps ctx.Err(), so that
// errors.Is(err, context.DeadlineExceeded) tells a deadline.
func (t *Template) RenderContext(ctx context.Context, vars map[string]any, lim Limits) (string, error) {
	return t.render(ctx, vars, nil, lim)
}

func (t *Template) render(ctx context.Context, vars map[string]any, order map[string][][]string, lim Limits) (out string, err error) {
	global := newEnv(nil)
	setupGlobals(global)
	for _, k := range keyOrder(vars, nil) {
		if _, ok := global.vars[k]; ok {
			return "", fmt.Errorf("jinja: render: variable %q is already declared (a global)", k)
		}
		v, err := convert(vars[k], k, order[k])
		if err != nil {
			return "", fmt.Errorf("jinja: render: %w", err)
		}
		global.vars[k] = v
	}
	var b strings.Builder
	ip := &interp{now: timeNow, lim: lim.withDefaults(), ctx: ctx, out: &b}
	defer func() {
		if r := recover(); r != nil {
			switch e := r.(type) {
			case *RenderError:
				out, err = "", e
			case *Exception:
				out, err = "", e
			case *BudgetError:
				out, err = "", e
			case stopped:
				out, err = "", e.err
			default:
				panic(r)
			}
		}
	}()
	ip.checkContext()
	if c := ip.renderBlock(t.body, global, &b); c != ctrlNone {
		return "", &RenderError{Line: ip.at.line, Column: ip.at.col, Msg: "break or continue outside a loop"}
	}
	return b.String(), nil
}

type ctrl int

const (
	ctrlNone ctrl = iota
	ctrlBreak
	ctrlContinue
)

func (ip *interp) renderBlock(stmts []node, e *env, b *strings.Builder) ctrl {
	for _, s := range stmts {
		ip.step(s)
		switch s := s.(type) {
		case *textNode:
			ip.write(b, s.text)
		case *commentNode:
		case *ifNode:
			body := s.alt
			if truthy(ip.eval(s.test, e)) {
				body = s.body
			}
			if c := ip.renderBlock(body, e, b); c != ctrlNone {
				return c
			}
		case *forNode:
			ip.renderFor(s, e, b)
		case *setNode:
			ip.execSet(s, e)
		case *macroNode:
			ip.defineMacro(s, e)
		case *breakNode:
			return ctrlBreak
		case *continueNode:
			return ctrlContinue
		case *callStmt:
			ip.writeValue(b, ip.evalCallStmt(s, e))
		case *filterStmt:
			ip.writeValue(b, ip.applyFilter(ip.renderString(s.body, e), s.filter, e))
		default:
			ip.writeValue(b, ip.eval(s, e))
		}
	}
	return ctrlNone
}

func (ip *interp) writeValue(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil, undefined:
		return
	case string:
		ip.write(b, v)
		return
	case []any, *Map, *namespace:
		ip.writeJSONOrFail(b, v, jsonOptions{}, false)
		return
	}
	ip.write(b, scalarText(v))
}

// renderString renders a block that must not break out of a loop (a macro
// body, a {% set %} block, a {% filter %} block).
func (ip *interp) renderString(body []node, e *env) string {
	var b strings.Builder
	if c := ip.renderBlock(body, e, &b); c != ctrlNone {
		ip.fail("break or continue outside a loop")
	}
	return b.String()
}

func (ip *interp) execSet(s *setNode, e *env) {
	var rhs any
	if s.value != nil {
		rhs = ip.eval(s.value, e)
	} else {
		rhs = ip.renderString(s.body, e)
	}
	ip.at = s.at()
	switch t := s.target.(type) {
	case *identExpr:
		e.vars[t.name] = rhs
	case *tupleLit:
		arr, ok := rhs.([]any)
		if !ok {
			ip.fail("cannot unpack non-iterable type in set: %s", typeName(rhs))
		}
		if len(arr) != len(t.items) {
			if len(t.items) > len(arr) {
				ip.fail("too few items to unpack in set")
			}
			ip.fail("too many items to unpack in set")
		}
		for i, it := range t.items {
			id, ok := it.(*identExpr)
			if !ok {
				ip.fail("cannot unpack to a non-name in set")
			}
			e.vars[id.name] = arr[i]
		}
	case *memberExpr:
		obj := ip.eval(t.object, e)
		ns, ok := obj.(*namespace)
		if !ok {
			ip.fail("cannot assign attribute on non-namespace object (%s)", typeName(obj))
		}
		id, ok := t.property.(*identExpr)
		if !ok || t.computed {
			ip.fail("cannot assign to a member with a non-name property")
		}
		ns.m.Set(id.name, rhs)
	default:
		ip.fail("invalid target of set")
	}
}

func (ip *interp) bindLoopVar(loopvar node, item any, e *env) {
	if id, ok := loopvar.(*identExpr); ok {
		e.vars[id.name] = item
		return
	}
	targets := loopvar.(*tupleLit).items
	vals, _ := item.([]any)
	for j, t := range targets {
		id, ok := t.(*identExpr)
		if !ok {
			ip.fail("cannot unpack to a non-name loop variable")
		}
		var v any = undefined{}
		if j < len(vals) {
			v = vals[j]
		}
		e.vars[id.name] = v
	}
}

func (ip *interp) renderFor(s *forNode, e *env, b *strings.Builder) {
	scope := newEnv(e)
	var iterable any
	var test node
	if sel, ok := s.iterable.(*selectExpr); ok {
		iterable, test = ip.eval(sel.lhs, scope), sel.test
	} else {
		iterable = ip.eval(s.iterable, scope)
	}
	ip.at = s.at()
	var candidates []any
	switch it := iterable.(type) {
	case []any:
		candidates = it
	case *Map:
		candidates = ip.mapKeys(it)
	default:
		ip.fail("expected an iterable or object in for loop, got %s", typeName(iterable))
	}
	tuple, isTuple := s.loopvar.(*tupleLit)
	items := candidates
	if isTuple || test != nil {
		items = nil
		for _, c := range candidates {
			if isTuple {
				arr, ok := c.([]any)
				if !ok {
					ip.fail("cannot unpack non-iterable type: %s", typeName(c))
				}
				if len(arr) != len(tuple.items) {
					if len(tuple.items) > len(arr) {
						ip.fail("too few items to unpack")
					}
					ip.fail("too many items to unpack")
				}
			}
			if test != nil {
				ls := newEnv(scope)
				ip.bindLoopVar(s.loopvar, c, ls)
				if !truthy(ip.eval(test, ls)) {
					continue
				}
			}
			items = append(items, c)
		}
	}
	iterated := false
	for i, it := range items {
		var prev, next any = undefined{}, undefined{}
		if i > 0 {
			prev = items[i-1]
		}
		if i < len(items)-1 {
			next = items[i+1]
		}
		n := int64(len(items))
		// An iteration takes about as long as eight steps: its loop
		// mapping is made anew, as a template may keep it.
		ip.spend(8 * stepCost)
		scope.vars["loop"] = &Map{keys: loopKeys, small: []any{
			int64(i + 1), int64(i), n - int64(i), n - int64(i) - 1,
			i == 0, i == len(items)-1, n, prev, next}}
		ip.bindLoopVar(s.loopvar, it, scope)
		c := ip.renderBlock(s.body, scope, b)
		if c == ctrlContinue {
			continue
		}
		if c == ctrlBreak {
			break
		}
		iterated = true
	}
	if !iterated {
		if c := ip.renderBlock(s.alt, scope, b); c != ctrlNone {
			ip.fail("break or continue outside a loop")
		}
	}
}

// loopKeys are the keys of the loop mapping, in the order of its values.
var loopKeys = []string{"index", "index0", "revindex", "revindex0", "first", "last", "length", "previtem", "nextitem"}

func (ip *interp) mapKeys(m *Map) []any {
	ip.produceItems(m.Len())
	out := make([]any, m.Len())
	for i, k := range m.Keys() {
		out[i] = k
	}
	return out
}

// specialArgs reports which of caller, kwargs and varargs a macro body
// refers to: Jinja gives a macro those only when it uses them.
func specialArgs(params []node, body []node) map[string]bool {
	declared := map[string]bool{}
	for _, p := range params {
		switch p := p.(type) {
		case *identExpr:
			declared[p.name] = true
		case *kwargExpr:
			declared[p.key] = true
		}
	}
	used := map[string]bool{}
	var visit func(n node)
	visitAll := func(ns []node) {
		for _, n := range ns {
			if n != nil {
				visit(n)
			}
		}
	}
	visit = func(n node) {
		switch n := n.(type) {
		case *identExpr:
			if (n.name == "caller" || n.name == "kwargs" || n.name == "varargs") && !declared[n.name] {
				used[n.name] = true
			}
		case *ifNode:
			visit(n.test)
			visitAll(n.body)
			visitAll(n.alt)
		case *forNode:
			visit(n.iterable)
			visitAll(n.body)
			visitAll(n.alt)
		case *setNode:
			if n.value != nil {
				visit(n.value)
			}
			visitAll(n.body)
		case *macroNode:
			// a nested macro has its own special arguments
		case *callStmt:
			visit(n.call)
		case *filterStmt:
			visitAll(n.body)
			visit(n.filter)
		case *arrayLit:
			visitAll(n.items)
		case *tupleLit:
			visitAll(n.items)
		case *objectLit:
			visitAll(n.keys)
			visitAll(n.vals)
		case *binaryExpr:
			visit(n.left)
			visit(n.right)
		case *unaryExpr:
			visit(n.arg)
		case *filterExpr:
			visit(n.operand)
			if c, ok := n.filter.(*callExpr); ok {
				visitAll(c.args)
			}
		case *testExpr:
			visit(n.operand)
		case *memberExpr:
			visit(n.object)
			if n.computed {
				visit(n.property)
			}
		case *sliceExpr:
			visitAll([]node{n.start, n.stop, n.step})
		case *callExpr:
			visit(n.callee)
			visitAll(n.args)
		case *kwargExpr:
			visit(n.value)
		case *spreadExpr:
			visit(n.arg)
		case *kwSpreadExpr:
			visit(n.arg)
		case *ternaryExpr:
			visit(n.cond)
			visit(n.yes)
			visit(n.no)
		case *selectExpr:
			visit(n.lhs)
			visit(n.test)
		}
	}
	visitAll(body)
	return used
}

func (ip *interp) bindMacroArgs(name string, params []node, special map[string]bool, args []any, kw *Map, scope *env) {
	remaining := &Map{}
	ip.produceItems(kw.Len())
	for _, k := range kw.Keys() {
		remaining.Set(k, kw.val(k))
	}
	type pending struct {
		name string
		def  node
	}
	var defaults []pending
	for i, p := range params {
		var pname string
		var def node
		switch p := p.(type) {
		case *identExpr:
			pname = p.name
		case *kwargExpr:
			pname, def = p.key, p.value
		}
		var v any
		have := false
		if i < len(args) {
			v, have = args[i], true
		} else if kv, ok := remaining.Get(pname); ok {
			v, have = kv, true
			ip.produceItems(remaining.Len())
			remaining = without(remaining, pname)
		}
		if !have {
			v = undefined{}
			if def != nil {
				defaults = append(defaults, pending{pname, def})
			}
		}
		scope.vars[pname] = v
	}
	if special["kwargs"] {
		scope.vars["kwargs"] = remaining
	} else if remaining.Len() > 0 {
		ip.fail("macro %s takes no keyword argument '%s'", name, remaining.Keys()[0])
	}
	if special["varargs"] {
		var extra []any
		if len(args) > len(params) {
			extra = append(extra, args[len(params):]...)
		}
		if extra == nil {
			extra = []any{}
		}
		scope.vars["varargs"] = extra
	} else if len(args) > len(params) {
		ip.fail("macro %s takes not more than %d argument(s)", name, len(params))
	}
	for _, d := range defaults {
		scope.vars[d.name] = ip.eval(d.def, scope)
	}
}

func without(m *Map, key string) *Map {
	out := &Map{}
	for _, k := range m.Keys() {
		if k != key {
			out.Set(k, m.val(k))
		}
	}
	return out
}

func (ip *interp) enterCall() {
	ip.depth++
	if ip.depth > maxCallDepth {
		ip.exceed("macro call depth", maxCallDepth)
	}
}

func (ip *interp) defineMacro(s *macroNode, e *env) {
	special := specialArgs(s.params, s.body)
	e.vars[s.name] = &function{name: s.name, call: func(ip *interp, args []any, kw *Map) any {
		ip.enterCall()
		defer func() { ip.depth-- }()
		parent := e
		if special["caller"] {
			parent = newEnv(e)
			parent.vars["caller"] = undefined{}
			if cs := ip.callSite; cs != nil && cs.callBlock {
				parent.vars["caller"] = cs.vars["caller"]
			}
		}
		scope := newEnv(parent)
		ip.bindMacroArgs("'"+s.name+"'", s.params, special, args, kw, scope)
		return ip.renderString(s.body, scope)
	}}
}

func (ip *interp) evalCallStmt(s *callStmt, e *env) any {
	special := specialArgs(s.callerArgs, s.body)
	caller := &function{name: "caller", call: func(ip *interp, args []any, kw *Map) any {
		ip.enterCall()
		defer func() { ip.depth-- }()
		scope := newEnv(e)
		ip.bindMacroArgs("None", s.callerArgs, special, args, kw, scope)
		return ip.renderString(s.body, scope)
	}}
	args, kw := ip.evalArgs(s.call.args, e)
	fn, ok := ip.eval(s.call.callee, e).(*function)
	if !ok {
		ip.at = s.at()
		ip.fail("cannot call something that is not a function")
	}
	site := newEnv(e)
	site.callBlock = true
	site.vars["caller"] = caller
	saved := ip.callSite
	ip.callSite = site
	defer func() { ip.callSite = saved }()
	return fn.call(ip, args, kw)
}

// evalArgs evaluates call arguments: positional ones (with *list expanded)
// first, then keyword ones (with **mapping expanded), as Python does.
func (ip *interp) evalArgs(argNodes []node, e *env) ([]any, *Map) {
	var args []any
	var kw *Map
	for _, a := range argNodes {
		switch a := a.(type) {
		case *spreadExpr:
			v := ip.eval(a.arg, e)
			arr, ok := v.([]any)
			if !ok {
				ip.at = a.at()
				ip.fail("cannot unpack non-iterable type: %s", typeName(v))
			}
			args = append(args, arr...)
		case *kwargExpr, *kwSpreadExpr:
		default:
			args = append(args, ip.eval(a, e))
		}
	}
	add := func(k string, v any) {
		if kw == nil {
			kw = &Map{}
		}
		ip.spend(itemCost + 2*int64(len(k)))
		if _, dup := kw.Get(k); dup {
			ip.fail("got multiple values for keyword argument '%s'", k)
		}
		kw.Set(k, v)
	}
	for _, a := range argNodes {
		switch a := a.(type) {
		case *kwargExpr:
			add(a.key, ip.eval(a.value, e))
		case *kwSpreadExpr:
			v := ip.eval(a.arg, e)
			m, ok := v.(*Map)
			if !ok {
				ip.at = a.at()
				ip.fail("argument after ** must be a mapping, not %s", typeName(v))
			}
			for _, k := range m.Keys() {
				add(k, m.val(k))
			}
		}
	}
	return args, kw
}

func (ip *interp) eval(n node, e *env) any {
	if n == nil {
		return undefined{}
	}
	ip.step(n)
	switch n := n.(type) {
	case *identExpr:
		return e.lookup(n.name)
	case *numLit:
		return n.v
	case *strLit:
		return n.v
	case *textNode:
		return n.text
	case *binaryExpr:
		return ip.evalBinary(n, e)
	case *memberExpr:
		return ip.evalMember(n, e)
	case *callExpr:
		args, kw := ip.evalArgs(n.args, e)
		callee := ip.eval(n.callee, e)
		fn, ok := callee.(*function)
		ip.at = n.at()
		if !ok {
			ip.fail("cannot call something that is not a function: got %s", typeName(callee))
		}
		saved := ip.callSite
		ip.callSite = nil
		defer func() { ip.callSite = saved }()
		return fn.call(ip, args, kw)
	case *filterExpr:
		v := ip.eval(n.operand, e)
		ip.at = n.at()
		return ip.applyFilter(v, n.filter, e)
	case *testExpr:
		v := ip.eval(n.operand, e)
		ip.at = n.at()
		test, ok := tests[n.name]
		if !ok {
			ip.fail("unknown test: %s", n.name)
		}
		return test(ip, v, nil) != n.negate
	case *ternaryExpr:
		if truthy(ip.eval(n.cond, e)) {
			return ip.eval(n.yes, e)
		}
		return ip.eval(n.no, e)
	case *unaryExpr:
		v := ip.eval(n.arg, e)
		ip.at = n.at()
		if n.op == "not" {
			return !truthy(v)
		}
		sign := int64(1)
		if n.op == "-" {
			sign = -1
		}
		switch v := v.(type) {
		case int64:
			return sign * v
		case bool:
			if v {
				return sign
			}
			return int64(0)
		case float64:
			return float64(sign) * v
		}
		ip.fail("unknown operator %q for %s", n.op, typeName(v))
	case *arrayLit:
		out := make([]any, len(n.items))
		for i, x := range n.items {
			out[i] = ip.eval(x, e)
		}
		return out
	case *tupleLit:
		out := make([]any, len(n.items))
		for i, x := range n.items {
			out[i] = ip.eval(x, e)
		}
		return out
	case *objectLit:
		m := &Map{}
		for i, k := range n.keys {
			kv := ip.eval(k, e)
			ks, ok := kv.(string)
			if !ok {
				ip.at = k.at()
				ip.fail("object keys must be strings: got %s", typeName(kv))
			}
			ip.spend(itemCost + int64(len(ks)))
			m.Set(ks, ip.eval(n.vals[i], e))
		}
		return m
	case *selectExpr:
		if !truthy(ip.eval(n.test, e)) {
			return undefined{}
		}
		return ip.eval(n.lhs, e)
	case *kwargExpr, *spreadExpr, *kwSpreadExpr:
		ip.fail("keyword arguments and unpacking are only allowed in calls")
	case *sliceExpr:
		ip.fail("a slice is only allowed inside []")
	case *ifNode, *forNode, *callStmt, *filterStmt:
		var b strings.Builder
		if c := ip.renderBlock([]node{n}, e, &b); c != ctrlNone {
			ip.fail("break or continue outside a loop")
		}
		return b.String()
	case *setNode, *macroNode, *commentNode:
		ip.renderBlock([]node{n}, e, &strings.Builder{})
		return nil
	case *breakNode, *continueNode:
		ip.fail("break or continue outside a loop")
	}
	ip.fail("cannot evaluate %T", n)
	return nil
}

func (ip *interp) evalMember(n *memberExpr, e *env) any {
	obj := ip.eval(n.object, e)
	var prop any
	switch {
	case n.computed:
		if s, ok := n.property.(*sliceExpr); ok {
			return ip.evalSlice(obj, s, e)
		}
		prop = ip.eval(n.property, e)
	default:
		switch p := n.property.(type) {
		case *numLit:
			prop = p.v
		case *identExpr:
			prop = p.name
		}
	}
	ip.at = n.at()
	return ip.member(obj, prop)
}

func (ip *interp) member(obj, prop any) any {
	switch o := obj.(type) {
	case *Map:
		k, ok := prop.(string)
		if !ok {
			ip.fail("cannot access property with non-string: got %s", typeName(prop))
		}
		ip.spend(int64(len(k))) // hashing the key
		if v, ok := o.Get(k); ok {
			return v
		}
		if f := mapMethod(o, k); f != nil {
			return f
		}
		return undefined{}
	case *namespace:
		k, ok := prop.(string)
		if !ok {
			ip.fail("cannot access property with non-string: got %s", typeName(prop))
		}
		ip.spend(int64(len(k)))
		if v, ok := o.m.Get(k); ok {
			return v
		}
		return undefined{}
	case []any:
		switch p := prop.(type) {
		case int64:
			i := int(p)
			if p < 0 {
				i = len(o) + int(p)
			}
			if p < -int64(len(o)) || p >= int64(len(o)) {
				return undefined{}
			}
			return o[i]
		case string:
			if p == "length" {
				return int64(len(o))
			}
			return undefined{}
		}
		ip.fail("cannot access property with non-string/non-number: got %s", typeName(prop))
	case string:
		switch p := prop.(type) {
		case int64:
			if p > math.MaxInt32 || p < math.MinInt32 {
				return undefined{}
			}
			ip.spendScan(len(o))
			if p < 0 {
				ip.spendScan(len(o)) // utf16At counts the length first
			}
			if s, ok := utf16At(o, int(p)); ok {
				return s
			}
			return undefined{}
		case string:
			if f := stringMethod(ip, o, p); f != nil {
				return f
			}
			return undefined{}
		}
		ip.fail("cannot access property with non-string/non-number: got %s", typeName(prop))
	}
	if _, ok := prop.(string); !ok {
		ip.fail("cannot access property with non-string: got %s", typeName(prop))
	}
	return undefined{}
}

func (ip *interp) evalSlice(obj any, s *sliceExpr, e *env) any {
	var n int
	switch o := obj.(type) {
	case []any:
		n = len(o)
	case string:
		ip.spendScan(len(o))
		n = utf8.RuneCountInString(o)
	default:
		ip.at = s.at()
		ip.fail("slice object must be an array or string")
	}
	bound := func(x node, what string) (int, bool) {
		v := ip.eval(x, e)
		switch v := v.(type) {
		case undefined:
			return 0, false
		case int64:
			return int(max(min(v, math.MaxInt32), math.MinInt32)), true
		}
		ip.at = s.at()
		ip.fail("slice %s must be an integer or omitted", what)
		return 0, false
	}
	start, hasStart := bound(s.start, "start")
	stop, hasStop := bound(s.stop, "stop")
	step, hasStep := bound(s.step, "step")
	if !hasStep {
		step = 1
	}
	first, count := sliceIndices(n, start, hasStart, stop, hasStop, step)
	ip.charge(count)
	if arr, ok := obj.([]any); ok {
		ip.produceItems(count)
		out := make([]any, count)
		for k := range out {
			out[k] = arr[first+k*step]
		}
		return out
	}
	return ip.sliceString(obj.(string), first, step, count)
}

// sliceString returns the count characters of s at first, first+step,
// …, each invalid byte of s counting as a character and becoming U+FFFD,
// as when s is read as []rune. It reads s once, forwards, without
// converting it.
func (ip *interp) sliceString(s string, first, step, count int) string {
	if count == 0 {
		return ""
	}
	lo, hi := first, first+(count-1)*step // the first and last character taken
	if step < 0 {
		lo, hi = hi, first
	}
	if step == 1 {
		// A run of characters: the bytes between them, as they are when
		// they are UTF-8.
		from, to, k := len(s), len(s), 0
		for i := range s {
			if k == lo {
				from = i
			}
			if k == hi+1 {
				to = i
				break
			}
			k++
		}
		if sub := s[from:to]; utf8.ValidString(sub) {
			return sub
		}
		ip.produce(3 * (to - from))
		return runesString(s[from:to])
	}
	stride := max(step, -step)
	ip.allocate(4 * int64(count))
	picked := make([]rune, count)
	k := 0
	for _, r := range s {
		if k > hi {
			break
		}
		if k >= lo && (k-lo)%stride == 0 {
			if step > 0 {
				picked[(k-lo)/stride] = r
			} else {
				picked[(hi-k)/stride] = r
			}
		}
		k++
	}
	out := string(picked)
	ip.produce(len(out))
	return out
}

// sliceIndices is Python's slice arithmetic as the JS port computes it:
// the slice of a sequence of n items is the count items at first,
// first+step, first+2·step, ….
func sliceIndices(n, start int, hasStart bool, stop int, hasStop bool, step int) (first, count int) {
	switch {
	case step > 0:
		if !hasStart {
			start = 0
		}
		if !hasStop {
			stop = n
		}
		start = clampSlice(start, n, 0, n)
		stop = clampSlice(stop, n, 0, n)
		if stop > start {
			count = (stop - start + step - 1) / step
		}
	case step < 0:
		if !hasStart {
			start = n - 1
		}
		if !hasStop {
			stop = -1
		}
		if start < 0 {
			start = max(n+start, -1)
		} else {
			start = min(start, n-1)
		}
		if stop < -1 {
			stop = max(n+stop, -1)
		} else {
			stop = min(stop, n-1)
		}
		if start > stop {
			count = (start - stop - step - 1) / -step
		}
	}
	return start, count
}

func clampSlice(i, n, lo, hi int) int {
	if i < 0 {
		return max(n+i, lo)
	}
	return min(i, hi)
}

func isNumber(v any) bool {
	switch v.(type) {
	case int64, float64:
		return true
	}
	return false
}

func toFloat(v any) float64 {
	switch v := v.(type) {
	case int64:
		return float64(v)
	case float64:
		return v
	case bool:
		if v {
			return 1
		}
	}
	return 0
}

// intResult keeps an integer operation's result an integer, as the JS port
// labels it, unless it is not one (a division by zero) or too large for
// float64 to count exactly.
func intResult(f float64) any {
	if f == math.Trunc(f) && math.Abs(f) <= maxSafeInt {
		return int64(f)
	}
	return f
}

func (ip *interp) evalBinary(n *binaryExpr, e *env) any {
	left := ip.eval(n.left, e)
	switch n.op {
	case "and":
		if truthy(left) {
			return ip.eval(n.right, e)
		}
		return left
	case "or":
		if truthy(left) {
			return left
		}
		return ip.eval(n.right, e)
	}
	right := ip.eval(n.right, e)
	ip.at = n.at()
	op := n.op
	switch op {
	case "==":
		return ip.looseEqual(left, right)
	case "!=":
		return !ip.looseEqual(left, right)
	}
	_, lu := left.(undefined)
	_, ru := right.(undefined)
	switch {
	case isNumber(left) && isNumber(right) && op != "~" && op != "**":
		a, b := toFloat(left), toFloat(right)
		_, lf := left.(float64)
		_, rf := right.(float64)
		isFloat := lf || rf
		num := func(f float64) any {
			if isFloat {
				return f
			}
			return intResult(f)
		}
		switch op {
		case "+":
			return num(a + b)
		case "-":
			return num(a - b)
		case "*":
			return num(a * b)
		case "/":
			return a / b
		case "//":
			return num(math.Floor(a / b))
		case "%":
			return num(math.Mod(a, b))
		case "<":
			return a < b
		case ">":
			return a > b
		case ">=":
			return a >= b
		case "<=":
			return a <= b
		}
	case lu || ru:
		if ru && (op == "in" || op == "not in") {
			return op == "not in"
		}
		if op == "~" && left != nil && right != nil {
			l, r := "", ""
			if !lu {
				l = ip.jsString(left)
			}
			if !ru {
				r = ip.jsString(right)
			}
			return ip.concat(l, r)
		}
		ip.fail("cannot perform operation %s on undefined values", op)
	case left == nil || right == nil:
		ip.fail("cannot perform operation %s on null values", op)
	case op == "~":
		return ip.concat(ip.jsString(left), ip.jsString(right))
	case op == "**" && isNumericLike(left) && isNumericLike(right):
		a, b := toFloat(left), toFloat(right)
		if a == 0 && b < 0 {
			ip.fail("0.0 cannot be raised to a negative power")
		}
		r := math.Pow(a, b)
		if math.IsInf(r, 0) || math.IsNaN(r) {
			ip.fail("exponentiation result is not a finite real number")
		}
		_, lf := left.(float64)
		_, rf := right.(float64)
		if lf || rf || b < 0 {
			return r
		}
		return intResult(r)
	}
	la, lArr := left.([]any)
	ra, rArr := right.([]any)
	if lArr && rArr {
		// Two lists only concatenate; `list in list` is an error in the
		// JS port, unlike in Python.
		if op == "+" {
			ip.checkListLen(len(la) + len(ra))
			ip.produceItems(len(la) + len(ra))
			return append(append(make([]any, 0, len(la)+len(ra)), la...), ra...)
		}
	} else if rArr {
		ip.charge(len(ra))
		found := false
		for _, x := range ra {
			if ip.strictEqual(x, left) {
				found = true
				break
			}
		}
		switch op {
		case "in":
			return found
		case "not in":
			return !found
		}
	}
	ls, lStr := left.(string)
	rs, rStr := right.(string)
	if (lStr || rStr) && op == "+" {
		return ip.concat(ip.jsString(left), ip.jsString(right))
	}
	if lStr && rStr {
		// strings.Index compares a short needle at each position with
		// vector instructions and a long one with a rolling hash: about
		// one unit of work per byte of the haystack either way.
		ip.spend(int64(len(rs)) + int64(len(ls)))
		switch op {
		case "in":
			return strings.Contains(rs, ls)
		case "not in":
			return !strings.Contains(rs, ls)
		}
	}
	if rm, ok := right.(*Map); ok && lStr {
		ip.spend(int64(len(ls)))
		_, has := rm.Get(ls)
		switch op {
		case "in":
			return has
		case "not in":
			return !has
		}
	}
	ip.fail("unknown operator %q between %s and %s", op, typeName(left), typeName(right))
	return nil
}

func (ip *interp) concat(a, b string) string {
	ip.produce(len(a) + len(b))
	return a + b
}

func isNumericLike(v any) bool {
	switch v.(type) {
	case int64, float64, bool:
		return true
	}
	return false
}

// identical reports whether two container values are the same object, the
// meaning of == between JavaScript objects.
func identical(a, b any) bool {
	switch a := a.(type) {
	case []any:
		bb, ok := b.([]any)
		return ok && len(a) == len(bb) && unsafe.SliceData(a) == unsafe.SliceData(bb)
	case *Map:
		bb, ok := b.(*Map)
		return ok && a == bb
	case *namespace:
		bb, ok := b.(*namespace)
		return ok && a == bb
	case *function:
		bb, ok := b.(*function)
		return ok && a == bb
	}
	return false
}

func isObject(v any) bool {
	switch v.(type) {
	case []any, *Map, *namespace, *function:
		return true
	}
	return false
}

// strictEqual is strictEqual, with the work of comparing two strings.
func (ip *interp) strictEqual(a, b any) bool {
	ip.spend(itemCost)
	if as, ok := a.(string); ok {
		if bs, ok := b.(string); ok && len(as) == len(bs) {
			ip.spend(int64(len(as)))
		}
	}
	return strictEqual(a, b)
}

// strictEqual is JavaScript's === between the values two runtime values
// wrap (the JS port's `in` for lists, unique, equalto).
func strictEqual(a, b any) bool {
	switch {
	case isNumber(a) && isNumber(b):
		return toFloat(a) == toFloat(b)
	case isObject(a) || isObject(b):
		return identical(a, b)
	}
	switch a := a.(type) {
	case nil, undefined:
		// none and undefined both wrap JavaScript's undefined.
		switch b.(type) {
		case nil, undefined:
			return true
		}
		return false
	case bool:
		bb, ok := b.(bool)
		return ok && a == bb
	case string:
		bb, ok := b.(string)
		return ok && a == bb
	}
	return false
}

// looseEqual is JavaScript's == between the values two runtime values wrap,
// which is what the JS port's == and != compute: 1 == 1.0, "1" == 1,
// true == 1, none == undefined, and lists and mappings only equal to
// themselves.
func (ip *interp) looseEqual(a, b any) bool {
	isNullish := func(v any) bool {
		switch v.(type) {
		case nil, undefined:
			return true
		}
		return false
	}
	switch {
	case isNullish(a) || isNullish(b):
		return isNullish(a) && isNullish(b)
	case isObject(a) && isObject(b):
		return identical(a, b)
	case isObject(a):
		return ip.looseEqual(ip.jsString(a), b)
	case isObject(b):
		return ip.looseEqual(a, ip.jsString(b))
	}
	if ab, ok := a.(bool); ok {
		return ip.looseEqual(toFloat(ab), b)
	}
	if bb, ok := b.(bool); ok {
		return ip.looseEqual(a, toFloat(bb))
	}
	as, aStr := a.(string)
	bs, bStr := b.(string)
	switch {
	case aStr && bStr:
		if len(as) == len(bs) {
			ip.spend(int64(len(as)))
		}
		return as == bs
	case aStr:
		ip.spendScan(len(as))
		return jsToNumber(as) == toFloat(b)
	case bStr:
		ip.spendScan(len(bs))
		return toFloat(a) == jsToNumber(bs)
	}
	return toFloat(a) == toFloat(b)
}

// jsToNumber is JavaScript's Number(string): whitespace-trimmed decimal,
// hexadecimal, octal or binary literals and Infinity; "" is 0; anything
// else NaN.
func jsToNumber(s string) float64 {
	s = strings.TrimFunc(s, isSpace)
	if s == "" {
		return 0
	}
	if len(s) > 2 && s[0] == '0' {
		base := 0
		switch s[1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			f := 0.0
			for _, c := range s[2:] {
				d := digitValue(c)
				if d < 0 || d >= base {
					return math.NaN()
				}
				f = f*float64(base) + float64(d)
			}
			return f
		}
	}
	switch s {
	case "Infinity", "+Infinity":
		return math.Inf(1)
	case "-Infinity":
		return math.Inf(-1)
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
			return math.NaN()
		}
	}
	f, err := parseFloatStrict(s)
	if err != nil {
		return math.NaN()
	}
	return f
}

func digitValue(c rune) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'z':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'Z':
		return int(c-'A') + 10
	}
	return -1
}

// sortValues sorts a copy of items stably with the JS port's comparison
// (numbers with numbers, strings with strings, optionally ignoring case).
func (ip *interp) sortValues(items []any, key func(any) any, caseSensitive, reverse bool) []any {
	ip.produceItems(len(items))
	out := append([]any(nil), items...)
	sort.SliceStable(out, func(i, j int) bool {
		ip.spend(itemCost)
		c := ip.compare(key(out[i]), key(out[j]), caseSensitive)
		if reverse {
			c = -c
		}
		return c < 0
	})
	return out
}

func (ip *interp) compare(a, b any, caseSensitive bool) int {
	_, an := a.(undefined)
	_, bn := b.(undefined)
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil || b == nil:
		ip.fail("cannot compare %s with %s", typeName(a), typeName(b))
	case an && bn:
		return 0
	case an || bn:
		ip.fail("cannot compare %s with %s", typeName(a), typeName(b))
	case isNumericLike(a) && isNumericLike(b):
		x, y := toFloat(a), toFloat(b)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	as, aok := a.(string)
	bs, bok := b.(string)
	if !aok || !bok {
		if typeName(a) != typeName(b) {
			ip.fail("cannot compare different types: %s and %s", typeName(a), typeName(b))
		}
		ip.fail("cannot compare type: %s", typeName(a))
	}
	if !caseSensitive {
		as, bs = ip.lower(as), ip.lower(bs)
	}
	return ip.compareStrings(as, bs)
}

// compareStrings is compareUTF16 with its work.
func (ip *interp) compareStrings(a, b string) int {
	ip.spendScan(min(len(a), len(b)))
	return compareUTF16(a, b)
}
