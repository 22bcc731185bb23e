// Package yamlkv reads the subset of YAML that training configs use:
// block mappings of scalars, flattened into dotted keys.
package yamlkv

import (
	"fmt"
	"strings"
)

// Scalars flattens the block mappings of a YAML document into dotted
// keys with unquoted scalar values (the subset of YAML that AgentJet's
// yaml.safe_dump writes). Sequences, flow collections and multi-line
// scalars are skipped.
func Scalars(src string) (map[string]string, error) {
	type frame struct {
		indent int
		key    string
	}
	var stack []frame
	out := map[string]string{}
	for ln, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || trimmed == "---" {
			continue
		}
		if strings.HasPrefix(trimmed, "- ") || trimmed == "-" {
			continue // sequence item
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if strings.ContainsRune(line[:indent], '\t') {
			return nil, fmt.Errorf("yaml line %d: tab indentation", ln+1)
		}
		colon := strings.Index(trimmed, ":")
		if colon <= 0 {
			continue // continuation of a multi-line scalar
		}
		key := strings.Trim(trimmed[:colon], `"'`)
		val := strings.TrimSpace(trimmed[colon+1:])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		path := key
		if len(stack) > 0 {
			path = stack[len(stack)-1].key + "." + key
		}
		if val == "" {
			stack = append(stack, frame{indent, path})
			continue
		}
		if len(val) >= 2 && (val[0] == '"' && val[len(val)-1] == '"' || val[0] == '\'' && val[len(val)-1] == '\'') {
			val = val[1 : len(val)-1]
		}
		out[path] = val
	}
	return out, nil
}
