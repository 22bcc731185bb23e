package finrisk

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// AttrKind is the type of an ARFF attribute.
type AttrKind int

const (
	// Numeric attributes (numeric, real, integer) hold float64 values.
	Numeric AttrKind = iota
	// Nominal attributes hold the index of the value in Attribute.Values.
	Nominal
)

// Attribute is one column of an ARFF relation.
type Attribute struct {
	Name   string
	Kind   AttrKind
	Values []string // nominal values, in declaration order
}

// Index returns the index of the nominal value v, or -1.
func (a *Attribute) Index(v string) int {
	for i, s := range a.Values {
		if s == v {
			return i
		}
	}
	return -1
}

// Relation is a parsed ARFF file: nominal cells hold the value index,
// numeric cells the number, and missing cells ('?') NaN.
type Relation struct {
	Name  string
	Attrs []Attribute
	Rows  [][]float64
}

// ReadARFF parses a dense ARFF file (Weka's attribute-relation file format:
// @relation, @attribute NAME {v1,...}|numeric|real|integer, @data, '%'
// comments, single or double quotes, '?' for missing values). Sparse rows,
// string and date attributes are rejected with an error naming the line.
func ReadARFF(r io.Reader) (*Relation, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	rel := &Relation{}
	inData := false
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '%' {
			continue
		}
		if !inData {
			kw, rest := splitKeyword(s)
			switch strings.ToLower(kw) {
			case "@relation":
				name, _, err := nextToken(rest)
				if err != nil {
					return nil, fmt.Errorf("arff line %d: @relation: %w", line, err)
				}
				rel.Name = name
			case "@attribute":
				a, err := parseAttribute(rest)
				if err != nil {
					return nil, fmt.Errorf("arff line %d: %w", line, err)
				}
				rel.Attrs = append(rel.Attrs, a)
			case "@data":
				if len(rel.Attrs) == 0 {
					return nil, fmt.Errorf("arff line %d: @data before any @attribute", line)
				}
				inData = true
			default:
				return nil, fmt.Errorf("arff line %d: unexpected %q in header", line, kw)
			}
			continue
		}
		if s[0] == '{' {
			return nil, fmt.Errorf("arff line %d: sparse rows are not supported", line)
		}
		cells, err := splitRow(s)
		if err != nil {
			return nil, fmt.Errorf("arff line %d: %w", line, err)
		}
		if len(cells) != len(rel.Attrs) {
			return nil, fmt.Errorf("arff line %d: %d values, want %d", line, len(cells), len(rel.Attrs))
		}
		row := make([]float64, len(cells))
		for i, c := range cells {
			a := &rel.Attrs[i]
			if c == "?" {
				row[i] = math.NaN()
				continue
			}
			switch a.Kind {
			case Numeric:
				v, err := strconv.ParseFloat(c, 64)
				if err != nil {
					return nil, fmt.Errorf("arff line %d: attribute %s: %w", line, a.Name, err)
				}
				row[i] = v
			case Nominal:
				k := a.Index(c)
				if k < 0 {
					return nil, fmt.Errorf("arff line %d: attribute %s: value %q not declared", line, a.Name, c)
				}
				row[i] = float64(k)
			}
		}
		rel.Rows = append(rel.Rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("arff: read: %w", err)
	}
	if !inData {
		return nil, fmt.Errorf("arff: no @data section")
	}
	return rel, nil
}

func splitKeyword(s string) (string, string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// nextToken reads one possibly quoted token from s and returns it with the rest.
func nextToken(s string) (tok, rest string, err error) {
	s = strings.TrimLeft(s, " \t")
	if s == "" {
		return "", "", fmt.Errorf("missing name")
	}
	if q := s[0]; q == '\'' || q == '"' {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			switch {
			case s[i] == '\\' && i+1 < len(s):
				i++
				b.WriteByte(s[i])
			case s[i] == q:
				return b.String(), strings.TrimLeft(s[i+1:], " \t"), nil
			default:
				b.WriteByte(s[i])
			}
		}
		return "", "", fmt.Errorf("unterminated quote in %q", s)
	}
	i := strings.IndexAny(s, " \t{")
	if i < 0 {
		return s, "", nil
	}
	return s[:i], strings.TrimLeft(s[i:], " \t"), nil
}

func parseAttribute(s string) (Attribute, error) {
	name, rest, err := nextToken(s)
	if err != nil {
		return Attribute{}, fmt.Errorf("@attribute: %w", err)
	}
	a := Attribute{Name: name}
	if strings.HasPrefix(rest, "{") {
		if !strings.HasSuffix(rest, "}") {
			return a, fmt.Errorf("@attribute %s: unterminated value list", name)
		}
		vals, err := splitRow(rest[1 : len(rest)-1])
		if err != nil {
			return a, fmt.Errorf("@attribute %s: %w", name, err)
		}
		if len(vals) == 0 || (len(vals) == 1 && vals[0] == "") {
			return a, fmt.Errorf("@attribute %s: empty value list", name)
		}
		seen := map[string]bool{}
		for _, v := range vals {
			if seen[v] {
				return a, fmt.Errorf("@attribute %s: duplicate value %q", name, v)
			}
			seen[v] = true
		}
		a.Kind, a.Values = Nominal, vals
		return a, nil
	}
	switch strings.ToLower(rest) {
	case "numeric", "real", "integer":
		a.Kind = Numeric
		return a, nil
	case "":
		return a, fmt.Errorf("@attribute %s: missing type", name)
	}
	return a, fmt.Errorf("@attribute %s: unsupported type %q", name, rest)
}

// splitRow splits a comma-separated list of possibly quoted values.
func splitRow(s string) ([]string, error) {
	var out []string
	for {
		s = strings.TrimLeft(s, " \t")
		var tok string
		if s != "" && (s[0] == '\'' || s[0] == '"') {
			var err error
			tok, s, err = nextToken(s)
			if err != nil {
				return nil, err
			}
		} else {
			i := strings.IndexByte(s, ',')
			if i < 0 {
				i = len(s)
			}
			tok = strings.TrimSpace(s[:i])
			s = s[i:]
		}
		out = append(out, tok)
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return out, nil
		}
		if s[0] != ',' {
			return nil, fmt.Errorf("expected ',' before %q", s)
		}
		s = s[1:]
	}
}
