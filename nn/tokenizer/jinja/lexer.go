package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
)

type tokenType int

const (
	tText tokenType = iota
	tNumber
	tString
	tIdent
	tEquals
	tOpenParen
	tCloseParen
	tOpenStatement
	tCloseStatement
	tOpenExpression
	tCloseExpression
	tOpenBracket
	tCloseBracket
	tOpenBrace
	tCloseBrace
	tComma
	tDot
	tColon
	tPipe
	tAdditive       // + - ~
	tMultiplicative // * / // %
	tPower          // **
	tComparison     // < > <= >= == !=
	tUnary          // a lone - or + that is not part of a number
	tComment
)

var tokenNames = [...]string{"text", "number", "string", "identifier", "'='", "'('", "')'", "'{%'", "'%}'",
	"'{{'", "'}}'", "'['", "']'", "'{'", "'}'", "','", "'.'", "':'", "'|'", "operator", "operator", "'**'",
	"comparison", "unary operator", "comment"}

func (t tokenType) String() string { return tokenNames[t] }

// pos is a position in the template source: 1-based line and column
// (columns count characters, not bytes).
type pos struct{ line, col int }

func (p pos) String() string { return fmt.Sprintf("line %d, column %d", p.line, p.col) }

type token struct {
	typ   tokenType
	value string
	pos   pos
}

// SyntaxError is returned by Parse for a template that does not lex or
// parse; Line and Column (1-based, columns in characters) locate it in the
// source.
type SyntaxError struct {
	Line, Column int
	Msg          string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("jinja: syntax error at line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// source is the template after the JS port's preprocessing (trailing
// newline, lstrip_blocks, trim_blocks, generation tags), kept as runes with
// the position each came from so that errors point into the original text.
type source struct {
	r   []rune
	pos []pos
	end pos // position just after the last character of the original
}

func isWord(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_'
}

func isDigit(r rune) bool { return r >= '0' && r <= '9' }

// isSpace is JavaScript's \s (and String.prototype.trim's whitespace).
func isSpace(r rune) bool {
	if r <= 32 {
		return r == ' ' || r >= 9 && r <= 13
	}
	return r == 0xa0 || r == 0x1680 || r >= 0x2000 && r <= 0x200a || r == 0x2028 || r == 0x2029 ||
		r == 0x202f || r == 0x205f || r == 0x3000 || r == 0xfeff
}

func isLineTerminator(r rune) bool { return r == '\n' || r == '\r' || r == 0x2028 || r == 0x2029 }

// preprocess applies the JS port's text rewrites, which run before lexing
// and therefore also touch text outside tags (a "%}" followed by a newline
// in plain text loses the newline, as it does there).
func preprocess(src string) source {
	var s source
	line, col := 1, 1
	for _, r := range src {
		s.r = append(s.r, r)
		s.pos = append(s.pos, pos{line, col})
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	s.end = pos{line, col}
	if n := len(s.r); n > 0 && s.r[n-1] == '\n' {
		s.r, s.pos = s.r[:n-1], s.pos[:n-1]
	}
	keep := func(drop []bool) {
		j := 0
		for i := range s.r {
			if !drop[i] {
				s.r[j], s.pos[j] = s.r[i], s.pos[i]
				j++
			}
		}
		s.r, s.pos = s.r[:j], s.pos[:j]
	}

	// lstrip_blocks: spaces and tabs from a line start up to "{#", "{%" or "{-".
	drop := make([]bool, len(s.r))
	for i := 0; i < len(s.r); i++ {
		if i > 0 && !isLineTerminator(s.r[i-1]) {
			continue
		}
		j := i
		for j < len(s.r) && (s.r[j] == ' ' || s.r[j] == '\t') {
			j++
		}
		if j+1 < len(s.r) && s.r[j] == '{' && (s.r[j+1] == '#' || s.r[j+1] == '%' || s.r[j+1] == '-') {
			for k := i; k < j; k++ {
				drop[k] = true
			}
			i = j + 1
		}
	}
	keep(drop)

	// trim_blocks: the newline right after "#}", "%}" or "-}".
	drop = make([]bool, len(s.r))
	for i := 0; i+2 < len(s.r); i++ {
		if (s.r[i] == '#' || s.r[i] == '%' || s.r[i] == '-') && s.r[i+1] == '}' && s.r[i+2] == '\n' {
			drop[i+2] = true
			i += 2
		}
	}
	keep(drop)

	// transformers' {% generation %} / {% endgeneration %} markers vanish,
	// honouring their whitespace-control hyphens.
	drop = make([]bool, len(s.r))
	last := 0
	for i := 0; i+1 < len(s.r); i++ {
		if s.r[i] != '{' || s.r[i+1] != '%' {
			continue
		}
		j := i + 2
		lstrip := j < len(s.r) && s.r[j] == '-'
		if lstrip {
			j++
		}
		for j < len(s.r) && isSpace(s.r[j]) {
			j++
		}
		if hasRunes(s.r, j, "end") {
			j += 3
		}
		if !hasRunes(s.r, j, "generation") {
			continue
		}
		j += len("generation")
		for j < len(s.r) && isSpace(s.r[j]) {
			j++
		}
		rstrip := j < len(s.r) && s.r[j] == '-'
		if rstrip {
			j++
		}
		if !hasRunes(s.r, j, "%}") {
			continue
		}
		j += 2
		start := i
		if lstrip {
			for start > last && isSpace(s.r[start-1]) {
				start--
			}
		}
		end := j
		if rstrip {
			for end < len(s.r) && isSpace(s.r[end]) {
				end++
			}
		}
		for k := start; k < end; k++ {
			drop[k] = true
		}
		last = end
		i = end - 1
	}
	keep(drop)
	return s
}

func hasRunes(r []rune, at int, s string) bool {
	for _, c := range s {
		if at >= len(r) || r[at] != c {
			return false
		}
		at++
	}
	return true
}

var escapes = map[rune]rune{'n': '\n', 't': '\t', 'r': '\r', 'b': '\b', 'f': '\f', 'v': '\v', '\'': '\'', '"': '"', '\\': '\\'}

type rule struct {
	seq string
	typ tokenType
}

// rules are tried in order at each position inside a tag, so that longer
// operators ("**", "//", "<=") win over their prefixes.
var rules = []rule{
	{"{%", tOpenStatement}, {"%}", tCloseStatement}, {"{{", tOpenExpression}, {"}}", tCloseExpression},
	{"(", tOpenParen}, {")", tCloseParen}, {"{", tOpenBrace}, {"}", tCloseBrace}, {"[", tOpenBracket},
	{"]", tCloseBracket}, {",", tComma}, {".", tDot}, {":", tColon}, {"|", tPipe},
	{"<=", tComparison}, {">=", tComparison}, {"==", tComparison}, {"!=", tComparison}, {"<", tComparison},
	{">", tComparison}, {"+", tAdditive}, {"-", tAdditive}, {"~", tAdditive}, {"**", tPower},
	{"*", tMultiplicative}, {"//", tMultiplicative}, {"/", tMultiplicative}, {"%", tMultiplicative},
	{"=", tEquals},
}

// tokenize splits the preprocessed template into tokens, following the JS
// port's lexer (including its whitespace control and its rule that a "-"
// or "+" after an operator or an opening bracket is a sign).
func tokenize(src string) ([]token, error) {
	s := preprocess(src)
	r := s.r
	n := len(r)
	var toks []token
	cur := 0
	depth := 0 // curly-brace depth inside an expression, so "}}" can close a dict

	at := func(i int) pos {
		if i < n {
			return s.pos[i]
		}
		return s.end
	}
	fail := func(i int, format string, args ...any) error {
		p := at(i)
		return &SyntaxError{Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...)}
	}
	ch := func(i int) rune {
		if i < n {
			return r[i]
		}
		return -1
	}
	// consumeWhile fails when the input ends while pred still holds, as in
	// the JS port: a tag cannot end the template.
	consumeWhile := func(pred func(rune) bool) (string, error) {
		start := cur
		for cur < n && pred(r[cur]) {
			cur++
			if cur >= n {
				return "", fail(cur, "unexpected end of template inside a tag")
			}
		}
		return string(r[start:cur]), nil
	}
	stripTrailing := func() {
		if k := len(toks); k > 0 && toks[k-1].typ == tText {
			toks[k-1].value = strings.TrimRightFunc(toks[k-1].value, isSpace)
			if toks[k-1].value == "" {
				toks = toks[:k-1]
			}
		}
	}
	skipLeading := func() {
		for cur < n && isSpace(r[cur]) {
			cur++
		}
	}

main:
	for cur < n {
		last := tokenType(-1)
		if k := len(toks); k > 0 {
			last = toks[k-1].typ
		}
		if last == -1 || last == tCloseStatement || last == tCloseExpression || last == tComment {
			end := cur
			for end < n {
				if r[end] == '{' && (ch(end+1) == '%' || ch(end+1) == '{' || ch(end+1) == '#') {
					break
				}
				end++
			}
			if end > cur {
				toks = append(toks, token{tText, string(r[cur:end]), s.pos[cur]})
				cur = end
				continue
			}
		}

		if r[cur] == '{' {
			next := ch(cur + 1)
			if next == '#' {
				start := cur
				cur += 2
				stripBefore := ch(cur) == '-'
				if stripBefore {
					cur++
				}
				end := -1
				for i := cur; i+1 < n; i++ {
					if r[i] == '#' && r[i+1] == '}' {
						end = i
						break
					}
				}
				if end == -1 {
					return nil, fail(start, "unclosed comment: missing #}")
				}
				comment := string(r[cur:end])
				stripAfter := strings.HasSuffix(comment, "-")
				comment = strings.TrimSuffix(comment, "-")
				if stripBefore {
					stripTrailing()
				}
				toks = append(toks, token{tComment, comment, s.pos[start]})
				cur = end + 2
				if stripAfter {
					skipLeading()
				}
				continue
			}
			if ch(cur+2) == '-' {
				switch next {
				case '%':
					stripTrailing()
					toks = append(toks, token{tOpenStatement, "{%", s.pos[cur]})
					cur += 3
					continue
				case '{':
					stripTrailing()
					toks = append(toks, token{tOpenExpression, "{{", s.pos[cur]})
					depth = 0
					cur += 3
					continue
				}
			}
		}

		if _, err := consumeWhile(isSpace); err != nil {
			return nil, err
		}
		c := r[cur]
		p := s.pos[cur]

		if c == '-' && ch(cur+2) == '}' {
			switch ch(cur + 1) {
			case '%':
				toks = append(toks, token{tCloseStatement, "%}", p})
				cur += 3
				skipLeading()
				continue
			case '}':
				toks = append(toks, token{tCloseExpression, "}}", p})
				cur += 3
				skipLeading()
				continue
			}
		}

		if c == '-' || c == '+' {
			if last == tText || last == -1 {
				return nil, fail(cur, "unexpected character %q", c)
			}
			switch last {
			case tIdent, tNumber, tString, tCloseParen, tCloseBracket:
				// binary operator, matched by the rules below
			default:
				cur++
				num, err := consumeWhile(isDigit)
				if err != nil {
					return nil, err
				}
				if num != "" && ch(cur) == '.' && isDigit(ch(cur+1)) {
					cur++
					frac, err := consumeWhile(isDigit)
					if err != nil {
						return nil, err
					}
					num += "." + frac
				}
				if num != "" {
					toks = append(toks, token{tNumber, string(c) + num, p})
				} else {
					toks = append(toks, token{tUnary, string(c), p})
				}
				continue
			}
		}

		for _, ru := range rules {
			if ru.seq == "}}" && depth > 0 {
				continue
			}
			if hasRunes(r, cur, ru.seq) {
				toks = append(toks, token{ru.typ, ru.seq, p})
				switch ru.typ {
				case tOpenExpression:
					depth = 0
				case tOpenBrace:
					depth++
				case tCloseBrace:
					depth--
				}
				cur += len(ru.seq)
				continue main
			}
		}

		if c == '\'' || c == '"' {
			cur++
			var b strings.Builder
			for {
				if cur >= n {
					return nil, fail(cur, "unterminated string literal opened at %v", p)
				}
				x := r[cur]
				if x == c {
					break
				}
				cur++
				if x != '\\' {
					b.WriteRune(x)
					continue
				}
				if cur >= n {
					return nil, fail(cur, "unterminated string literal opened at %v", p)
				}
				e := r[cur]
				cur++
				if e == 'x' || e == 'u' {
					k := 2
					if e == 'u' {
						k = 4
					}
					if cur+k > n {
						return nil, fail(cur-2, "invalid escape sequence \\%c", e)
					}
					v, err := strconv.ParseUint(string(r[cur:cur+k]), 16, 32)
					if err != nil || strings.ContainsAny(string(r[cur:cur+k]), "+-_") {
						return nil, fail(cur-2, "invalid escape sequence \\%c%s", e, string(r[cur:cur+k]))
					}
					cur += k
					u := rune(v)
					// A \u escape is one UTF-16 unit: a high surrogate
					// followed by an escaped low one is one character.
					if utf16.IsSurrogate(u) && u < 0xdc00 && hasRunes(r, cur, "\\u") && cur+6 <= n {
						if lo, err := strconv.ParseUint(string(r[cur+2:cur+6]), 16, 32); err == nil && lo >= 0xdc00 && lo <= 0xdfff {
							u = utf16.DecodeRune(u, rune(lo))
							cur += 6
						}
					}
					b.WriteRune(u)
					continue
				}
				u, ok := escapes[e]
				if !ok {
					return nil, fail(cur-2, "unknown escape sequence \\%c", e)
				}
				b.WriteRune(u)
			}
			cur++ // closing quote
			toks = append(toks, token{tString, b.String(), p})
			continue
		}

		if isDigit(c) {
			num, err := consumeWhile(isDigit)
			if err != nil {
				return nil, err
			}
			if last != tDot && ch(cur) == '.' && isDigit(ch(cur+1)) {
				cur++
				frac, err := consumeWhile(isDigit)
				if err != nil {
					return nil, err
				}
				num += "." + frac
			}
			toks = append(toks, token{tNumber, num, p})
			continue
		}
		if isWord(c) {
			word, err := consumeWhile(isWord)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tIdent, word, p})
			continue
		}
		return nil, fail(cur, "unexpected character %q", c)
	}
	return toks, nil
}
