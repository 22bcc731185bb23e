package jinja

import (
	"fmt"
	"strconv"
	"strings"
)

// The AST mirrors the JS port's: statements render text, expressions
// evaluate to values. Every node remembers where it starts for errors.

type node interface{ at() pos }

type base struct{ p pos }

func (b base) at() pos { return b.p }

type (
	textNode struct {
		base
		text string
	}
	commentNode struct{ base }
	ifNode      struct {
		base
		test      node
		body, alt []node
	}
	forNode struct {
		base
		loopvar   node // *identExpr or *tupleLit
		iterable  node
		body, alt []node
	}
	setNode struct {
		base
		target node
		value  node // nil for a {% set x %}…{% endset %} block
		body   []node
	}
	macroNode struct {
		base
		name   string
		params []node // *identExpr or *kwargExpr
		body   []node
	}
	callStmt struct {
		base
		call       *callExpr
		callerArgs []node
		body       []node
	}
	filterStmt struct {
		base
		filter node // *identExpr or *callExpr
		body   []node
	}
	breakNode    struct{ base }
	continueNode struct{ base }

	identExpr struct {
		base
		name string
	}
	numLit struct {
		base
		v any
	} // int64 or float64
	strLit struct {
		base
		v string
	}
	arrayLit struct {
		base
		items []node
	}
	tupleLit struct {
		base
		items []node
	}
	objectLit struct {
		base
		keys, vals []node
	}
	binaryExpr struct {
		base
		op          string
		left, right node
	}
	unaryExpr struct {
		base
		op  string
		arg node
	}
	filterExpr struct {
		base
		operand node
		filter  node // *identExpr or *callExpr
	}
	testExpr struct {
		base
		operand node
		negate  bool
		name    string
	}
	memberExpr struct {
		base
		object, property node
		computed         bool
	}
	sliceExpr struct {
		base
		start, stop, step node // nil: omitted
	}
	callExpr struct {
		base
		callee node
		args   []node
	}
	kwargExpr struct {
		base
		key   string
		value node
	}
	spreadExpr struct {
		base
		arg node
	}
	kwSpreadExpr struct {
		base
		arg node
	}
	ternaryExpr struct {
		base
		cond, yes, no node
	}
	selectExpr struct {
		base
		lhs, test node
	}
)

// Template is a parsed template, safe for concurrent Render calls.
type Template struct {
	body []node
}

// maxNesting bounds how deeply blocks and expressions may nest, so that a
// hostile template fails with an error instead of exhausting the stack.
const maxNesting = 500

type parser struct {
	toks  []token
	cur   int
	end   pos
	depth int
}

// Parse lexes and parses a template with the options transformers uses for
// chat templates (trim_blocks and lstrip_blocks). A template that does not
// parse gives a *SyntaxError naming the line and column.
func Parse(src string) (t *Template, err error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, end: preprocessEnd(src)}
	defer func() {
		if r := recover(); r != nil {
			se, ok := r.(*SyntaxError)
			if !ok {
				panic(r)
			}
			t, err = nil, se
		}
	}()
	var body []node
	for p.cur < len(p.toks) {
		body = append(body, p.parseAny())
	}
	return &Template{body: body}, nil
}

func preprocessEnd(src string) pos {
	line := 1 + strings.Count(src, "\n")
	col := 1 + len([]rune(src[strings.LastIndexByte(src, '\n')+1:]))
	return pos{line, col}
}

func (p *parser) failAt(at pos, format string, args ...any) {
	panic(&SyntaxError{Line: at.line, Column: at.col, Msg: fmt.Sprintf(format, args...)})
}

// here is the position of the current token (the end of the template past
// the last one).
func (p *parser) here() pos {
	if p.cur < len(p.toks) {
		return p.toks[p.cur].pos
	}
	return p.end
}

func (p *parser) fail(format string, args ...any) { p.failAt(p.here(), format, args...) }

func (p *parser) peek() (token, bool) {
	if p.cur < len(p.toks) {
		return p.toks[p.cur], true
	}
	return token{}, false
}

func (p *parser) next() token {
	t, ok := p.peek()
	if !ok {
		p.fail("unexpected end of template")
	}
	p.cur++
	return t
}

func (p *parser) expect(typ tokenType, what string) token {
	t, ok := p.peek()
	if !ok {
		p.fail("unexpected end of template: expected %s", what)
	}
	if t.typ != typ {
		p.fail("expected %s, got %s %q", what, t.typ, t.value)
	}
	p.cur++
	return t
}

func (p *parser) is(types ...tokenType) bool {
	if p.cur+len(types) > len(p.toks) {
		return false
	}
	for i, t := range types {
		if p.toks[p.cur+i].typ != t {
			return false
		}
	}
	return true
}

func (p *parser) isIdent(names ...string) bool {
	if p.cur+len(names) > len(p.toks) {
		return false
	}
	for i, name := range names {
		t := p.toks[p.cur+i]
		if t.typ != tIdent || t.value != name {
			return false
		}
	}
	return true
}

func (p *parser) isStatement(names ...string) bool {
	if p.cur+1 >= len(p.toks) || p.toks[p.cur].typ != tOpenStatement || p.toks[p.cur+1].typ != tIdent {
		return false
	}
	return contains(names, p.toks[p.cur+1].value)
}

func (p *parser) enter() {
	p.depth++
	if p.depth > maxNesting {
		p.fail("template nests deeper than %d", maxNesting)
	}
}

func (p *parser) leave() { p.depth-- }

func (p *parser) parseAny() node {
	p.enter()
	defer p.leave()
	t := p.toks[p.cur]
	switch t.typ {
	case tComment:
		p.cur++
		return &commentNode{base{t.pos}}
	case tText:
		p.cur++
		return &textNode{base{t.pos}, t.value}
	case tOpenStatement:
		return p.parseStatement()
	case tOpenExpression:
		p.cur++
		e := p.parseExpression()
		p.expect(tCloseExpression, "'}}'")
		return e
	}
	p.fail("unexpected %s %q", t.typ, t.value)
	return nil
}

// blockUntil parses statements until one of the named closing statements
// (not consumed); open names the block for the error when the template
// ends first.
func (p *parser) blockUntil(open token, kind string, names ...string) []node {
	var body []node
	for !p.isStatement(names...) {
		if p.cur >= len(p.toks) {
			p.failAt(open.pos, "unclosed {%% %s %%}: missing {%% %s %%}", kind, names[len(names)-1])
		}
		body = append(body, p.parseAny())
	}
	return body
}

func (p *parser) endTag(name string) {
	p.expect(tOpenStatement, "'{%'")
	if !p.isIdent(name) {
		p.fail("expected %s", name)
	}
	p.cur++
	p.expect(tCloseStatement, "'%}'")
}

func (p *parser) parseStatement() node {
	open := p.expect(tOpenStatement, "'{%'")
	t, ok := p.peek()
	if !ok || t.typ != tIdent {
		p.fail("expected a statement name after {%%")
	}
	p.cur++
	switch t.value {
	case "set":
		return p.parseSet(open)
	case "if":
		n := p.parseIf(open)
		p.endTag("endif")
		return n
	case "macro":
		name := p.parsePrimary()
		id, ok := name.(*identExpr)
		if !ok {
			p.failAt(name.at(), "expected a macro name")
		}
		params := p.parseArgs(true)
		p.expect(tCloseStatement, "'%}'")
		body := p.blockUntil(open, "macro", "endmacro")
		p.endTag("endmacro")
		return &macroNode{base{open.pos}, id.name, params, body}
	case "for":
		n := p.parseFor(open)
		p.endTag("endfor")
		return n
	case "call":
		var callerArgs []node
		if p.is(tOpenParen) {
			callerArgs = p.parseArgs(true)
		}
		callee := p.parsePrimary()
		if _, ok := callee.(*identExpr); !ok {
			p.failAt(callee.at(), "expected a macro name after call")
		}
		args := p.parseArgs(false)
		p.expect(tCloseStatement, "'%}'")
		body := p.blockUntil(open, "call", "endcall")
		p.endTag("endcall")
		return &callStmt{base{open.pos}, &callExpr{base{callee.at()}, callee, args}, callerArgs, body}
	case "break":
		p.expect(tCloseStatement, "'%}'")
		return &breakNode{base{open.pos}}
	case "continue":
		p.expect(tCloseStatement, "'%}'")
		return &continueNode{base{open.pos}}
	case "filter":
		f := p.parsePrimary()
		if _, ok := f.(*identExpr); ok && p.is(tOpenParen) {
			f = p.parseCall(f)
		}
		switch f.(type) {
		case *identExpr, *callExpr:
		default:
			p.failAt(f.at(), "expected a filter name")
		}
		p.expect(tCloseStatement, "'%}'")
		body := p.blockUntil(open, "filter", "endfilter")
		p.endTag("endfilter")
		return &filterStmt{base{open.pos}, f, body}
	}
	p.failAt(t.pos, "unknown statement %q", t.value)
	return nil
}

func (p *parser) parseSet(open token) node {
	target := p.parseSequence(false)
	n := &setNode{base: base{open.pos}, target: target}
	if p.is(tEquals) {
		p.cur++
		n.value = p.parseSequence(false)
	} else {
		p.expect(tCloseStatement, "'%}' or '='")
		n.body = p.blockUntil(open, "set", "endset")
		p.expect(tOpenStatement, "'{%'")
		p.cur++ // endset
	}
	p.expect(tCloseStatement, "'%}'")
	return n
}

func (p *parser) parseIf(open token) *ifNode {
	test := p.parseExpression()
	p.expect(tCloseStatement, "'%}'")
	n := &ifNode{base: base{open.pos}, test: test}
	n.body = p.blockUntil(open, "if", "elif", "else", "endif")
	switch {
	case p.isStatement("elif"):
		elif := p.toks[p.cur]
		p.cur += 2
		n.alt = []node{p.parseIf(elif)}
	case p.isStatement("else"):
		p.cur += 2
		p.expect(tCloseStatement, "'%}'")
		n.alt = p.blockUntil(open, "if", "endif")
	}
	return n
}

func (p *parser) parseFor(open token) node {
	loopvar := p.parseSequence(true)
	switch loopvar.(type) {
	case *identExpr, *tupleLit:
	default:
		p.failAt(loopvar.at(), "expected a loop variable name or tuple of names")
	}
	if !p.isIdent("in") {
		p.fail("expected 'in' after the loop variable")
	}
	p.cur++
	iterable := p.parseExpression()
	p.expect(tCloseStatement, "'%}'")
	n := &forNode{base: base{open.pos}, loopvar: loopvar, iterable: iterable}
	n.body = p.blockUntil(open, "for", "else", "endfor")
	if p.isStatement("else") {
		p.cur += 2
		p.expect(tCloseStatement, "'%}'")
		n.alt = p.blockUntil(open, "for", "endfor")
	}
	return n
}

// parseSequence parses one expression, or a tuple of them separated by
// commas (a, b = …; for k, v in …).
func (p *parser) parseSequence(primary bool) node {
	parse := p.parseExpression
	if primary {
		parse = p.parsePrimary
	}
	first := parse()
	if !p.is(tComma) {
		return first
	}
	items := []node{first}
	for p.is(tComma) {
		p.cur++
		items = append(items, parse())
	}
	return &tupleLit{base{first.at()}, items}
}

func (p *parser) parseExpression() node {
	p.enter()
	defer p.leave()
	return p.parseIfExpr()
}

func (p *parser) parseIfExpr() node {
	a := p.parseOr()
	if p.isIdent("if") {
		p.cur++
		test := p.parseOr()
		if p.isIdent("else") {
			p.cur++
			p.enter()
			defer p.leave()
			return &ternaryExpr{base{a.at()}, test, a, p.parseIfExpr()}
		}
		return &selectExpr{base{a.at()}, a, test}
	}
	return a
}

func (p *parser) parseOr() node {
	left := p.parseAnd()
	for p.isIdent("or") {
		p.cur++
		left = &binaryExpr{base{left.at()}, "or", left, p.parseAnd()}
	}
	return left
}

func (p *parser) parseAnd() node {
	left := p.parseNot()
	for p.isIdent("and") {
		p.cur++
		left = &binaryExpr{base{left.at()}, "and", left, p.parseNot()}
	}
	return left
}

func (p *parser) parseNot() node {
	if p.isIdent("not") {
		t := p.next()
		p.enter()
		defer p.leave()
		return &unaryExpr{base{t.pos}, "not", p.parseNot()}
	}
	return p.parseComparison()
}

func (p *parser) parseComparison() node {
	left := p.parseAdditive()
	for {
		var op string
		switch {
		case p.isIdent("not", "in"):
			op = "not in"
			p.cur += 2
		case p.isIdent("in"):
			op = "in"
			p.cur++
		case p.is(tComparison):
			op = p.next().value
		default:
			return left
		}
		left = &binaryExpr{base{left.at()}, op, left, p.parseAdditive()}
	}
}

func (p *parser) parseAdditive() node {
	left := p.parseMultiplicative()
	for p.is(tAdditive) {
		op := p.next().value
		left = &binaryExpr{base{left.at()}, op, left, p.parseMultiplicative()}
	}
	return left
}

func (p *parser) parseMultiplicative() node {
	left := p.parsePower()
	for p.is(tMultiplicative) {
		op := p.next().value
		left = &binaryExpr{base{left.at()}, op, left, p.parsePower()}
	}
	return left
}

func (p *parser) parsePower() node {
	left := p.parseTest()
	for p.is(tPower) {
		p.cur++
		left = &binaryExpr{base{left.at()}, "**", left, p.parseTest()}
	}
	return left
}

func (p *parser) parseTest() node {
	operand := p.parseFilter()
	for p.isIdent("is") {
		p.cur++
		negate := p.isIdent("not")
		if negate {
			p.cur++
		}
		name := p.parsePrimary()
		id, ok := name.(*identExpr)
		if !ok {
			p.failAt(name.at(), "expected a test name after 'is'")
		}
		operand = &testExpr{base{operand.at()}, operand, negate, id.name}
	}
	return operand
}

func (p *parser) parseFilter() node {
	operand := p.parseUnarySign()
	for p.is(tPipe) {
		p.cur++
		f := p.parsePrimary()
		if _, ok := f.(*identExpr); !ok {
			p.failAt(f.at(), "expected a filter name after '|'")
		}
		if p.is(tOpenParen) {
			f = p.parseCall(f)
		}
		operand = &filterExpr{base{operand.at()}, operand, f}
	}
	return operand
}

func (p *parser) parseUnarySign() node {
	if t, ok := p.peek(); ok && (t.typ == tUnary || t.typ == tAdditive) && (t.value == "-" || t.value == "+") {
		p.cur++
		p.enter()
		defer p.leave()
		return &unaryExpr{base{t.pos}, t.value, p.parseUnarySign()}
	}
	member := p.parseMember(p.parsePrimary())
	if p.is(tOpenParen) {
		return p.parseCall(member)
	}
	return member
}

func (p *parser) parseCall(callee node) node {
	p.enter()
	defer p.leave()
	var e node = &callExpr{base{callee.at()}, callee, p.parseArgs(false)}
	e = p.parseMember(e)
	if p.is(tOpenParen) {
		e = p.parseCall(e)
	}
	return e
}

// parseArgs parses a parenthesised argument list: call arguments
// (positional, keyword, *list and **mapping) or, with params, macro
// parameters (names with optional defaults).
func (p *parser) parseArgs(params bool) []node {
	p.expect(tOpenParen, "'('")
	var args []node
	seen := map[string]bool{}
	sawKeyword, sawSpread := false, false
	for !p.is(tCloseParen) {
		if p.cur >= len(p.toks) {
			p.fail("unexpected end of template in an argument list")
		}
		kwSpread := p.is(tPower)
		spread := p.is(tMultiplicative) && p.toks[p.cur].value == "*"
		if params && (kwSpread || spread) {
			p.fail("argument unpacking is not allowed in parameter declarations")
		}
		if kwSpread {
			t := p.next()
			args = append(args, &kwSpreadExpr{base{t.pos}, p.parseExpression()})
			if p.is(tComma) {
				p.cur++
			}
			if !p.is(tCloseParen) {
				p.fail("** must be applied to the final argument")
			}
			break
		}
		var arg node
		if spread {
			if sawSpread {
				p.fail("only one * argument unpacking is allowed")
			}
			sawSpread = true
			t := p.next()
			arg = &spreadExpr{base{t.pos}, p.parseExpression()}
		} else {
			arg = p.parseExpression()
			if p.is(tEquals) {
				p.cur++
				id, ok := arg.(*identExpr)
				if !ok {
					p.failAt(arg.at(), "expected a name before '='")
				}
				arg = &kwargExpr{base{id.p}, id.name, p.parseExpression()}
			}
			if params {
				var name string
				switch a := arg.(type) {
				case *identExpr:
					name = a.name
				case *kwargExpr:
					name = a.key
				default:
					p.failAt(arg.at(), "expected a parameter name")
				}
				if seen[name] {
					p.failAt(arg.at(), "duplicate parameter name %q", name)
				}
				seen[name] = true
			}
			if _, ok := arg.(*kwargExpr); ok {
				sawKeyword = true
			} else if sawKeyword {
				if params {
					p.failAt(arg.at(), "non-default parameter follows a default one")
				}
				p.failAt(arg.at(), "positional argument follows keyword argument")
			} else if sawSpread {
				p.failAt(arg.at(), "positional argument follows * unpacking")
			}
		}
		args = append(args, arg)
		if p.is(tComma) {
			p.cur++
		}
	}
	p.expect(tCloseParen, "')'")
	return args
}

// parseSubscript parses what is inside [ ]: an index or a slice.
func (p *parser) parseSubscript(open pos) node {
	var parts []node
	isSlice := false
	for !p.is(tCloseBracket) {
		if p.cur >= len(p.toks) {
			p.fail("unexpected end of template: expected ']'")
		}
		if p.is(tColon) {
			parts = append(parts, nil)
			p.cur++
			isSlice = true
			continue
		}
		parts = append(parts, p.parseExpression())
		if p.is(tColon) {
			p.cur++
			isSlice = true
		}
	}
	if len(parts) == 0 {
		p.failAt(open, "expected an index or slice inside []")
	}
	if isSlice {
		if len(parts) > 3 {
			p.failAt(open, "a slice takes at most 3 parts")
		}
		s := &sliceExpr{base: base{open}}
		for i, x := range parts {
			switch i {
			case 0:
				s.start = x
			case 1:
				s.stop = x
			case 2:
				s.step = x
			}
		}
		return s
	}
	if len(parts) > 1 {
		p.failAt(open, "expected one index inside []")
	}
	return parts[0]
}

func (p *parser) parseMember(object node) node {
	for p.is(tDot) || p.is(tOpenBracket) {
		op := p.next()
		if op.typ == tOpenBracket {
			prop := p.parseSubscript(op.pos)
			p.expect(tCloseBracket, "']'")
			object = &memberExpr{base{object.at()}, object, prop, true}
			continue
		}
		prop := p.parsePrimary()
		switch pr := prop.(type) {
		case *identExpr:
		case *numLit:
			if _, ok := pr.v.(int64); !ok {
				p.failAt(prop.at(), "expected a name or integer after '.'")
			}
		default:
			p.failAt(prop.at(), "expected a name or integer after '.'")
		}
		object = &memberExpr{base{object.at()}, object, prop, false}
	}
	return object
}

func (p *parser) parsePrimary() node {
	t := p.next()
	switch t.typ {
	case tNumber:
		f, err := strconv.ParseFloat(t.value, 64)
		if err != nil && !isRangeErr(err) {
			p.failAt(t.pos, "invalid number %q", t.value)
		}
		if strings.Contains(t.value, ".") {
			return &numLit{base{t.pos}, f}
		}
		return &numLit{base{t.pos}, numberValue(f)}
	case tString:
		v := t.value
		for p.is(tString) {
			v += p.next().value
		}
		return &strLit{base{t.pos}, v}
	case tIdent:
		return &identExpr{base{t.pos}, t.value}
	case tOpenParen:
		e := p.parseSequence(false)
		p.expect(tCloseParen, "')'")
		return e
	case tOpenBracket:
		a := &arrayLit{base: base{t.pos}}
		for !p.is(tCloseBracket) {
			if p.cur >= len(p.toks) {
				p.failAt(t.pos, "unclosed '['")
			}
			a.items = append(a.items, p.parseExpression())
			if p.is(tComma) {
				p.cur++
			}
		}
		p.cur++
		return a
	case tOpenBrace:
		o := &objectLit{base: base{t.pos}}
		for !p.is(tCloseBrace) {
			if p.cur >= len(p.toks) {
				p.failAt(t.pos, "unclosed '{'")
			}
			k := p.parseExpression()
			p.expect(tColon, "':' between key and value")
			o.keys = append(o.keys, k)
			o.vals = append(o.vals, p.parseExpression())
			if p.is(tComma) {
				p.cur++
			}
		}
		p.cur++
		return o
	}
	p.failAt(t.pos, "unexpected %s %q", t.typ, t.value)
	return nil
}
